"""Startd cron on the node: runs the policy's jobs as real processes and keeps their ads.

The reference's "Startd Cron" / "Daemon ClassAd Hooks", as the condor_startd runs them:

- When each job starts and when a running one is killed is decided by
  `kondor_core.cron.schedule` (Periodic, WaitForExit, OneShot; KILL, RECONFIG,
  RECONFIG_RERUN, STARTD_CRON_MAX_JOB_LOAD); a kill is SIGTERM to the job's process group
  and SIGKILL after `grace`. This module only applies those decisions.
- WaitForExit: its output is read as it comes, each `-` line publishing the ad it ends;
  Periodic and OneShot jobs publish when they exit.
- The executable's argv[0] is the job's name (as HTCondor passes it); its working
  directory is `cwd` or the hooks directory; `env` adds to the agent's environment.
- Only executables inside the hooks directory run, checked with symlinks resolved.
- A non-zero exit is logged; with STARTD_CRON_LOG_NON_ZERO_EXIT its unparsed stdout and
  all its stderr are logged too. Output lines that do not parse are logged and left out
  (`kondor_core.cron.output`). A run's output counts whatever its exit code; the output of
  a run that was killed does not.
- STARTD_CRON_<job>_CONDITION is evaluated against the machine ad before each start.
- A `- update:true` separator (or STARTD_CRON_AUTOPUBLISH = Always / If_Changed) asks
  for an immediate status write: `take_update()` says so and `on_update` wakes the loop.
  Otherwise the ads go out with the next write, as HTCondor's do with the next update.

The clock and the spawner (what starts a process) are passed in: the agent uses the
monotonic clock, `spawn` and one background thread that calls `step` when a job is due or a
process has something to say; tests pass fake time and fake processes and call `step`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kondor_agent.execute.hookpath import RefusedExecutableError, resolve_hook
from kondor_core.classads import ClassAd, ExpressionError, evaluate
from kondor_core.cron import (
    AutoPublish,
    CronAction,
    CronAd,
    CronJob,
    CronMode,
    CronSettings,
    CronState,
    OutputParser,
    OutputProblem,
    OutputReader,
    attribute_names,
    parse_output,
    record,
    retain,
    schedule,
)

log = logging.getLogger("kondor_agent.cron")

#: Seconds between SIGTERM and SIGKILL when a job is killed.
DEFAULT_GRACE = 2.0
#: How long `stop` waits for killed jobs to be reaped beyond `grace`.
_STOP_MARGIN = 5.0


def resolve_executable(job: CronJob, hooks_dir: Path) -> Path:
    """The file to run for `job`: inside `hooks_dir` with symlinks resolved, an executable
    regular file; RefusedExecutableError says why not."""
    return resolve_hook(
        job.executable, hooks_dir, where=job.source or f"startd cron job {job.name}"
    )


# -- the edges: time and processes ------------------------------------------------------------


class Clock(Protocol):
    """Monotonic seconds, and waiting on them."""

    def __call__(self) -> float: ...

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        """Until `event` is set or `timeout` seconds have passed; whether it is set."""
        ...


class MonotonicClock:
    def __call__(self) -> float:
        return time.monotonic()

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait(timeout)


@dataclass(frozen=True)
class Launch:
    """How to start one run of a job."""

    #: argv[0] is the job's name, as HTCondor passes it.
    argv: tuple[str, ...]
    executable: Path
    cwd: str
    #: Added to the agent's environment.
    env: Mapping[str, str]


class CronProcess(Protocol):
    """A started run, as the runner sees it."""

    def read(self) -> list[str]:
        """The lines of stdout printed since the last call."""
        ...

    def exit_code(self) -> int | None:
        """None while it runs or its output is still being read; negative: the signal that
        ended it."""
        ...

    def stderr(self) -> str:
        """Everything it wrote to stderr (complete once `exit_code` is not None)."""
        ...

    def failure(self) -> str | None:
        """Why the run failed as a hook (output not UTF-8, or beyond the bound per run);
        None when its output was good."""
        ...

    def signal(self, sig: signal.Signals) -> None:
        """`sig` to its process group (a no-op once it has exited)."""
        ...


class Spawner(Protocol):
    def __call__(self, launch: Launch, notify: Callable[[], None]) -> CronProcess:
        """Start `launch`; call `notify` (from any thread) when it prints a line or exits.
        OSError when it cannot start."""
        ...


class _Subprocess:
    """A real process in its own session (so a kill reaches its children); two reader
    threads turn its pipes into lines and an exit code. stdout is read as bytes through
    `OutputReader`: output that is not UTF-8 or beyond MAX_OUTPUT_BYTES fails the run, and
    a flood is killed rather than read without end."""

    def __init__(self, launch: Launch, notify: Callable[[], None]) -> None:
        self._notify = notify
        self._lock = threading.Lock()
        self._lines: list[str] = []
        self._stderr = bytearray()
        self._code: int | None = None
        self._reader = OutputReader(launch.argv[0])
        self._popen = subprocess.Popen(
            list(launch.argv),
            executable=str(launch.executable),
            cwd=launch.cwd,
            env={**os.environ, **launch.env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        name = launch.argv[0]
        self._stderr_reader = threading.Thread(
            target=self._read_stderr, daemon=True, name=f"cron-{name}-stderr"
        )
        self._stderr_reader.start()
        threading.Thread(target=self._read_stdout, daemon=True, name=f"cron-{name}").start()

    def _read_stdout(self) -> None:
        stdout = self._popen.stdout
        assert stdout is not None
        with stdout:
            while chunk := os.read(stdout.fileno(), 65536):
                lines = self._reader.feed(chunk)
                if self._reader.failure is not None:
                    self.signal(signal.SIGKILL)
                    break
                if lines:
                    with self._lock:
                        self._lines.extend(lines)
                    self._notify()
            with self._lock:
                self._lines.extend(self._reader.finish())
        code = self._popen.wait()
        self._stderr_reader.join(1.0)
        with self._lock:
            self._code = code
        self._notify()

    def _read_stderr(self) -> None:
        stderr = self._popen.stderr
        assert stderr is not None
        with stderr:
            while chunk := os.read(stderr.fileno(), 65536):
                with self._lock:
                    # Kept for the log up to a bound; the rest is read and dropped.
                    self._stderr += chunk[: max(0, _MAX_STDERR_BYTES - len(self._stderr))]

    def read(self) -> list[str]:
        with self._lock:
            lines, self._lines = self._lines, []
            return lines

    def exit_code(self) -> int | None:
        with self._lock:
            return self._code

    def stderr(self) -> str:
        with self._lock:
            return self._stderr.decode("utf-8", errors="backslashreplace")

    def failure(self) -> str | None:
        return self._reader.failure

    def signal(self, sig: signal.Signals) -> None:
        if self._popen.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._popen.pid, sig)


#: stderr kept of one run, for the log.
_MAX_STDERR_BYTES = 64 * 1024


def spawn(launch: Launch, notify: Callable[[], None]) -> CronProcess:
    """Start `launch` as a real process."""
    return _Subprocess(launch, notify)


# -- the runner -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunResult:
    """What one run of a job did (for logs and tests)."""

    job: str
    exit_code: int | None
    killed: bool
    stdout: str
    stderr: str
    problems: tuple[OutputProblem, ...] = ()


@dataclass
class _Run:
    process: CronProcess
    parser: OutputParser
    stdout: list[str] = field(default_factory=list)


@dataclass
class _Scheduled:
    """One configured job, its schedule state and its current run."""

    job: CronJob
    executable: Path
    state: CronState
    run: _Run | None = None


class CronRunner:
    """The node's startd cron jobs: `configure` with the policy's jobs, read `ads()`.

    With `background` (the agent) the first `configure` starts a thread that calls `step`
    whenever a job is due or a process prints or exits; without it the caller calls `step`.
    """

    def __init__(
        self,
        hooks_dir: Path,
        *,
        on_update: Callable[[], None] | None = None,
        machine_ad: Callable[[], Mapping[str, Any]] = dict,
        grace: float = DEFAULT_GRACE,
        clock: Clock | None = None,
        spawner: Spawner = spawn,
        background: bool = True,
    ) -> None:
        self.hooks_dir = hooks_dir
        self.on_update = on_update
        self.machine_ad = machine_ad
        self.grace = grace
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self.spawner = spawner
        self.background = background
        self.settings = CronSettings()
        self.results: list[RunResult] = []
        self._lock = threading.RLock()
        self._ads: dict[str, CronAd] = {}
        self._update = False
        self._jobs: dict[str, _Scheduled] = {}
        #: Runs of removed or changed jobs, being killed; their output is dropped.
        self._dying: list[_Scheduled] = []
        self._wake = threading.Event()
        self._driver: threading.Thread | None = None
        self._closed = False

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
        restarted; removed ones are killed and their ads dropped."""
        with self._lock:
            now = self.clock()
            self.settings = settings
            self._closed = False
            wanted = {job.name: job for job in jobs}
            for name, scheduled in list(self._jobs.items()):
                if wanted.get(name) != scheduled.job:
                    self._retire(scheduled, now)
                    del self._jobs[name]
                elif reconfig:
                    if scheduled.run is not None and schedule.hangs_up(
                        scheduled.job, scheduled.state
                    ):
                        scheduled.run.process.signal(signal.SIGHUP)
                    scheduled.state = schedule.reconfigured(scheduled.job, scheduled.state)
            self._ads = retain(self._ads, wanted)
            for name, job in wanted.items():
                if name in self._jobs:
                    continue
                try:
                    executable = resolve_executable(job, self.hooks_dir)
                except RefusedExecutableError as err:
                    log.error("startd cron job %s is not run: %s", name, err)
                    continue
                self._jobs[name] = _Scheduled(job, executable, CronState(configured=now))
            if self.background and self._driver is None:
                self._driver = threading.Thread(target=self._drive, name="cron", daemon=True)
                self._driver.start()
        self._wake.set()

    def stop(self) -> None:
        """Kill every running job and wait (at most `grace` and a few seconds) for them."""
        with self._lock:
            self._closed = True
            now = self.clock()
            for scheduled in self._jobs.values():
                self._retire(scheduled, now)
            self._jobs.clear()
            driver, self._driver = self._driver, None
        self._wake.set()
        if driver is not None:
            driver.join(self.grace + _STOP_MARGIN)
        deadline = self.clock() + self.grace + _STOP_MARGIN
        while True:
            self._wake.clear()
            wake = self.step()
            now = self.clock()
            if not self._dying or now >= deadline:
                break
            until = deadline if wake is None else min(deadline, wake)
            self.clock.wait(self._wake, max(0.0, until - now))
        for scheduled in self._dying:
            log.warning("startd cron job %s did not exit after SIGKILL", scheduled.job.name)
        self._dying.clear()

    def run_once(self, jobs: Sequence[CronJob], settings: CronSettings, timeout: float) -> None:
        """Each job once, now, one after another, waiting up to `timeout` seconds for each
        (`--oneshot`); one still running then is killed (a WaitForExit job keeps the ads it
        has published)."""
        self.settings = settings
        for job in jobs:
            try:
                executable = resolve_executable(job, self.hooks_dir)
            except RefusedExecutableError as err:
                log.error("startd cron job %s is not run: %s", job.name, err)
                continue
            now = self.clock()
            deadline = now + timeout
            scheduled = _Scheduled(job, executable, CronState(configured=now))
            with self._lock:
                self._start(scheduled, now)
            while scheduled.run is not None:
                self._wake.clear()
                with self._lock:
                    now = self.clock()
                    update = self._reap(scheduled, now, publish=True)
                    action = schedule.due_once(
                        scheduled.state, now, deadline=deadline, grace=self.grace
                    )
                    if action is CronAction.TERMINATE:
                        log.warning(
                            "startd cron job %s is still running after %ss; killing it",
                            job.name,
                            timeout,
                        )
                    self._apply(scheduled, action, now)
                    wake = schedule.next_wakeup_once(
                        scheduled.state, deadline=deadline, grace=self.grace
                    )
                self._notify(update)
                if scheduled.run is not None:
                    self.clock.wait(self._wake, None if wake is None else max(0.0, wake - now))

    # -- one step ----------------------------------------------------------------------------

    def step(self) -> float | None:
        """Read what the running jobs printed, finish the ones that exited, then start, kill
        or signal each job as `kondor_core.cron.schedule` says at this time; the clock time
        at which a job is next due (None: nothing is, until a process exits or `configure`)."""
        with self._lock:
            now = self.clock()
            update = False
            for scheduled in self._jobs.values():
                update = self._reap(scheduled, now, publish=True) or update
            for scheduled in self._dying:
                self._reap(scheduled, now, publish=False)
            self._dying = [scheduled for scheduled in self._dying if scheduled.run is not None]
            load = sum(s.job.job_load for s in self._jobs.values() if s.run is not None)
            for scheduled in self._jobs.values():
                action = schedule.due(scheduled.job, scheduled.state, now, grace=self.grace)
                if action is CronAction.START:
                    if not self._may_start(scheduled.job, load):
                        scheduled.state = schedule.held(scheduled.state, now)
                        continue
                    self._start(scheduled, now)
                    if scheduled.run is not None:
                        load += scheduled.job.job_load
                    continue
                if action is CronAction.TERMINATE:
                    log.warning(
                        "startd cron job %s is still running at its period (%ss); killing it",
                        scheduled.job.name,
                        scheduled.job.period,
                    )
                self._apply(scheduled, action, now)
            for scheduled in self._dying:
                action = schedule.due(scheduled.job, scheduled.state, now, grace=self.grace)
                if action is CronAction.KILL:
                    self._apply(scheduled, action, now)
            wakeups = [
                schedule.next_wakeup(s.job, s.state, grace=self.grace)
                for s in (*self._jobs.values(), *self._dying)
            ]
        self._notify(update)
        times = [at for at in wakeups if at is not None]
        return min(times) if times else None

    def _drive(self) -> None:
        """The background thread: `step`, then wait until the next job is due or a process
        has something to say."""
        while True:
            self._wake.clear()
            try:
                wake: float | None = self.step()
            except Exception:  # a bug in one step never stops startd cron for good
                log.exception("startd cron failed; trying again")
                wake = self.clock() + schedule.HOLD_RETRY
            with self._lock:
                if self._closed:
                    return
            timeout = None if wake is None else max(0.0, wake - self.clock())
            self.clock.wait(self._wake, timeout)

    # -- applying decisions (the caller holds the lock) --------------------------------------

    def _apply(self, scheduled: _Scheduled, action: CronAction, now: float) -> None:
        job, run = scheduled.job, scheduled.run
        if action is CronAction.TERMINATE and run is not None:
            run.process.signal(signal.SIGTERM)
            scheduled.state = schedule.terminated(scheduled.state, now)
        elif action is CronAction.KILL and run is not None:
            run.process.signal(signal.SIGKILL)
            scheduled.state = schedule.kill_sent(scheduled.state)
        elif action is CronAction.OVERRUN:
            log.warning(
                "startd cron job %s is still running at its period; it is not started again "
                "until it exits (kill is false)",
                job.name,
            )
            scheduled.state = schedule.overran(scheduled.state)

    def _retire(self, scheduled: _Scheduled, now: float) -> None:
        """The job is removed or changed: kill its run and reap it later."""
        if scheduled.run is None:
            return
        scheduled.run.process.signal(signal.SIGTERM)
        scheduled.state = schedule.terminated(scheduled.state, now)
        self._dying.append(scheduled)

    def _may_start(self, job: CronJob, load: float) -> bool:
        if not self._condition_holds(job):
            return False
        if not schedule.fits(load, job, self.settings.max_job_load):
            log.debug("startd cron job %s waits: STARTD_CRON_MAX_JOB_LOAD is reached", job.name)
            return False
        return True

    def _start(self, scheduled: _Scheduled, now: float) -> None:
        job = scheduled.job
        launch = Launch(
            argv=(job.name, *job.args),
            executable=scheduled.executable,
            cwd=job.cwd or str(self.hooks_dir),
            env=job.env,
        )
        scheduled.state = schedule.started(scheduled.state, now)
        try:
            process = self.spawner(launch, self._wake.set)
        except OSError as err:
            log.error("startd cron job %s cannot start %s: %s", job.name, launch.executable, err)
            scheduled.state = schedule.exited(scheduled.state, now)
            self._finished(RunResult(job.name, None, False, "", str(err)))
            return
        scheduled.run = _Run(process, OutputParser(job))

    def _reap(self, scheduled: _Scheduled, now: float, *, publish: bool) -> bool:
        """Take what the run printed (a WaitForExit job publishes each ad as it ends) and
        finish it if it exited; whether an immediate update was asked for."""
        run, job = scheduled.run, scheduled.job
        if run is None:
            return False
        streaming = job.mode is CronMode.WAIT_FOR_EXIT
        update = False
        for line in run.process.read():
            run.stdout.append(line)
            if streaming:
                ad = run.parser.feed(line)
                if ad is not None and publish:
                    update = self._publish([ad]) or update
        code = run.process.exit_code()
        if code is None:
            return update
        failure = run.process.failure()
        # Signalled by the runner, or (a stream) ended by a signal: its output does not count;
        # nor does the output of a failed run (not UTF-8, or too much of it).
        killed = scheduled.state.terminated is not None or (streaming and code < 0) or bool(failure)
        if failure:
            log.error("%s", failure)
        stdout = "".join(run.stdout)
        if streaming:
            last = run.parser.finish()
            ads = [last] if last is not None else []
            problems = tuple(run.parser.problems)
        else:
            parsed = parse_output(job, stdout)
            ads, problems = list(parsed.ads), parsed.problems
        if publish and not killed:
            update = self._publish(ads) or update
        scheduled.run = None
        scheduled.state = schedule.exited(scheduled.state, now)
        self._finished(RunResult(job.name, code, killed, stdout, run.process.stderr(), problems))
        return update

    def _publish(self, ads: Sequence[CronAd]) -> bool:
        """Keep `ads`; whether they ask for an immediate update."""
        if not ads:
            return False
        before = {ad.full_name: self._ads.get(ad.full_name) for ad in ads}
        self._ads = record(self._ads, ads)
        update = self._wants_update(ads, before)
        self._update = self._update or update
        return update

    def _notify(self, update: bool) -> None:
        """Wake the loop for an immediate update (outside the lock: it is the loop's code)."""
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
