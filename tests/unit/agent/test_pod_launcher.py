"""The pod launcher's actions on a pod's cgroup (kondor_agent.pods): freeze for suspend, the
KillSig to the containers' processes for soft kill, thaw before every deletion, SIGKILL of what
is left after a hard kill, and an OOM kill held with code 34. The cgroup tree is a recorded v1
layout with a real process's pid in it; the API is a fake that records deletions."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kondor_agent import podcgroup
from kondor_agent.pods import PodHandle, PodLauncher, _signal_number
from kondor_core.api import ExecutionJob, JobExecution

UID = "11111111-2222-3333-4444-555555555555"
HANDLE = PodHandle("default", "job-1", "slot1_1@n0", 128)


class FakeCore:
    def __init__(self, freezer: Path) -> None:
        self.freezer = freezer
        self.deleted: list[tuple[str, int | None, str]] = []

    def delete_namespaced_pod(self, name: str, namespace: str, grace_period_seconds: Any) -> None:
        state = (self.freezer / "freezer.state").read_text().strip()
        self.deleted.append((name, grace_period_seconds, state))


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    trap = (
        "import signal, time; signal.signal(signal.SIGTERM, lambda *a: exit(7)); "
        "print('ready', flush=True); time.sleep(60)"
    )
    process = subprocess.Popen([sys.executable, "-c", trap], stdout=subprocess.PIPE)
    assert process.stdout is not None and process.stdout.readline() == b"ready\n"
    yield process
    process.kill()
    process.wait()


def launcher(tmp_path: Path, pid: int) -> tuple[PodLauncher, FakeCore]:
    relative = podcgroup.pod_cgroup_paths(UID, "Burstable")[0]
    for controller in ("memory", "freezer"):
        directory = tmp_path / controller / relative / "container-a"
        directory.mkdir(parents=True)
        (directory / "cgroup.procs").write_text(f"{pid}\n")
    freezer = tmp_path / "freezer" / relative
    (freezer / "freezer.state").write_text("THAWED\n")
    api = SimpleNamespace(api_client=client.ApiClient())
    made = PodLauncher(api, "n0", cgroup_root=tmp_path)  # type: ignore[arg-type]
    made._pods = {
        ("default", "job-1"): {
            "metadata": {"uid": UID},
            "status": {"qosClass": "Burstable", "phase": "Running"},
        }
    }
    core = FakeCore(freezer)
    made.core = core  # type: ignore[assignment]
    return made, core


def test_suspend_freezes_the_pods_cgroup_and_resume_thaws_it(
    tmp_path: Path, child: subprocess.Popen[bytes]
) -> None:
    pods, core = launcher(tmp_path, child.pid)
    pods.suspend(HANDLE)
    assert (core.freezer / "freezer.state").read_text() == "FROZEN"
    assert pods.is_suspended(HANDLE)
    pods.resume(HANDLE)
    assert not pods.is_suspended(HANDLE)


def test_soft_kill_sends_the_killsig_and_keeps_the_pod(
    tmp_path: Path, child: subprocess.Popen[bytes]
) -> None:
    pods, core = launcher(tmp_path, child.pid)
    pods.suspend(HANDLE)
    pods.soft_kill(HANDLE, "SIGTERM")
    assert child.wait(timeout=10) == 7  # its handler ran: thawed first, then signalled
    assert core.deleted == []


def test_deletion_thaws_first_and_hard_kill_kills_what_is_left(
    tmp_path: Path, child: subprocess.Popen[bytes]
) -> None:
    pods, core = launcher(tmp_path, child.pid)
    pods.suspend(HANDLE)
    pods.hard_kill(HANDLE)
    assert core.deleted == [("job-1", 0, "THAWED")]
    assert child.wait(timeout=10) == -signal.SIGKILL


def test_an_oom_killed_container_holds_the_job_with_code_34(tmp_path: Path) -> None:
    pods, _core = launcher(tmp_path, 0)
    pods._pods[("default", "job-1")]["status"] = {
        "phase": "Failed",
        "containerStatuses": [{"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}],
    }
    outcome = pods.poll(HANDLE)
    assert outcome is not None and outcome.hold_reason_code == 34
    assert "memory limit of 128 megabytes" in (outcome.hold_reason or "")


def test_a_pod_without_a_cgroup_here_is_not_frozen_and_soft_kill_deletes_it(
    tmp_path: Path,
) -> None:
    pods, core = launcher(tmp_path, 0)
    pods._pods[("default", "job-1")]["metadata"]["uid"] = "elsewhere"
    pods.suspend(HANDLE)
    assert pods.is_suspended(HANDLE)  # nothing to re-check
    core.freezer.mkdir(parents=True, exist_ok=True)
    pods.soft_kill(HANDLE, "TERM")
    assert [entry[:2] for entry in core.deleted] == [("job-1", None)]


@pytest.mark.parametrize(
    ("given", "number"), [("SIGTERM", 15), ("TERM", 15), ("9", 9), ("sigusr1", 10), ("NOPE", 15)]
)
def test_killsig_as_htcondor_spells_it(given: str, number: int) -> None:
    assert _signal_number(given) == number


class FakeReads(FakeCore):
    def __init__(self, freezer: Path, pods: dict[str, Any]) -> None:
        super().__init__(freezer)
        self.pods = pods

    def read_namespaced_pod(self, name: str, namespace: str) -> dict[str, Any]:
        if name not in self.pods:
            raise ApiException(status=404)
        return self.pods[name]


def adopting(tmp_path: Path, pods: dict[str, Any]) -> PodLauncher:
    made, core = launcher(tmp_path, 0)
    made.core = FakeReads(core.freezer, pods)  # type: ignore[assignment]
    made._pods = {}
    return made


def job_pod(node: str = "n0", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "job-1",
            "namespace": "default",
            "uid": UID,
            "labels": {"kondor.io/execution-point": node},
            **meta,
        },
        "spec": {"containers": [{"resources": {"limits": {"memory": "128Mi"}}}]},
        "status": {"phase": "Running", "qosClass": "Burstable"},
    }


def execution(directory: str) -> JobExecution:
    return JobExecution(claim_id="c#1", state="Running", slot="slot1_1@n0", directory=directory)


JOB = ExecutionJob.model_validate(
    {"metadata": {"name": "job", "namespace": "default"}, "spec": {"pod": {"template": {}}}}
)


def test_a_restarted_agent_takes_back_its_running_pod_and_clear_spares_it(
    tmp_path: Path,
) -> None:
    pods = adopting(tmp_path, {"job-1": job_pod()})
    handle = pods.adopt(JOB, execution("pod/default/job-1"))
    assert handle == PodHandle("default", "job-1", "slot1_1@n0", 128)
    listed = {"items": [job_pod()]}
    pods._list = lambda **_options: listed  # type: ignore[method-assign]
    assert pods.clear() == 0  # taken back: not deleted


@pytest.mark.parametrize(
    ("directory", "found"),
    [
        ("pod/default/gone", {}),  # deleted while no agent ran
        ("pod/other/job-1", {"job-1": job_pod()}),  # not the job's namespace
        ("/var/lib/kondor/execute/x", {"job-1": job_pod()}),  # a process run
        ("pod/default/job-1", {"job-1": job_pod("n9")}),  # another node's
        ("pod/default/job-1", {"job-1": job_pod(deletionTimestamp="2026-11-23T00:00:00Z")}),
    ],
)
def test_nothing_to_take_back(tmp_path: Path, directory: str, found: dict[str, Any]) -> None:
    assert adopting(tmp_path, found).adopt(JOB, execution(directory)) is None
