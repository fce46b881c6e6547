"""The operator's negotiator loop, over dict indexes and a fake writer: a new job gets its
ClusterId and is matched in one pass; writes are guarded by resourceVersion, carry what
the write returned until the index catches up, and never touch status.execution."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from kondor_core import startd
from kondor_core.api import (
    ExecutionPoint,
    Machine,
    PoolSpec,
    SlotPolicySpec,
    apply_merge_patch,
    format_time,
)
from kondor_core.config import compile_policy
from kondor_operator.metrics import Metrics
from kondor_operator.negotiator import (
    JobEntry,
    Negotiator,
    job_entry,
    offer_signature,
    pool_entry,
)

ROOT = Path(__file__).resolve().parents[3]
NOW = 1_800_000_000.0


class FakeKube:
    """Holds job objects; patches them as the API server would (resourceVersion guard)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.version = 100
        self.pools: dict[str, dict[str, Any]] = {}

    def read_pool(self, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.pools.get(name))

    def patch_pool_status(self, name: str, patch: Mapping[str, Any]) -> bool:
        # As the API server (and Kube.patch_pool_status): a missing Pool is created with an
        # empty spec; a patch naming a resourceVersion the Pool no longer has is refused.
        self.calls.append(("pool", name, dict(patch)))
        pool = self.pools.setdefault(
            name, {"metadata": {"name": name, "resourceVersion": "1"}, "spec": {}}
        )
        guard = (patch.get("metadata") or {}).get("resourceVersion")
        if guard is not None and guard != pool["metadata"]["resourceVersion"]:
            return False
        updated = apply_merge_patch(pool, {"status": patch.get("status") or {}})
        self.version += 1
        updated["metadata"] = {**updated["metadata"], "resourceVersion": str(self.version)}
        self.pools[name] = updated
        return True

    def add(self, body: dict[str, Any]) -> None:
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)
        key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
        self.objects[key] = body

    def patch_execution_job_status(
        self, namespace: str, name: str, patch: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any] | None:
        self.calls.append(("status", name, dict(patch)))
        current = self.objects.get(f"{namespace}/{name}")
        if current is None or current["metadata"]["resourceVersion"] != resource_version:
            return None
        updated = apply_merge_patch(current, {"status": patch["status"]})
        self.version += 1
        updated["metadata"] = {**updated["metadata"], "resourceVersion": str(self.version)}
        self.objects[f"{namespace}/{name}"] = updated
        return copy.deepcopy(updated)


def job_body(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionJob",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "creationTimestamp": format_time(NOW - 60),
        },
        "spec": {"owner": "alice", "process": {"executable": "/bin/sleep"}, **spec},
    }


def ep_body(name: str) -> dict[str, Any]:
    values = yaml.safe_load((ROOT / "examples/machines/kwok-small.yaml").read_text())
    machine = Machine.model_validate({**values, "name": name})
    node = startd.start(machine, compile_policy(SlotPolicySpec()), NOW)
    status = startd.status(startd.tick(node, {}, NOW).startd, {}, NOW).dump()
    status["lastHeartbeat"] = format_time(NOW)
    status["operator"] = {"heartbeat": "Fresh"}
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionPoint",
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"nodeName": name},
        "status": status,
    }


def point(name: str) -> ExecutionPoint:
    return ExecutionPoint.model_validate(ep_body(name))


class Points(dict[str, ExecutionPoint]):
    """The ExecutionPoint watch's table, as the negotiator reads it."""

    def execution_points(self) -> list[ExecutionPoint]:
        return list(self.values())


class Queue(dict[str, JobEntry]):
    """The job watch's table, as the negotiator reads it."""

    def jobs(self) -> dict[str, JobEntry]:
        return dict(self)


class World:
    def __init__(self) -> None:
        self.kube = FakeKube()
        self.eps = Points()
        self.pools: dict[str, list[Any]] = {}
        self.negotiator = Negotiator(self.kube, Metrics(), clock=lambda: NOW)
        self.index = Queue()
        self.negotiator.attach(self.index, self.eps, self.pools)

    def sync(self) -> None:
        """The index catches up with the server (a watch event per object)."""
        self.index.clear()
        for key, body in self.kube.objects.items():
            entry = job_entry(copy.deepcopy(body))
            assert entry is not None
            self.index[key] = entry

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.kube.objects[f"ns/{name}"].get("status") or {})

    def labels(self, name: str) -> dict[str, str]:
        return dict(self.kube.objects[f"ns/{name}"]["metadata"].get("labels") or {})


def test_a_new_job_gets_a_cluster_id_and_is_matched_in_one_pass() -> None:
    world = World()
    world.eps["node-a"] = point("node-a")
    world.kube.add(job_body("j1", requestCpus=2))
    world.kube.add(job_body("j2", requestCpus=2))
    world.sync()
    done = world.negotiator.run_once({"ns/j1", "ns/j2"}, cycle=True)
    assert done.matched == 2 and done.idle == 2
    first, second = world.status("j1"), world.status("j2")
    assert (first["clusterId"], second["clusterId"]) == (1, 2)
    assert first["jobStatus"] == "Idle"
    assert first["executionPoint"] == "node-a" and first["slot"] == "slot1@node-a"
    assert first["claimId"] == "uid-j1#1"
    # One write each: the ClusterId and the match together, no label (the agent finds the
    # job by status.executionPoint).
    assert [what for what, name, _ in world.kube.calls if name == "j1"] == ["status"]
    assert world.labels("j1") == {}
    assert all("execution" not in patch.get("status", {}) for _, _, patch in world.kube.calls)


def test_cluster_ids_come_from_the_pool_s_counter_and_are_never_reused() -> None:
    # ClusterIds come from the Pool's status.lastClusterId, not from the jobs an
    # operator sees: a restarted operator, after the newest job was deleted, gives the next
    # job a new ClusterId. With no Pool `default`, the first reservation creates it.
    world = World()
    assert world.kube.pools == {}
    world.kube.add(job_body("j1"))
    world.kube.add(job_body("j2"))
    world.sync()
    world.negotiator.run_once({"ns/j1", "ns/j2"}, cycle=False)
    assert (world.status("j1")["clusterId"], world.status("j2")["clusterId"]) == (1, 2)
    assert world.kube.pools["default"]["status"]["lastClusterId"] == 2
    assert world.kube.pools["default"]["spec"] == {}  # created with the defaults
    del world.kube.objects["ns/j2"]  # the newest job deleted
    restarted = Negotiator(world.kube, Metrics(), clock=lambda: NOW)
    world.negotiator = restarted
    restarted.attach(world.index, world.eps, world.pools)
    world.kube.add(job_body("j3"))
    world.sync()
    restarted.run_once({"ns/j3"}, cycle=True)
    assert world.status("j3")["clusterId"] == 3
    # The accountant's write each cycle leaves the counter alone.
    assert world.kube.pools["default"]["status"]["lastClusterId"] == 3
    pools = [p for what, _, p in world.kube.calls if what == "pool"]
    accountant = [p for p in pools if "lastCycle" in p["status"]]
    assert accountant and all("lastClusterId" not in p["status"] for p in accountant)


def test_a_cluster_id_reservation_refused_by_a_concurrent_write_is_read_again() -> None:
    world = World()
    world.kube.patch_pool_status("default", {"status": {"lastClusterId": 40}})
    real = world.kube.read_pool
    reads = 0

    def read_then_someone_writes(name: str) -> dict[str, Any] | None:
        nonlocal reads
        reads += 1
        found = real(name)
        if reads == 1:  # another writer moves the counter after this read: 409
            world.kube.patch_pool_status(name, {"status": {"lastClusterId": 50}})
        return found

    world.kube.read_pool = read_then_someone_writes  # type: ignore[method-assign]
    world.kube.add(job_body("j1"))
    world.sync()
    world.negotiator.run_once({"ns/j1"}, cycle=False)
    assert reads == 2
    assert world.status("j1")["clusterId"] == 51
    assert world.kube.pools["default"]["status"]["lastClusterId"] == 51


def test_the_counter_starts_past_the_cluster_ids_jobs_already_have() -> None:
    # A Pool from before the counter: the jobs' own ClusterIds are never given again.
    world = World()
    old = job_body("old")
    old["status"] = {"jobStatus": "Idle", "clusterId": 7}
    world.kube.add(old)
    world.kube.add(job_body("new"))
    world.sync()
    world.negotiator.run_once({"ns/new"}, cycle=False)
    assert world.status("new")["clusterId"] == 8


def test_a_stale_index_does_not_match_a_job_twice() -> None:
    world = World()
    world.eps["node-a"] = point("node-a")
    world.kube.add(job_body("j1", requestCpus=4))
    world.kube.add(job_body("j2", requestCpus=4))
    world.sync()
    world.negotiator.run_once(set(), cycle=True)
    matched = [n for n in ("j1", "j2") if world.status(n).get("claimId")]
    assert matched == ["j1"]
    # The index has not seen the writes: the slot stays withheld, nothing is rewritten.
    calls = len(world.kube.calls)
    done = world.negotiator.run_once(set(), cycle=True)
    assert done.matched == 0
    assert [c for c in world.kube.calls[calls:] if c[1] == "j1"] == []


def test_the_agent_s_answers_are_followed() -> None:
    world = World()
    world.eps["node-a"] = point("node-a")
    world.kube.add(job_body("j1"))
    world.sync()
    world.negotiator.run_once(set(), cycle=True)
    claim = world.status("j1")["claimId"]
    body = world.kube.objects["ns/j1"]
    body["status"]["execution"] = {"claimId": claim, "state": "Running", "slot": "slot1_1@node-a"}
    world.kube.version += 1
    body["metadata"]["resourceVersion"] = str(world.kube.version)
    world.sync()
    world.negotiator.run_once({"ns/j1"}, cycle=False)
    assert world.status("j1")["jobStatus"] == "Running"
    assert world.status("j1")["numJobStarts"] == 1
    body = world.kube.objects["ns/j1"]
    body["status"]["execution"] = {"claimId": claim, "state": "Exited", "exitCode": 3}
    world.kube.version += 1
    body["metadata"]["resourceVersion"] = str(world.kube.version)
    world.sync()
    done = world.negotiator.run_once({"ns/j1"}, cycle=False)
    assert world.status("j1")["jobStatus"] == "Completed"
    assert world.status("j1")["exitCode"] == 3
    assert world.status("j1")["execution"]["state"] == "Exited"  # the agent's, untouched
    assert done.frees


def test_a_cycle_follows_what_changed_and_what_time_changes_and_everything_each_resync() -> None:
    clock = {"now": 0.0}
    world = World()
    world.negotiator = Negotiator(
        world.kube, Metrics(), clock=lambda: NOW, monotonic=lambda: clock["now"], resync=60
    )
    world.negotiator.attach(world.index, world.eps, world.pools)
    world.eps["node-a"] = point("node-a")
    for name in ("done", "pending", "quiet"):
        world.kube.add(job_body(name))
    world.sync()
    first = world.negotiator.run_once(set(), cycle=True)  # the first cycle follows everything
    assert first.followed == 3 and first.matched == 3
    world.sync()
    body = world.kube.objects["ns/done"]
    body["status"] = {**body["status"], "jobStatus": "Completed"}
    body = world.kube.objects["ns/quiet"]
    claim = body["status"]["claimId"]
    body["status"] = {**body["status"], "jobStatus": "Running"}
    body["status"]["execution"] = {"claimId": claim, "state": "Running"}
    world.sync()
    # "pending" waits for the agent's answer (MATCH_TIMEOUT runs with time): followed; the
    # Completed and the Running jobs are not, unless they changed (dirty).
    clock["now"] = 30.0
    assert world.negotiator.run_once(set(), cycle=True).followed == 1
    assert world.negotiator.run_once({"ns/done"}, cycle=True).followed == 2
    clock["now"] = 61.0
    assert world.negotiator.run_once(set(), cycle=True).followed == 3


def test_nothing_is_written_while_not_leading() -> None:
    world = World()
    world.eps["node-a"] = point("node-a")
    world.kube.add(job_body("j1"))
    world.sync()
    world.negotiator.set_leading(False)
    world.negotiator.run_once({"ns/j1"}, cycle=True)
    assert world.kube.calls == []


def test_the_pool_default_sets_the_settings_and_a_bad_one_means_defaults() -> None:
    world = World()
    assert world.negotiator.settings() == PoolSpec()
    world.pools["default"] = [pool_entry({"spec": {"negotiatorInterval": 2, "matchTimeout": 5}})]
    assert world.negotiator.settings() == PoolSpec(negotiator_interval=2, match_timeout=5)
    world.pools["default"] = [
        pool_entry({"metadata": {"name": "default"}, "spec": {"matchTimeout": 0}})
    ]
    assert world.negotiator.settings() == PoolSpec()


def test_a_heartbeat_alone_does_not_change_the_offer_signature() -> None:
    body = ep_body("node-a")
    later = copy.deepcopy(body)
    later["status"]["lastHeartbeat"] = format_time(NOW + 30)
    later["status"]["slots"][0]["ad"]["MyCurrentTime"] = int(NOW + 30)
    signature = offer_signature(ExecutionPoint.model_validate(body))
    assert signature == offer_signature(ExecutionPoint.model_validate(later))
    claimed = copy.deepcopy(body)
    claimed["status"]["slots"][0]["cpus"] = 2
    assert signature != offer_signature(ExecutionPoint.model_validate(claimed))


def test_the_accountant_is_kept_in_the_pool_status_and_survives_a_restart() -> None:
    world = World()
    world.eps["node-a"] = point("node-a")
    world.kube.add(job_body("j1", requestCpus=2))
    world.kube.add(job_body("j2", requestCpus=2, owner="bob"))
    world.sync()
    done = world.negotiator.run_once(set(), cycle=True)
    assert done.stats is not None and done.stats.matches == 2
    status = world.kube.pools["default"]["status"]
    assert status["lastCycle"]["matches"] == 2 and status["lastCycle"]["jobsConsidered"] == 2
    assert status["lastUpdate"] == format_time(NOW)
    for name in ("j1", "j2"):  # the agent runs both
        body = world.kube.objects[f"ns/{name}"]
        claim = body["status"]["claimId"]
        body["status"]["execution"] = {"claimId": claim, "state": "Running"}
        world.kube.version += 1
        body["metadata"]["resourceVersion"] = str(world.kube.version)
    world.sync()
    world.negotiator.run_once({"ns/j1", "ns/j2"}, cycle=True)
    assert {u["name"] for u in world.kube.pools["default"]["status"]["users"]} == {"alice", "bob"}
    # Running: the next cycle (a day later) accounts 2 cores each for the day.
    later = Negotiator(world.kube, Metrics(), clock=lambda: NOW + 86400)  # a restarted operator
    later.attach(world.index, world.eps, world.pools)
    world.sync()
    later.run_once(set(), cycle=True)
    users = {u["name"]: u for u in world.kube.pools["default"]["status"]["users"]}
    assert users["alice"]["realPriority"] == pytest.approx(1.25)  # half way from 0.5 to 2
    assert users["alice"]["accumulatedUsage"] == pytest.approx(2 * 86400)
    assert users["bob"]["effectivePriority"] == pytest.approx(1250.0)


def test_only_a_new_pool_spec_starts_a_cycle_not_the_accountants_own_writes() -> None:
    world = World()
    negotiator = world.negotiator
    negotiator.pool_changed(1)  # first seen
    assert negotiator._soon
    negotiator._soon = False
    negotiator.pool_changed(1)  # a status write: same generation
    assert not negotiator._soon
    negotiator.pool_changed(2)  # -setfactor: the spec changed
    assert negotiator._soon
