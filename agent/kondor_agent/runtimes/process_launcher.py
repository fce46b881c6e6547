"""The process runtime: process and Apptainer jobs started through a detached supervisor.

The agent calls `ProcessLauncher.launch` when the startd's start-job action
fires; it returns as soon as the supervisor is detached. From then on the job
directory (see `records`) is the whole truth: `poll` reads the result, the
kill and suspend calls act on the job's process group and cgroup, and `adopt`
rebuilds the handles after the agent restarts.

The environment and file layout follow condor_starter (the manual's "Environment
and Job Execution"): `_CONDOR_SCRATCH_DIR`, `_CONDOR_SLOT`, `_CONDOR_JOB_AD` and
`_CONDOR_MACHINE_AD` (the ads in `attr = value` text), TMPDIR/TMP/TEMP set to
the scratch directory; relative input, output, error and executable paths are
in the scratch directory (or the initial directory). An Apptainer job (or any job
SINGULARITY_JOB sends there) runs through the same supervisor, its command line wrapped
by the Apptainer runtime (`kondor_agent.runtimes.apptainer`).

A job's hooks (`kondor_core.jobs.hooks`: PREPARE_JOB, UPDATE_JOB_INFO, JOB_EXIT) run from the
agent's hooks directory only: each program is checked here, with symlinks resolved, and one
outside it (or not an executable file) holds the job with HookPrepareJobFailure and a reason
naming the knob. The supervisor runs them (`hookrun`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kondor_agent.execute import records
from kondor_agent.execute.cgroups import SUPERVISORS, CgroupError, JobCgroups
from kondor_agent.execute.hookpath import RefusedExecutableError, resolve_hook
from kondor_agent.execute.jobdir import DEFAULT_PATH
from kondor_agent.execute.limits import CgroupLimits
from kondor_agent.execute.privileges import ensure_traversable
from kondor_agent.execute.records import JobResult, LaunchSpec
from kondor_agent.gpu_isolation import GpuDeviceIsolation
from kondor_agent.runtimes.apptainer import ApptainerCommands, pid_namespaces_work
from kondor_core.api import ApptainerRuntime, ProcessRuntime
from kondor_core.errors import KondorError
from kondor_core.jobs.apptainer import ApptainerSettings
from kondor_core.jobs.gpus import GpuDeviceNode
from kondor_core.jobs.hooks import JOB_EXIT, PREPARE_JOB, UPDATE_JOB_INFO, JobHooks
from kondor_core.jobs.runas import Account, AccountError, RunAsSettings, run_as

log = logging.getLogger("kondor_agent.execute")

#: The directory holding the kondor_agent package (site-packages, or agent/ in a checkout).
_PACKAGE_PARENT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class JobAccount:
    """The account a launched job runs as: its uid and gid (None: the agent's own, when it
    is not root), its name and why it was chosen."""

    uid: int | None
    gid: int | None
    name: str
    reason: str


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


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


def job_environment(runtime: ProcessRuntime, *, scratch: Path, slot: str) -> dict[str, str]:
    """The job's environment: its own variables, then those the starter sets (which win).
    An Apptainer job's is passed on to the container by `container_environment`."""
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
    return env


def _in_scratch(path: str | None, base: Path) -> str | None:
    if path is None:
        return None
    return path if os.path.isabs(path) else str(base / path)


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
        pid_namespaces: Callable[[], bool] = pid_namespaces_work,
        hooks_dir: Path | None = None,
        euid: Callable[[], int] = os.geteuid,
        gpu_isolation: GpuDeviceIsolation | None = None,
    ) -> None:
        self.execute_dir = Path(execute_dir).resolve()
        self.hooks_dir = hooks_dir
        self.cgroups = cgroups
        #: Where a job's other GPUs are hidden (STARTER_HIDE_GPU_DEVICES).
        self.gpu_isolation = gpu_isolation or GpuDeviceIsolation.disabled()
        self._python = python
        self._clock = clock
        self._apptainer = ApptainerCommands(search_path=search_path, pid_namespaces=pid_namespaces)
        self._euid = euid
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
        apptainer: ApptainerSettings | None = None,
        hooks: JobHooks | None = None,
        account: Account | AccountError | None = None,
        hide_devices: Sequence[GpuDeviceNode] = (),
    ) -> JobHandle:
        """Create the job's directory and cgroup and start its supervisor; returns at once.

        `apptainer` holds the SlotPolicy's SINGULARITY knobs (HTCondor's defaults when None);
        `hooks` the job's hooks, run from the hooks directory only; `account` who the job
        runs as (`kondor_core.jobs.runas`; the slot's own user when None). The job never
        runs as root: its scratch directory (mode 0700) and ads belong to its account, and
        its supervisor's child drops to it before exec. `hide_devices` are the GPU device
        nodes the job must not open (`kondor_agent.gpu_isolation`).
        A job that cannot start (no apptainer, no image, no cgroup, bad paths, no such
        account) still gets a handle: `poll` returns its `failed` result with the hold reason.
        """
        cgroup = JobCgroups.job_cgroup(slot, job_id)
        directory = self.execute_dir / job_id
        ids = self._ids(account, slot)
        scratch = self._make_job_directory(directory, job_id, ids, job_ad_text, machine_ad_text)
        handle = JobHandle(job_id=job_id, slot=slot, directory=directory, cgroup=cgroup)
        command = self._command(
            runtime, apptainer, job_ad_text, machine_ad_text, scratch=scratch, slot=slot
        )
        failure = (ids if isinstance(ids, JobResult) else None) or command.failure
        hook_spec: dict[str, object] | None = None
        if failure is None and hooks is not None:
            checked = hook_spec_of(hooks, self.hooks_dir)
            if isinstance(checked, JobResult):
                failure = checked
            else:
                hook_spec = checked
        device_procs: list[Path] = []
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
            else:
                device_procs = self.gpu_isolation.hide(cgroup, hide_devices)
        spec = _launch_spec(
            handle,
            runtime,
            command,
            self.cgroups,
            scratch=scratch,
            limits=limits,
            hooks=hook_spec,
            ids=ids,
            device_procs=device_procs,
        )
        records.write_atomic(directory / records.SPEC, spec.to_json())
        if failure is not None:
            records.write_atomic(
                directory / records.EXIT, replace(failure, end_time=self._clock()).to_json()
            )
            return handle
        self._start_supervisor(directory, site=hook_spec is not None)
        return handle

    def _make_job_directory(
        self,
        directory: Path,
        job_id: str,
        ids: JobAccount | JobResult,
        job_ad_text: str,
        machine_ad_text: str,
    ) -> Path:
        """The job's directory (root's, mode 0711) and its scratch directory (the job
        account's, mode 0700) with the job's and the machine's ads; the scratch directory.
        What an earlier job of the same id left is removed first, unless its supervisor
        still runs (LaunchError)."""
        scratch = directory / records.SCRATCH
        self.execute_dir.mkdir(parents=True, exist_ok=True)
        try:
            directory.mkdir(mode=0o711)
        except FileExistsError:
            supervisor = _read_int(directory / records.SUPERVISOR_PID)
            if supervisor is not None and _process_alive(supervisor, directory):
                raise LaunchError(f"{directory}: the job {job_id!r} was already launched") from None
            # What an earlier job of the same name left, whose deletion this node never saw
            # (its cluster went away, or the agent was down): as the startd cleans its
            # execute directory, it goes, and the new job starts afresh.
            log.warning("%s: removing what an earlier job %r left", directory, job_id)
            shutil.rmtree(directory)
            directory.mkdir(mode=0o711)
        if self._switches:
            self._prepare_execute_dir()
            # The job's account may cross its own directory to its scratch, and read nothing.
            os.chmod(directory, 0o711)
        scratch.mkdir(mode=0o700)
        os.chmod(scratch, 0o700)
        for name, text in ((records.JOB_AD, job_ad_text), (records.MACHINE_AD, machine_ad_text)):
            (scratch / name).write_text(text if text.endswith("\n") else text + "\n")
        if isinstance(ids, JobAccount) and ids.uid is not None and ids.gid is not None:
            for path in (scratch, scratch / records.JOB_AD, scratch / records.MACHINE_AD):
                os.chown(path, ids.uid, ids.gid)
        return scratch

    def _command(
        self,
        runtime: ProcessRuntime | ApptainerRuntime,
        apptainer: ApptainerSettings | None,
        job_ad_text: str,
        machine_ad_text: str,
        *,
        scratch: Path,
        slot: str,
    ) -> _Command:
        """The job's command line, environment and initial directory, wrapped in Apptainer
        where it runs there (with its image test); a failure where it cannot."""
        iwd = _in_scratch(runtime.working_directory, scratch) or str(scratch)
        executable = runtime.executable
        if not executable.startswith("/"):
            executable = str(Path(iwd) / executable)
        argv = [executable, *runtime.arguments]
        environment = job_environment(runtime, scratch=scratch, slot=slot)
        failure: JobResult | None = None
        image_test: list[str] | None = None
        try:
            contained = self._apptainer.wrap(
                runtime,
                apptainer or ApptainerSettings.from_macros(),
                job_ad_text,
                machine_ad_text,
                executable=executable,
                iwd=iwd,
                scratch=scratch,
                environment=environment,
            )
        except KondorError as err:
            failure = JobResult.failure(records.FAILED_TO_CREATE_PROCESS, 0, str(err), at=0.0)
        else:
            if isinstance(contained, JobResult):
                failure = contained
            elif contained is not None:
                argv, environment, image_test = contained
        command_at = len(argv) - len(runtime.arguments) - 1
        return _Command(executable, iwd, argv, environment, image_test, command_at, failure)

    @property
    def _switches(self) -> bool:
        """Whether jobs run as another user: only root can switch (an agent run by a user,
        as in some tests, runs jobs as itself, still without capabilities)."""
        return self._euid() == 0

    def _ids(self, account: Account | AccountError | None, slot: str) -> JobAccount | JobResult:
        return job_ids(account, slot, switches=self._switches, euid=self._euid())

    def _prepare_execute_dir(self) -> None:
        """The execute directory: root's, mode 0711 (each job's account crosses it to its
        own directory and lists nothing); each directory above it gets the search bit for
        others where it lacks it (cross, never read), so a job can reach its scratch.
        Checked at every launch (a few stats): a directory above that lost its search bit
        since (a tmp cleaner, another tool resetting modes) would lock out every later job."""
        os.chmod(self.execute_dir, 0o711)
        ensure_traversable(self.execute_dir)

    def _start_supervisor(self, directory: Path, *, site: bool = False) -> None:
        start_supervisor(self._python, self._supervisor_env, directory, site=site)

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

    def spec(self, handle: JobHandle) -> LaunchSpec | None:
        """The job's launch spec (who it runs as, its command line), None if unreadable."""
        try:
            return LaunchSpec.from_json((handle.directory / records.SPEC).read_text())
        except (OSError, ValueError, TypeError):
            return None

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

    def note_exit_how(self, handle: JobHandle, how: str) -> None:
        """Why the agent is ending the job (remove, hold, evict), for its JOB_EXIT hook;
        written before the kill, as the supervisor reads it once the job has ended."""
        if self._result(handle) is None:
            with contextlib.suppress(OSError):
                records.write_atomic(handle.directory / records.EXIT_HOW, f"{how}\n")

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
            self.gpu_isolation.remove(handle.cgroup)
        shutil.rmtree(handle.directory, ignore_errors=True)

    def _signal_group(self, handle: JobHandle, sig: int) -> None:
        job = self.job_pid(handle)
        if job is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job, sig)

    def _mark_killed(self, handle: JobHandle, sig: int) -> None:
        with contextlib.suppress(OSError):
            records.write_atomic(handle.directory / records.KILLED, f"{int(sig)}\n")


def job_ids(
    account: Account | AccountError | None, slot: str, *, switches: bool, euid: int
) -> JobAccount | JobResult:
    """The uid and gid the job runs as: the account's numbers, or its name looked up in
    this node's password file; root is refused whatever named it, and so is an account
    the decision refused (`AccountError`)."""
    if isinstance(account, AccountError):
        return JobResult.failure(
            records.FAILED_TO_CREATE_PROCESS,
            errno.EPERM,
            f"The job's account: {account}",
            at=0.0,
        )
    if not switches:
        me = euid
        return JobAccount(
            None,
            None,
            _user_name(me),
            f"the agent runs as uid {me}, not root, so the job runs as that user "
            "(without capabilities)",
        )
    if account is None:
        try:
            account = run_as(RunAsSettings(), owner=None, slot=slot, job_ad=None)
        except AccountError as err:
            return JobResult.failure(
                records.FAILED_TO_CREATE_PROCESS,
                errno.EPERM,
                f"The job's account: {err}",
                at=0.0,
            )
    uid, gid = account.uid, account.gid
    if uid is None or gid is None:
        try:
            entry = pwd.getpwnam(account.name)
        except KeyError:
            return JobResult.failure(
                records.FAILED_TO_CREATE_PROCESS,
                errno.ENOENT,
                f"The job's account {account.name!r} does not exist on this node "
                f"({account.reason})",
                at=0.0,
            )
        uid = entry.pw_uid if uid is None else uid
        gid = entry.pw_gid if gid is None else gid
    if uid == 0 or gid == 0:
        return JobResult.failure(
            records.FAILED_TO_CREATE_PROCESS,
            errno.EPERM,
            f"The job's account {account.name!r} is uid {uid} gid {gid}: a job never runs as root",
            at=0.0,
        )
    return JobAccount(uid, gid, account.name, account.reason)


def start_supervisor(
    python: str, env: Mapping[str, str], directory: Path, *, site: bool = False
) -> None:
    """Start the job's detached supervisor (`python -m kondor_agent.execute.supervisor`);
    returns once it has recorded its pid (LaunchError when it did not start)."""
    # A job with hooks needs the ClassAd library from site-packages to read their ads.
    flags = [] if site else ["-S"]
    with open(directory / records.SUPERVISOR_LOG, "ab") as log:
        outer = subprocess.Popen(
            [python, *flags, "-m", "kondor_agent.execute.supervisor", str(directory)],
            env=env,
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


def hook_spec_of(hooks: JobHooks, hooks_dir: Path | None) -> dict[str, object] | JobResult:
    """The spec's `hooks`: each program checked against the hooks directory; a refused
    one is the job's failure, naming the knob."""
    spec: dict[str, object] = {
        "keyword": hooks.keyword,
        "knobs": {hook: hooks.knob(hook) for hook in (PREPARE_JOB, UPDATE_JOB_INFO, JOB_EXIT)},
        "initial_update_interval": hooks.initial_update_interval,
        "update_interval": hooks.update_interval,
        "timeout": hooks.timeout,
    }
    for hook in (PREPARE_JOB, UPDATE_JOB_INFO, JOB_EXIT):
        program = hooks.program(hook)
        if program is None:
            continue
        where = f"{hooks.knob(hook)} = {program}"
        try:
            if hooks_dir is None:
                raise RefusedExecutableError(f"{where}: the agent has no hooks directory")
            resolved = resolve_hook(program, hooks_dir, where=where)
        except RefusedExecutableError as err:
            return JobResult.failure(
                records.HOOK_PREPARE_JOB_FAILURE, 0, f"Job hook refused: {err}", at=0.0
            )
        spec[hook.lower()] = str(resolved)
    return spec


@dataclass(frozen=True)
class _Command:
    """What a job runs: its command line (Apptainer's where it runs there), environment and
    initial directory; where its own executable is in `argv`; what holds it instead."""

    executable: str
    iwd: str
    argv: list[str]
    environment: dict[str, str]
    image_test: list[str] | None
    command_at: int
    failure: JobResult | None


def _launch_spec(
    handle: JobHandle,
    runtime: ProcessRuntime | ApptainerRuntime,
    command: _Command,
    cgroups: JobCgroups,
    *,
    scratch: Path,
    limits: CgroupLimits | None,
    hooks: dict[str, object] | None,
    ids: JobAccount | JobResult,
    device_procs: list[Path],
) -> LaunchSpec:
    """The launch spec the supervisor reads (`records.LaunchSpec`)."""
    cgroup = handle.cgroup
    account = ids if isinstance(ids, JobAccount) else None
    return LaunchSpec(
        job_id=handle.job_id,
        slot=handle.slot,
        cgroup=cgroup,
        argv=command.argv,
        executable=command.executable,
        environment=command.environment,
        iwd=command.iwd,
        scratch=str(scratch),
        input=_in_scratch(runtime.input, scratch),
        output=_in_scratch(runtime.output, scratch),
        error=_in_scratch(runtime.error, scratch),
        job_procs=[str(p) for p in (*cgroups.procs_files(cgroup), *device_procs)],
        supervisor_procs=[str(p) for p in cgroups.procs_files(SUPERVISORS)],
        peak_memory_file=_str_or_none(cgroups.peak_memory_file(cgroup)),
        oom_kills_file=_str_or_none(cgroups.oom_kills_file(cgroup)),
        memory_limit_mib=(
            limits.memory_bytes // (1024 * 1024)
            if limits is not None and limits.memory_bytes is not None
            else None
        ),
        cgroup_kill_file=_str_or_none(cgroups.kill_file(cgroup)),
        image_test=command.image_test,
        hooks=hooks,
        command_at=command.command_at if hooks is not None else None,
        uid=account.uid if account is not None else None,
        gid=account.gid if account is not None else None,
        account=account.name if account is not None else None,
        account_reason=account.reason if account is not None else None,
    )


def _str_or_none(path: Path | None) -> str | None:
    return None if path is None else str(path)


def environment_of(handle: JobHandle) -> Mapping[str, str]:
    """The environment the job was given (from its spec), for `kondor tail` and tests."""
    return LaunchSpec.from_json((handle.directory / records.SPEC).read_text()).environment
