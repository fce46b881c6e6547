"""Leader election on a Lease: who may take it, and two electors sharing one fake Lease (its
LeaseApi: plain JSON and kondor_kube's ConflictError, since the port to kondor_kube)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from kondor_kube.errors import ConflictError
from kondor_operator.leader import (
    LeaderElector,
    LeaseRecord,
    LeaseTimings,
    may_take,
    release_patch,
    take_patch,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, 60, tzinfo=UTC)


def record(holder: str | None, duration: float = 15, transitions: int = 0) -> LeaseRecord:
    return LeaseRecord(holder, duration, transitions, "t", "7")


@pytest.mark.parametrize(
    ("lease", "observed_at", "now", "expected"),
    [
        (record(None), 0, 0, True),  # nobody holds it
        (record("me"), 0, 0, True),  # renewing
        (record("other"), 0, 10, False),  # the holder renewed 10 s ago, lease 15 s
        (record("other"), 0, 15, False),
        (record("other"), 0, 15.5, True),  # unchanged for longer than its duration
    ],
)
def test_may_take(lease: LeaseRecord, observed_at: float, now: float, expected: bool) -> None:
    assert may_take(lease, "me", observed_at, now) is expected


def test_taking_over_counts_a_transition_and_renewing_does_not() -> None:
    taken = take_patch(record("other", transitions=2), "me", 15, NOW)
    assert taken["metadata"] == {"resourceVersion": "7"}, "guarded by what was read"
    assert taken["spec"]["holderIdentity"] == "me"
    assert taken["spec"]["leaseTransitions"] == 3
    assert taken["spec"]["renewTime"] == "2026-01-02T03:04:05.000060Z"
    assert taken["spec"]["acquireTime"] == taken["spec"]["renewTime"]
    renewed = take_patch(record("me", transitions=3), "me", 15, NOW)
    assert "acquireTime" not in renewed["spec"] and "leaseTransitions" not in renewed["spec"]
    assert take_patch(record(None), "me", 15, NOW)["spec"]["leaseTransitions"] == 0


def test_release_empties_the_holder() -> None:
    assert release_patch(record("me"), NOW)["spec"]["holderIdentity"] is None


def test_timings_are_checked() -> None:
    assert LeaseTimings().problems() == []
    [problem] = LeaseTimings(duration=5, renew_deadline=10, retry_period=2).problems()
    assert "--leader-election-lease-duration (5s) must be longer" in problem
    assert LeaseTimings(duration=15, renew_deadline=2, retry_period=2).problems()


class FakeLeases:
    """One namespace's Leases with the API server's resourceVersion precondition."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.version = 0

    def _bump(self, lease: dict[str, Any]) -> None:
        self.version += 1
        lease["metadata"]["resourceVersion"] = str(self.version)

    def read_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.leases.get(name))

    def create_lease(self, namespace: str, body: Mapping[str, Any]) -> None:
        name = body["metadata"]["name"]
        if name in self.leases:
            raise ConflictError(409)
        self.leases[name] = {"metadata": {"name": name}, "spec": {"leaseTransitions": 0}}
        self._bump(self.leases[name])

    def patch_lease(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        lease = self.leases[name]
        if patch["metadata"]["resourceVersion"] != lease["metadata"]["resourceVersion"]:
            raise ConflictError(409)
        for key, value in patch["spec"].items():
            if value is None:
                lease["spec"].pop(key, None)
            else:
                lease["spec"][key] = value
        self._bump(lease)

    def holder(self, name: str) -> str | None:
        holder = self.leases[name]["spec"].get("holderIdentity")
        return str(holder) if holder is not None else None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def elector(api: FakeLeases, identity: str, clock: Clock) -> LeaderElector:
    return LeaderElector(
        api,
        namespace="kondor",
        name="kondor-operator",
        identity=identity,
        clock=clock,
        wall=lambda: NOW,
    )


def test_one_leader_until_it_lapses_or_releases() -> None:
    api, clock = FakeLeases(), Clock()
    first, second = elector(api, "a", clock), elector(api, "b", clock)
    assert first.try_acquire_or_renew()
    assert api.holder("kondor-operator") == "a"
    assert not second.try_acquire_or_renew(), "a holds it"
    clock.now += 10
    assert first.try_acquire_or_renew(), "renewing"
    clock.now += 10
    assert not second.try_acquire_or_renew(), "renewed 10 s ago: not lapsed"
    clock.now += 16
    assert second.try_acquire_or_renew(), "a stopped renewing for longer than the lease"
    assert api.holder("kondor-operator") == "b"
    assert api.leases["kondor-operator"]["spec"]["leaseTransitions"] == 1
    assert not first.try_acquire_or_renew(), "a sees b's fresh record"

    second.release()
    assert api.holder("kondor-operator") is None
    assert first.try_acquire_or_renew(), "released: no need to wait for it to lapse"


def test_hold_returns_when_another_replica_took_the_lease() -> None:
    api, clock = FakeLeases(), Clock()
    first = elector(api, "a", clock)
    first.timings = LeaseTimings(duration=1, renew_deadline=0.5, retry_period=0.01)
    changes: list[bool] = []
    first.on_change = changes.append
    assert asyncio.run(first.acquire(asyncio.Event()))
    api.leases["kondor-operator"]["spec"]["holderIdentity"] = "b"  # taken behind a's back
    api._bump(api.leases["kondor-operator"])
    asyncio.run(asyncio.wait_for(first.hold(), 2))
    assert changes == [True, False]


def test_acquire_gives_up_when_asked_to_stop() -> None:
    api, clock = FakeLeases(), Clock()
    assert elector(api, "a", clock).try_acquire_or_renew()
    waiting = elector(api, "b", clock)
    waiting.timings = LeaseTimings(duration=15, renew_deadline=10, retry_period=0.01)

    async def stop_soon() -> bool:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, stop.set)
        return await waiting.acquire(stop)

    assert asyncio.run(stop_soon()) is False
