"""Job hooks with real supervisors, jobs and hook scripts (the reference's "Job Hooks That
Modify and Monitor Execution"): PREPARE_JOB edits what runs, holds or requeues the job;
UPDATE_JOB_INFO runs at its intervals with the running attributes; JOB_EXIT gets the exit
attributes and the reason; hooks outside the hooks directory are refused."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from execute_fakes import wait_for, wait_result

from kondor_agent.execute import records
from kondor_agent.execute.cgroups import JobCgroups
from kondor_agent.runtimes.process import ProcessJobs
from kondor_agent.runtimes.process_launcher import JobHandle, ProcessLauncher
from kondor_core.api import ProcessRuntime
from kondor_core.classads import parse_ad
from kondor_core.jobs.hooks import JobHooks, job_hooks

JOB_AD = 'ClusterId = 12\nProcId = 0\nOwner = "alice"\nCmd = "/bin/sh"\nHookKeyword = "TEST"'
MACHINE_AD = 'Name = "slot1_1@node-a"\nCpus = 1\nMemory = 128'


@pytest.fixture
def hooks_dir(tmp_path: Path) -> Path:
    path = tmp_path / "hooks"
    path.mkdir()
    return path


@pytest.fixture
def launcher(tmp_path: Path, hooks_dir: Path) -> ProcessLauncher:
    return ProcessLauncher(
        tmp_path / "execute", JobCgroups.disabled(), search_path="", hooks_dir=hooks_dir
    )


def hook(hooks_dir: Path, name: str, body: str) -> str:
    path = hooks_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return name


def sh(script: str) -> ProcessRuntime:
    return ProcessRuntime(executable="/bin/sh", arguments=["-c", script], output="out.txt")


#: A job that runs until the test lets it end: it waits for a `go` file in its scratch
#: directory (at most a minute), so what a test checks while it runs cannot race its end.
UNTIL_GO = "i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done"


def let_end(handle: JobHandle) -> None:
    (handle.scratch / "go").touch()


def test_prepare_job_rewrites_the_arguments_and_the_job_ad(
    launcher: ProcessLauncher, hooks_dir: Path
) -> None:
    name = hook(
        hooks_dir,
        "prepare",
        'cat > "$_CONDOR_SCRATCH_DIR/prepare-stdin"\n'
        "cat <<'EOF'\nArguments = \"-c 'echo rewritten'\"\nPrepared = True\nEOF\n",
    )
    hooks = JobHooks(keyword="TEST", programs={"TEST_HOOK_PREPARE_JOB": name})
    handle = launcher.launch(
        "j", sh("echo original"), JOB_AD, MACHINE_AD, slot="slot1", hooks=hooks
    )
    result = wait_result(launcher, handle)
    assert result.state == "exited" and result.exit_code == 0, result
    assert (handle.scratch / "out.txt").read_text() == "rewritten\n"
    # The hook saw the job ad on stdin; the job sees the edited ad.
    seen = parse_ad((handle.scratch / "prepare-stdin").read_text(), field="stdin")
    assert seen["ClusterId"] == 12 and seen["HookKeyword"] == "TEST"
    edited = parse_ad((handle.scratch / records.JOB_AD).read_text(), field="ad")
    assert edited["Prepared"] is True


def test_prepare_job_can_change_the_executable(launcher: ProcessLauncher, hooks_dir: Path) -> None:
    name = hook(hooks_dir, "prepare", "cat >/dev/null\necho 'Cmd = \"/bin/echo\"'\n")
    hooks = JobHooks(keyword="TEST", programs={"TEST_HOOK_PREPARE_JOB": name})
    handle = launcher.launch(
        "j", sh("echo original"), JOB_AD, MACHINE_AD, slot="slot1", hooks=hooks
    )
    result = wait_result(launcher, handle)
    assert result.exit_code == 0
    assert (handle.scratch / "out.txt").read_text() == "-c echo original\n"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "echo 'HookStatusCode = 150'\necho 'HookStatusMessage = \"no licence\"'\n",
            (19, 150, "no licence"),
        ),
        ("echo oops >&2\nexit 3\n", (19, 3, "TEST_HOOK_PREPARE_JOB failed (status 3)")),
    ],
)
def test_prepare_job_failure_holds_the_job(
    launcher: ProcessLauncher, hooks_dir: Path, body: str, expected: tuple[int, int, str]
) -> None:
    name = hook(hooks_dir, "prepare", "cat >/dev/null\n" + body)
    hooks = JobHooks(keyword="TEST", programs={"TEST_HOOK_PREPARE_JOB": name})
    handle = launcher.launch("j", sh("touch ran"), JOB_AD, MACHINE_AD, slot="slot1", hooks=hooks)
    result = wait_result(launcher, handle)
    assert result.state == "failed"
    assert (result.hold_reason_code, result.hold_reason_subcode, result.hold_reason) == expected
    assert not (handle.scratch / "ran").exists()


def test_prepare_job_status_300_returns_the_job_to_idle(
    launcher: ProcessLauncher, hooks_dir: Path
) -> None:
    body = "cat >/dev/null\necho 'HookStatusCode = 300'\necho 'HookStatusMessage = \"later\"'\n"
    hooks = JobHooks(keyword="TEST", programs={"TEST_HOOK_PREPARE_JOB": hook(hooks_dir, "p", body)})
    handle = launcher.launch("j", sh("touch ran"), JOB_AD, MACHINE_AD, slot="slot1", hooks=hooks)
    result = wait_result(launcher, handle)
    assert result.requeue_reason == "later" and result.hold_reason is None
    assert not (handle.scratch / "ran").exists()


def test_a_hung_prepare_job_is_killed_and_holds(launcher: ProcessLauncher, hooks_dir: Path) -> None:
    name = hook(hooks_dir, "prepare", "exec sleep 30\n")
    hooks = JobHooks(keyword="TEST", programs={"TEST_HOOK_PREPARE_JOB": name}, timeout=0.3)
    handle = launcher.launch("j", sh("true"), JOB_AD, MACHINE_AD, slot="slot1", hooks=hooks)
    result = wait_result(launcher, handle)
    assert result.hold_reason_code == 19
    assert result.hold_reason == "TEST_HOOK_PREPARE_JOB ran longer than 0.3 s and was killed"


def test_update_job_info_runs_at_its_intervals_with_the_running_attributes(
    launcher: ProcessLauncher, hooks_dir: Path
) -> None:
    name = hook(hooks_dir, "update", 'cat > "$_CONDOR_SCRATCH_DIR/update-$(date +%s%N)"\n')
    hooks = JobHooks(
        keyword="TEST",
        programs={"TEST_HOOK_UPDATE_JOB_INFO": name},
        initial_update_interval=0.5,
        update_interval=1.0,
    )
    handle = launcher.launch("j", sh("sleep 2.75"), JOB_AD, MACHINE_AD, slot="slot1", hooks=hooks)
    result = wait_result(launcher, handle)
    assert result.exit_code == 0
    updates = sorted(handle.scratch.glob("update-*"))
    # At 0.5, 1.5 and 2.5 s of a 2.75 s job (the times are the hooks' own: a loaded machine
    # delays a hook's start by a few tenths).
    assert len(updates) == 3, updates
    times = [int(path.name.split("-")[1]) / 1e9 for path in updates]
    assert 0.7 < times[1] - times[0] < 1.3 and 0.7 < times[2] - times[1] < 1.3
    ad = parse_ad(updates[0].read_text(), field="update")
    assert ad["JobState"] == "Running" and ad["ClusterId"] == 12
    assert ad["JobPid"] == launcher.job_pid(handle) and ad["NumPids"] >= 1
    assert ad["JobStartDate"] == int(result.start_time or 0)
    for attribute in ("RemoteSysCpu", "RemoteUserCpu", "ImageSize"):
        assert ad[attribute] >= 0


def test_job_exit_gets_the_exit_attributes(launcher: ProcessLauncher, hooks_dir: Path) -> None:
    name = hook(
        hooks_dir,
        "exit",
        'echo "$1" > "$_CONDOR_SCRATCH_DIR/how"; cat > "$_CONDOR_SCRATCH_DIR/exit-ad"\n',
    )
    hooks = JobHooks(keyword="TEST", programs={"TEST_HOOK_JOB_EXIT": name})
    handle = launcher.launch("j", sh("exit 7"), JOB_AD, MACHINE_AD, slot="slot1", hooks=hooks)
    result = wait_result(launcher, handle)
    assert result.exit_code == 7
    # The supervisor waited for the hook before writing the result.
    assert (handle.scratch / "how").read_text() == "exit\n"
    ad = parse_ad((handle.scratch / "exit-ad").read_text(), field="exit")
    assert ad["ExitBySignal"] is False and ad["ExitCode"] == 7
    assert ad["ExitReason"] == "exited normally with status 7"
    assert ad["JobDuration"] >= 0 and ad["JobStartDate"] == int(result.start_time or 0)
    assert ad["Owner"] == "alice"


def test_job_exit_says_evict_when_the_agent_vacates(
    launcher: ProcessLauncher, hooks_dir: Path
) -> None:
    name = hook(
        hooks_dir,
        "exit",
        'echo "$1" > "$_CONDOR_SCRATCH_DIR/how"; cat > "$_CONDOR_SCRATCH_DIR/exit-ad"\n',
    )
    hooks = JobHooks(keyword="TEST", programs={"TEST_HOOK_JOB_EXIT": name})
    handle = launcher.launch(
        "j", sh("exec sleep 30"), JOB_AD, MACHINE_AD, slot="slot1", hooks=hooks
    )
    wait_for(lambda: launcher.job_pid(handle) is not None)
    launcher.note_exit_how(handle, "remove")
    launcher.soft_kill(handle, signal.SIGTERM)
    result = wait_result(launcher, handle)
    assert result.killed and result.exit_signal == signal.SIGTERM
    assert (handle.scratch / "how").read_text() == "remove\n"
    ad = parse_ad((handle.scratch / "exit-ad").read_text(), field="exit")
    assert ad["ExitBySignal"] is True and ad["ExitSignal"] == signal.SIGTERM


@pytest.mark.parametrize("where", ["outside", "symlink", "missing"])
def test_a_hook_outside_the_hooks_directory_is_refused(
    launcher: ProcessLauncher, hooks_dir: Path, tmp_path: Path, where: str
) -> None:
    outside = tmp_path / "elsewhere.sh"
    outside.write_text("#!/bin/sh\ntouch /tmp/should-not-run\n")
    outside.chmod(0o755)
    program = {"outside": str(outside), "symlink": "link", "missing": "nope"}[where]
    os.symlink(outside, hooks_dir / "link")
    hooks = JobHooks(keyword="TEST", programs={"TEST_HOOK_PREPARE_JOB": program})
    handle = launcher.launch("j", sh("touch ran"), JOB_AD, MACHINE_AD, slot="slot1", hooks=hooks)
    result = wait_result(launcher, handle)
    assert result.state == "failed" and result.hold_reason_code == 19
    assert result.hold_reason is not None
    assert f"TEST_HOOK_PREPARE_JOB = {program}" in result.hold_reason
    assert not (handle.scratch / "ran").exists()


def test_hooks_of_the_policy_macros() -> None:
    hooks = job_hooks(
        {"TEST_HOOK_JOB_EXIT": "exit", "STARTER_UPDATE_INTERVAL": "2"},
        slot_id=1,
        hook_keyword="TEST",
    )
    assert hooks is not None and hooks.program("JOB_EXIT") == "exit"


def test_job_exit_says_evict_when_the_agent_kills_without_a_reason(
    launcher: ProcessLauncher, hooks_dir: Path
) -> None:
    name = hook(hooks_dir, "exit", 'echo "$1" > "$_CONDOR_SCRATCH_DIR/how"\n')
    hooks = JobHooks(keyword="TEST", programs={"TEST_HOOK_JOB_EXIT": name})
    handle = launcher.launch(
        "j", sh("exec sleep 30"), JOB_AD, MACHINE_AD, slot="slot1", hooks=hooks
    )
    wait_for(lambda: launcher.job_pid(handle) is not None)
    launcher.hard_kill(handle)
    result = wait_result(launcher, handle)
    assert result.killed and result.exit_signal == signal.SIGKILL
    assert (handle.scratch / "how").read_text() == "evict\n"


def test_failed_update_job_info_and_job_exit_are_recorded_for_the_agent(
    launcher: ProcessLauncher, hooks_dir: Path
) -> None:
    """UPDATE_JOB_INFO exiting non-zero or running past its timeout, and JOB_EXIT printing
    more than it may, are recorded in the job directory; the agent's ProcessJobs reads each
    once (as (Event reason, message)) while the job runs and after it ends."""
    update = hook(hooks_dir, "update", "cat >/dev/null\nexit 3\n")
    flood = hook(hooks_dir, "exit", "cat >/dev/null\nyes aaaaaaaaaaaaaaa | head -c 2000000\n")
    hooks = JobHooks(
        keyword="TEST",
        programs={"TEST_HOOK_UPDATE_JOB_INFO": update, "TEST_HOOK_JOB_EXIT": flood},
        initial_update_interval=0.1,
        update_interval=10.0,
        timeout=5.0,
    )
    jobs = ProcessJobs(launcher)
    handle = launcher.launch("j", sh(UNTIL_GO), JOB_AD, MACHINE_AD, slot="slot1", hooks=hooks)
    first: list[tuple[str, str]] = []

    def reported() -> bool:
        first.extend(jobs.hook_failures(handle))
        return bool(first)

    wait_for(reported)
    assert first == [("UpdateJobInfoFailed", "TEST_HOOK_UPDATE_JOB_INFO exited with status 3")]
    assert jobs.hook_failures(handle) == []  # each once
    let_end(handle)
    wait_result(launcher, handle)
    later = jobs.hook_failures(handle)
    assert [reason for reason, _ in later] == ["JobExitFailed"], later
    assert "TEST_HOOK_JOB_EXIT" in later[0][1] and "printed more than" in later[0][1]
    assert (handle.directory / "hook-failures").read_text().count("\n") == 2


def test_update_job_info_past_its_timeout_is_killed_and_recorded(
    launcher: ProcessLauncher, hooks_dir: Path
) -> None:
    update = hook(hooks_dir, "update", "cat >/dev/null\nexec sleep 30\n")
    hooks = JobHooks(
        keyword="TEST",
        programs={"TEST_HOOK_UPDATE_JOB_INFO": update},
        initial_update_interval=0.1,
        update_interval=0.3,
        timeout=0.4,
    )
    handle = launcher.launch("j", sh(UNTIL_GO), JOB_AD, MACHINE_AD, slot="slot1", hooks=hooks)
    jobs = ProcessJobs(launcher)
    found: list[tuple[str, str]] = []
    wait_for(lambda: bool(found.extend(jobs.hook_failures(handle)) or found))
    let_end(handle)
    assert wait_result(launcher, handle).exit_code == 0
    found += jobs.hook_failures(handle)
    assert found and all(reason == "UpdateJobInfoFailed" for reason, _ in found)
    assert "TEST_HOOK_UPDATE_JOB_INFO ran longer than 0.4 s and was killed" in found[0][1]
