"""The pod launcher's actions on a pod's cgroup (kondor_agent.runtimes.pod): freeze for suspend, the
KillSig to the containers' processes for soft kill, thaw before every deletion, SIGKILL of what
is left after a hard kill, and an OOM kill held with code 34. The cgroup tree is a recorded v1
layout with a real process's pid in it; the API is a fake that records deletions (the
launcher's PodApi: kondor_agent.kube, over kondor_kube, whose errors it raises)."""

from __future__ import annotations

import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kondor_agent.jobs import Outcome
from kondor_agent.runtimes import pod_cgroup
from kondor_agent.runtimes.pod import PodHandle, PodLauncher, _signal_number
from kondor_agent.runtimes.pod_hooks import exit_status
from kondor_core.api import ExecutionJob, JobExecution
from kondor_core.classads import parse_ad
from kondor_core.slots import SlotAd
from kondor_kube.errors import ForbiddenError

UID = "11111111-2222-3333-4444-555555555555"
HANDLE = PodHandle("default", "job-1", "slot1_1@n0", 128)


class FakeCore:
    def __init__(self, freezer: Path) -> None:
        self.freezer = freezer
        self.deleted: list[tuple[str, int | None, str]] = []

    def delete(self, namespace: str, name: str, grace_seconds: int | None) -> None:
        state = (self.freezer / "freezer.state").read_text().strip()
        self.deleted.append((name, grace_seconds, state))


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
    relative = pod_cgroup.pod_cgroup_paths(UID, "Burstable")[0]
    for controller in ("memory", "freezer"):
        directory = tmp_path / controller / relative / "container-a"
        directory.mkdir(parents=True)
        (directory / "cgroup.procs").write_text(f"{pid}\n")
    freezer = tmp_path / "freezer" / relative
    (freezer / "freezer.state").write_text("THAWED\n")
    api = SimpleNamespace(api_client=None)  # the fake PodApi below takes the calls
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
    pods._pods[("default", "job-1")]["status"] = {  # type: ignore[index]
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

    def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.pods.get(name)
        return found

    def list(self, label_selector: str) -> list[dict[str, Any]]:
        return list(self.pods.values())


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


# --- job hooks around a pod job (kondor_agent.runtimes.pod_hooks) ---------------------------

HOOKED_AD = 'ClusterId = 3\nProcId = 0\nOwner = "alice"\nHookKeyword = "POD"\n'
SLOT = SlotAd("slot1_1@n0", {"Name": "slot1_1@n0", "SlotID": 1, "Cpus": 1, "Memory": 128},
              frozenset())  # fmt: skip
HOOKED_JOB = ExecutionJob.model_validate(
    {
        "metadata": {"name": "hooked", "namespace": "default", "uid": "u-1"},
        "spec": {
            "pod": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "main", "image": "busybox", "args": ["original"]},
                            {"name": "helper", "image": "sidecar"},
                        ]
                    }
                }
            }
        },
        "status": {"claimId": "c#1"},
    }
)


class FakeCreates:
    """Records what the launcher creates and deletes: every write it makes to the API (it
    has no other write method, so any other write fails the test)."""

    def __init__(self) -> None:
        self.created: list[tuple[str, dict[str, Any]]] = []
        self.deleted: list[str] = []

    def create(self, namespace: str, body: dict[str, Any]) -> None:
        self.created.append(("Pod", body))

    def delete(self, namespace: str, name: str, grace_seconds: int | None) -> None:
        self.deleted.append(name)


def hook(hooks_dir: Path, name: str, body: str) -> str:
    path = hooks_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return name


def hooked(tmp_path: Path, **knobs: str) -> tuple[PodLauncher, FakeCreates, Path]:
    hooks_dir = tmp_path / "hooks"
    hooks_dir.mkdir(exist_ok=True)
    api = SimpleNamespace(api_client=None)  # the fake PodApi below takes the calls
    made = PodLauncher(api, "n0", cgroup_root=tmp_path / "cgroup", hooks_dir=hooks_dir)  # type: ignore[arg-type]
    made.configure({"STARTER_INITIAL_UPDATE_INTERVAL": "0.2", "STARTER_UPDATE_INTERVAL": "0.3",
                    **{f"POD_HOOK_{hook}": value for hook, value in knobs.items()}})  # fmt: skip
    core = FakeCreates()
    made.core = core  # type: ignore[assignment]
    return made, core, hooks_dir


def wait(condition: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.01)
    return found


def end_pod(pods: PodLauncher, handle: PodHandle, code: int, **terminated: Any) -> None:
    """What the watch sees when kwok or the kubelet ends the pod."""
    done = {"exitCode": code, "startedAt": "2026-11-24T00:00:00Z",
            "finishedAt": "2026-11-24T00:00:04Z", **terminated}  # fmt: skip
    with pods._lock:
        pods._pods[(handle.namespace, handle.name)] = {
            "metadata": {"name": handle.name, "namespace": handle.namespace},
            "status": {"phase": "Failed" if code else "Succeeded",
                       "containerStatuses": [{"state": {"terminated": done}}]},
        }  # fmt: skip


def test_prepare_job_edits_the_pod_before_it_is_created_and_job_exit_sees_its_exit(
    tmp_path: Path,
) -> None:
    pods, core, hooks_dir = hooked(tmp_path)
    prepare = hook(hooks_dir, "prepare", 'cat > "$0.stdin"\nsleep 1\n'
                   "cat <<'EOF'\nArguments = \"-c 'echo edited'\"\nEnvironment = \"A=1\"\n"
                   'SiteTag = "x"\nEOF\n')  # fmt: skip
    exit_hook = hook(hooks_dir, "exit", 'echo "$1" > "$0.how"\ncat > "$0.ad"\n')
    pods.configure({**pods._macros, "POD_HOOK_PREPARE_JOB": prepare,
                    "POD_HOOK_JOB_EXIT": exit_hook})  # fmt: skip
    began = time.monotonic()
    handle = pods.launch(HOOKED_JOB, "default/hooked", SLOT, HOOKED_AD)
    # The hook sleeps a second: the launch (the agent's loop) does not wait for it.
    assert time.monotonic() - began < 0.5
    assert core.created == [] and not pods.ended(handle) and pods.poll(handle) is None
    wait(lambda: core.created)
    [(kind, pod)] = core.created  # one create: the Pod carries the edited job ad
    assert kind == "Pod" and 'SiteTag = "x"' in pod["metadata"]["annotations"]["kondor.io/job-ad"]
    assert pod["metadata"]["annotations"]["kondor.io/machine-ad"] == SLOT.to_classad().printOld()
    main, helper = pod["spec"]["containers"]
    assert main["args"] == ["-c", "echo edited"]
    assert {"name": "A", "value": "1"} in main["env"]
    assert "args" not in helper
    assert "HookKeyword" in (hooks_dir / "prepare.stdin").read_text()
    end_pod(pods, handle, 3)
    outcome = wait(lambda: pods.poll(handle))
    assert outcome.exit_code == 3 and outcome.hold_reason is None
    # JOB_EXIT ran before the end was reported.
    assert (hooks_dir / "exit.how").read_text() == "exit\n"
    ad = parse_ad((hooks_dir / "exit.ad").read_text(), field="exit")
    assert ad["ExitCode"] == 3 and ad["ExitBySignal"] is False
    assert ad["ExitReason"] == "exited normally with status 3"
    assert ad["JobDuration"] == 4.0 and ad["SiteTag"] == "x"


@pytest.mark.parametrize(
    ("said", "held", "lost"),
    [
        ("echo 'HookStatusCode = 150'; echo 'HookStatusMessage = \"no licence\"'", "no licence",
         False),
        ("echo 'HookStatusCode = 300'", None, True),
        ("exit 4", "POD_HOOK_PREPARE_JOB failed (status 4)", False),
        ("echo 'In = \"/data/in\"'", "POD_HOOK_PREPARE_JOB set In = \"/data/in\", which a pod "
         "job cannot take: a pod's container reads no input file", False),
        ("echo 'this is not an ad ['", "POD_HOOK_PREPARE_JOB printed no ClassAd", False),
    ],
)  # fmt: skip
def test_prepare_job_holds_or_requeues_the_job_and_no_pod_is_made(
    tmp_path: Path, said: str, held: str | None, lost: bool
) -> None:
    pods, core, hooks_dir = hooked(tmp_path)
    pods.configure({**pods._macros, "POD_HOOK_PREPARE_JOB": hook(hooks_dir, "p", f"{said}\n")})
    handle = pods.launch(HOOKED_JOB, "default/hooked", SLOT, HOOKED_AD)
    outcome = wait(lambda: pods.poll(handle))
    assert core.created == []
    assert outcome.lost is lost
    if held is None:
        assert outcome.hold_reason is None
    else:
        assert outcome.hold_reason_code == 19 and held in (outcome.hold_reason or "")


def test_a_hook_outside_the_hooks_directory_holds_the_job_at_once(tmp_path: Path) -> None:
    pods, core, _ = hooked(tmp_path, PREPARE_JOB="/bin/true")
    handle = pods.launch(HOOKED_JOB, "default/hooked", SLOT, HOOKED_AD)
    outcome = pods.poll(handle)
    assert outcome is not None and outcome.hold_reason_code == 19
    assert "POD_HOOK_PREPARE_JOB = /bin/true" in (outcome.hold_reason or "")
    assert core.created == []


def test_a_job_without_hook_keyword_is_created_at_once(tmp_path: Path) -> None:
    pods, core, hooks_dir = hooked(tmp_path, PREPARE_JOB="p")
    hook(hooks_dir, "p", "exit 1\n")
    pods.launch(HOOKED_JOB, "default/hooked", SLOT, "ClusterId = 3\n")
    assert [kind for kind, _ in core.created] == ["Pod"]


def test_a_pod_job_costs_one_create_and_its_pod_carries_both_ads(tmp_path: Path) -> None:
    pods, core, _ = hooked(tmp_path)
    pods.configure({})  # no hooks: created on the agent's loop
    handle = pods.launch(HOOKED_JOB, "default/hooked", SLOT, HOOKED_AD)
    [(kind, pod)] = core.created
    assert kind == "Pod" and pod["metadata"]["name"] == handle.name
    annotations = pod["metadata"]["annotations"]
    assert annotations["kondor.io/job-ad"] == HOOKED_AD
    assert 'Name = "slot1_1@n0"' in annotations["kondor.io/machine-ad"]
    end_pod(pods, handle, 0)
    outcome = pods.poll(handle)
    assert outcome is not None and outcome.exit_code == 0 and outcome.hold_reason is None
    pods.remove(handle)
    # Match to exit, the agent wrote one object for the job (its deletion is the pod's end).
    assert len(core.created) == 1 and core.deleted == [handle.name]


def _huge_ad(size: int) -> str:
    return HOOKED_AD + 'Environment = "X=' + "x" * size + '"\n'


def test_ads_over_the_annotations_limit_hold_the_job_and_nothing_is_created(
    tmp_path: Path,
) -> None:
    pods, core, _ = hooked(tmp_path)
    pods.configure({})
    huge = _huge_ad(262144)
    handle = pods.launch(HOOKED_JOB, "default/hooked", SLOT, huge)
    assert core.created == []
    outcome = pods.poll(handle)
    assert outcome is not None and pods.ended(handle)
    assert outcome.hold_reason_code == 6
    reason = outcome.hold_reason or ""
    assert reason.startswith(f"Cannot create the job's pod: the job ad ({len(huge)} bytes)")
    assert "over Kubernetes' limit of 262144 bytes (256 KiB)" in reason
    # There is no Pod: kills and removal write nothing.
    pods.soft_kill(handle, "SIGTERM")
    pods.hard_kill(handle)
    pods.remove(handle)
    assert core.created == [] and core.deleted == []


def test_a_prepare_job_edit_that_outgrows_the_annotations_holds_the_job(
    tmp_path: Path,
) -> None:
    pods, core, hooks_dir = hooked(tmp_path)
    grow = hook(hooks_dir, "p", f"echo 'Big = \"{'y' * 270000}\"'\n")
    pods.configure({**pods._macros, "POD_HOOK_PREPARE_JOB": grow})
    handle = pods.launch(HOOKED_JOB, "default/hooked", SLOT, HOOKED_AD)
    outcome = wait(lambda: pods.poll(handle))
    assert core.created == []
    assert outcome.hold_reason_code == 6
    assert (outcome.hold_reason or "").startswith(
        "Cannot create the job's pod: POD_HOOK_PREPARE_JOB edited the job ad and the job ad ("
    )


def test_a_job_killed_while_prepare_job_runs_never_gets_a_pod(tmp_path: Path) -> None:
    pods, core, hooks_dir = hooked(tmp_path)
    pods.configure({**pods._macros, "POD_HOOK_PREPARE_JOB": hook(hooks_dir, "p", "sleep 0.5\n")})
    handle = pods.launch(HOOKED_JOB, "default/hooked", SLOT, HOOKED_AD)
    pods.note_exit_how(handle, "remove")
    pods.hard_kill(handle)
    outcome = wait(lambda: pods.poll(handle))
    assert outcome.hold_reason is None and core.created == [] and core.deleted == []


def test_update_job_info_runs_while_the_pod_runs_and_failures_are_reported_once(
    tmp_path: Path,
) -> None:
    pods, _core, hooks_dir = hooked(tmp_path)
    update = hook(hooks_dir, "u", 'cat > "$0.$(date +%s%N)"\nexit 2\n')
    exit_hook = hook(hooks_dir, "e", "cat >/dev/null\nsleep 5\n")
    pods.configure({**pods._macros, "POD_HOOK_UPDATE_JOB_INFO": update,
                    "POD_HOOK_JOB_EXIT": exit_hook, "KONDOR_JOB_HOOK_TIMEOUT": "0.5"})  # fmt: skip
    handle = pods.launch(HOOKED_JOB, "default/hooked", SLOT, HOOKED_AD)
    runs = wait(lambda: len(seen := sorted(hooks_dir.glob("u.*"))) >= 2 and seen)
    ad = parse_ad(runs[0].read_text(), field="update")
    assert ad["JobState"] == "Running" and ad["ClusterId"] == 3
    # A simulated pod (no cgroup here): no processes to count.
    assert ad["NumPids"] == 0 and ad["JobPid"] == 0 and ad["JobStartDate"] > 0
    failures = pods.hook_failures(handle)
    assert failures and failures[0] == (
        "UpdateJobInfoFailed",
        "POD_HOOK_UPDATE_JOB_INFO exited with status 2",
    )
    pods.note_exit_how(handle, "evict")
    pods.hard_kill(handle)
    wait(lambda: pods.poll(handle), 15)
    later = [reason for reason, _ in pods.hook_failures(handle)]
    assert later[-1] == "JobExitFailed" and "JobExitFailed" not in later[:-1]
    assert pods.hook_failures(handle) == []


def test_job_exit_of_a_pod_the_agent_deleted_says_how_and_the_signal(tmp_path: Path) -> None:
    pods, core, hooks_dir = hooked(tmp_path)
    exit_hook = hook(hooks_dir, "e", 'echo "$1" > "$0.how"\ncat > "$0.ad"\n')
    pods.configure({**pods._macros, "POD_HOOK_JOB_EXIT": exit_hook})
    handle = pods.launch(HOOKED_JOB, "default/hooked", SLOT, HOOKED_AD)
    wait(lambda: len(core.created) == 1)
    pods.note_exit_how(handle, "hold")
    pods.hard_kill(handle)
    wait(lambda: pods.poll(handle))
    assert core.deleted == [handle.name]
    assert (hooks_dir / "e.how").read_text() == "hold\n"
    ad = parse_ad((hooks_dir / "e.ad").read_text(), field="exit")
    assert ad["ExitBySignal"] is True and ad["ExitSignal"] == 9
    assert ad["ExitReason"] == "The job was put on hold"


@pytest.mark.parametrize(
    ("code", "terminated", "killed_by", "expected"),
    [
        (0, {"exitCode": 0}, None, (0, None)),
        (3, {"exitCode": 3}, None, (3, None)),
        (137, {"exitCode": 137}, None, (137, None)),  # the job's own exit 137
        (137, {"exitCode": 137}, 15, (None, 9)),  # killed: 128 + SIGKILL
        (143, {"exitCode": 143, "signal": 15}, None, (None, 15)),  # the runtime says
        (0, None, 15, (None, 15)),  # deleted at once: the kill's signal
    ],
)
def test_the_exit_status_of_a_pod_job(
    code: int,
    terminated: dict[str, Any] | None,
    killed_by: int | None,
    expected: tuple[int | None, int | None],
) -> None:
    assert exit_status(Outcome(exit_code=code), terminated, killed_by) == expected


# --- Pod Security: the node's SlotPolicy level, and the hardened pod -----------------------


def _pod_job(owner: str | None = None, **security: Any) -> ExecutionJob:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if security:
        container["securityContext"] = security
    return ExecutionJob.model_validate(
        {
            "metadata": {"name": "secure", "namespace": "default", "uid": "u-2"},
            "spec": {
                "owner": owner,
                "pod": {"template": {"spec": {"containers": [container]}}},
            },
            "status": {"claimId": "c#2"},
        }
    )


@pytest.mark.parametrize(
    ("owner", "knobs", "expected"),
    [
        # No mapping: slot1_1's own user (kondor_core.jobs.runas.slot_user_ids), as a
        # process job in that slot would run as.
        ("alice", {}, ("slot1_1", 101001, 101001)),
        # The admin maps alice: her uid and gid.
        ("alice", {"KONDOR_USER_ACCOUNTS": "alice=5000:5001"}, ("alice", 5000, 5001)),
        ("bob", {"KONDOR_USER_ACCOUNTS": "alice=5000:5001"}, ("slot1_1", 101001, 101001)),
    ],
)
def test_a_job_pod_runs_non_root_without_capabilities_or_escalation(
    tmp_path: Path, owner: str, knobs: dict[str, str], expected: tuple[str, int, int]
) -> None:
    _name, uid, gid = expected
    pods, core, _ = hooked(tmp_path)
    pods.configure(knobs)
    handle = pods.launch(_pod_job(owner), "default/secure", SLOT, HOOKED_AD)
    [(_, pod)] = core.created
    assert pod["spec"]["securityContext"] == {
        "seccompProfile": {"type": "RuntimeDefault"},
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": gid,
    }
    assert pod["spec"]["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    account = pods.account(handle)
    assert account is not None and (account.name, account.uid, account.gid) == expected


def test_a_slot_user_named_by_the_policy_is_this_hosts_user(tmp_path: Path) -> None:
    pods, core, _ = hooked(tmp_path)
    pods.configure({"SLOT1_1_USER": "daemon"})  # a name: looked up in this host's passwd
    handle = pods.launch(_pod_job("alice"), "default/secure", SLOT, HOOKED_AD)
    [(_, pod)] = core.created
    assert pod["spec"]["securityContext"]["runAsUser"] == pwd.getpwnam("daemon").pw_uid
    pods.remove(handle)
    pods.configure({"SLOT1_1_USER": "no-such-user-here"})
    held = pods.launch(_pod_job("alice"), "default/secure", SLOT, HOOKED_AD)
    outcome = pods.poll(held)
    assert outcome is not None and outcome.hold_reason_code == 6
    assert "no-such-user-here: no such user on n0" in (outcome.hold_reason or "")


@pytest.mark.parametrize(
    ("level", "security", "field", "needs"),
    [
        ("restricted", {"privileged": True}, "securityContext.privileged", "privileged"),
        ("baseline", {"privileged": True}, "securityContext.privileged", "privileged"),
        ("restricted", {"runAsUser": 0}, "securityContext.runAsUser", "baseline"),
    ],
)
def test_a_pod_asking_for_more_than_this_nodes_policy_is_held_and_never_created(
    tmp_path: Path, level: str, security: dict[str, Any], field: str, needs: str
) -> None:
    pods, core, _ = hooked(tmp_path)
    pods.configure({"KONDOR_POD_SECURITY": level})
    handle = pods.launch(_pod_job(**security), "default/secure", SLOT, HOOKED_AD)
    assert core.created == []
    outcome = pods.poll(handle)
    assert outcome is not None and pods.ended(handle)
    assert outcome.hold_reason_code == 21  # StartdHeldJob: the machine's policy held it
    reason = outcome.hold_reason or ""
    assert reason.startswith(
        f"The job's pod asks for more than the SlotPolicy of n0 allows (podSecurity: {level}): "
        f"spec.pod.template.spec.containers[0].{field}: "
    )
    assert f"it needs a SlotPolicy with podSecurity: {needs}" in reason
    pods.remove(handle)
    assert core.deleted == []


def test_a_pod_the_nodes_policy_allows_is_created_as_asked(tmp_path: Path) -> None:
    pods, core, _ = hooked(tmp_path)
    pods.configure({"KONDOR_POD_SECURITY": "privileged"})
    pods.launch(_pod_job(privileged=True), "default/secure", SLOT, HOOKED_AD)
    [(_, pod)] = core.created
    context = pod["spec"]["containers"][0]["securityContext"]
    assert context == {"privileged": True, "capabilities": {"drop": ["ALL"]}}


class RefusingCreates(FakeCreates):
    def create(self, namespace: str, body: dict[str, Any]) -> None:
        raise ForbiddenError(
            403,
            "Forbidden",
            'pods "secure-x" is forbidden: violates PodSecurity "restricted:latest": '
            'seccompProfile (pod or container "main" must set securityContext.seccompProfile'
            '.type to "RuntimeDefault" or "Localhost")',
        )


def test_a_pod_the_api_server_refuses_holds_the_job_with_its_message(tmp_path: Path) -> None:
    pods, _, _ = hooked(tmp_path)
    pods.configure({})
    pods.core = RefusingCreates()  # type: ignore[assignment]
    handle = pods.launch(_pod_job(), "default/secure", SLOT, HOOKED_AD)
    outcome = pods.poll(handle)
    assert outcome is not None and outcome.hold_reason_code == 6
    assert (outcome.hold_reason or "").startswith(
        'Cannot create the job\'s pod: pods "secure-x" is forbidden: violates PodSecurity'
    )
