"""condor_drain on the dev cluster: `kubectl kondor drain` writes the request to the
ExecutionPoint, the node's agent drains along the startd's transitions (a graceful drain lets
the running job finish within its retirement time, and no new job starts; -quick vacates it at
once with its soft kill, -fast kills it), `kubectl get xp` shows it Drained, `-cancel` makes the
node run jobs again, -resume-on-completion does so by itself, and -exit-on-completion leaves
the node publishing no slots until -cancel."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import MACHINES, skip_reason
from .test_jobs_end_to_end import Cluster, eventually, job_cluster, process_job, slot_policy

pytestmark = pytest.mark.timeout(180)

NODE = "kwok-small-0"
#: The reference's MaxJobRetirementTime, shortened to 30 s; MachineMaxVacateTime (600 s by
#: default, and counted within the retirement) shortened too, so that retirement lasts.
POLICY = """POLLING_INTERVAL = 1
MAXJOBRETIREMENTTIME = 30
MachineMaxVacateTime = 2
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("drain")
    policy = slot_policy("drain", {"kondor.io/pool": "cpu"}, POLICY)
    with job_cluster(tmp, [MACHINES / "kwok-small.yaml"], [policy]) as made:
        yield made


def states(cluster: Cluster) -> set[tuple[str, str]]:
    slots = cluster.get("executionpoints", NODE, None)["status"]["slots"]
    return {(slot["state"], slot["activity"]) for slot in slots}


def test_a_graceful_drain_lets_the_job_finish_then_the_node_is_drained(cluster: Cluster) -> None:
    cluster.apply(process_job("retiring", "sleep 6; echo done"), user="alice")
    eventually(
        lambda: cluster.job("retiring")["status"].get("jobStatus") == "Running", 60, "Running"
    )

    out = cluster.kubectl("kondor", "drain", "-reason", "kernel update", NODE)
    assert out == f"Sent request to drain {NODE}\n"
    eventually(lambda: ("Claimed", "Retiring") in states(cluster), 15, "the job's slot retiring")
    drain = cluster.get("executionpoints", NODE, None)["status"]["drain"]
    assert (drain["state"], drain["mode"], drain["reason"]) == (
        "Draining",
        "graceful",
        "kernel update",
    )
    # No new job starts on a draining node.
    cluster.apply(process_job("waiting", "echo ran"), user="alice")

    done = eventually(
        lambda: (job := cluster.job("retiring"))["status"].get("jobStatus") == "Completed" and job,
        60,
        "the retiring job Completed",
    )
    assert done["status"]["numJobStarts"] == 1 and done["status"]["exitCode"] == 0
    eventually(lambda: states(cluster) == {("Drained", "Idle")}, 30, "every slot Drained")
    listed = cluster.kubectl("get", "xp", NODE, "--no-headers")
    assert "Drained" in listed.split()
    assert cluster.job("waiting")["status"].get("jobStatus") == "Idle"

    assert cluster.kubectl("kondor", "drain", "-cancel", NODE) == (
        f"Sent request to cancel draining on {NODE}\n"
    )
    ran = eventually(
        lambda: (job := cluster.job("waiting"))["status"].get("jobStatus") == "Completed" and job,
        60,
        "the waiting job run once the drain is cancelled",
    )
    assert ran["status"]["exitCode"] == 0
    assert "drain" not in cluster.get("executionpoints", NODE, None)["status"]


def test_users_may_not_drain_nodes(cluster: Cluster) -> None:
    with pytest.raises(AssertionError, match=r"forbidden|cannot patch"):
        cluster.kubectl("kondor", "drain", NODE, user="alice")


def trapping_job(name: str, flag: Path) -> dict[str, Any]:
    """A job that says in `flag` when it is asked to vacate (SIGTERM), and ends at once."""
    return process_job(name, f'trap "echo TERM > {flag}; exit 0" TERM; sleep 600 & wait')


def drained_and_cancelled(cluster: Cluster, job: str) -> None:
    eventually(lambda: states(cluster) == {("Drained", "Idle")}, 30, "every slot Drained")
    cluster.kubectl("delete", "executionjob", job, "-n", "default")
    cluster.kubectl("kondor", "drain", "-cancel", NODE)
    eventually(lambda: states(cluster) == {("Unclaimed", "Idle")}, 30, "the slots back")


@pytest.mark.parametrize(("mode", "vacated"), [("quick", True), ("fast", False)])
def test_quick_vacates_at_once_and_fast_kills(
    cluster: Cluster, tmp_path: Path, mode: str, vacated: bool
) -> None:
    flag = tmp_path / "vacated"
    tmp_path.chmod(0o1777)  # the job, never root (its slot's user), writes its flag here
    cluster.apply(trapping_job(mode, flag), user="alice")
    eventually(lambda: cluster.job(mode)["status"].get("jobStatus") == "Running", 60, "Running")
    started = time.monotonic()
    cluster.kubectl("kondor", "drain", f"-{mode}", NODE)
    # MAXJOBRETIREMENTTIME is 30 s: only -quick and -fast end the job this soon.
    evicted = eventually(
        lambda: (job := cluster.job(mode))["status"].get("jobStatus") == "Idle" and job,
        20,
        "the job evicted back to Idle",
    )
    assert time.monotonic() - started < 12
    assert evicted["status"]["numJobStarts"] == 1
    assert flag.exists() is vacated  # -quick sends the soft kill; -fast kills outright
    drained_and_cancelled(cluster, mode)


def test_resume_on_completion_runs_jobs_again(cluster: Cluster) -> None:
    cluster.kubectl("kondor", "drain", "-resume-on-completion", "-fast", NODE)
    eventually(
        lambda: (
            cluster.get("executionpoints", NODE, None)["status"].get("drain", {}).get("state")
            == "Resumed"
        ),
        30,
        "the drain Resumed",
    )
    assert states(cluster) == {("Unclaimed", "Idle")}
    cluster.kubectl("kondor", "drain", "-cancel", NODE)  # the request leaves the spec


def test_exit_on_completion_serves_no_slots_until_cancelled(cluster: Cluster) -> None:
    cluster.kubectl("kondor", "drain", "-exit-on-completion", NODE)

    def exited() -> bool:
        status = cluster.get("executionpoints", NODE, None)["status"]
        return status.get("drain", {}).get("state") == "Exited" and not status.get("slots")

    eventually(exited, 30, "the startd Exited, no slots published")
    ready = next(
        c
        for c in cluster.get("executionpoints", NODE, None)["status"]["conditions"]
        if c["type"] == "Ready"
    )
    assert (ready["status"], ready["reason"]) == ("False", "Exited")
    cluster.apply(process_job("after-exit", "echo ran"), user="alice")
    time.sleep(4)  # two negotiation cycles: nothing to match it to
    assert cluster.job("after-exit")["status"].get("jobStatus") == "Idle"

    cluster.kubectl("kondor", "drain", "-cancel", NODE)
    ran = eventually(
        lambda: (
            (job := cluster.job("after-exit"))["status"].get("jobStatus") == "Completed" and job
        ),
        60,
        "the job run once the drain is cancelled",
    )
    assert ran["status"]["exitCode"] == 0


def test_start_lets_jobs_it_accepts_use_the_draining_node_until_the_old_job_exits(
    cluster: Cluster,
) -> None:
    cluster.apply(process_job("old", "sleep 8"), user="alice")
    eventually(lambda: cluster.job("old")["status"].get("jobStatus") == "Running", 60, "old")
    cluster.kubectl("kondor", "drain", "-graceful", "-start", "TARGET.Short =?= true", NODE)
    eventually(lambda: ("Claimed", "Retiring") in states(cluster), 15, "old retiring")
    cluster.apply(process_job("long", "sleep 600"), user="alice")
    cluster.apply(process_job("short", "sleep 600", attributes={"Short": "true"}), user="alice")
    eventually(
        lambda: cluster.job("short")["status"].get("jobStatus") == "Running",
        30,
        "the job -start accepts Running on the draining node",
    )
    assert cluster.job("old")["status"].get("jobStatus") == "Running"  # still retiring
    assert cluster.job("long")["status"].get("jobStatus") == "Idle"
    # The old job ends: the one accepted while draining is evicted and the node drains.
    evicted = eventually(
        lambda: (job := cluster.job("short"))["status"].get("jobStatus") == "Idle" and job,
        30,
        "the accepted job evicted once the old one exited",
    )
    assert evicted["status"]["numJobStarts"] == 1
    assert cluster.job("old")["status"].get("jobStatus") == "Completed"
    eventually(lambda: states(cluster) == {("Drained", "Idle")}, 30, "every slot Drained")
    cluster.kubectl("delete", "executionjob", "long", "short", "-n", "default")
    cluster.kubectl("kondor", "drain", "-cancel", NODE)
    eventually(lambda: states(cluster) == {("Unclaimed", "Idle")}, 30, "the slots back")


def test_a_cordoned_node_drains_when_its_policy_says_so_and_uncordon_cancels(
    cluster: Cluster,
) -> None:
    cluster.kubectl(
        "patch", "slotpolicy", "drain", "--type=merge", "-p", '{"spec":{"drainOnCordon":true}}'
    )
    # Re-carved with the patched policy first: a re-carve that came after the cordon's drain
    # would carve the slots anew, and the drain would be lost (the agent does not carry a
    # drain across a re-carve).
    generation = cluster.get("slotpolicies", "drain", None)["metadata"]["generation"]

    def recarved() -> bool:
        status = cluster.get("executionpoints", NODE, None)["status"]
        carved = (status.get("policy") or {}).get("generation")
        return carved == generation and states(cluster) == {("Unclaimed", "Idle")}

    eventually(recarved, 30, f"re-carved with generation {generation}, Unclaimed")
    cluster.kubectl("cordon", NODE)
    try:
        eventually(
            lambda: (
                (cluster.get("executionpoints", NODE, None)["spec"].get("drain") or {}).get(
                    "requestedBy"
                )
                == "kondor-cordon"
            ),
            20,
            "a graceful drain asked for the cordoned node",
        )
        eventually(lambda: states(cluster) == {("Drained", "Idle")}, 30, "every slot Drained")
    finally:
        cluster.kubectl("uncordon", NODE)
    eventually(
        lambda: "drain" not in cluster.get("executionpoints", NODE, None)["spec"],
        20,
        "the cordon drain cancelled",
    )
    eventually(lambda: states(cluster) == {("Unclaimed", "Idle")}, 30, "the slots back")
