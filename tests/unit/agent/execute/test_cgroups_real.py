"""JobCgroups and the launcher on this machine's real cgroups (skipped where they are absent).

The Kondor root is relative (`kondor-test-<n>`), so it sits inside this process's own cgroup
of each hierarchy, as in a delegated subtree, and nothing else on the host is touched.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from apptainer_runtimes import Apptainer
from execute_fakes import job_python, wait_for, wait_result

from kondor_agent.execute.cgroups import SUPERVISORS, CgroupError, JobCgroups
from kondor_agent.execute.limits import CgroupLimits, ExecuteSettings, slot_limits
from kondor_agent.runtimes.process import ProcessJobs
from kondor_agent.runtimes.process_launcher import ProcessLauncher
from kondor_core.api import ApptainerRuntime, ProcessRuntime

AD = 'MyType = "Job"'


@pytest.fixture
def cgroups() -> Iterator[JobCgroups]:
    if os.geteuid() != 0:
        pytest.skip("cgroups can be created only as root here")
    if not Path("/sys/fs/cgroup").is_dir():
        pytest.skip("no cgroup file system at /sys/fs/cgroup")
    try:
        opened = JobCgroups.open(root=f"kondor-test-{uuid.uuid4().hex[:8]}")
    except (CgroupError, OSError) as err:
        pytest.skip(f"cgroups are not writable here: {err}")
    if not opened.enabled:
        pytest.skip("no cgroup hierarchy is mounted")
    yield opened
    # A supervisor exits just after writing its result.
    wait_for(lambda: opened.pids(SUPERVISORS) == [])
    opened.remove_root()


@pytest.fixture
def launcher(tmp_path: Path, cgroups: JobCgroups) -> Iterator[ProcessLauncher]:
    launcher = ProcessLauncher(tmp_path / "execute", cgroups)
    yield launcher
    for handle in launcher.adopt():
        launcher.remove(handle)


def _cgroup_of(pid: int, hierarchy: str) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if hierarchy in controllers.split(",") or (hierarchy == "" and controllers == ""):
            return path
    raise AssertionError(f"pid {pid} is in no {hierarchy or 'v2'} hierarchy")


def test_limits_are_written_and_read_back_as_the_kernel_keeps_them(cgroups: JobCgroups) -> None:
    if not (cgroups.can_limit_memory and cgroups.can_limit_cpu):
        pytest.skip(f"no memory or cpu controller here: {cgroups.describe()}")
    leaf = JobCgroups.job_cgroup("slot1_1", "limits")
    settings = ExecuteSettings(
        disable_swap=cgroups.can_limit_swap,
        cpu_hard_limit=True,
        pids_max=50 if cgroups.can_limit_pids else None,
    )
    cgroups.create(leaf, slot_limits(1.5, 96, settings=settings))
    try:
        got = cgroups.limits(leaf)
        # The kernel keeps the soft limit rounded to its pages.
        assert got.memory_soft_bytes is not None
        assert abs(got.memory_soft_bytes - int((96 << 20) * 0.9)) < 4096 * 4
        assert got == CgroupLimits(
            memory_bytes=96 << 20,
            memory_soft_bytes=got.memory_soft_bytes,
            swap_bytes=0 if cgroups.can_limit_swap else None,
            cpu_weight_cpus=1.5,
            cpu_quota_cpus=1.5,
            pids_max=settings.pids_max,
        )
    finally:
        cgroups.remove(leaf)


def test_a_job_cannot_fork_past_its_pids_limit(
    launcher: ProcessLauncher, cgroups: JobCgroups
) -> None:
    if not cgroups.can_limit_pids:
        pytest.skip(f"no pids controller here: {cgroups.describe()}")
    forks = (
        "import os, time\n"
        "n = 0\n"
        "for _ in range(8):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(5)\n"
        "        os._exit(0)\n"
        "    n += 1\n"
        "print(n)\n"
    )
    runtime = ProcessRuntime(executable=job_python(), arguments=["-S", "-c", forks], output="out")
    limits = slot_limits(1, 64, settings=ExecuteSettings(pids_max=4))
    handle = launcher.launch("forky", runtime, AD, AD, slot="slot1_1", limits=limits)
    assert wait_result(launcher, handle).exit_code == 0
    # The job itself and three children: the fourth fork is refused.
    assert (handle.scratch / "out").read_text() == "3\n"


def test_without_swap_a_job_over_its_memory_is_killed_not_swapped(
    launcher: ProcessLauncher, cgroups: JobCgroups
) -> None:
    if not (cgroups.can_limit_memory and cgroups.can_limit_swap):
        pytest.skip(f"the kernel accounts no swap per cgroup here: {cgroups.describe()}")
    grow = "b = bytearray(96 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
    runtime = ProcessRuntime(executable=job_python(), arguments=["-S", "-c", grow])
    limits = slot_limits(1, 32, settings=ExecuteSettings(disable_swap=True))
    handle = launcher.launch("noswap", runtime, AD, AD, slot="slot1_1", limits=limits)
    result = wait_result(launcher, handle, timeout=10)
    assert result.exit_signal == signal.SIGKILL and result.hold_reason_code == 34, result


def test_the_job_runs_in_its_leaf_and_the_supervisor_outside_the_agents_cgroup(
    launcher: ProcessLauncher, cgroups: JobCgroups
) -> None:
    runtime = ProcessRuntime(executable="/bin/sleep", arguments=["30"])
    handle = launcher.launch("placed", runtime, AD, AD, slot="slot1_1", limits=slot_limits(1, 64))
    wait_for(lambda: launcher.job_pid(handle) is not None)
    job = launcher.job_pid(handle)
    assert job is not None and job in cgroups.pids(handle.cgroup)
    supervisor = int((handle.directory / "supervisor.pid").read_text())
    assert supervisor in cgroups.pids(SUPERVISORS)
    assert supervisor not in cgroups.pids(handle.cgroup)
    if cgroups.can_limit_memory:
        own = _cgroup_of(os.getpid(), "memory")
        assert (
            _cgroup_of(job, "memory") == f"{own.rstrip('/')}/{cgroups_root(cgroups)}/slot1_1/placed"
        )
    launcher.hard_kill(handle)
    assert wait_result(launcher, handle).exit_signal == signal.SIGKILL


def cgroups_root(cgroups: JobCgroups) -> str:
    # The relative root the fixture chose, as it appears in /proc/<pid>/cgroup.
    return next(p.parent.parent.parent.name for p in cgroups.procs_files("slot1_1/placed"))


def test_a_job_over_its_memory_limit_is_oom_killed(
    launcher: ProcessLauncher, cgroups: JobCgroups
) -> None:
    if not cgroups.can_limit_memory:
        pytest.skip(f"no memory controller here: {cgroups.describe()}")
    grow = (
        "b = bytearray(256 * 1024 * 1024)\n"
        "for i in range(0, len(b), 4096): b[i] = 1\n"
        "print('survived')"
    )
    runtime = ProcessRuntime(executable=job_python(), arguments=["-S", "-c", grow], output="out")
    handle = launcher.launch("hog", runtime, AD, AD, slot="slot1_1", limits=slot_limits(1, 32))
    result = wait_result(launcher, handle, timeout=10)
    assert (handle.scratch / "out").read_text() == ""
    # The OOM killer's SIGKILL, or a failed allocation where the kernel refuses instead.
    assert result.exit_signal == signal.SIGKILL or (result.exit_code or 0) != 0, result
    assert result.peak_memory_mib is not None and result.peak_memory_mib <= 33
    if result.exit_signal == signal.SIGKILL:
        # Held as HTCondor holds it: code 34, naming the limit and the usage.
        assert result.hold_reason_code == 34, result
        assert result.hold_reason is not None
        assert "Job has gone over cgroup memory limit of 32 megabytes" in result.hold_reason
        assert f"Peak usage: {result.peak_memory_mib} megabytes" in result.hold_reason


def test_freeze_stops_the_whole_cgroup_and_kill_ends_even_escaped_processes(
    launcher: ProcessLauncher, cgroups: JobCgroups
) -> None:
    if not cgroups.can_freeze:
        pytest.skip(f"no freezer here: {cgroups.describe()}")
    # The child leaves the job's process group (setsid): only the cgroup still holds it.
    script = "setsid sleep 30 & echo $! > escaped; exec sleep 30"
    runtime = ProcessRuntime(executable="/bin/sh", arguments=["-c", script])
    handle = launcher.launch("frozen", runtime, AD, AD, slot="slot1_1")
    escaped_file = handle.scratch / "escaped"
    # The file exists once the shell opens it, before echo writes the pid (a loaded machine
    # showed it empty): wait for the whole line.
    wait_for(
        lambda: (
            escaped_file.exists()
            and escaped_file.read_text().endswith("\n")
            and len(cgroups.pids(handle.cgroup)) >= 2
        )
    )
    escaped = int(escaped_file.read_text())
    launcher.suspend(handle)
    wait_for(lambda: launcher.is_suspended(handle))
    launcher.resume(handle)
    wait_for(lambda: not launcher.is_suspended(handle))
    launcher.hard_kill(handle)
    result = wait_result(launcher, handle)
    assert result.exit_signal == signal.SIGKILL and result.killed
    wait_for(lambda: cgroups.pids(handle.cgroup) == [])
    assert (
        not Path(f"/proc/{escaped}/cmdline").exists()
        or Path(f"/proc/{escaped}/cmdline").read_bytes() == b""
    )


def test_usage_is_accounted_to_the_jobs_cgroup(
    launcher: ProcessLauncher, cgroups: JobCgroups
) -> None:
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass"
    runtime = ProcessRuntime(executable=job_python(), arguments=["-S", "-c", burn])
    handle = launcher.launch("burn", runtime, AD, AD, slot="slot1_1")
    wait_result(launcher, handle)
    usage = cgroups.usage(handle.cgroup)
    if usage.user_cpu_seconds is None:
        pytest.skip(f"no CPU accounting here: {cgroups.describe()}")
    assert usage.user_cpu_seconds + (usage.sys_cpu_seconds or 0) >= 0.15


def _gone(pid: int) -> bool:
    """Whether `pid` has exited (a zombie not yet reaped counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def test_soft_kill_reaches_a_process_that_left_the_jobs_group_and_thaws_a_frozen_job(
    launcher: ProcessLauncher, cgroups: JobCgroups
) -> None:
    """The vacate's KillSig goes to every process of the job (its cgroup), as the reference's
    "every process" says, even one in another session; a suspended job is thawed to take it."""
    if not cgroups.can_freeze:
        pytest.skip(f"no freezer here: {cgroups.describe()}")
    trap = "trap 'echo escaped > escaped; exit 0' TERM; echo \\$\\$ > escaped.pid; "
    trap += "while true; do sleep 0.05; done"
    script = (
        # The main process waits for the other's marker: its exit ends the rest.
        "trap 'while [ ! -e escaped ]; do sleep 0.01; done; echo main > main; exit 0' TERM; "
        f'setsid sh -c "{trap}" & '
        "while true; do sleep 0.05; done"
    )
    runtime = ProcessRuntime(executable="/bin/sh", arguments=["-c", script])
    handle = launcher.launch("vacated", runtime, AD, AD, slot="slot1_1")
    pid_file = handle.scratch / "escaped.pid"
    wait_for(lambda: pid_file.exists() and pid_file.read_text().endswith("\n"))  # written whole
    escaped = int(pid_file.read_text())
    assert escaped != launcher.job_pid(handle)
    launcher.suspend(handle)
    wait_for(lambda: launcher.is_suspended(handle))
    launcher.soft_kill(handle, signal.SIGTERM)
    result = wait_result(launcher, handle)
    assert (result.exit_code, result.killed) == (0, True)
    assert (handle.scratch / "main").read_text() == "main\n"
    assert (handle.scratch / "escaped").read_text() == "escaped\n"
    wait_for(lambda: _gone(escaped))


def test_a_suspended_apptainer_jobs_processes_stop_using_cpu_and_a_vacate_ends_them(
    tmp_path: Path, cgroups: JobCgroups, apptainer: Apptainer
) -> None:
    """Suspend freezes the job's cgroup and every process of the container with it
    (Apptainer's starter, the job in its PID namespace): the cgroup's CPU time stops while
    the job is suspended and goes on after continue; the vacate's SIGTERM then ends it."""
    if not cgroups.can_freeze:
        pytest.skip(f"no freezer here: {cgroups.describe()}")
    launcher = ProcessLauncher(
        apptainer.execute_dir(tmp_path),
        cgroups,
        search_path=str(apptainer.bin_dir),
        pid_namespaces=lambda: True,
    )
    image = apptainer.image(tmp_path / "image")
    spin = "trap 'echo vacated > vacated; exit 0' TERM; echo up > started; while :; do :; done"
    runtime = ApptainerRuntime(image=str(image), executable="/bin/sh", arguments=["-c", spin])
    handle = launcher.launch(
        "spinning", runtime, AD, AD, slot="slot1_1",
        apptainer=apptainer.settings(), account=apptainer.account,
    )  # fmt: skip

    def cpu_seconds() -> float:
        usage = cgroups.usage(handle.cgroup)
        if usage.user_cpu_seconds is None:
            pytest.skip(f"no CPU accounting here: {cgroups.describe()}")
        return usage.user_cpu_seconds + (usage.sys_cpu_seconds or 0.0)

    wait_for((handle.scratch / "started").exists, timeout=60)
    running = cpu_seconds()
    wait_for(lambda: cpu_seconds() > running + 0.05)
    launcher.suspend(handle)
    wait_for(lambda: launcher.is_suspended(handle))
    frozen = cpu_seconds()
    time.sleep(0.5)  # what a running spinner would use half of, at least, on a loaded machine
    assert cpu_seconds() - frozen < 0.01
    launcher.resume(handle)
    wait_for(lambda: not launcher.is_suspended(handle))
    wait_for(lambda: cpu_seconds() > frozen + 0.05)
    launcher.soft_kill(handle, signal.SIGTERM)
    result = wait_result(launcher, handle)
    assert result.killed, result
    if apptainer.real:  # the stand-in's bwrap (PID 1 of the namespace) may end it first
        assert (handle.scratch / "vacated").read_text() == "vacated\n"
    wait_for(lambda: cgroups.pids(handle.cgroup) == [])


def test_a_double_forked_daemon_dies_with_the_job(
    launcher: ProcessLauncher, cgroups: JobCgroups
) -> None:
    """A job that detaches a grandchild (setsid, its parent gone) and exits leaves nothing
    running: the supervisor ends the job's cgroup when the job's main process exits."""
    daemon = "(setsid sh -c 'echo $$ > daemon.pid; exec sleep 300' &); sleep 0.2; exit 0"
    runtime = ProcessRuntime(executable="/bin/sh", arguments=["-c", daemon])
    handle = launcher.launch("daemon", runtime, AD, AD, slot="slot1_1")
    result = wait_result(launcher, handle)
    assert result.exit_code == 0 and not result.killed
    grandchild = int((handle.scratch / "daemon.pid").read_text())
    wait_for(lambda: _gone(grandchild))
    wait_for(lambda: cgroups.pids(handle.cgroup) == [])


def test_a_running_jobs_usage_through_the_process_runtime(
    launcher: ProcessLauncher, cgroups: JobCgroups
) -> None:
    """What the agent writes while a job runs: NumPids, its memory, its CPU time."""
    script = "sleep 30 & sleep 30 & exec sleep 30"
    runtime = ProcessRuntime(executable="/bin/sh", arguments=["-c", script])
    handle = launcher.launch("busy", runtime, AD, AD, slot="slot1_1", limits=slot_limits(1, 64))
    wait_for(lambda: len(cgroups.pids(handle.cgroup)) == 3)
    usage = ProcessJobs(launcher).usage(handle)
    assert usage is not None and usage.num_pids == 3
    if cgroups.can_limit_memory:
        assert usage.memory_mib is not None and 0 < usage.memory_mib <= 64
    launcher.hard_kill(handle)
    wait_result(launcher, handle)
