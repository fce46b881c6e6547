"""Backfill on the dev cluster: with ENABLE_BACKFILL and START_BACKFILL true, the node's idle
static slot enters Backfill and its agent starts the SlotPolicy's backfill process for real
(Backfill/Busy); a real job matched to the slot evicts it (Backfill/Killing: the process is
killed) within a polling interval, the job runs, and once it is done the slot backfills
again with a new process."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kondor_core.api import parse_time

from .conftest import MACHINES, skip_reason
from .test_jobs_end_to_end import Cluster, eventually, job_cluster, process_job, slot_policy

pytestmark = pytest.mark.timeout(180)

NODE = "kwok-small-0"
SLOT = f"slot1@{NODE}"
POLICY = """POLLING_INTERVAL = 1
SLOT_TYPE_1 = 100%
NUM_SLOTS_TYPE_1 = 1
SLOT_TYPE_1_PARTITIONABLE = FALSE
ENABLE_BACKFILL = TRUE
START_BACKFILL = $(BACKFILL_NOW)
EVICT_BACKFILL = FALSE
"""
BACKFILL = {"executable": "/bin/sh", "arguments": ["-c", "echo $$ > pid; exec sleep 600"]}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path]]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("backfill")
    policy = slot_policy("backfill", {"kondor.io/pool": "cpu"}, "BACKFILL_NOW = FALSE\n" + POLICY)
    policy["spec"]["backfill"] = BACKFILL
    with job_cluster(tmp, [MACHINES / "kwok-small.yaml"], [policy]) as cluster:
        yield cluster, tmp / "state" / "agents" / NODE / "execute" / "backfill" / f"slot1_{NODE}"


def slot_state(cluster: Cluster) -> tuple[str, str]:
    slot = next(s for s in cluster.slots() if s["name"] == SLOT)
    return slot["state"], slot["activity"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[-1][0] != "Z"


def backfill_pid(directory: Path) -> int:
    text = (directory / "pid").read_text().strip() if (directory / "pid").exists() else ""
    return int(text) if text and alive(int(text)) else 0


def test_an_idle_slot_backfills_and_a_matched_job_evicts_the_backfill(
    made: tuple[Cluster, Path],
) -> None:
    cluster, directory = made
    assert slot_state(cluster) == ("Unclaimed", "Idle")  # START_BACKFILL is false
    policy = slot_policy("backfill", {"kondor.io/pool": "cpu"}, "BACKFILL_NOW = TRUE\n" + POLICY)
    policy["spec"]["backfill"] = BACKFILL
    cluster.apply(policy)
    eventually(lambda: slot_state(cluster) == ("Backfill", "Busy"), 30, "Backfill/Busy")
    first = eventually(lambda: backfill_pid(directory), 10, "the backfill process running")

    cluster.apply(process_job("real", "sleep 2; echo real"), user="alice")
    killed_at = eventually(
        lambda: None if alive(first) else time.time(), 30, "the backfill process killed"
    )
    job = cluster.job("real")
    assert job["status"].get("slot") == SLOT
    matched_at = parse_time(job["status"]["matchTime"])
    assert matched_at is not None
    # Within a polling interval (1 s) of the match, with a second for the RFC 3339 time's
    # truncation and one for the agent hearing of the match.
    assert killed_at - matched_at.timestamp() < 3.0
    done = eventually(
        lambda: (job := cluster.job("real"))["status"].get("jobStatus") == "Completed" and job,
        60,
        "the job Completed",
    )
    assert done["status"]["exitCode"] == 0

    eventually(lambda: slot_state(cluster) == ("Backfill", "Busy"), 30, "Backfill/Busy again")
    second = eventually(lambda: backfill_pid(directory), 10, "a new backfill process")
    assert second != first


def test_a_pod_backfill_is_created_on_the_node_and_deleted_when_a_job_comes(
    made: tuple[Cluster, Path],
) -> None:
    cluster, _ = made
    policy = slot_policy("backfill", {"kondor.io/pool": "cpu"}, "BACKFILL_NOW = TRUE\n" + POLICY)
    policy["spec"]["backfill"] = {
        "pod": {"spec": {"containers": [{"name": "client", "image": "busybox"}]}}
    }
    cluster.apply(policy)
    # The process client gives way to a job; afterwards the slot backfills with a pod.
    cluster.apply(process_job("between", "echo between"), user="alice")
    eventually(
        lambda: cluster.job("between")["status"].get("jobStatus") == "Completed", 60, "between"
    )
    pod_name = f"backfill-{NODE}-slot1"

    def pod() -> dict[str, Any] | None:
        found = cluster.kubectl("get", "pods", "-n", "default", "-o", "json")
        for item in json.loads(found)["items"]:
            if item["metadata"]["name"] == pod_name and not item["metadata"].get(
                "deletionTimestamp"
            ):
                return dict(item)
        return None

    created = eventually(pod, 30, "the backfill pod created")
    assert created["spec"]["nodeName"] == NODE
    assert created["metadata"]["labels"]["kondor.io/backfill-slot"] == "slot1"
    eventually(lambda: slot_state(cluster) == ("Backfill", "Busy"), 30, "Backfill/Busy (pod)")

    cluster.apply(process_job("after-pod", "echo after"), user="alice")
    eventually(lambda: pod() is None, 30, "the backfill pod deleted for the job")
    eventually(
        lambda: cluster.job("after-pod")["status"].get("jobStatus") == "Completed",
        60,
        "the job run after the pod",
    )
