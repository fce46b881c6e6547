"""Fair share on the dev cluster (issue 13): alice and bob submit 20 jobs each onto 8
one-core slots of a node whose agent runs them as real processes; the operator's negotiator
shares the slots by effective user priority, `kubectl kondor userprio -setfactor` moves the
split, and the accountant (the Pool's status) survives an operator restart.

The operator runs as a process of this module (not the dev cluster's) so that it can be
restarted; its admission webhook stamps each job's owner from the submitting user."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from kondor_core.api import parse_time
from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port

from .conftest import skip_reason
from .test_jobs_end_to_end import Cluster, eventually, process_job, slot_policy
from .test_operator import Operator, start_operator, stop_operator, wait_ready

pytestmark = pytest.mark.timeout(480)

NODE = "kwok-fair-0"
SLOTS = 8
#: Eight one-core static slots.
STATIC = f"SLOT_TYPE_1 = cpus=1\nNUM_SLOTS_TYPE_1 = {SLOTS}\nSLOT_TYPE_1_PARTITIONABLE = FALSE\n"
#: Long enough that a cycle's split can be seen, short enough that the jobs cycle.
JOB_SECONDS = 12


class FairCluster:
    """The dev cluster, its kubectl, and the operator process (restartable)."""

    def __init__(self, dev: DevCluster, kubectl: Cluster, tmp: Path) -> None:
        self.dev = dev
        self.kubectl = kubectl
        self.tmp = tmp
        self.admin = config.new_client_from_config(
            config_file=str(dev.spec.kubeconfig), context="admin"
        )
        self.operator: Operator | None = None

    def start_operator(self) -> None:
        self.operator = start_operator(
            self.dev, self.tmp, lease=f"fair-{int(time.time() * 1000) % 100000}", webhook=True
        )
        wait_ready(self.operator, self.admin)

    def stop_operator(self) -> None:
        if self.operator is not None:
            stop_operator(self.operator, self.admin)
            self.operator = None

    def pool_status(self) -> dict[str, Any]:
        pool = client.CustomObjectsApi(self.admin).get_cluster_custom_object(
            "kondor.io", "v1alpha1", "pools", "default"
        )
        return dict(pool.get("status") or {})

    def running(self) -> Counter[str]:
        """Running jobs by owner."""
        listed = json.loads(
            self.kubectl.kubectl("get", "executionjobs", "-n", "default", "-o", "json")
        )
        return Counter(
            item["spec"].get("owner")
            for item in listed["items"]
            if (item.get("status") or {}).get("jobStatus") == "Running"
        )


@contextlib.contextmanager
def fair_cluster(
    tmp: Path, *, node: str, slots: int, memory: str, condor_config: str, pool: dict[str, Any]
) -> Iterator[FairCluster]:
    """One kwok node `node` of `slots` cores with its agent, the SlotPolicy `condor_config`
    selecting it, Pool `default` with spec `pool`, and the operator, once every slot is
    Unclaimed. On exit every user's jobs are removed (their processes killed: jobs outlive
    their agents by design) before the cluster stops."""
    label = {"kondor.io/pool": node}
    machine = tmp / f"{node}.yaml"
    machine.write_text(
        yaml.safe_dump(
            {"name": node, "cpus": slots, "memory": memory, "disk": 104857600, "labels": label}
        )
    )
    spec = ClusterSpec(
        port=free_port(),
        kubeconfig=tmp / "kubeconfig",
        state_dir=tmp / "state",
        nodes=(machine,),
        operator=False,
        agents=True,
    )
    dev = DevCluster(spec, log=sys.stderr)
    dev.start()
    made = FairCluster(dev, Cluster(spec.kubeconfig), tmp)
    try:
        made.kubectl.apply(slot_policy(node, label, condor_config))
        made.kubectl.apply(
            {
                "apiVersion": "kondor.io/v1alpha1",
                "kind": "Pool",
                "metadata": {"name": "default"},
                "spec": pool,
            }
        )
        made.start_operator()

        def unclaimed() -> bool:
            found = made.kubectl.get("executionpoints", node, None)["status"]["slots"]
            return len(found) == slots and all(s["state"] == "Unclaimed" for s in found)

        eventually(unclaimed, 90, f"{slots} Unclaimed slots on {node}")
        yield made
    finally:
        with contextlib.suppress(Exception):
            for user in ("alice", "bob", "carol"):
                with contextlib.suppress(AssertionError):  # none left: condor_rm exits 1
                    made.kubectl.kubectl("kondor", "rm", "-all", user=user)

            def none_running() -> bool:
                statuses = job_statuses(made).values()
                return not any(st.get("jobStatus") == "Running" for st in statuses)

            eventually(none_running, 30, "no job running")
        with contextlib.suppress(Exception):
            made.stop_operator()
        dev.stop()


@pytest.fixture(scope="module")
def fair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FairCluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("fair")
    with fair_cluster(
        tmp,
        node=NODE,
        slots=SLOTS,
        memory="16Gi",
        condor_config=STATIC,
        pool={"negotiatorInterval": 2},
    ) as made:
        yield made


def submit_held(cluster: FairCluster, user: str, count: int) -> list[str]:
    """`count` jobs submitted by `user` in one kubectl apply, held so that both users' jobs
    are queued before any is negotiated for."""
    names = [f"{user}-{i:02d}" for i in range(count)]
    items = [process_job(name, f"sleep {JOB_SECONDS}", hold=True) for name in names]
    cluster.kubectl.apply({"apiVersion": "v1", "kind": "List", "items": items}, user=user)
    return names


def job_statuses(cluster: FairCluster) -> dict[str, dict[str, Any]]:
    listed = json.loads(
        cluster.kubectl.kubectl("get", "executionjobs", "-n", "default", "-o", "json")
    )
    return {item["metadata"]["name"]: item.get("status") or {} for item in listed["items"]}


def negotiator_interval(cluster: FairCluster, seconds: int) -> None:
    patch = json.dumps({"spec": {"negotiatorInterval": seconds}})
    cluster.kubectl.kubectl("patch", "pools", "default", "--type", "merge", "-p", patch)


def release_together(cluster: FairCluster, names: list[str]) -> None:
    """condor_release of `names` so that one cycle sees them all Idle: the negotiator
    waits (a long NEGOTIATOR_INTERVAL; a release starts no cycle) until the operator has
    followed every release, then the interval is shortened again, which starts a cycle.
    (A slot an agent frees meanwhile may start a cycle sooner: a test that releases in an
    order its assertions allow for does not depend on this.)"""
    negotiator_interval(cluster, 300)
    time.sleep(2)  # the cycle the Pool change started is over
    cluster.kubectl.kubectl(
        "patch", "executionjobs", "-n", "default", *names,
        "--type", "merge", "-p", '{"spec": {"hold": false}}',
    )  # fmt: skip
    eventually(
        lambda: all(job_statuses(cluster)[n].get("jobStatus") != "Held" for n in names),
        60,
        "every release followed",
    )
    negotiator_interval(cluster, 2)


def test_alice_and_bob_share_eight_slots_by_user_priority(fair: FairCluster) -> None:
    alice = submit_held(fair, "alice", 20)
    bob = submit_held(fair, "bob", 20)
    release_together(fair, alice + bob)

    # Equal priorities: four and four.
    eventually(lambda: fair.running() == {"alice": 4, "bob": 4}, 60, "4 and 4 running")
    # bob's effective priority three times alice's: as the jobs end, six and two.
    out = fair.kubectl.kubectl("kondor", "userprio", "-setfactor", "bob", "3000")
    assert "The priority factor of bob was set to 3000" in out
    split = eventually(
        lambda: (r := fair.running()) == {"alice": 6, "bob": 2} and r,
        4 * JOB_SECONDS + 60,
        "6 and 2 running",
    )
    assert split == {"alice": 6, "bob": 2}

    report = fair.kubectl.kubectl("kondor", "userprio")
    rows = {line.split()[0]: line.split() for line in report.splitlines()[4:-2]}
    assert rows["bob"][2] == "3000.00" and rows["alice"][2] == "1000.00"
    status = fair.pool_status()
    assert status["lastCycle"]["jobsConsidered"] >= 1
    before = {user["name"]: user for user in status["users"]}
    assert before["alice"]["accumulatedUsage"] > 0 and before["bob"]["accumulatedUsage"] > 0

    # The operator restarts: the accountant is read back from the Pool and goes on.
    fair.stop_operator()
    fair.start_operator()

    def continued() -> dict[str, Any] | None:
        users = {user["name"]: user for user in fair.pool_status()["users"]}
        alice_now = users.get("alice") or {}
        if alice_now.get("accumulatedUsage", 0) > before["alice"]["accumulatedUsage"]:
            return users
        return None

    after = eventually(continued, 60, "the accountant updated by the new operator")
    for name in ("alice", "bob"):
        assert after[name]["beginUsageTime"] == before[name]["beginUsageTime"]
        assert after[name]["accumulatedUsage"] >= before[name]["accumulatedUsage"]
        assert after[name]["realPriority"] >= 0.5


def test_jobprio_first_an_unmatchable_job_never_blocks_and_nice_jobs_run_last(
    fair: FairCluster,
) -> None:
    for user in ("alice", "bob"):  # the first test's jobs leave the slots
        with contextlib.suppress(AssertionError):  # none left: condor_rm says so, exit 1
            fair.kubectl.kubectl("kondor", "rm", "-all", user=user)
    eventually(lambda: not fair.running(), 60, "no job running")
    jobs = [
        process_job("impossible", "sleep 1", hold=True, priority=10, requirements="TotalCpus > 64"),
        process_job("mid", "sleep 10", hold=True, priority=5),
        *(process_job(f"low-{i}", "sleep 10", hold=True) for i in range(9)),
    ]
    fair.kubectl.apply({"apiVersion": "v1", "kind": "List", "items": jobs}, user="alice")
    nice = process_job("nice", "sleep 1", hold=True, attributes={"NiceUser": "true"})
    fair.kubectl.apply(nice, user="bob")
    release_together(fair, [job["metadata"]["name"] for job in jobs] + ["nice"])

    first = eventually(
        lambda: (
            (s := job_statuses(fair))
            and sum(st.get("jobStatus") == "Running" for st in s.values()) == SLOTS
            and s
        ),
        60,
        "eight jobs running",
    )
    assert first["mid"]["jobStatus"] == "Running"  # JobPrio 5 before JobPrio 0
    assert first["nice"]["jobStatus"] == "Idle"  # others still want slots
    impossible = first["impossible"]
    assert impossible["jobStatus"] == "Idle"

    def started(name: str) -> float:
        when = parse_time(job_statuses(fair)[name].get("execution", {}).get("startTime") or "")
        return when.timestamp() if when is not None else 0.0

    def matched(name: str) -> float:
        when = parse_time(job_statuses(fair)[name].get("matchTime") or "")
        return when.timestamp() if when is not None else 0.0

    eventually(lambda: started("nice") > 0, 90, "the nice job started")
    # Negotiated last: no low job was matched in a later cycle than the nice one (in the same
    # cycle the nice job takes a slot left over, and may start a second before a low job).
    assert all(0 < matched(f"low-{i}") <= matched("nice") for i in range(9))
    # Never matched; once slots are free again, its Requirements are why.
    impossible = eventually(
        lambda: (
            (st := job_statuses(fair)["impossible"])
            and "Requirements" in st.get("lastRejMatchReason", "")
            and st
        ),
        60,
        "the impossible job rejected for its Requirements",
    )
    assert impossible["jobStatus"] == "Idle" and impossible.get("numJobMatches", 0) == 0
    analysis = fair.kubectl.kubectl("kondor", "q", "-better-analyze", "impossible", user="alice")
    assert f"[0]          0         {SLOTS}  TotalCpus > 64" in analysis
    assert f"{SLOTS} are rejected by your job's requirements" in analysis
    assert "0 are able to run your job" in analysis
    report = fair.kubectl.kubectl("kondor", "userprio", "-all")
    assert "nice-user.bob" in report


RANK_NODE = "kwok-rank-0"


@pytest.fixture(scope="module")
def rank_node(fair: FairCluster) -> str:
    """A one-core node whose slot's RANK prefers alice's jobs, with 15 s of retirement."""
    machine = fair.tmp / "kwok-rank.yaml"
    machine.write_text(
        yaml.safe_dump(
            {
                "name": RANK_NODE,
                "cpus": 1,
                "memory": "4Gi",
                "disk": 104857600,
                "labels": {"kondor.io/pool": "rank"},
            }
        )
    )
    # MachineMaxVacateTime below the retirement: HTCondor soft-kills a preempted job that many
    # seconds before its retirement ends, so with the default (600 s) it would vacate at once.
    config = (
        'RANK = ifThenElse(TARGET.Owner == "alice", 10, 0)\nMAXJOBRETIREMENTTIME = 15\n'
        "MachineMaxVacateTime = 2\n"
    )
    fair.kubectl.apply(slot_policy("rank", {"kondor.io/pool": "rank"}, config))
    fair.dev.add_machines([machine])

    def unclaimed() -> bool:
        slots = fair.kubectl.get("executionpoints", RANK_NODE, None)["status"]["slots"]
        return bool(slots) and all(s["state"] == "Unclaimed" for s in slots)

    eventually(unclaimed, 90, f"{RANK_NODE}'s slot Unclaimed")
    return RANK_NODE


def test_a_slot_whose_rank_prefers_alice_preempts_bob_s_job_which_runs_again_later(
    fair: FairCluster, rank_node: str
) -> None:
    pinned = f'Machine == "{rank_node}"'
    fair.kubectl.apply(process_job("tyner", "sleep 300", requirements=pinned), user="bob")
    eventually(lambda: job_statuses(fair)["tyner"].get("jobStatus") == "Running", 60, "tyner runs")
    started = time.monotonic()

    fair.kubectl.apply(process_job("jones", "sleep 3", requirements=pinned), user="alice")
    eventually(lambda: job_statuses(fair)["jones"].get("jobStatus") == "Running", 60, "jones runs")

    # tyner's job retired first: it ran its MAXJOBRETIREMENTTIME (15 s from its start, less
    # the 2 s of vacate time granted before its end) before jones' could start.
    assert time.monotonic() - started >= 12
    tyner = job_statuses(fair)["tyner"]
    assert tyner["jobStatus"] == "Idle" and tyner["numJobStarts"] == 1  # vacated, to run again
    again = eventually(
        lambda: (st := job_statuses(fair)["tyner"]).get("jobStatus") == "Running" and st,
        60,
        "tyner runs again after jones",
    )
    assert again["numJobStarts"] == 2
    assert job_statuses(fair)["jones"]["jobStatus"] == "Completed"

    # NEGOTIATOR_CONSIDER_PREEMPTION = False: alice's next job waits for tyner's to end.
    fair.kubectl.kubectl(
        "patch", "pools", "default", "--type", "merge",
        "-p", '{"spec": {"negotiatorConsiderPreemption": false}}',
    )  # fmt: skip
    try:
        fair.kubectl.apply(process_job("jones-2", "sleep 1", requirements=pinned), user="alice")
        time.sleep(8)  # four negotiation cycles
        statuses = job_statuses(fair)
        assert statuses["tyner"]["jobStatus"] == "Running"
        assert statuses["tyner"]["numJobStarts"] == 2
        assert statuses["jones-2"]["jobStatus"] == "Idle"
        assert not statuses["jones-2"].get("claimId")
    finally:
        fair.kubectl.kubectl(
            "patch", "pools", "default", "--type", "merge",
            "-p", '{"spec": {"negotiatorConsiderPreemption": true}}',
        )  # fmt: skip
