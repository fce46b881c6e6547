"""Pod jobs on the dev cluster's real node: the kubelet runs the job's pod as real processes in
real cgroups, and the node's agent (reading the real host) suspends it by freezing the pod's
cgroup, continues it by thawing, vacates it with its KillSig, and holds it with code 34 when
the kernel OOM-kills it; `harvest` pods carry minimal requests and the low PriorityClass."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kondor_agent.runtimes import pod_cgroup
from kondor_core.jobs.pod import HARVEST_PRIORITY_CLASS
from kondor_devcluster.images import BUSYBOX_IMAGE

from .conftest import real_node_skip_reason
from .test_jobs_end_to_end import Cluster, eventually, job_cluster
from .test_real_node import cpu_ticks

pytestmark = pytest.mark.timeout(300)

NODE = "kondor-real-jobs"
# One partitionable slot of the whole host: a job's dynamic slot is exactly its request. The
# job is frozen 3 s after it starts running and thawed 3 s later, over and over (SUSPEND and
# CONTINUE on the activity's age), so a run of a few seconds' CPU is suspended at least once.
POLICY = """POLLING_INTERVAL = 1
SLOT_TYPE_1 = 100%
SLOT_TYPE_1_PARTITIONABLE = True
NUM_SLOTS_TYPE_1 = 1
START = True
WANT_SUSPEND = True
SUSPEND = (time() - EnteredCurrentActivity) > 3
CONTINUE = (time() - EnteredCurrentActivity) > 3
PREEMPT = False
"""


def policy(mode: str, extra: str = "") -> dict[str, Any]:
    config = POLICY
    if "PREEMPT" in extra:  # preempting instead of suspending (WANT_SUSPEND hides PREEMPT)
        config = config.replace("WANT_SUSPEND = True", "WANT_SUSPEND = False")
        config = config.replace("PREEMPT = False\n", "")
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "SlotPolicy",
        "metadata": {"name": "real"},
        "spec": {
            "nodeSelector": {"matchLabels": {"kondor.io/real-node": "true"}},
            "podMode": mode,
            "condorConfig": config + extra,
        },
    }


def pod_job(name: str, script: str, memory: str = "64Mi") -> dict[str, Any]:
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "requestCpus": 1,
            "requestMemory": memory,
            "pod": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "main",
                                "image": BUSYBOX_IMAGE,
                                "imagePullPolicy": "Never",
                                "command": ["sh", "-c", script],
                            }
                        ]
                    }
                }
            },
        },
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = real_node_skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("realjobs")
    with job_cluster(tmp, [], [policy("dedicated")], real_node=NODE) as made:
        yield made


def job_pod(cluster: Cluster, name: str) -> dict[str, Any] | None:
    listed = cluster.kubectl(
        "get", "pods", "-n", "default", "-l", f"kondor.io/job={name}", "-o", "json"
    )
    items: list[dict[str, Any]] = json.loads(listed)["items"]
    return items[0] if items else None


def test_a_pod_job_is_frozen_in_place_and_thawed_and_completes(cluster: Cluster) -> None:
    script = "i=0; while [ $i -lt 5000000 ]; do i=$((i+1)); done; echo counted $i"
    cluster.apply(pod_job("counter", script))
    pod = eventually(lambda: job_pod(cluster, "counter"), 60, "the job's pod")
    assert pod["spec"]["nodeName"] == NODE
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["requests"] == container["resources"]["limits"]
    # The dynamic slot's memory: the request rounded up to 128 MiB (MODIFY_REQUEST_EXPR_*).
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "128Mi"}
    assert not {"livenessProbe", "readinessProbe", "startupProbe"} & container.keys()
    seen: set[str] = set()
    deadline = time.monotonic() + 180
    while (status := cluster.job("counter")["status"]).get("jobStatus") != "Completed":
        assert time.monotonic() < deadline, f"not Completed in 180 s; saw {sorted(seen)}"
        slots = cluster.get("executionpoints", NODE, None)["status"]["slots"]
        if any((s["state"], s["activity"]) == ("Claimed", "Suspended") for s in slots):
            seen.add("slot Claimed/Suspended")
        if status.get("jobStatus") == "Suspended" and "frozen" not in seen:
            pod = job_pod(cluster, "counter") or {}
            uid, qos = pod["metadata"]["uid"], pod["status"]["qosClass"]
            directory = pod_cgroup.freezer(uid, qos)
            pids = [p for p in pod_cgroup.pod_processes(uid, qos) if not pod_cgroup.is_pause(p)]
            before = cpu_ticks(pids)
            time.sleep(0.5)
            if directory is not None and pod_cgroup.is_frozen(directory):
                assert cpu_ticks(pids) == before, "a frozen job's processes used CPU"
                assert pod["status"]["phase"] == "Running"  # frozen in place, not deleted
                seen.add("frozen")
        if "frozen" in seen and status.get("jobStatus") == "Running":
            seen.add("thawed")
        time.sleep(0.2)
    assert {"frozen", "thawed", "slot Claimed/Suspended"} <= seen
    assert status["exitCode"] == 0
    logs = cluster.kubectl("logs", "-n", "default", pod["metadata"]["name"])
    assert "counted 5000000" in logs


def test_a_harvest_pod_past_its_memory_is_held_with_code_34(cluster: Cluster) -> None:
    # Not suspended on the way: a freeze interrupts dd's read of /dev/zero (the kernel ends a
    # read early when a signal is pending, and the freezer is one), and dd then exits 0.
    cluster.apply(policy("harvest", "WANT_SUSPEND = False\n"))
    time.sleep(3)  # the agent takes the new knobs at its next cycle
    cluster.apply(
        pod_job("hungry", "sleep 2; dd if=/dev/zero of=/dev/null bs=256M count=1", "32Mi")
    )
    pod = eventually(lambda: job_pod(cluster, "hungry"), 60, "the job's pod")
    assert pod["spec"]["priorityClassName"] == HARVEST_PRIORITY_CLASS
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"cpu": "1", "memory": "128Mi"}
    assert resources["requests"] == {"cpu": "1m", "memory": "1Mi"}
    held = eventually(
        lambda: (job := cluster.job("hungry"))["status"].get("jobStatus") == "Held" and job,
        90,
        "Held",
    )
    assert held["status"]["holdReasonCode"] == 34
    assert "memory limit of 128 megabytes" in held["status"]["holdReason"]


def test_preempt_vacates_a_pod_job_with_its_killsig_and_it_runs_again(cluster: Cluster) -> None:
    # PREEMPT 4 s into the run; MachineMaxVacateTime gives the job 10 s to go.
    preempting = (
        "PREEMPT = (time() - EnteredCurrentActivity) > 4\nWANT_VACATE = True\nKILL = False\n"
        "MAXJOBRETIREMENTTIME = 0\nMachineMaxVacateTime = 10\n"
    )
    cluster.apply(policy("dedicated", preempting))
    time.sleep(3)
    script = "trap 'echo got TERM; exit 0' TERM; sleep 8 & wait; echo finished"
    cluster.apply(pod_job("vacated", script))
    pod = eventually(lambda: job_pod(cluster, "vacated"), 60, "the job's pod")

    def got_term() -> bool:  # read while the pod is there: its log is the job's witness
        with contextlib.suppress(AssertionError):
            return "got TERM" in cluster.kubectl("logs", "-n", "default", pod["metadata"]["name"])
        return False

    eventually(got_term, 60, "the job's KillSig trap ran")
    cluster.apply(policy("dedicated"))  # no more preemption: the next run completes
    uid, qos = pod["metadata"]["uid"], pod["status"]["qosClass"]
    eventually(
        lambda: not [p for p in pod_cgroup.pod_processes(uid, qos) if not pod_cgroup.is_pause(p)],
        30,
        "no process of the vacated pod left",
    )
    done = eventually(
        lambda: (job := cluster.job("vacated"))["status"].get("jobStatus") == "Completed" and job,
        120,
        "Completed after running again",
    )
    assert done["status"]["numJobStarts"] >= 2
    assert done["status"]["exitCode"] == 0


def test_a_pod_job_outlives_its_agent(cluster: Cluster) -> None:
    cluster.apply(policy("dedicated", "PREEMPT = False\nWANT_SUSPEND = False\n"))
    time.sleep(3)
    cluster.apply(pod_job("survivor", "sleep 15; echo survived"))
    pod = eventually(lambda: job_pod(cluster, "survivor"), 60, "the job's pod")
    eventually(
        lambda: cluster.job("survivor")["status"].get("jobStatus") == "Running", 60, "Running"
    )
    state = cluster.kubeconfig.parent / "state"
    listed = subprocess.run(
        [sys.executable, "-m", "kondor_devcluster", "dev-cluster", "ps", "--state-dir", str(state),
         "-o", "json"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    (agent,) = [row for row in json.loads(listed) if row["node"] == NODE]
    os.kill(agent["pid"], signal.SIGKILL)
    done = eventually(
        lambda: (job := cluster.job("survivor"))["status"].get("jobStatus") == "Completed" and job,
        90,
        "Completed after the agent came back",
    )
    assert done["status"]["numJobStarts"] == 1  # taken back, never started twice
    assert done["status"]["exitCode"] == 0
    assert job_pod(cluster, "survivor")["metadata"]["uid"] == pod["metadata"]["uid"]
    logs = cluster.kubectl("logs", "-n", "default", pod["metadata"]["name"])
    assert "survived" in logs
