"""The job hooks as the supervisor runs them (the reference's "Job Hooks That Modify and
Monitor Execution"; what they mean is `kondor_core.jobs.hooks`).

The supervisor imports this only for a job that has hooks, so a job without them starts as
fast as before. Every hook gets the job ad (with the attributes the manual lists for it) on
stdin, runs in the job's scratch directory with the job's environment, is killed after the
spec's timeout, and has its stdout read within `MAX_OUTPUT_BYTES`; its stderr goes to the
supervisor's log (`supervisor.log` in the job directory), which the agent keeps.

- PREPARE_JOB runs before the job is spawned; the attributes it prints update the job ad
  (`.job.ad` in the scratch directory): a new `Cmd` or `Arguments` changes what runs.
- UPDATE_JOB_INFO runs `initial_update_interval` seconds after the spawn, then every
  `update_interval`, without being waited for; its output is ignored.
- JOB_EXIT runs after the job has ended, with exit, remove, hold or evict as its argument,
  and is waited for (up to the timeout) before the result is written.

A failure of UPDATE_JOB_INFO or JOB_EXIT (not run, killed at its timeout, too much output, a
non-zero exit) is logged and recorded in the job directory's `hook-failures`, which the agent
reads while the job runs and once it has ended, and reports as a Warning Event.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kondor_agent.execute import jobdir
from kondor_agent.execute.privileges import drop_privileges
from kondor_core.classads import ExpressionError, literal, parse_ad
from kondor_core.cron import OutputReader
from kondor_core.cron.jobs import parse_args
from kondor_core.jobs.hooks import (
    HOOK_FAILURES_FILE,
    HOOK_PREPARE_JOB_FAILURE,
    JOB_EXIT_FAILED,
    UPDATE_JOB_INFO_FAILED,
    ExitHow,
    exit_reason,
    prepare_outcome,
)

#: Bytes of stdout a hook may print (the startd cron bound: an ad is a few KiB).
MAX_OUTPUT_BYTES = 1024 * 1024


def _log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} supervisor[{os.getpid()}]: {message}", flush=True)


@dataclass(frozen=True)
class HookRun:
    """How one synchronous hook run ended."""

    exit_code: int | None
    exit_signal: int | None
    stdout: str
    #: Why the run failed before its status counts (not started, timed out, too much output).
    failure: str | None = None


def as_job_user(spec: dict[str, Any]) -> Callable[[], None] | None:
    """What a job hook's child runs before exec: the job's hooks run "with the same
    privileges as the job itself" (the manual's Hooks section: PREPARE_JOB, UPDATE_JOB_INFO,
    JOB_EXIT), so it drops to the job's account as the job does. None for a spec that names
    no account (the startd's own hooks, FETCH_WORK and the like, run as the agent)."""
    if "uid" not in spec:
        return None
    uid, gid = spec.get("uid"), spec.get("gid")

    def drop() -> None:
        drop_privileges(uid, gid)

    return drop


def run_hook(
    argv: list[str], stdin_text: str, spec: dict[str, Any], *, timeout: float, name: str
) -> HookRun:
    """Run a hook to its end (killed after `timeout`), its stdout read within the bound."""
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryFile() as stdin:
        stdin.write(stdin_text.encode())
        stdin.seek(0)
        try:
            proc = subprocess.Popen(
                argv,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=None,  # the supervisor's log
                cwd=spec["scratch"],
                env=spec["environment"],
                close_fds=True,
                start_new_session=True,
                preexec_fn=as_job_user(spec),  # noqa: PLW1509 - the supervisor has one thread
            )
        except (OSError, subprocess.SubprocessError) as err:
            return HookRun(None, None, "", f"{name} ({argv[0]}) could not be run: {err}")
    assert proc.stdout is not None
    reader = OutputReader(name, MAX_OUTPUT_BYTES)
    lines: list[str] = []
    failure: str | None = None
    with proc.stdout:
        fd = proc.stdout.fileno()
        while failure is None:
            left = deadline - time.monotonic()
            if left <= 0:
                failure = f"{name} ran longer than {timeout:g} s and was killed"
            elif select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                lines += reader.feed(chunk)
                failure = reader.failure
    if failure is None:
        lines += reader.finish()
        failure = reader.failure
    try:
        code = proc.wait(timeout=max(deadline - time.monotonic(), 0.0) if failure is None else 0)
    except subprocess.TimeoutExpired:
        # Still running: past its timeout, or stopped early for its output (said already).
        failure = failure or f"{name} ran longer than {timeout:g} s and was killed"
    if failure is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
        failure = failure.replace("startd cron job ", "")
    return HookRun(
        code if code >= 0 else None, -code if code < 0 else None, "".join(lines), failure
    )


def record_failure(spec: dict[str, Any], reason: str, message: str) -> None:
    """Log a hook's failure and append it to the job directory's `hook-failures` (the
    scratch directory's parent), for the agent to report as an Event."""
    _log(message)
    line = f"{reason}\t{' '.join(message.split())}\n"
    path = os.path.join(os.path.dirname(spec["scratch"]), HOOK_FAILURES_FILE)
    try:
        with open(path, "a") as f:
            f.write(line)
    except OSError as err:
        _log(f"cannot record the hook failure in {path}: {err}")


def _job_ad_path(spec: dict[str, Any]) -> str:
    return os.path.join(spec["scratch"], jobdir.JOB_AD)


def _read_ad(spec: dict[str, Any]) -> Any:
    with open(_job_ad_path(spec)) as f:
        return parse_ad(f.read(), field="the job ad")


def _ad_text(ad: Any, extra: dict[str, Any]) -> str:
    lines = [ad.printOld().rstrip("\n")]
    lines += [f"{name} = {literal(value)}" for name, value in extra.items()]
    return "\n".join(lines) + "\n"


def _failure(code: int, subcode: int, reason: str) -> dict[str, Any]:
    return {
        "state": "failed",
        "end_time": time.time(),
        "hold_reason": reason,
        "hold_reason_code": code,
        "hold_reason_subcode": subcode,
    }


def prepare(spec: dict[str, Any]) -> dict[str, Any] | None:
    """Run PREPARE_JOB: None to go on (the job ad and spec updated), else the result that
    holds the job (HookPrepareJobFailure) or returns it to Idle (`requeue_reason`)."""
    hooks = spec["hooks"]
    knob = hooks["knobs"]["PREPARE_JOB"]
    ad = _read_ad(spec)
    run = run_hook(
        [hooks["prepare_job"]], _ad_text(ad, {}), spec, timeout=hooks["timeout"], name=knob
    )
    if run.failure is not None:
        _log(run.failure)
        return _failure(HOOK_PREPARE_JOB_FAILURE, 0, run.failure)
    try:
        output = parse_ad(run.stdout, field=f"the output of {knob}") if run.stdout.strip() else None
    except ExpressionError as err:
        return _failure(HOOK_PREPARE_JOB_FAILURE, 0, f"{knob} printed no ClassAd: {err}")
    values = {} if output is None else {key: _value(output, key) for key in output}
    outcome = prepare_outcome(run.exit_code, run.exit_signal, values, knob=knob)
    if outcome.action == "hold":
        _log(f"{knob}: the job is held: {outcome.message}")
        return _failure(HOOK_PREPARE_JOB_FAILURE, outcome.status, outcome.message)
    if outcome.action == "idle":
        _log(f"{knob}: the job goes back to Idle: {outcome.message}")
        return {"state": "failed", "end_time": time.time(), "requeue_reason": outcome.message}
    if output is not None:
        _apply(spec, ad, output)
    return None


def _value(ad: Any, key: str) -> Any:
    try:
        return ad.eval(key)
    except Exception:  # an expression that does not evaluate: not a status code
        return None


def _apply(spec: dict[str, Any], ad: Any, output: Any) -> None:
    """The hook's attributes into the job ad; a new Cmd or Arguments into the command line."""
    for key in output:
        if key in ("HookStatusCode", "HookStatusMessage"):
            continue
        ad[key] = output.lookup(key)
    jobdir.write_atomic(_job_ad_path(spec), ad.printOld())
    at = spec.get("command_at")
    if at is None:
        return
    argv: list[str] = spec["argv"]
    cmd = _value(output, "Cmd") if "Cmd" in output else None
    if isinstance(cmd, str) and cmd:
        executable = cmd if cmd.startswith("/") else os.path.join(spec["iwd"], cmd)
        argv[at] = executable
        spec["executable"] = executable
    arguments = _value(output, "Arguments") if "Arguments" in output else None
    if isinstance(arguments, str):
        words = list(parse_args(f'"{arguments}"', field="Arguments"))
        argv[at + 1 :] = words
    _log(f"PREPARE_JOB changed the job ad; running {argv[at:]}")


# -- UPDATE_JOB_INFO and JOB_EXIT ------------------------------------------------------


def _cgroup_dirs(spec: dict[str, Any]) -> list[str]:
    return [os.path.dirname(path) for path in spec.get("job_procs", [])]


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _pids(spec: dict[str, Any], job: int) -> set[int]:
    pids: set[int] = set()
    for path in spec.get("job_procs", []):
        text = _read(path)
        if text:
            pids.update(int(word) for word in text.split())
    return pids or {job}


def _suspended(spec: dict[str, Any], job: int) -> bool:
    for directory in _cgroup_dirs(spec):
        events = _read(os.path.join(directory, "cgroup.events"))
        if events is not None and "frozen 1" in events:
            return True
        state = _read(os.path.join(directory, "freezer.state"))
        if state is not None and state.strip() == "FROZEN":
            return True
    stat = _read(f"/proc/{job}/stat")
    return stat is not None and stat.rsplit(")", 1)[1].split()[0] == "T"


def _cpu(spec: dict[str, Any], pids: set[int]) -> tuple[float, float]:
    """User and system CPU seconds of the job: the cgroup's cpu.stat, else its processes'."""
    for directory in _cgroup_dirs(spec):
        text = _read(os.path.join(directory, "cpu.stat"))
        if text and "user_usec" in text:
            fields = dict(line.split() for line in text.splitlines() if line.count(" ") == 1)
            return int(fields["user_usec"]) / 1e6, int(fields["system_usec"]) / 1e6
    ticks = os.sysconf("SC_CLK_TCK")
    user = system = 0.0
    for pid in pids:
        stat = _read(f"/proc/{pid}/stat")
        if stat:
            words = stat.rsplit(")", 1)[1].split()
            user += int(words[11]) / ticks
            system += int(words[12]) / ticks
    return user, system


def _image_size_kib(pids: set[int]) -> int:
    """ImageSize: the job's processes' virtual memory, in KiB (as the starter sums it)."""
    page_kib = os.sysconf("SC_PAGE_SIZE") // 1024
    total = 0
    for pid in pids:
        statm = _read(f"/proc/{pid}/statm")
        if statm:
            total += int(statm.split()[0]) * page_kib
    return total


def running_attributes(spec: dict[str, Any], job: int, start: float) -> dict[str, Any]:
    """The attributes the manual adds for UPDATE_JOB_INFO (and JOB_EXIT)."""
    pids = _pids(spec, job)
    user, system = _cpu(spec, pids)
    return {
        "JobState": "Suspended" if _suspended(spec, job) else "Running",
        "JobPid": job,
        "NumPids": len(pids),
        "JobStartDate": int(start),
        "RemoteSysCpu": round(system, 3),
        "RemoteUserCpu": round(user, 3),
        "ImageSize": _image_size_kib(pids),
    }


#: Seconds between looks at UPDATE_JOB_INFO runs still going.
RUNNING_POLL = 0.05


class Updates:
    """UPDATE_JOB_INFO on its schedule, never waited for: `due` says when the next run is,
    `fire` starts it and reaps (or, past the timeout, kills) the earlier ones."""

    def __init__(self, spec: dict[str, Any], job: int, start: float) -> None:
        self.spec = spec
        self.hooks = spec["hooks"]
        self.job = job
        self.start = start
        self.due = start + self.hooks["initial_update_interval"]
        self._running: list[tuple[subprocess.Popen[bytes], float]] = []

    def fire(self, now: float) -> None:
        self.reap(now)
        self.due = max(self.due + self.hooks["update_interval"], now)
        try:
            ad = _read_ad(self.spec)
            text = _ad_text(ad, running_attributes(self.spec, self.job, self.start))
            # Its input from a file, so that a hook that does not read it cannot block us.
            with tempfile.TemporaryFile() as stdin:
                stdin.write(text.encode())
                stdin.seek(0)
                proc = subprocess.Popen(
                    [self.hooks["update_job_info"]],
                    stdin=stdin,
                    stdout=subprocess.DEVNULL,
                    stderr=None,
                    cwd=self.spec["scratch"],
                    env=self.spec["environment"],
                    close_fds=True,
                    start_new_session=True,
                    preexec_fn=as_job_user(self.spec),  # noqa: PLW1509 - one thread
                )
        except (OSError, subprocess.SubprocessError, ExpressionError) as err:
            record_failure(
                self.spec, UPDATE_JOB_INFO_FAILED, f"{self.knob} could not be run: {err}"
            )
            return
        self._running.append((proc, now))

    @property
    def knob(self) -> str:
        return str(self.hooks["knobs"]["UPDATE_JOB_INFO"])

    def wake_in(self, now: float) -> float:
        """Seconds until there is something to do: the next run, or, while runs are going,
        soon (their exits are reaped and their failures recorded as they happen, as the
        starter reaps its children) and no later than the first one's timeout."""
        wake: float = self.due - now
        for _, began in self._running:
            wake = min(wake, RUNNING_POLL, began + float(self.hooks["timeout"]) - now)
        return max(wake, 0.0)

    def reap(self, now: float, *, final: bool = False) -> None:
        """Reap the runs that have ended (a non-zero exit is a failure); kill those past the
        timeout (a failure) and, when the job has ended (`final`), the others."""
        left: list[tuple[subprocess.Popen[bytes], float]] = []
        timeout = self.hooks["timeout"]
        for proc, began in self._running:
            code = proc.poll()
            if code is not None:
                if code != 0:
                    how = f"status {code}" if code > 0 else f"signal {-code}"
                    record_failure(
                        self.spec, UPDATE_JOB_INFO_FAILED, f"{self.knob} exited with {how}"
                    )
                continue
            late = now - began > timeout
            if final or late:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                if late:
                    record_failure(
                        self.spec,
                        UPDATE_JOB_INFO_FAILED,
                        f"{self.knob} ran longer than {timeout:g} s and was killed",
                    )
                continue
            left.append((proc, began))
        self._running = left


def wait_with_updates(spec: dict[str, Any], job: int, start: float) -> tuple[int, int, Any]:
    """`os.wait4(job)`, running UPDATE_JOB_INFO at its times meanwhile."""
    updates = Updates(spec, job, start)
    try:
        pidfd: int | None = os.pidfd_open(job)
    except (OSError, AttributeError):
        pidfd = None
    try:
        while True:
            pid, status, rusage = os.wait4(job, os.WNOHANG)
            if pid == job:
                return pid, status, rusage
            now = time.time()
            updates.reap(now)
            if now >= updates.due:
                updates.fire(now)
                continue
            wait = min(updates.wake_in(now), 1.0)
            if pidfd is not None:
                select.select([pidfd], [], [], wait)
            else:
                time.sleep(min(wait, 0.05))
    finally:
        if pidfd is not None:
            os.close(pidfd)
        updates.reap(time.time(), final=True)


def exit_how(job_dir: str) -> ExitHow:
    """Why the job ended, for JOB_EXIT: what the agent wrote when it killed the job (evict
    when it said nothing), else exit."""
    if not os.path.exists(os.path.join(job_dir, jobdir.KILLED)):
        return "exit"
    said = (_read(os.path.join(job_dir, jobdir.EXIT_HOW)) or "").strip()
    return said if said in ("remove", "hold", "evict") else "evict"  # type: ignore[return-value]


def job_exit(
    spec: dict[str, Any], job_dir: str, job: int, start: float, result: dict[str, Any]
) -> None:
    """Run JOB_EXIT with the exit attributes and how the job ended; waited for."""
    hooks = spec["hooks"]
    knob = hooks["knobs"]["JOB_EXIT"]
    how = exit_how(job_dir)
    code, sig = result.get("exit_code"), result.get("exit_signal")
    extra = running_attributes(spec, job, start)
    extra.update(
        {
            # The job's own accounting, now that its processes are gone.
            "RemoteSysCpu": round(result.get("sys_cpu_seconds", 0.0), 3),
            "RemoteUserCpu": round(result.get("user_cpu_seconds", 0.0), 3),
            "ImageSize": (result.get("peak_memory_mib") or 0) * 1024,
            "JobState": "Exited",
            "ExitReason": exit_reason(how, exit_code=code, exit_signal=sig),
            "ExitBySignal": sig is not None,
            "JobDuration": round(result.get("end_time", time.time()) - start, 3),
        }
    )
    if sig is not None:
        extra["ExitSignal"] = sig
    else:
        extra["ExitCode"] = code or 0
    try:
        text = _ad_text(_read_ad(spec), extra)
    except (OSError, ExpressionError) as err:
        record_failure(spec, JOB_EXIT_FAILED, f"{knob}: cannot read the job ad ({err}); not run")
        return
    run = run_hook([hooks["job_exit"], how], text, spec, timeout=hooks["timeout"], name=knob)
    if run.failure is not None:
        record_failure(spec, JOB_EXIT_FAILED, run.failure)
    elif run.exit_code:
        record_failure(spec, JOB_EXIT_FAILED, f"{knob} exited with status {run.exit_code}")
    elif run.exit_signal is not None:
        record_failure(spec, JOB_EXIT_FAILED, f"{knob} was killed by signal {run.exit_signal}")
