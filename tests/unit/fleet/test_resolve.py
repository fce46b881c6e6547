"""Which SlotPolicy governs each node: highest priority wins, ties broken by name and reported."""

from __future__ import annotations

from typing import Any

import pytest

from kondor_core.api import SlotPolicySpec
from kondor_core.fleet import PolicyCandidate, resolve, selected_nodes

NODES = {
    "cpu-0": {"pool": "batch"},
    "gpu-0": {"pool": "batch", "gpu": "yes"},
    "web-0": {"pool": "web"},
}


def policy(name: str, priority: int = 0, **selector: dict[str, str]) -> PolicyCandidate:
    spec = SlotPolicySpec.model_validate({"priority": priority, "nodeSelector": selector})
    return PolicyCandidate(name, 1, spec, f"hash-{name}")


BATCH: dict[str, Any] = {"matchLabels": {"pool": "batch"}}
GPU: dict[str, Any] = {"matchLabels": {"gpu": "yes"}}


@pytest.mark.parametrize(
    ("policies", "expected"),
    [
        ([], {}),
        ([policy("batch", **BATCH)], {"cpu-0": ("batch", ()), "gpu-0": ("batch", ())}),
        (
            [policy("batch", 0, **BATCH), policy("gpu", 10, **GPU)],
            {"cpu-0": ("batch", ()), "gpu-0": ("gpu", ())},
        ),
        (
            [policy("batch", 10, **BATCH), policy("gpu", 0, **GPU)],
            {"cpu-0": ("batch", ()), "gpu-0": ("batch", ())},
        ),
        # Equal priority: the first name wins, and the node reports whom it tied with.
        (
            [policy("zeta", 5, **GPU), policy("alpha", 5, **BATCH)],
            {"cpu-0": ("alpha", ()), "gpu-0": ("alpha", ("zeta",))},
        ),
        # A lower-priority match is no tie.
        (
            [policy("a", 5, **GPU), policy("b", 5, **GPU), policy("c", 1, **BATCH)],
            {"cpu-0": ("c", ()), "gpu-0": ("a", ("b",))},
        ),
        # An empty selector selects every node.
        (
            [policy("all")],
            {"cpu-0": ("all", ()), "gpu-0": ("all", ()), "web-0": ("all", ())},
        ),
        # Negative priorities order too.
        (
            [policy("all", -1), policy("web", -5, matchLabels={"pool": "web"})],
            {"cpu-0": ("all", ()), "gpu-0": ("all", ()), "web-0": ("all", ())},
        ),
    ],
)
def test_resolve(
    policies: list[PolicyCandidate], expected: dict[str, tuple[str, tuple[str, ...]]]
) -> None:
    resolved = resolve(NODES, policies)
    assert {node: (r.policy.name, r.tie_with) for node, r in resolved.items()} == expected


def test_resolution_is_the_same_whatever_the_input_order() -> None:
    policies = [policy("b", 1, **BATCH), policy("a", 1, **BATCH), policy("c", 1, **GPU)]
    assert resolve(NODES, policies) == resolve(NODES, list(reversed(policies)))
    assert resolve(NODES, policies)["gpu-0"].tie_with == ("b", "c")


def test_selected_nodes_ignores_priority() -> None:
    assert selected_nodes(NODES, policy("batch", **BATCH)) == ["cpu-0", "gpu-0"]
