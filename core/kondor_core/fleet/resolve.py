"""Which SlotPolicy governs each node: the highest `spec.priority` among those selecting it.

Equal priorities are a configuration mistake the admin should hear about, but a
node must still get exactly one policy, so the tie is broken by name (the
smallest wins, as `sorted` orders them) and reported with the names it tied with.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from kondor_core.api.slotpolicy import SlotPolicySpec
from kondor_core.fleet.selector import selects


class PolicyCandidate(NamedTuple):
    """A valid SlotPolicy as resolution sees it: `hash` is its compiled policy's."""

    name: str
    generation: int
    spec: SlotPolicySpec
    hash: str


@dataclass(frozen=True)
class Resolution:
    """The policy that governs a node, and the policies of equal priority it won against."""

    policy: PolicyCandidate
    tie_with: tuple[str, ...] = ()

    @property
    def tied(self) -> bool:
        return bool(self.tie_with)


def selected_nodes(nodes: Mapping[str, Mapping[str, str]], policy: PolicyCandidate) -> list[str]:
    """The names of the nodes `policy`'s nodeSelector selects, sorted."""
    selector = policy.spec.node_selector
    return sorted(name for name, labels in nodes.items() if selects(selector, labels))


def resolve(
    nodes: Mapping[str, Mapping[str, str]], policies: Iterable[PolicyCandidate]
) -> dict[str, Resolution]:
    """Node name -> its Resolution, for every node at least one policy selects.

    `nodes` maps a node name to its labels.
    """
    ordered = sorted(policies, key=lambda p: (-p.spec.priority, p.name))
    resolutions: dict[str, Resolution] = {}
    for name, labels in nodes.items():
        matching = [p for p in ordered if selects(p.spec.node_selector, labels)]
        if not matching:
            continue
        winner = matching[0]
        tied = tuple(p.name for p in matching[1:] if p.spec.priority == winner.spec.priority)
        resolutions[name] = Resolution(winner, tied)
    return resolutions
