"""Job hooks around `pod` jobs on the dev cluster's kwok node, and a deferred job's start.

A SlotPolicy names PREPARE_JOB, UPDATE_JOB_INFO and JOB_EXIT under a keyword; the node's agent
runs them from the hooks directory (`<state>/hooks`, every agent's) around the job's Pod, off
its loop (kwok "runs" the pod to its `kondor.io/sim-exit-code` annotation). The policy leaves
POLLING_INTERVAL at HTCondor's 5 s, so a deferred job that starts on time shows that the agent
wakes at its DeferralTime rather than at the next polling tick.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kondor_core.classads import parse_ad
from kondor_devcluster import kondor
from kondor_devcluster.components import Layout

from .conftest import MACHINES, skip_reason
from .test_jobs_end_to_end import Cluster, eventually, job_cluster, process_job, slot_policy

NODE = "kwok-small-0"
POLICY = """STARTER_INITIAL_UPDATE_INTERVAL = 1
STARTER_UPDATE_INTERVAL = 1
POD_HOOK_PREPARE_JOB = prepare.sh
POD_HOOK_UPDATE_JOB_INFO = update.sh
POD_HOOK_JOB_EXIT = exit.sh
"""

#: The hooks write what they saw next to themselves (the hooks directory), by job name.
PREPARE = """#!/bin/sh
ad=$(cat)
name=$(printf '%s\\n' "$ad" | sed -n 's/^PodName = "\\(.*\\)"$/\\1/p')
printf '%s\\n' "$ad" > "$(dirname "$0")/prepare-$name"
case "$ad" in
*"HoldMe = true"*)
    echo 'HookStatusCode = 150'
    echo 'HookStatusMessage = "no licence for this pod"'
    ;;
*"WantsStdin = true"*)
    echo 'In = "/data/input.txt"'
    ;;
*)
    echo "Arguments = \\"-c 'echo rewritten'\\""
    echo "Environment = \\"GREETING='hello there' HOOKED=yes\\""
    echo 'Cmd = "/bin/sh"'
    echo 'SiteTag = "edited"'
    ;;
esac
"""
UPDATE = """#!/bin/sh
ad=$(cat)
name=$(printf '%s\\n' "$ad" | sed -n 's/^PodName = "\\(.*\\)"$/\\1/p')
printf '%s\\n' "$ad" > "$(dirname "$0")/update-$name-$(date +%s%N)"
case "$ad" in *"FailUpdates = true"*) exit 2 ;; esac
"""
EXIT = """#!/bin/sh
ad=$(cat)
name=$(printf '%s\\n' "$ad" | sed -n 's/^PodName = "\\(.*\\)"$/\\1/p')
printf '%s\\n' "$1" > "$(dirname "$0")/exit-how-$name"
printf '%s\\n' "$ad" > "$(dirname "$0")/exit-ad-$name"
"""


@pytest.fixture(scope="module")
def hooks_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pod-hooks")


@pytest.fixture(scope="module")
def cluster(hooks_dir: Path) -> Iterator[Cluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    hooks = _hooks(hooks_dir)
    hooks.mkdir(parents=True)
    for name, text in (("prepare.sh", PREPARE), ("update.sh", UPDATE), ("exit.sh", EXIT)):
        (hooks / name).write_text(text)
        (hooks / name).chmod(0o755)
    policy = slot_policy("pod-hooks", {"kondor.io/pool": "cpu"}, POLICY)
    with job_cluster(hooks_dir, [MACHINES / "kwok-small.yaml"], [policy]) as made:
        yield made


def _hooks(root: Path) -> Path:
    return kondor.hooks_dir(Layout(root / "state"))


def pod_job(name: str, *, exit_code: int, duration: str, **attributes: str) -> dict[str, Any]:
    template = {
        "metadata": {
            "annotations": {
                "kondor.io/sim-duration": duration,
                "kondor.io/sim-exit-code": str(exit_code),
            }
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["/bin/false"],
                    "args": ["original"],
                    "env": [{"name": "GREETING", "value": "hi"}],
                }
            ]
        },
    }
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "requestCpus": 1,
            "requestMemory": "64Mi",
            "attributes": {"HookKeyword": '"POD"', "PodName": f'"{name}"', **attributes},
            "pod": {"template": template},
        },
    }


def _pod(cluster: Cluster, job: str) -> dict[str, Any]:
    listed = cluster.kubectl("get", "pods", "-n", "default", "-l", f"kondor.io/job={job}",
                             "-o", "json")  # fmt: skip
    [pod] = json.loads(listed)["items"]
    return pod  # type: ignore[no-any-return]


def _events(cluster: Cluster, reason: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.name={NODE},reason={reason}"
    listed = cluster.kubectl("get", "events", "-n", "default", "--field-selector", selector,
                             "-o", "json")  # fmt: skip
    found: list[dict[str, Any]] = json.loads(listed)["items"]
    return found


def test_prepare_job_edits_the_pod_and_job_exit_sees_its_exit(
    cluster: Cluster, hooks_dir: Path
) -> None:
    cluster.apply(pod_job("pod-hooked", exit_code=3, duration="3s"), user="alice")
    done = eventually(
        lambda: (j := cluster.job("pod-hooked"))["status"]["jobStatus"] == "Completed" and j,
        45,
        "the hooked pod job Completed",
    )
    assert done["status"]["exitCode"] == 3
    hooks = _hooks(hooks_dir)
    # PREPARE_JOB saw the job ad and its edits are what the pod carries.
    assert "HookKeyword" in (hooks / "prepare-pod-hooked").read_text()
    pod = _pod(cluster, "pod-hooked")
    [container] = pod["spec"]["containers"]
    assert container["command"] == ["/bin/sh"]
    assert container["args"] == ["-c", "echo rewritten"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GREETING"] == "hello there" and env["HOOKED"] == "yes"
    # The edited job ad is what the pod carries (mounted from its annotation): no ConfigMap.
    assert 'SiteTag = "edited"' in pod["metadata"]["annotations"]["kondor.io/job-ad"]
    listed = cluster.kubectl("get", "configmaps", "-n", "default", "-l",
                             "kondor.io/job=pod-hooked", "-o", "json")  # fmt: skip
    assert json.loads(listed)["items"] == []
    # UPDATE_JOB_INFO ran while the pod ran (1 s, then every 1 s of the 3 s run).
    updates = sorted(hooks.glob("update-pod-hooked-*"))
    assert len(updates) >= 2, updates
    update = parse_ad(updates[0].read_text(), field="update")
    assert update["JobState"] == "Running" and update["JobStartDate"] > 0
    # JOB_EXIT saw the exit with the pod's exit code.
    assert (hooks / "exit-how-pod-hooked").read_text() == "exit\n"
    exit_ad = parse_ad((hooks / "exit-ad-pod-hooked").read_text(), field="exit")
    assert exit_ad["ExitCode"] == 3 and exit_ad["ExitBySignal"] is False
    assert exit_ad["ExitReason"] == "exited normally with status 3"
    assert 2.0 <= exit_ad["JobDuration"] < 10.0, exit_ad["JobDuration"]


def test_prepare_job_150_holds_a_pod_job_before_any_pod(cluster: Cluster) -> None:
    cluster.apply(pod_job("pod-held", exit_code=0, duration="1s", HoldMe="true"), user="alice")
    held = eventually(
        lambda: (j := cluster.job("pod-held"))["status"]["jobStatus"] == "Held" and j,
        30,
        "the pod job Held by PREPARE_JOB",
    )
    assert held["status"]["holdReason"] == "no licence for this pod"
    assert held["status"]["holdReasonCode"] == 19
    listed = cluster.kubectl("get", "pods", "-n", "default", "-l", "kondor.io/job=pod-held",
                             "-o", "json")  # fmt: skip
    assert json.loads(listed)["items"] == []
    event = eventually(lambda: _events(cluster, "PrepareJobFailed"), 15, "an Event")[0]
    assert event["type"] == "Warning" and "pod-held" in event["message"]


def test_an_edit_a_pod_cannot_take_holds_the_job_naming_it(cluster: Cluster) -> None:
    cluster.apply(pod_job("pod-stdin", exit_code=0, duration="1s", WantsStdin="true"), user="alice")
    held = eventually(
        lambda: (j := cluster.job("pod-stdin"))["status"]["jobStatus"] == "Held" and j,
        30,
        "the pod job Held",
    )
    reason = held["status"]["holdReason"]
    assert held["status"]["holdReasonCode"] == 19
    assert "POD_HOOK_PREPARE_JOB" in reason and "In" in reason and "pod" in reason, reason


def test_job_exit_of_a_removed_pod_job_says_remove(cluster: Cluster, hooks_dir: Path) -> None:
    cluster.apply(pod_job("pod-removed", exit_code=0, duration="300s"), user="alice")
    eventually(
        lambda: cluster.job("pod-removed")["status"].get("execution", {}).get("state") == "Running",
        30,
        "pod-removed Running",
    )
    hooks = _hooks(hooks_dir)
    eventually(lambda: list(hooks.glob("update-pod-removed-*")), 15, "an UPDATE_JOB_INFO")
    cluster.kubectl("patch", "executionjob", "pod-removed", "-n", "default", "--type", "merge",
                    "-p", '{"spec": {"remove": true}}', user="alice")  # fmt: skip
    eventually((hooks / "exit-ad-pod-removed").exists, 30, "JOB_EXIT of the removed job")
    assert (hooks / "exit-how-pod-removed").read_text() == "remove\n"
    exit_ad = parse_ad((hooks / "exit-ad-pod-removed").read_text(), field="exit")
    assert exit_ad["ExitReason"] == "The job was removed"
    assert exit_ad["ExitBySignal"] is True


def test_a_failing_update_job_info_is_a_warning_event(cluster: Cluster) -> None:
    job = pod_job("pod-update-fails", exit_code=0, duration="3s", FailUpdates="true")
    cluster.apply(job, user="alice")
    event = eventually(lambda: _events(cluster, "UpdateJobInfoFailed"), 30, "an Event")[0]
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "ExecutionPoint"
    assert event["message"] == (
        "default/pod-update-fails: POD_HOOK_UPDATE_JOB_INFO exited with status 2"
    )
    eventually(
        lambda: cluster.job("pod-update-fails")["status"]["jobStatus"] == "Completed",
        30,
        "the job Completed all the same",
    )


#: How late a deferred job may start: the agent wakes at DeferralTime (not at its 5 s polling
#: tick), then forks the job's supervisor; the margin is for a loaded shared test machine.
DEFERRAL_BOUND = 1.0
DEFERRAL_MARGIN = 0.5


def test_a_deferred_job_starts_within_a_second_of_its_deferral_time(cluster: Cluster) -> None:
    at = int(time.time()) + 20  # the 20 s ahead
    script = 'date +%s.%N > "$_CONDOR_SCRATCH_DIR/started"'
    cluster.apply(process_job("deferred", script, deferralTime=at), user="alice")
    eventually(
        lambda: cluster.job("deferred")["status"]["jobStatus"] == "Running",
        15,
        "the deferred job matched and waiting, Running",
    )
    assert time.time() < at, "matched, claimed and waiting before its time"
    done = eventually(
        lambda: (j := cluster.job("deferred"))["status"]["jobStatus"] == "Completed" and j,
        40,
        "the deferred job Completed",
    )
    scratch = Path(done["status"]["execution"]["directory"]) / "scratch"
    late = float((scratch / "started").read_text()) - at
    print(f"deferred job started {late:.3f} s after its DeferralTime")
    assert 0.0 <= late < DEFERRAL_BOUND + DEFERRAL_MARGIN, late
