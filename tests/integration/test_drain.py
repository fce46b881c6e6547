"""condor_drain on the dev cluster: `kubectl kondor drain` writes the request to the
ExecutionPoint, the node's agent drains along the startd's transitions (a graceful drain lets
the running job finish within its retirement time, and no new job starts), `kubectl get xp`
shows it Drained, and `-cancel` makes the node run jobs again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .conftest import MACHINES, skip_reason
from .test_jobs_end_to_end import Cluster, eventually, job_cluster, process_job, slot_policy

NODE = "kwok-small-0"
POLICY = """POLLING_INTERVAL = 1
MAXJOBRETIREMENTTIME = 3600
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
