"""Startd cron on the node: runs the policy's jobs as real processes and keeps their ads.

The reference's "Startd Cron" / "Daemon ClassAd Hooks", as the condor_startd runs them:

- Periodic: started every `period` seconds. A run still going when the next is due is
  killed (SIGTERM to its process group, SIGKILL after `grace`) and started again when
  `kill` is set; otherwise it runs on and the next start waits for its exit.
- WaitForExit: started again `period` seconds after it exits; its output is read as it
  comes, each `-` line publishing the ad it ends.
- OneShot: once, and again when the policy changes if `reconfigRerun`.
- The executable's argv[0] is the job's name (as HTCondor passes it); its working
  directory is `cwd` or the hooks directory; `env` adds to the agent's environment.
- Only executables inside the hooks directory run, checked with symlinks resolved.
- A non-zero exit is logged; with STARTD_CRON_LOG_NON_ZERO_EXIT its unparsed stdout and
  all its stderr are logged too. Output lines that do not parse are logged and left out
  (`kondor_core.cron.output`). A run's output counts whatever its exit code; the output of
  a run that was killed does not.
- STARTD_CRON_MAX_JOB_LOAD caps the sum of the JOB_LOAD of the jobs running at once;
  STARTD_CRON_<job>_CONDITION is evaluated against the machine ad before each start.
- A `- update:true` separator (or STARTD_CRON_AUTOPUBLISH = Always / If_Changed) asks
  for an immediate status write: `take_update()` says so and `on_update` wakes the loop.
  Otherwise the ads go out with the next write, as HTCondor's do with the next update.

Everything that decides about output is pure (`kondor_core.cron`); this module only runs
processes, one thread per job.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kondor_core.classads import ClassAd, ExpressionError, evaluate
from kondor_core.cron import (
    AutoPublish,
    CronAd,
    CronJob,
    CronMode,
    CronSettings,
    HookPathError,
    OutputParser,
    OutputProblem,
    attribute_names,
    hook_path,
    parse_output,
    record,
    retain,
)

log = logging.getLogger("kondor_agent.cron")

#: Seconds between SIGTERM and SIGKILL when a job is killed.
DEFAULT_GRACE = 2.0


class RefusedExecutableError(ValueError):
    """A job's executable that the agent will not run."""


def resolve_executable(job: CronJob, hooks_dir: Path) -> Path:
    """The file to run for `job`: inside `hooks_dir` with symlinks resolved, an executable
    regular file; RefusedExecutableError says why not."""
    where = job.source or f"startd cron job {job.name}"
    try:
        lexical = hook_path(job.executable, str(hooks_dir), field=where)
    except HookPathError as err:
        raise RefusedExecutableError(str(err)) from None
    root = hooks_dir.resolve()
    real = Path(lexical).resolve()
    if not real.is_relative_to(root):
        raise RefusedExecutableError(
            f"{where}: {job.executable!r} resolves to {real}, outside the hooks directory "
            f"{root} (a symlink leads out of it)"
        )
    if not real.is_file():
        raise RefusedExecutableError(f"{where}: {real} does not exist or is not a file")
    if not os.access(real, os.X_OK):
        raise RefusedExecutableError(f"{where}: {real} is not executable")
    return real


@dataclass(frozen=True)
class RunResult:
    """What one run of a job did (for logs and tests)."""

    job: str
    exit_code: int | None
    killed: bool
    stdout: str
    stderr: str
    problems: tuple[OutputProblem, ...] = ()


class CronRunner:
    """The node's startd cron jobs: `configure` with the policy's jobs, read `ads()`."""

    def __init__(
        self,
        hooks_dir: Path,
        *,
        on_update: Callable[[], None] | None = None,
        machine_ad: Callable[[], Mapping[str, Any]] = dict,
        grace: float = DEFAULT_GRACE,
    ) -> None:
        self.hooks_dir = hooks_dir
        self.on_update = on_update
        self.machine_ad = machine_ad
        self.grace = grace
        self.settings = CronSettings()
        self.results: list[RunResult] = []
        self._lock = threading.Lock()
        self._ads: dict[str, CronAd] = {}
        self._update = False
        self._load = 0.0
        self._workers: dict[str, _Worker] = {}
        self._order: tuple[str, ...] = ()

    # -- what the loop reads -----------------------------------------------------------------

    def ads(self) -> dict[str, CronAd]:
        with self._lock:
            return dict(self._ads)

    def attribute_names(self) -> frozenset[str]:
        with self._lock:
            return attribute_names(self._ads)

    def take_update(self) -> bool:
        """Whether an immediate write was asked for since the last call."""
        with self._lock:
            update, self._update = self._update, False
            return update

    # -- configuration -----------------------------------------------------------------------

    def configure(
        self, jobs: Sequence[CronJob], settings: CronSettings, *, reconfig: bool = True
    ) -> None:
        """Run `jobs` from now on. Unchanged jobs keep running (a OneShot job with
        `reconfig_rerun` runs again, a job with `reconfig` gets SIGHUP); changed ones are
        restarted; removed ones are stopped and their ads dropped."""
        self.settings = settings
        wanted = {job.name: job for job in jobs}
        for name, worker in list(self._workers.items()):
            if wanted.get(name) != worker.job:
                worker.stop(self.grace)
                del self._workers[name]
            elif reconfig:
                worker.reconfigure()
        with self._lock:
            self._ads = retain(self._ads, wanted)
            self._order = tuple(wanted)
        for name, job in wanted.items():
            if name in self._workers:
                continue
            try:
                executable = resolve_executable(job, self.hooks_dir)
            except RefusedExecutableError as err:
                log.error("startd cron job %s is not run: %s", name, err)
                continue
            worker = _Worker(self, job, executable)
            self._workers[name] = worker
            worker.start()

    def stop(self) -> None:
        """Stop every job (killing the running ones) and wait for their threads."""
        for worker in self._workers.values():
            worker.stop(self.grace)
        self._workers.clear()

    def run_once(self, jobs: Sequence[CronJob], settings: CronSettings, timeout: float) -> None:
        """Each job once, now, waiting up to `timeout` seconds for each (`--oneshot`)."""
        self.settings = settings
        with self._lock:
            self._order = tuple(job.name for job in jobs)
        for job in jobs:
            try:
                executable = resolve_executable(job, self.hooks_dir)
            except RefusedExecutableError as err:
                log.error("startd cron job %s is not run: %s", job.name, err)
                continue
            worker = _Worker(self, job, executable)
            if job.mode is CronMode.WAIT_FOR_EXIT:
                worker.stream(deadline=time.monotonic() + timeout)
            else:
                worker.run(deadline=time.monotonic() + timeout, kill=True)

    # -- used by the workers -----------------------------------------------------------------

    def _publish(self, job: CronJob, ads: Sequence[CronAd]) -> None:
        if not ads:
            return
        with self._lock:
            before = {ad.full_name: self._ads.get(ad.full_name) for ad in ads}
            self._ads = record(self._ads, ads)
            update = self._wants_update(ads, before)
            self._update = self._update or update
        if update and self.on_update is not None:
            self.on_update()

    def _wants_update(self, ads: Sequence[CronAd], before: Mapping[str, CronAd | None]) -> bool:
        said = [ad.update for ad in ads if ad.update is not None]
        if said:
            return any(said)
        autopublish = self.settings.autopublish
        if autopublish is AutoPublish.ALWAYS:
            return True
        if autopublish is AutoPublish.IF_CHANGED:
            return any(before.get(ad.full_name) != ad for ad in ads)
        return False

    def _acquire_load(self, job: CronJob) -> bool:
        with self._lock:
            if self._load > 0 and self._load + job.job_load > self.settings.max_job_load + 1e-9:
                return False
            self._load += job.job_load
            return True

    def _release_load(self, job: CronJob) -> None:
        with self._lock:
            self._load = max(0.0, self._load - job.job_load)

    def _condition_holds(self, job: CronJob) -> bool:
        if job.condition is None:
            return True
        try:
            value = evaluate(job.condition, my=ClassAd(dict(self.machine_ad())), field="condition")
        except (ExpressionError, ValueError, TypeError) as err:
            log.warning("startd cron job %s: its condition cannot be evaluated: %s", job.name, err)
            return False
        return value is True

    def _finished(self, result: RunResult) -> None:
        with self._lock:
            self.results.append(result)
            del self.results[:-100]  # a bounded history, for tests and debugging
        for problem in result.problems:
            log.warning("%s; the line is left out", problem)
        if result.killed or result.exit_code in (0, None):
            return
        if self.settings.log_non_zero_exit:
            unparsed = "\n".join(problem.text for problem in result.problems)
            log.warning(
                "startd cron job %s exited with %d; unparsed stdout: %r; stderr: %r",
                result.job,
                result.exit_code,
                unparsed,
                result.stderr,
            )
        else:
            log.warning(
                "startd cron job %s exited with %d (STARTD_CRON_LOG_NON_ZERO_EXIT = true logs "
                "its output)",
                result.job,
                result.exit_code,
            )


class _Worker:
    """One job's thread."""

    def __init__(self, runner: CronRunner, job: CronJob, executable: Path) -> None:
        self.runner = runner
        self.job = job
        self.executable = executable
        self._stop = threading.Event()
        self._rerun = threading.Event()
        self._thread: threading.Thread | None = None
        self._process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._main, name=f"cron-{self.job.name}", daemon=True
        )
        self._thread.start()

    def reconfigure(self) -> None:
        if self.job.reconfig and self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGHUP)
        if self.job.mode is CronMode.ONE_SHOT and self.job.reconfig_rerun:
            self._rerun.set()

    def stop(self, grace: float) -> None:
        self._stop.set()
        self._rerun.set()
        process = self._process
        if process is not None:
            _terminate(process, grace)
        if self._thread is not None:
            self._thread.join(grace + 5)

    # -- the schedule ------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            mode = self.job.mode
            if mode is CronMode.PERIODIC:
                self._periodic()
            elif mode is CronMode.WAIT_FOR_EXIT:
                self._wait_for_exit()
            else:
                self._one_shot()
        except Exception:  # a job's thread never takes the agent down
            log.exception("startd cron job %s failed", self.job.name)

    def _periodic(self) -> None:
        period = float(self.job.period)
        next_start = time.monotonic()
        while not self._stop.wait(max(0.0, next_start - time.monotonic())):
            started = time.monotonic()
            if not self._may_start():
                next_start = started + min(period, 1.0)
                continue
            result = self.run(deadline=started + period, kill=self.job.kill)
            now = time.monotonic()
            if result.killed:
                next_start = now  # killed at its period: the new instance starts at once
            else:  # the next period boundary (later ones passed while it overran)
                next_start = started + period * max(1, math.ceil((now - started) / period))

    def _wait_for_exit(self) -> None:
        while not self._stop.is_set():
            if not self._may_start():
                self._stop.wait(1.0)
                continue
            self.stream(deadline=None)
            self._stop.wait(float(self.job.period))

    def _one_shot(self) -> None:
        while not self._stop.is_set():
            if self._may_start():
                self.run(deadline=None, kill=False)
            else:
                self._stop.wait(1.0)
                continue
            self._rerun.wait()
            self._rerun.clear()

    def _may_start(self) -> bool:
        return self.runner._condition_holds(self.job) and self._acquired()

    def _acquired(self) -> bool:
        if self.runner._acquire_load(self.job):
            return True
        log.debug("startd cron job %s waits: STARTD_CRON_MAX_JOB_LOAD is reached", self.job.name)
        return False

    # -- one run -----------------------------------------------------------------------------

    def _spawn(self) -> subprocess.Popen[str]:
        job = self.job
        cwd = job.cwd or str(self.runner.hooks_dir)
        return subprocess.Popen(
            [job.name, *job.args],
            executable=str(self.executable),
            cwd=cwd,
            env={**os.environ, **job.env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group, so a kill reaches its children
        )

    def run(self, *, deadline: float | None, kill: bool) -> RunResult:
        """One run of a Periodic or OneShot job: publish its output when it exits. At
        `deadline` a still running job is killed if `kill`, else waited for."""
        job = self.job
        try:
            process = self._process = self._spawn()
        except OSError as err:
            log.error("startd cron job %s cannot start %s: %s", job.name, self.executable, err)
            self.runner._release_load(job)
            return RunResult(job.name, None, False, "", str(err))
        killed = False
        try:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            if kill:
                log.warning(
                    "startd cron job %s is still running at its period (%ss); killing it",
                    job.name,
                    job.period,
                )
                killed = True
                stdout, stderr = _kill_and_read(process, self.runner.grace)
            else:
                log.warning(
                    "startd cron job %s is still running at its period; it is not started "
                    "again until it exits (kill is false)",
                    job.name,
                )
                stdout, stderr = process.communicate()
        finally:
            self._process = None
            self.runner._release_load(job)
        killed = killed or self._stop.is_set()
        parsed = parse_output(job, stdout)
        if not killed:
            self.runner._publish(job, parsed.ads)
        result = RunResult(job.name, process.returncode, killed, stdout, stderr, parsed.problems)
        self.runner._finished(result)
        return result

    def stream(self, *, deadline: float | None) -> None:
        """One run of a WaitForExit job: each `-` line publishes the ad it ends."""
        job = self.job
        try:
            process = self._process = self._spawn()
        except OSError as err:
            log.error("startd cron job %s cannot start %s: %s", job.name, self.executable, err)
            self.runner._release_load(job)
            return
        stderr: list[str] = []
        reader = threading.Thread(
            target=lambda: stderr.extend(process.stderr or ()), daemon=True, name="cron-stderr"
        )
        reader.start()
        timer = None
        if deadline is not None:
            timer = threading.Timer(
                max(0.0, deadline - time.monotonic()), _terminate, (process, self.runner.grace)
            )
            timer.start()
        parser = OutputParser(job)
        lines: list[str] = []
        try:
            for line in process.stdout or ():
                lines.append(line)
                ad = parser.feed(line)
                if ad is not None:
                    self.runner._publish(job, [ad])
            process.wait()
        finally:
            if timer is not None:
                timer.cancel()
            self._process = None
            self.runner._release_load(job)
        reader.join(1.0)
        killed = process.returncode is not None and process.returncode < 0
        last = parser.finish()
        if last is not None and not killed:
            self.runner._publish(job, [last])
        self.runner._finished(
            RunResult(
                job.name,
                process.returncode,
                killed,
                "".join(lines),
                "".join(stderr),
                tuple(parser.problems),
            )
        )


def _signal(process: subprocess.Popen[str], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _kill_and_read(process: subprocess.Popen[str], grace: float) -> tuple[str, str]:
    """SIGTERM to the job's process group, SIGKILL after `grace`; its output so far (the
    caller is the only reader of its pipes)."""
    _signal(process, signal.SIGTERM)
    try:
        out, err = process.communicate(timeout=grace)
    except subprocess.TimeoutExpired:
        _signal(process, signal.SIGKILL)
        out, err = process.communicate()
    return out or "", err or ""


def _terminate(process: subprocess.Popen[str], grace: float) -> None:
    """SIGTERM, then SIGKILL after `grace`, from another thread than the pipes' reader."""
    _signal(process, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        _signal(process, signal.SIGKILL)
