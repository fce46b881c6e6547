"""ProcessLauncher with real supervisors and jobs (no cgroups: the process-group fallbacks).

Each job is a real process; tests poll every few milliseconds and never sleep on the clock
beyond what the process itself needs.
"""

from __future__ import annotations

import errno
import json
import os
import signal
from pathlib import Path

import pytest
from apptainer_runtimes import Apptainer
from execute_fakes import job_python, wait_for, wait_result

from kondor_agent.execute import records
from kondor_agent.execute.cgroups import JobCgroups
from kondor_agent.runtimes.apptainer import APPTAINER_MISSING
from kondor_agent.runtimes.process_launcher import LaunchError, ProcessLauncher, environment_of
from kondor_core.api import ApptainerRuntime, ProcessRuntime

JOB_AD = 'ClusterId = 12\nProcId = 0\nOwner = "alice"\nCmd = "/bin/sh"'
MACHINE_AD = 'Name = "slot1_1@node-a"\nCpus = 1\nMemory = 128'


@pytest.fixture
def launcher(tmp_path: Path) -> ProcessLauncher:
    return ProcessLauncher(tmp_path / "execute", JobCgroups.disabled(), search_path="")


def sh(script: str, **fields: str) -> ProcessRuntime:
    return ProcessRuntime(executable="/bin/sh", arguments=["-c", script], **fields)  # type: ignore[arg-type]


def test_a_job_runs_in_its_scratch_dir_with_the_starters_environment_and_ads(
    launcher: ProcessLauncher,
) -> None:
    script = (
        'pwd; echo "$_CONDOR_SLOT $TMPDIR $TMP $TEMP $GREETING"; '
        'cat "$_CONDOR_JOB_AD"; cat "$_CONDOR_MACHINE_AD"; '
        'test "$_CONDOR_SCRATCH_DIR" = "$(pwd)" && echo scratch-ok; echo oops >&2; exit 3'
    )
    runtime = sh(script, output="out.txt", error="err.txt")
    runtime = runtime.model_copy(update={"environment": {"GREETING": "hello"}})
    handle = launcher.launch("job-1", runtime, JOB_AD, MACHINE_AD, slot="slot1_1")
    result = wait_result(launcher, handle)
    scratch = handle.scratch
    assert result.state == "exited" and result.exit_code == 3 and result.exit_signal is None
    assert result.start_time is not None and result.end_time is not None
    assert result.end_time >= result.start_time and result.peak_memory_mib is not None
    lines = (scratch / "out.txt").read_text().splitlines()
    assert lines[0] == str(scratch)
    assert lines[1] == f"slot1_1 {scratch} {scratch} {scratch} hello"
    assert 'Owner = "alice"' in lines and "Cpus = 1" in lines and "scratch-ok" in lines
    assert (scratch / "err.txt").read_text() == "oops\n"
    assert (scratch / ".job.ad").read_text().startswith("ClusterId = 12\n")
    assert environment_of(handle)["_CONDOR_MACHINE_AD"] == str(scratch / ".machine.ad")


def test_input_is_the_jobs_stdin_and_cpu_time_is_reported(
    launcher: ProcessLauncher, tmp_path: Path
) -> None:
    (tmp_path / "in.txt").write_text("abc")
    busy = (
        "import sys,time\nt=time.process_time()\n"
        "while time.process_time()-t<0.2: pass\nprint(sys.stdin.read().upper())"
    )
    runtime = ProcessRuntime(
        executable=job_python(),
        arguments=["-S", "-c", busy],
        input=str(tmp_path / "in.txt"),
        output="out",
    )
    handle = launcher.launch("job-in", runtime, JOB_AD, MACHINE_AD, slot="slot1")
    result = wait_result(launcher, handle)
    assert (handle.scratch / "out").read_text() == "ABC\n"
    assert result.user_cpu_seconds + result.sys_cpu_seconds >= 0.15


NOT_EXECUTABLE = "/tmp/kondor-test-not-executable"


@pytest.mark.parametrize(
    ("runtime", "code", "subcode", "names"),
    [
        (ProcessRuntime(executable="/no/such/program"), 6, errno.ENOENT, "/no/such/program"),
        (ProcessRuntime(executable="relative-prog"), 6, errno.ENOENT, "scratch/relative-prog"),
        (ProcessRuntime(executable=NOT_EXECUTABLE), 6, errno.EACCES, NOT_EXECUTABLE),
        (
            ProcessRuntime(executable="/bin/true", working_directory="/no/iwd"),
            14,
            errno.ENOENT,
            "/no/iwd",
        ),
        (ProcessRuntime(executable="/bin/true", input="missing.in"), 8, errno.ENOENT, "missing.in"),
        (
            ProcessRuntime(executable="/bin/true", output="no/dir/out"),
            7,
            errno.ENOENT,
            "no/dir/out",
        ),
        (ProcessRuntime(executable="/bin/true", error="no/dir/err"), 7, errno.ENOENT, "no/dir/err"),
    ],
)
def test_a_job_that_cannot_start_fails_with_htcondors_hold_reason(
    launcher: ProcessLauncher, runtime: ProcessRuntime, code: int, subcode: int, names: str
) -> None:
    Path(NOT_EXECUTABLE).write_text("#!/bin/sh\n")
    Path(NOT_EXECUTABLE).chmod(0o644)
    handle = launcher.launch("job-bad", runtime, JOB_AD, MACHINE_AD, slot="slot1")
    result = wait_result(launcher, handle)
    assert result.state == "failed"
    assert (result.hold_reason_code, result.hold_reason_subcode) == (code, subcode)
    assert result.hold_reason is not None and names in result.hold_reason


def test_soft_kill_signals_the_jobs_process_group_and_marks_it_killed(
    launcher: ProcessLauncher,
) -> None:
    # The shell's child (sleep) is in the same process group, so it gets the signal too.
    handle = launcher.launch("job-k", sh("sleep 30 & wait"), JOB_AD, MACHINE_AD, slot="slot1")
    wait_for(lambda: launcher.job_pid(handle) is not None)
    launcher.soft_kill(handle, signal.SIGTERM)
    result = wait_result(launcher, handle)
    assert result.exit_signal == signal.SIGTERM and result.killed
    assert launcher.poll(handle) == result  # stable once written
    launcher.soft_kill(handle)  # after the end: nothing to do, no error


def test_the_supervisor_forwards_a_signal_it_receives(launcher: ProcessLauncher) -> None:
    handle = launcher.launch("job-f", sh("exec sleep 30"), JOB_AD, MACHINE_AD, slot="slot1")
    wait_for(lambda: launcher.job_pid(handle) is not None)
    supervisor = int((handle.directory / records.SUPERVISOR_PID).read_text())
    os.kill(supervisor, signal.SIGINT)
    assert wait_result(launcher, handle).exit_signal == signal.SIGINT


def test_hard_kill_without_cgroups_kills_the_process_group(launcher: ProcessLauncher) -> None:
    script = "trap '' TERM; sleep 30 & wait"
    handle = launcher.launch("job-h", sh(script), JOB_AD, MACHINE_AD, slot="slot1")
    wait_for(lambda: launcher.job_pid(handle) is not None)
    launcher.hard_kill(handle)
    result = wait_result(launcher, handle)
    assert result.exit_signal == signal.SIGKILL and result.killed


def test_suspend_and_resume_stop_and_continue_the_job(launcher: ProcessLauncher) -> None:
    handle = launcher.launch("job-s", sh("exec sleep 30"), JOB_AD, MACHINE_AD, slot="slot1")
    wait_for(lambda: launcher.job_pid(handle) is not None)
    launcher.suspend(handle)
    wait_for(lambda: launcher.is_suspended(handle))
    launcher.resume(handle)
    wait_for(lambda: not launcher.is_suspended(handle))
    launcher.hard_kill(handle)
    wait_result(launcher, handle)


def test_a_restarted_agent_adopts_running_and_finished_jobs(
    launcher: ProcessLauncher, tmp_path: Path
) -> None:
    done = launcher.launch("a-done", sh("exit 0"), JOB_AD, MACHINE_AD, slot="slot1")
    wait_result(launcher, done)
    running = launcher.launch("b-run", sh("exec sleep 30"), JOB_AD, MACHINE_AD, slot="slot2")
    (tmp_path / "execute" / "not-a-job").mkdir()
    # A new launcher, as after an agent restart: it knows only the execute directory.
    again = ProcessLauncher(tmp_path / "execute", JobCgroups.disabled())
    handles = {h.job_id: h for h in again.adopt()}
    assert set(handles) == {"a-done", "b-run"}
    assert handles["b-run"] == running
    assert again.poll(handles["a-done"]) is not None
    wait_for(lambda: again.job_pid(handles["b-run"]) is not None)
    assert again.poll(handles["b-run"]) is None
    again.soft_kill(handles["b-run"], signal.SIGTERM)
    assert wait_result(again, handles["b-run"]).exit_signal == signal.SIGTERM


def test_remove_kills_what_is_left_and_deletes_the_directory(launcher: ProcessLauncher) -> None:
    handle = launcher.launch("job-r", sh("exec sleep 30"), JOB_AD, MACHINE_AD, slot="slot1")
    wait_for(lambda: launcher.job_pid(handle) is not None)
    pid = launcher.job_pid(handle)
    launcher.remove(handle)
    assert not handle.directory.exists()
    assert pid is not None
    wait_for(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid))


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_job_id_launched_twice_is_refused_while_it_runs(launcher: ProcessLauncher) -> None:
    handle = launcher.launch("job-2", sh("exec sleep 30"), JOB_AD, MACHINE_AD, slot="slot1")
    wait_for(lambda: launcher.job_pid(handle) is not None)
    with pytest.raises(LaunchError, match="already launched"):
        launcher.launch("job-2", sh("exit 0"), JOB_AD, MACHINE_AD, slot="slot1")
    launcher.remove(handle)


def test_what_an_ended_job_of_the_same_id_left_is_replaced(launcher: ProcessLauncher) -> None:
    # A job deleted while its node's agent (or its whole cluster) was away leaves its
    # directory; a new job of the same namespace and name starts afresh, not refused.
    first = launcher.launch(
        "job-3", sh("echo old > mark; exit 1"), JOB_AD, MACHINE_AD, slot="slot1"
    )
    assert wait_result(launcher, first).exit_code == 1
    supervisor = int((first.directory / records.SUPERVISOR_PID).read_text())
    wait_for(lambda: not Path(f"/proc/{supervisor}").exists() or _zombie(supervisor))
    second = launcher.launch("job-3", sh("exit 0"), JOB_AD, MACHINE_AD, slot="slot1")
    assert wait_result(launcher, second).exit_code == 0
    assert not (second.directory / records.SCRATCH / "mark").exists()


def test_a_lost_supervisor_is_reported_not_waited_for(launcher: ProcessLauncher) -> None:
    handle = launcher.launch("job-l", sh("exec sleep 30"), JOB_AD, MACHINE_AD, slot="slot1")
    wait_for(lambda: launcher.job_pid(handle) is not None)
    supervisor = int((handle.directory / records.SUPERVISOR_PID).read_text())
    os.kill(supervisor, signal.SIGKILL)  # as a reboot or the OOM killer would
    result = wait_result(launcher, handle)
    assert result.state == "lost" and "ended without recording a result" in (
        result.hold_reason or ""
    )
    launcher.hard_kill(handle)


# -- Apptainer ------------------------------------------------------------------------------
# The command line itself is kondor_core.jobs.apptainer's (tests/unit/jobs/test_apptainer.py);
# here it runs: through real Apptainer on a SIF where `make apptainer` built it, else through
# the stand-in on a directory image (the test id says which: apptainer_runtimes).


def apptainer_launcher(
    tmp_path: Path, apptainer: Apptainer, *, pid_namespaces: bool = True
) -> ProcessLauncher:
    return ProcessLauncher(
        apptainer.execute_dir(tmp_path),
        JobCgroups.disabled(),
        search_path=str(apptainer.bin_dir),
        pid_namespaces=lambda: pid_namespaces,
    )


def test_apptainer_job_runs_through_apptainer_exec(tmp_path: Path, apptainer: Apptainer) -> None:
    """HTCondor's command line run for real: the job starts in its scratch directory, bound
    in (-B, --pwd), reads what is there and writes its output, in its own PID namespace (-C)."""
    launcher = apptainer_launcher(tmp_path, apptainer)
    image = apptainer.image(tmp_path / "image")
    runtime = ApptainerRuntime(
        image=str(image),
        executable="/bin/sh",
        arguments=[
            "-c",
            'echo "in $(pwd) slot=$_CONDOR_SLOT x=$X"; ls -l /proc/self/ns/pid; ls /; '
            'cat "$_CONDOR_JOB_AD" > ad.copy; echo written > made-inside',
        ],
        environment={"X": "1"},
        output="out",
    )
    handle = launcher.launch(
        "job-app", runtime, JOB_AD, MACHINE_AD, slot="slot1_3",
        apptainer=apptainer.settings(), account=apptainer.account,
    )  # fmt: skip
    result = wait_result(launcher, handle)
    assert result.state == "exited" and result.exit_code == 0, result
    said = (handle.scratch / "out").read_text().splitlines()
    assert said[0] == f"in {handle.scratch} slot=slot1_3 x=1", said
    argv = json.loads((handle.directory / records.SPEC).read_text())["argv"]
    assert argv[1:] == [
        "-s", "exec", "-S", "/tmp", "-S", "/var/tmp", "--pwd", str(handle.scratch),
        "-B", str(handle.scratch), "--no-home", "-C", *apptainer.extra_arguments, str(image),
        "/bin/sh", *runtime.arguments,
    ]  # fmt: skip
    if apptainer.contained:  # inside the image, in its own PID namespace (-C)
        assert not said[1].endswith(os.readlink("/proc/self/ns/pid")), said
        assert "busybox" not in said[2:] and "bin" in said[2:]
        assert (handle.scratch / "ad.copy").read_text().startswith("ClusterId = 12\n")
        assert (handle.scratch / "made-inside").read_text() == "written\n"


def test_the_slot_policys_knobs_shape_the_container(tmp_path: Path, apptainer: Apptainer) -> None:
    """SINGULARITY_TARGET_DIR maps the scratch directory to /srv inside; SINGULARITY_JOB runs
    a process job in the image SINGULARITY_IMAGE_EXPR names; no PID namespaces: no -C."""
    launcher = apptainer_launcher(tmp_path, apptainer, pid_namespaces=False)
    image = apptainer.image(tmp_path / "image", dirs=("srv",))
    settings = apptainer.settings(
        {
            "SINGULARITY_JOB": "true",
            "SINGULARITY_IMAGE_EXPR": f'"{image}"',
            "SINGULARITY_TARGET_DIR": "/srv",
        }
    )
    runtime = sh('echo "$(pwd) $_CONDOR_SCRATCH_DIR $TMPDIR"', output="out")
    handle = launcher.launch(
        "job-srv", runtime, JOB_AD, MACHINE_AD, slot="slot1_1",
        apptainer=settings, account=apptainer.account,
    )  # fmt: skip
    result = wait_result(launcher, handle)
    assert result.state == "exited" and result.exit_code == 0, result
    argv = json.loads((handle.directory / records.SPEC).read_text())["argv"]
    assert "-C" not in argv and argv[argv.index("--pwd") + 1] == "/srv"
    if apptainer.contained:
        assert (handle.scratch / "out").read_text() == "/srv /srv /srv\n"


def test_an_image_whose_test_fails_holds_the_job_with_the_reason(
    tmp_path: Path, apptainer: Apptainer
) -> None:
    """The starter runs `apptainer test` on the image first (SINGULARITY_RUN_TEST_BEFORE_JOB);
    the image's failing `%test` holds the job (HoldReasonCode 41, SingularityTestFailed) with
    what the test said, and the job never runs."""
    launcher = apptainer_launcher(tmp_path, apptainer)
    image = apptainer.image(
        tmp_path / "broken", test="echo 'libc too old for this image' >&2\nexit 3"
    )
    runtime = ApptainerRuntime(
        image=str(image), executable="/bin/sh", arguments=["-c", "echo ran > ran"]
    )
    handle = launcher.launch(
        "job-broken", runtime, JOB_AD, MACHINE_AD, slot="slot1_2",
        apptainer=apptainer.settings(), account=apptainer.account,
    )  # fmt: skip
    result = wait_result(launcher, handle)
    assert (result.state, result.hold_reason_code, result.hold_reason_subcode) == ("failed", 41, 3)
    assert result.hold_reason == (
        f"Apptainer test of image {image} failed (exit code 3): libc too old for this image"
    )
    assert not (handle.scratch / "ran").exists()
    # A missing image fails its test too.
    gone = ApptainerRuntime(image=str(tmp_path / "nowhere.sif"), executable="/bin/true")
    missing = wait_result(
        launcher,
        launcher.launch(
            "job-gone", gone, JOB_AD, MACHINE_AD, slot="slot1_3",
            apptainer=apptainer.settings(), account=apptainer.account,
        ),
    )  # fmt: skip
    assert missing.hold_reason_code == 41 and "could not open image" in (missing.hold_reason or "")
    # SINGULARITY_RUN_TEST_BEFORE_JOB = false: no test, the job runs (and its exec fails).
    untested = launcher.launch(
        "job-untested",
        gone,
        JOB_AD,
        MACHINE_AD,
        slot="slot1_3",
        apptainer=apptainer.settings({"SINGULARITY_RUN_TEST_BEFORE_JOB": "false"}),
        account=apptainer.account,
    )
    assert wait_result(launcher, untested).hold_reason_code != 41


def test_apptainer_missing_holds_the_job_saying_so(launcher: ProcessLauncher) -> None:
    runtime = ApptainerRuntime(image="/images/x.sif", executable="/bin/true")
    handle = launcher.launch("job-noapp", runtime, JOB_AD, MACHINE_AD, slot="slot1")
    result = launcher.poll(handle)  # decided at launch: no supervisor was started
    assert result is not None and result.state == "failed"
    assert result.hold_reason == APPTAINER_MISSING and result.hold_reason_code == 6


def test_the_supervisors_result_has_exactly_the_fields_jobresult_knows(
    launcher: ProcessLauncher,
) -> None:
    import dataclasses
    import json

    from kondor_agent.execute.records import JobResult

    handle = launcher.launch("job-keys", sh("exit 0"), JOB_AD, MACHINE_AD, slot="slot1")
    wait_result(launcher, handle)
    written = set(json.loads((handle.directory / records.EXIT).read_text()))
    known = {f.name for f in dataclasses.fields(JobResult)}
    # Everything the supervisor measures, under JobResult's names; `killed` is the launcher's.
    assert written == known - {
        "killed",
        "hold_reason",
        "hold_reason_code",
        "hold_reason_subcode",
        "requeue_reason",
    }
