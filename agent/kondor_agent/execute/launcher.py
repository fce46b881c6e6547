"""Start process and Apptainer jobs through a detached supervisor, and control them.

The agent calls `ProcessLauncher.launch` when the startd's start-job action
fires; it returns as soon as the supervisor is detached. From then on the job
directory (see `records`) is the whole truth: `poll` reads the result, the
kill and suspend calls act on the job's process group and cgroup, and `adopt`
rebuilds the handles after the agent restarts.

The environment and file layout follow condor_starter (the manual's "Environment
and Job Execution"): `_CONDOR_SCRATCH_DIR`, `_CONDOR_SLOT`, `_CONDOR_JOB_AD` and
`_CONDOR_MACHINE_AD` (the ads in `attr = value` text), TMPDIR/TMP/TEMP set to
the scratch directory; relative input, output, error and executable paths are
in the scratch directory (or the initial directory). An Apptainer job runs as
the manual's example shows the starter running it:
`apptainer -s exec -S /tmp -S /var/tmp --pwd <iwd> -B <scratch> --no-home -C <image> <exe> <args>`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from kondor_agent.execute import records
from kondor_agent.execute.cgroups import SUPERVISORS, CgroupError, JobCgroups
from kondor_agent.execute.limits import CgroupLimits
from kondor_agent.execute.records import JobResult, LaunchSpec
from kondor_core.api import ApptainerRuntime, ProcessRuntime

#: The search path a job gets when its environment names none (dash's and systemd's default).
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

APPTAINER_MISSING = "apptainer is not installed on this node (no apptainer executable on PATH)"


#: The directory holding the kondor_agent package (site-packages, or agent/ in a checkout).
_PACKAGE_PARENT = Path(__file__).resolve().parents[2]


class LaunchError(Exception):
    """The supervisor could not be started (not the job: its failures are results)."""


@dataclass(frozen=True)
class JobHandle:
    """One launched job: everything else is read from its directory."""

    job_id: str
    slot: str
    directory: Path
    cgroup: str

    @property
    def scratch(self) -> Path:
        return self.directory / records.SCRATCH


def job_environment(
    runtime: ProcessRuntime, *, scratch: Path, slot: str, apptainer: bool = False
) -> dict[str, str]:
    """The job's environment: its own variables, then those the starter sets (which win).

    Inside Apptainer's `-C` (a clean environment) variables reach the job as
    `APPTAINERENV_<name>`, so they are passed both ways.
    """
    env = {"PATH": DEFAULT_PATH, **runtime.environment}
    env.update(
        {
            "_CONDOR_SCRATCH_DIR": str(scratch),
            "_CONDOR_SLOT": slot,
            "_CONDOR_JOB_AD": str(scratch / records.JOB_AD),
            "_CONDOR_MACHINE_AD": str(scratch / records.MACHINE_AD),
            "TMPDIR": str(scratch),
            "TMP": str(scratch),
            "TEMP": str(scratch),
        }
    )
    if apptainer:
        env.update({f"APPTAINERENV_{name}": value for name, value in list(env.items())})
    return env


def _in_scratch(path: str | None, base: Path) -> str | None:
    if path is None:
        return None
    return path if os.path.isabs(path) else str(base / path)


def apptainer_command(
    apptainer: str, runtime: ApptainerRuntime, *, iwd: str, scratch: Path
) -> list[str]:
    """The command line the manual's example shows (HTCondor's "Singularity Support"):
    `-s exec -S /tmp -S /var/tmp --pwd <iwd> -B <scratch> --no-home -C <image> <exe> <args>`.

    The scratch directory is bound at its own path, so paths in the job's environment hold
    inside the container; an initial directory elsewhere is bound too. A relative image is
    in the scratch directory (transferred with the job).
    """
    binds = [str(scratch)]
    if not Path(iwd).is_relative_to(scratch):
        binds.append(iwd)
    command = [apptainer, "-s", "exec", "-S", "/tmp", "-S", "/var/tmp", "--pwd", iwd]
    for bind in binds:
        command += ["-B", bind]
    image = _in_scratch(runtime.image, scratch) or runtime.image
    executable = runtime.executable
    if not executable.startswith("/"):
        executable = str(Path(iwd) / executable)
    return [*command, "--no-home", "-C", image, executable, *runtime.arguments]


def _process_alive(pid: int, job_dir: Path) -> bool:
    """Whether `pid` is still this job's supervisor (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(job_dir).encode() in cmdline


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


class ProcessLauncher:
    """Launch jobs under `execute_dir` (one directory each) in cgroups from `cgroups`."""

    def __init__(
        self,
        execute_dir: Path,
        cgroups: JobCgroups,
        *,
        python: str = sys.executable,
        search_path: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.execute_dir = Path(execute_dir).resolve()
        self.cgroups = cgroups
        self._python = python
        self._search_path = search_path
        self._clock = clock
        # `-S` skips site-packages (tens of ms of .pth files): the supervisor needs only the
        # standard library and this package, found through PYTHONPATH.
        self._supervisor_env = {"PATH": DEFAULT_PATH, "PYTHONPATH": str(_PACKAGE_PARENT)}

    def __repr__(self) -> str:
        return f"ProcessLauncher({str(self.execute_dir)!r}, {self.cgroups!r})"

    # -- starting ----------------------------------------------------------------------

    def launch(
        self,
        job_id: str,
        runtime: ProcessRuntime | ApptainerRuntime,
        job_ad_text: str,
        machine_ad_text: str,
        *,
        slot: str,
        limits: CgroupLimits | None = None,
    ) -> JobHandle:
        """Create the job's directory and cgroup and start its supervisor; returns at once.

        A job that cannot start (no apptainer, no cgroup, bad paths) still gets a handle:
        `poll` returns its `failed` result with the hold reason.
        """
        cgroup = JobCgroups.job_cgroup(slot, job_id)
        directory = self.execute_dir / job_id
        scratch = directory / records.SCRATCH
        try:
            self.execute_dir.mkdir(parents=True, exist_ok=True)
            directory.mkdir()
        except FileExistsError:
            raise LaunchError(f"{directory}: the job {job_id!r} was already launched") from None
        scratch.mkdir(mode=0o755)
        for name, text in ((records.JOB_AD, job_ad_text), (records.MACHINE_AD, machine_ad_text)):
            (scratch / name).write_text(text if text.endswith("\n") else text + "\n")
        handle = JobHandle(job_id=job_id, slot=slot, directory=directory, cgroup=cgroup)

        iwd = _in_scratch(runtime.working_directory, scratch) or str(scratch)
        is_apptainer = isinstance(runtime, ApptainerRuntime)
        executable = runtime.executable
        if not executable.startswith("/"):
            executable = str(Path(iwd) / executable)
        argv = [executable, *runtime.arguments]
        failure: JobResult | None = None
        image_test: list[str] | None = None
        if isinstance(runtime, ApptainerRuntime):
            apptainer = shutil.which("apptainer", path=self._search_path)
            if apptainer is None:
                failure = JobResult.failure(
                    records.FAILED_TO_CREATE_PROCESS, errno.ENOENT, APPTAINER_MISSING, at=0.0
                )
            else:
                argv = apptainer_command(apptainer, runtime, iwd=iwd, scratch=scratch)
                image = _in_scratch(runtime.image, scratch) or runtime.image
                image_test = [apptainer, "-s", "test", image]
        if failure is None and self.cgroups.enabled:
            try:
                self.cgroups.create(cgroup, limits)
            except CgroupError as err:
                failure = JobResult.failure(
                    records.FAILED_TO_CREATE_PROCESS,
                    0,
                    f"Cannot create the job's cgroup: {err}",
                    at=0,
                )
        spec = LaunchSpec(
            job_id=job_id,
            slot=slot,
            cgroup=cgroup,
            argv=argv,
            executable=executable,
            environment=job_environment(
                runtime, scratch=scratch, slot=slot, apptainer=is_apptainer
            ),
            iwd=iwd,
            scratch=str(scratch),
            input=_in_scratch(runtime.input, scratch),
            output=_in_scratch(runtime.output, scratch),
            error=_in_scratch(runtime.error, scratch),
            job_procs=[str(p) for p in self.cgroups.procs_files(cgroup)],
            supervisor_procs=[str(p) for p in self.cgroups.procs_files(SUPERVISORS)],
            peak_memory_file=_str_or_none(self.cgroups.peak_memory_file(cgroup)),
            oom_kills_file=_str_or_none(self.cgroups.oom_kills_file(cgroup)),
            memory_limit_mib=(
                limits.memory_bytes // (1024 * 1024)
                if limits is not None and limits.memory_bytes is not None
                else None
            ),
            cgroup_kill_file=_str_or_none(self.cgroups.kill_file(cgroup)),
            image_test=image_test,
        )
        records.write_atomic(directory / records.SPEC, spec.to_json())
        if failure is not None:
            records.write_atomic(
                directory / records.EXIT, replace(failure, end_time=self._clock()).to_json()
            )
            return handle
        self._start_supervisor(directory)
        return handle

    def _start_supervisor(self, directory: Path) -> None:
        with open(directory / records.SUPERVISOR_LOG, "ab") as log:
            outer = subprocess.Popen(
                [self._python, "-S", "-m", "kondor_agent.execute.supervisor", str(directory)],
                env=self._supervisor_env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=directory,
                close_fds=True,
                start_new_session=True,
            )
        # The first process only forks the supervisor and records its pid, then exits.
        if outer.wait() != 0 or not (directory / records.SUPERVISOR_PID).exists():
            log_text = (directory / records.SUPERVISOR_LOG).read_text(errors="replace")
            raise LaunchError(
                f"the supervisor for {directory} did not start (exit {outer.returncode}): "
                f"{log_text[-2000:]}"
            )

    # -- watching ----------------------------------------------------------------------

    def poll(self, handle: JobHandle) -> JobResult | None:
        """The job's result once it has ended, else None (still starting or running)."""
        result = self._result(handle)
        if result is not None:
            return result
        pid = _read_int(handle.directory / records.SUPERVISOR_PID)
        if pid is not None and _process_alive(pid, handle.directory):
            return None
        result = self._result(handle)  # written just before the supervisor exited
        if result is not None:
            return result
        return JobResult(
            state="lost",
            end_time=self._clock(),
            killed=(handle.directory / records.KILLED).exists(),
            hold_reason=f"the job's supervisor (pid {pid}) ended without recording a result",
        )

    def has_result(self, handle: JobHandle) -> bool:
        """Whether the job's result is recorded (cheap: one stat, no parsing)."""
        return (handle.directory / records.EXIT).exists()

    def _result(self, handle: JobHandle) -> JobResult | None:
        try:
            text = (handle.directory / records.EXIT).read_text()
        except FileNotFoundError:
            return None
        result = JobResult.from_json(text)
        if (handle.directory / records.KILLED).exists():
            result = replace(result, killed=True)
        return result

    def job_pid(self, handle: JobHandle) -> int | None:
        """The job's pid (and process group), None until it has started."""
        return _read_int(handle.directory / records.JOB_PID)

    def adopt(self) -> list[JobHandle]:
        """The jobs under the execute directory, running or ended, after an agent restart."""
        handles: list[JobHandle] = []
        if not self.execute_dir.is_dir():
            return handles
        for directory in sorted(self.execute_dir.iterdir()):
            try:
                spec = LaunchSpec.from_json((directory / records.SPEC).read_text())
            except (OSError, ValueError, TypeError):
                continue  # not a job directory, or one a crash left before its spec
            handles.append(
                JobHandle(
                    job_id=spec.job_id, slot=spec.slot, directory=directory, cgroup=spec.cgroup
                )
            )
        return handles

    # -- controlling -------------------------------------------------------------------

    def soft_kill(self, handle: JobHandle, sig: int = signal.SIGTERM) -> None:
        """Send the job's KillSig to every process of the job (condor_vacate's soft kill):
        each one in its cgroup, however it forked, and its process group. A suspended job
        is thawed so that it can act on the signal (the vacate time runs meanwhile)."""
        if self._result(handle) is not None:
            return
        self._mark_killed(handle, sig)
        job = self.job_pid(handle)
        if job is not None:
            members = self.cgroups.pids(handle.cgroup) if self.cgroups.enabled else []
            for pid in members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job, sig)
            # Always thawed: a frozen task woken by a signal reads as not frozen for a while.
            if self.cgroups.can_freeze and self.cgroups.exists(handle.cgroup):
                self.cgroups.thaw(handle.cgroup)
            elif not self.cgroups.can_freeze:
                self._signal_group(handle, signal.SIGCONT)  # stopped by SIGSTOP instead
            return
        # Not started yet: the supervisor holds the signal and does not start the job.
        supervisor = _read_int(handle.directory / records.SUPERVISOR_PID)
        if supervisor is not None and _process_alive(supervisor, handle.directory):
            os.kill(supervisor, sig)

    def hard_kill(self, handle: JobHandle) -> None:
        """SIGKILL every process of the job: the cgroup's, else its process group."""
        if self._result(handle) is None:
            self._mark_killed(handle, signal.SIGKILL)
        if self.cgroups.enabled and self.cgroups.exists(handle.cgroup):
            self.cgroups.kill(handle.cgroup)
        job = self.job_pid(handle)
        if job is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job, signal.SIGKILL)
        elif self._result(handle) is None:
            self.soft_kill(handle, signal.SIGTERM)

    def suspend(self, handle: JobHandle) -> None:
        """Freeze the job's cgroup (condor_suspend); SIGSTOP its group where nothing freezes."""
        if self.cgroups.can_freeze:
            self.cgroups.freeze(handle.cgroup)
        else:
            self._signal_group(handle, signal.SIGSTOP)

    def resume(self, handle: JobHandle) -> None:
        """Thaw the job's cgroup (condor_continue); SIGCONT its group where nothing freezes."""
        if self.cgroups.can_freeze:
            self.cgroups.thaw(handle.cgroup)
        else:
            self._signal_group(handle, signal.SIGCONT)

    def is_suspended(self, handle: JobHandle) -> bool:
        """Whether the kernel reports the job frozen (re-checked each polling interval)."""
        if self.cgroups.can_freeze:
            return self.cgroups.frozen(handle.cgroup)
        job = self.job_pid(handle)
        if job is None:
            return False
        try:
            status = Path(f"/proc/{job}/stat").read_text()
        except OSError:
            return False
        return status.rsplit(")", 1)[1].split()[0] == "T"

    def remove(self, handle: JobHandle, *, timeout: float = 2.0) -> None:
        """Kill what is left, remove the job's cgroup and delete its directory."""
        if self.poll(handle) is None or (self.cgroups.enabled and self.cgroups.pids(handle.cgroup)):
            self.hard_kill(handle)
        deadline = time.monotonic() + timeout
        # The supervisor writes the result as the job ends: the directory goes after it.
        supervisor = _read_int(handle.directory / records.SUPERVISOR_PID)
        while (
            supervisor is not None
            and _process_alive(supervisor, handle.directory)
            and time.monotonic() < deadline
        ):
            time.sleep(0.005)
        if self.cgroups.enabled:
            while self.cgroups.pids(handle.cgroup) and time.monotonic() < deadline:
                time.sleep(0.005)
            if self.cgroups.can_freeze and self.cgroups.exists(handle.cgroup):
                # A frozen cgroup cannot be removed on v1; thaw it first (as before deleting a pod).
                with contextlib.suppress(CgroupError):
                    self.cgroups.thaw(handle.cgroup)
            self.cgroups.remove(handle.cgroup)
        shutil.rmtree(handle.directory, ignore_errors=True)

    def _signal_group(self, handle: JobHandle, sig: int) -> None:
        job = self.job_pid(handle)
        if job is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job, sig)

    def _mark_killed(self, handle: JobHandle, sig: int) -> None:
        with contextlib.suppress(OSError):
            records.write_atomic(handle.directory / records.KILLED, f"{int(sig)}\n")


def _str_or_none(path: Path | None) -> str | None:
    return None if path is None else str(path)


def environment_of(handle: JobHandle) -> Mapping[str, str]:
    """The environment the job was given (from its spec), for `kondor tail` and tests."""
    return LaunchSpec.from_json((handle.directory / records.SPEC).read_text()).environment
