"""The slot ads a cycle offers: every slot of the fresh ExecutionPoints but those withheld
for a pending claim, each built into a ClassAd once per ExecutionPoint resourceVersion.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from kondor_core.api import (
    ExecutionPoint,
)
from kondor_core.classads import ExpressionError
from kondor_core.negotiation.negotiator import slot_offer
from kondor_core.schedd.identity import remember

#: Slot offers already built, by (ExecutionPoint, its resourceVersion, slot): an
#: ExecutionPoint that did not change since the last cycle is not turned into ClassAds
#: again (1,000 nodes, a few of which change between cycles: issue 16). Only the clock
#: (MyCurrentTime) is set anew each cycle.
_OFFERS: dict[tuple[str, str, str], Any] = {}


def _offer(ep: ExecutionPoint, slot: Any, now: float) -> Any:
    version = ep.metadata.resource_version
    if version is None:
        return slot_offer(slot.ad, set(slot.expressions), now)
    key = (ep.metadata.name, version, slot.name)
    offer = _OFFERS.get(key)
    if offer is None:
        offer = slot_offer(slot.ad, set(slot.expressions), now)
        remember(_OFFERS, key, offer)
    else:
        offer["MyCurrentTime"] = math.floor(now)
    return offer


def slot_offers(
    execution_points: Iterable[ExecutionPoint], pending: set[tuple[str, str]], now: float
) -> tuple[list[Any], dict[str, str], list[str], list[str]]:
    """The slot ads offered (in ExecutionPoint-name then slot order), which ExecutionPoint
    each slot name is on, the slots that could not be read, and the slots withheld."""
    offers: list[Any] = []
    owners: dict[str, str] = {}
    problems: list[str] = []
    withheld: list[str] = []
    for ep in sorted(execution_points, key=lambda ep: ep.metadata.name):
        status = ep.status
        name = ep.metadata.name
        if status is None or status.operator.heartbeat != "Fresh" or ep.metadata.deletion_timestamp:
            continue
        for slot in status.slots:
            if (name, slot.name) in pending:
                withheld.append(f"{name}/{slot.name}")
                continue
            if not slot.ad:
                problems.append(f"{name}/{slot.name}: the slot publishes no ad")
                continue
            try:
                offers.append(_offer(ep, slot, now))
            except ExpressionError as error:
                problems.append(f"{name}/{slot.name}: {error}")
                continue
            owners[str(slot.ad.get("Name", slot.name))] = name
    return offers, owners, problems, withheld
