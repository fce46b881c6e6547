"""The per-job supervisor: `python -m kondor_agent.execute.supervisor <job-dir>`.

What HTCondor's condor_starter does for one job, small enough to outlive the
agent (as containerd's shim and slurmstepd outlive their daemons): it detaches
(a second fork, so init or the node's subreaper inherits it and the agent
leaves no zombie), moves itself into the supervisors' cgroup (out of the
agent's, so restarting the agent's pod does not take the job with it), starts
the job in its own process group inside the job's leaf cgroup (joined between
fork and exec, so the job's first instruction is already contained) as the job's
account, never root (the child drops every capability, switches uid and gid and sets
`no_new_privs` before it opens the job's files and execs: `privileges`; the supervisor
itself stays root, to freeze and kill the cgroup), forwards
the signals it is sent to that group, waits, ends whatever the job left running
in its cgroup (a daemon it double-forked into another session included, as
HTCondor's starter does when the job exits), and writes `exit.json` atomically.

A job that cannot start gets a `failed` result with HTCondor's HoldReasonCode
(the manual's job ClassAd attributes): 14 IwdError when the working directory
is missing, 8 and 7 when the input or an output file cannot be opened, 6
FailedToCreateProcess when the executable cannot be executed; the errno is the
subcode and the message names the path.

A job with hooks (the spec's `hooks`) has them run here, by `hookrun`, imported only then:
PREPARE_JOB before the job is spawned (it may hold the job, send it back to Idle, or edit
its ad and command line), UPDATE_JOB_INFO on its schedule while the job runs, JOB_EXIT
after it has ended and before the result is written.

Start-up time is launch latency, so this imports only `os`, `signal`, `json`,
`time` and `resource`, forks and execs by hand rather than through
`subprocess`, and reads and writes the records as plain dicts (`records`
holds their typed form, and refuses keys it does not know).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time

from kondor_agent.execute import jobdir

# Not `typing.TYPE_CHECKING`: importing typing alone costs milliseconds of every launch.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any

#: Signals the supervisor passes on to the job's process group (the agent's soft kill, a
#: node shutdown, an operator at a terminal).
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)

_MIB = 1024 * 1024


def _log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} supervisor[{os.getpid()}]: {message}", flush=True)


def _result(state: str, **fields: Any) -> dict[str, Any]:
    """A result as `records.JobResult` spells it (unset fields take its defaults)."""
    return {"state": state, **fields}


def _failure(code: int, subcode: int, reason: str) -> dict[str, Any]:
    return _result(
        "failed",
        end_time=time.time(),
        hold_reason=reason,
        hold_reason_code=code,
        hold_reason_subcode=subcode,
    )


def _join(procs_files: list[str], pid: int) -> None:
    for path in procs_files:
        with open(path, "w") as f:
            f.write(str(pid))


def _open_files(spec: dict[str, Any]) -> list[int]:
    """Descriptors for the job's stdin, stdout, stderr, opened in the child once it is the
    job's user (so the output files are created as that user, with that user's rights);
    an OSError's filename says which file could not be opened."""
    fds: list[int] = []
    try:
        path = spec.get("input")
        try:
            fds.append(os.open(path or os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        except OSError as err:
            raise _StageError("input", err, path) from None
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        for key in ("output", "error"):
            path = spec.get(key)
            if key == "error" and path is not None and path == spec.get("output"):
                fds.append(fds[1])  # output and error the same file: one descriptor
                continue
            try:
                fds.append(os.open(path or os.devnull, flags, 0o644))
            except OSError as err:
                raise _StageError("output", err, path) from None
        opened, fds = fds, []
        return opened
    finally:
        for fd in set(fds):
            os.close(fd)


class _StageError(Exception):
    """A step of the child's set-up failed: which, its errno, and the path it concerned."""

    def __init__(self, stage: str, err: OSError, path: str | None = None) -> None:
        super().__init__(stage, err, path)
        self.stage = stage
        self.errno = err.errno or 0
        self.path = path
        self.message = str(err)


def _become_job_user(spec: dict[str, Any]) -> None:
    """Drop to the job's account (`kondor_agent.execute.privileges`), imported only here."""
    from kondor_agent.execute.privileges import drop_privileges  # noqa: PLC0415

    drop_privileges(spec.get("uid"), spec.get("gid"))


def _iwd_error(iwd: str) -> dict[str, Any] | None:
    try:
        os.listdir(iwd)
    except OSError as err:
        code = err.errno or 0
        reason = f"Cannot access initial working directory {iwd}: {os.strerror(code)}"
        return _failure(jobdir.IWD_ERROR, code, reason)
    return None


def _spawn(spec: dict[str, Any]) -> int | dict[str, Any]:
    """Fork and exec the job (its own process group, its cgroup, its user); its pid, or why
    it failed.

    The child joins the job's cgroup while root, then gives up root for good (the job's uid
    and gid, no capabilities, `no_new_privs`), and only then opens the job's files and
    enters its working directory, with the job user's rights. As subprocess does, a
    close-on-exec pipe carries the child's error back: nothing arrives when exec succeeds.
    """
    argv: list[str] = spec["argv"]
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # the child: only async-signal-safe work would matter, but we have one thread
        stage = "exec"
        try:
            os.close(read_end)
            os.setpgid(0, 0)
            stage = "cgroup"
            _join(spec["job_procs"], os.getpid())
            stage = "user"
            _become_job_user(spec)
            fds = _open_files(spec)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            stage = "iwd"
            os.chdir(spec["iwd"])
            stage = "exec"
            for signum in FORWARDED:
                signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            os.execve(argv[0], argv, spec["environment"])
        except _StageError as err:
            os.write(write_end, f"{err.stage}:{err.errno}:{err.path}".encode())
        except OSError as err:
            os.write(write_end, f"{stage}:{err.errno or 0}:{err}".encode())
        except BaseException as err:
            os.write(write_end, f"{stage}:0:{err!r}".encode())
        finally:
            os._exit(127)
    os.close(write_end)
    report = b""
    while chunk := os.read(read_end, 4096):
        report += chunk
    os.close(read_end)
    if not report:
        return pid
    os.waitpid(pid, 0)
    stage, code_text, message = report.decode(errors="replace").split(":", 2)
    code = int(code_text)
    said = os.strerror(code) if code else message
    if stage == "cgroup":
        cgroups = ", ".join(spec["job_procs"])
        reason = f"Cannot place the job in its cgroup ({cgroups}): {message}"
        return _failure(jobdir.FAILED_TO_CREATE_PROCESS, code, reason)
    if stage == "user":
        reason = f"Cannot switch to the job's user ({_account(spec)}): {message}"
        return _failure(jobdir.FAILED_TO_CREATE_PROCESS, code, reason)
    if stage == "input":
        reason = f"Cannot open input file {message}: {said}"
        return _failure(jobdir.UNABLE_TO_OPEN_INPUT, code, reason)
    if stage == "output":
        reason = f"Cannot open output file {message}: {said}"
        return _failure(jobdir.UNABLE_TO_OPEN_OUTPUT, code, reason)
    if stage == "iwd":
        reason = f"Cannot access initial working directory {spec['iwd']}: {said}"
        return _failure(jobdir.IWD_ERROR, code, reason)
    reason = f"Cannot execute {spec['executable']}: {said}"
    return _failure(jobdir.FAILED_TO_CREATE_PROCESS, code, reason)


def _account(spec: dict[str, Any]) -> str:
    return f"{spec.get('account') or 'uid'} {spec.get('uid')}:{spec.get('gid')}"


def _peak_memory_mib(spec: dict[str, Any], rusage: resource.struct_rusage) -> int:
    """The cgroup's peak (the whole job, children included) when recorded, else ru_maxrss."""
    path = spec.get("peak_memory_file")
    if path:
        try:
            with open(path) as f:
                return -(-int(f.read()) // _MIB)
        except (OSError, ValueError):
            pass
    return -(-rusage.ru_maxrss // 1024)  # Linux reports ru_maxrss in KiB


def _oom_kills(spec: dict[str, Any]) -> int:
    """The kernel's OOM kills in the job's cgroup (the `oom_kill N` line), 0 if unknown."""
    path = spec.get("oom_kills_file")
    if not path:
        return 0
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _out_of_memory(spec: dict[str, Any], peak_mib: int) -> dict[str, Any]:
    """HTCondor's hold of a job the kernel killed over its cgroup memory limit."""
    limit = spec.get("memory_limit_mib")
    over = f" of {limit} megabytes" if limit else ""
    return {
        "hold_reason": (
            f"Error from {spec['slot']}: Job has gone over cgroup memory limit{over}. "
            f"Peak usage: {peak_mib} megabytes. Consider resubmitting with a higher "
            "request_memory."
        ),
        "hold_reason_code": jobdir.OUT_OF_MEMORY,
    }


def _kill_leftovers(spec: dict[str, Any], group: int) -> None:
    """SIGKILL what the job left: its process group, then everything in its cgroup."""
    try:  # noqa: SIM105 - contextlib is one more import on the launch path
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    kill_file = spec.get("cgroup_kill_file")
    if kill_file:
        try:
            with open(kill_file, "w") as f:
                f.write("1")
            return
        except OSError as err:
            _log(f"cannot write {kill_file} ({err}); killing each process instead")
    # Without cgroup.kill: each pid, a few rounds, for a child forked between read and kill.
    for _ in range(50):
        pids: set[int] = set()
        for path in spec.get("job_procs", []):
            try:
                with open(path) as f:
                    pids.update(int(word) for word in f.read().split())
            except (OSError, ValueError):
                pass
        if not pids:
            return
        for pid in pids:
            try:  # noqa: SIM105
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)


def _image_test(spec: dict[str, Any], job_dir: str) -> dict[str, Any] | None:
    """Run `apptainer test` on the job's image first, as the starter does (the manual's
    SINGULARITY_RUN_TEST_BEFORE_JOB): a failure holds the job with what the test said."""
    argv: list[str] = spec["image_test"]
    log_path = os.path.join(job_dir, jobdir.IMAGE_TEST_LOG)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        # The log is the agent's (in the job directory), opened before the child drops root.
        log_fd = os.open(log_path, flags | os.O_CLOEXEC, 0o644)
        try:
            pid = os.fork()
            if pid == 0:  # the test runs as the job's user, as the job will
                try:
                    null = os.open(os.devnull, os.O_RDONLY)
                    os.dup2(null, 0)
                    os.dup2(log_fd, 1)
                    os.dup2(log_fd, 2)
                    _become_job_user(spec)
                    os.chdir(spec["scratch"])
                    os.execve(argv[0], argv, spec["environment"])
                except BaseException as err:
                    os.write(2, f"cannot run {argv[0]}: {err}\n".encode())
                finally:
                    os._exit(127)
        finally:
            os.close(log_fd)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    except OSError as err:
        reason = f"Cannot run the image test {' '.join(argv)}: {err}"
        return _failure(jobdir.SINGULARITY_TEST_FAILED, err.errno or 0, reason)
    if code == 0:
        return None
    try:
        with open(log_path, errors="replace") as f:
            said = f.read()[-1000:].strip()
    except OSError:
        said = ""
    how = f"exit code {code}" if code > 0 else f"signal {-code}"
    reason = f"Apptainer test of image {argv[-1]} failed ({how})" + (f": {said}" if said else "")
    return _failure(jobdir.SINGULARITY_TEST_FAILED, max(code, 0), reason)


def run(spec: dict[str, Any], job_dir: str) -> dict[str, Any]:
    """Start the job, wait for it and say how it ended."""
    pending: list[int] = []
    job: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        if job:
            try:  # noqa: SIM105 - contextlib is one more import on the launch path
                os.killpg(job[0], signum)
            except ProcessLookupError:
                pass
        else:
            pending.append(signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)

    try:
        _join(spec["supervisor_procs"], os.getpid())
    except OSError as err:
        # The job is still contained by its own cgroup; only the supervisor stays behind.
        _log(f"cannot leave the agent's cgroup ({err}); going on")

    failure = _iwd_error(spec["iwd"])
    if failure is not None:
        return failure
    if spec.get("image_test"):
        failure = _image_test(spec, job_dir)
        if failure is not None:
            return failure
    hooks: dict[str, Any] | None = spec.get("hooks")
    runner: Any = None
    if hooks:
        # Only a job with hooks pays for their imports (the ClassAd library among them).
        from kondor_agent.execute import hookrun  # noqa: PLC0415

        runner = hookrun
        if hooks.get("prepare_job"):
            failure = hookrun.prepare(spec)
            if failure is not None:
                return failure
    if pending:
        return _result("exited", exit_signal=pending[0], end_time=time.time())
    start = time.time()
    spawned = _spawn(spec)
    if isinstance(spawned, dict):
        return spawned
    job.append(spawned)
    jobdir.write_atomic(os.path.join(job_dir, jobdir.JOB_PID), f"{spawned}\n")
    for pending_signal in pending:
        forward(pending_signal, None)

    if runner is not None and hooks and hooks.get("update_job_info"):
        _, status, rusage = runner.wait_with_updates(spec, spawned, start)
    else:
        _, status, rusage = os.wait4(spawned, 0)
    end = time.time()
    # HTCondor ends what the job left behind when its main process exits.
    _kill_leftovers(spec, spawned)
    code = os.waitstatus_to_exitcode(status)
    peak = _peak_memory_mib(spec, rusage)
    # Killed by the kernel for its memory: held, not ended (the reference's cgroup section).
    held = _out_of_memory(spec, peak) if code == -signal.SIGKILL and _oom_kills(spec) else {}
    result = _result(
        "exited",
        exit_code=code if code >= 0 else None,
        exit_signal=-code if code < 0 else None,
        start_time=start,
        end_time=end,
        user_cpu_seconds=rusage.ru_utime,
        sys_cpu_seconds=rusage.ru_stime,
        peak_memory_mib=peak,
        **held,
    )
    if runner is not None and hooks and hooks.get("job_exit"):
        runner.job_exit(spec, job_dir, spawned, start, result)
    return result


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    paths = [arg for arg in args if not arg.startswith("--")]
    if len(paths) != 1:
        print("usage: python -m kondor_agent.execute.supervisor [--foreground] <job-dir>")
        return 2
    job_dir = os.path.abspath(paths[0])
    # Blocked until the handlers are in place; the mask survives the fork.
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    if "--foreground" not in args:
        child = os.fork()
        if child:
            jobdir.write_atomic(os.path.join(job_dir, jobdir.SUPERVISOR_PID), f"{child}\n")
            os._exit(0)
    else:
        jobdir.write_atomic(os.path.join(job_dir, jobdir.SUPERVISOR_PID), f"{os.getpid()}\n")
    try:
        with open(os.path.join(job_dir, jobdir.SPEC)) as f:
            spec = json.load(f)
        result = run(spec, job_dir)
    except Exception as err:
        _log(f"cannot run the job: {err!r}")
        reason = f"The job's supervisor failed: {err}"
        result = _failure(jobdir.FAILED_TO_CREATE_PROCESS, 0, reason)
    text = json.dumps(result, indent=1, sort_keys=True) + "\n"
    jobdir.write_atomic(os.path.join(job_dir, jobdir.EXIT), text, durable=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
