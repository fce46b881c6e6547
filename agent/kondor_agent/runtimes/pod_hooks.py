"""Job hooks around a `pod` job, run off the agent's loop (the reference's "Job Hooks That Modify
and Monitor Execution"; what the hooks mean is `kondor_core.jobs.hooks`, what PREPARE_JOB's
edits do to the Pod is `kondor_core.jobs.podhooks`).

What the per-job supervisor does for a process job, one thread does for a pod job with hooks:

- PREPARE_JOB gets the job ad on stdin before the Pod exists. HookStatusCode (or the exit
  status) 1-299 holds the job with HookStatusMessage (HoldReasonCode 19), 300 and up returns it
  to Idle (an eviction), and no Pod is created. Otherwise its attributes update the job ad
  the pod carries (its `kondor.io/job-ad` annotation, mounted as .job.ad), and those with a
  meaning in a container (Cmd, Arguments, Environment, Iwd, ContainerImage) edit the job
  container; an edit a Pod cannot take (In, Request*, ...) holds the job naming it, and an
  edited ad too large for the Pod's annotations holds it with HoldReasonCode 6 naming the
  sizes.
- UPDATE_JOB_INFO runs STARTER_INITIAL_UPDATE_INTERVAL after the Pod is created, then every
  STARTER_UPDATE_INTERVAL while it runs, with JobState, JobPid, NumPids, JobStartDate,
  RemoteSysCpu, RemoteUserCpu and ImageSize (from the pod's cgroup where this host has it,
  else 0: a simulated node).
- JOB_EXIT runs once the Pod has ended, with exit, remove, hold or evict and the exit
  attributes, and is waited for before the job's end is reported, as the starter waits.

Every hook runs from the hooks directory (symlinks resolved), in it, with the agent's
environment, killed at its timeout. The failures of UPDATE_JOB_INFO and JOB_EXIT are kept for
the agent's loop to report as Warning Events (`hook_failures`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kondor_agent.execute.hookpath import RefusedExecutableError, resolve_hook
from kondor_agent.execute.hookrun import run_hook
from kondor_agent.jobs import Outcome
from kondor_core.classads import ExpressionError, literal, parse_ad
from kondor_core.jobs.hooks import (
    HOOK_PREPARE_JOB_FAILURE,
    JOB_EXIT,
    JOB_EXIT_FAILED,
    PREPARE_JOB,
    STARTER_HOOKS,
    UPDATE_JOB_INFO,
    UPDATE_JOB_INFO_FAILED,
    ExitHow,
    HookSettingsError,
    JobHooks,
    exit_reason,
    job_hooks,
    prepare_outcome,
)
from kondor_core.jobs.pod import AdsTooLargeError, with_job_ad
from kondor_core.jobs.podhooks import STATUS_ATTRIBUTES, PodEditError, apply_pod_edits, pod_edits

log = logging.getLogger("kondor_agent.runtimes.pod_hooks")

#: HoldReasonCode FailedToCreateProcess: the Pod could not be created.
FAILED_TO_CREATE_PROCESS = 6
#: How often the thread looks at the watched Pod for its end (a dict read under a lock).
END_CHECK_INTERVAL = 0.2


def pod_job_hooks(macros: Mapping[str, str], slot_id: int, job_ad_text: str) -> JobHooks | None:
    """The job's hooks, as the policy's knobs and the job's HookKeyword say (None: none)."""
    if not any("_HOOK_" in name.upper() for name in macros):
        return None  # no hooks configured: the job ad need not be read
    try:
        keyword = parse_ad(job_ad_text, field="the job ad").get("HookKeyword")
    except ExpressionError:
        keyword = None
    wanted = keyword if isinstance(keyword, str) else None
    try:
        return job_hooks(macros, slot_id=slot_id, hook_keyword=wanted)
    except HookSettingsError as err:
        log.error("%s; the job's hooks use the defaults", err)
        numbers = ("STARTER_INITIAL_UPDATE_INTERVAL", "STARTER_UPDATE_INTERVAL")
        kept = {
            k: v
            for k, v in macros.items()
            if k.upper() not in (*numbers, "KONDOR_JOB_HOOK_TIMEOUT")
        }
        return job_hooks(kept, slot_id=slot_id, hook_keyword=wanted)


def resolve_programs(hooks: JobHooks, hooks_dir: Path | None) -> dict[str, str] | str:
    """Each hook's program inside the hooks directory (symlinks resolved), by hook; or why
    one is refused, naming its knob."""
    programs: dict[str, str] = {}
    for hook in STARTER_HOOKS:
        program = hooks.program(hook)
        if program is None:
            continue
        where = f"{hooks.knob(hook)} = {program}"
        try:
            if hooks_dir is None:
                raise RefusedExecutableError(f"{where}: the agent has no hooks directory")
            programs[hook] = str(resolve_hook(program, hooks_dir, where=where))
        except RefusedExecutableError as err:
            return f"Job hook refused: {err}"
    return programs


@dataclass
class PodSide:
    """What the hooks' thread does to and reads of the job's Pod (the launcher's)."""

    #: Create the Pod (the body as edited).
    create: Callable[[dict[str, Any]], None]
    #: The Pod's end as the watch saw it, None while it runs.
    outcome: Callable[[], Outcome | None]
    #: The first container's `terminated` state, when the watch saw one.
    terminated: Callable[[], Mapping[str, Any] | None]
    #: UPDATE_JOB_INFO's attributes now (JobState, JobPid, ...), given when it was created.
    attributes: Callable[[float], dict[str, Any]]
    #: Carry out a kill asked for before the Pod existed (the signal's number).
    kill: Callable[[int], None]


@dataclass
class PodHooksRun:
    """One hooked pod job's life, on its own thread: `start()`, then `outcome` once ended."""

    hooks: JobHooks
    #: Hook -> the program to run (resolved in the hooks directory).
    programs: Mapping[str, str]
    job_ad_text: str
    #: The Pod to create, carrying the job's ads (PREPARE_JOB's edits go into it).
    pod: dict[str, Any]
    side: PodSide
    hooks_dir: str
    environment: Mapping[str, str]
    clock: Callable[[], float]
    #: Told when the run has ended (the loop wakes to report it).
    on_done: Callable[[], None] | None = None
    outcome: Outcome | None = None
    #: Whether the Pod has been created.
    created: bool = False
    #: Why the agent ends the job (note_exit_how), for JOB_EXIT.
    how: str | None = None
    #: The kill's signal number, once the agent has killed the job.
    killed_by: int | None = None
    _failures: list[tuple[str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        name = self.pod["metadata"]["name"]
        threading.Thread(target=self._run, name=f"pod-hooks-{name}", daemon=True).start()

    @property
    def ended(self) -> bool:
        with self._lock:
            return self.outcome is not None

    def killed(self, signal: int) -> bool:
        """The agent kills the job: True when the Pod exists and the launcher acts on it;
        False when it does not yet (it is not created, or killed once created)."""
        with self._lock:
            self.killed_by = signal
            return self.created

    def stop(self) -> None:
        self._stop.set()

    def failures(self) -> list[tuple[str, str]]:
        """The UPDATE_JOB_INFO and JOB_EXIT failures since the last call."""
        with self._lock:
            found, self._failures = self._failures, []
        return found

    # -- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            outcome = self._life()
        except Exception as err:  # the job must end, whatever went wrong here
            log.exception("the hooks of pod %s failed", self.pod["metadata"]["name"])
            outcome = Outcome(
                hold_reason=f"The pod job's hooks failed: {err}",
                hold_reason_code=HOOK_PREPARE_JOB_FAILURE,
                end_time=self.clock(),
            )
        with self._lock:
            self.outcome = outcome
        if self.on_done is not None:
            self.on_done()

    def _life(self) -> Outcome:
        if PREPARE_JOB in self.programs:
            held = self._prepare()
            if held is not None:
                return held
        with self._lock:
            cancelled = self.killed_by is not None
        if cancelled:
            return Outcome(end_time=self.clock())  # killed before it started: never created
        try:
            self.side.create(self.pod)
        except Exception as err:
            return Outcome(
                hold_reason=f"Cannot create the job's pod: {err}",
                hold_reason_code=FAILED_TO_CREATE_PROCESS,
                end_time=self.clock(),
            )
        started = self.clock()
        with self._lock:
            self.created = True
            pending = self.killed_by
        if pending is not None:
            self.side.kill(pending)  # asked while the Pod was being created
        due = started + self.hooks.initial_update_interval
        while (outcome := self.side.outcome()) is None and not self._stop.is_set():
            now = self.clock()
            if UPDATE_JOB_INFO in self.programs and now >= due:
                self._update(started)
                due = max(due + self.hooks.update_interval, self.clock())
                continue
            self._stop.wait(max(0.0, min(due - now, END_CHECK_INTERVAL)))
        if outcome is None:
            return Outcome(lost=True, end_time=self.clock())  # the agent stops: not reported
        if JOB_EXIT in self.programs:
            self._job_exit(outcome, started)
        return outcome

    def _call(self, hook: str, text: str, argument: str | None = None) -> Any:
        argv = [self.programs[hook], *([argument] if argument else [])]
        spec = {"scratch": self.hooks_dir, "environment": dict(self.environment)}
        return run_hook(argv, text, spec, timeout=self.hooks.timeout, name=self.hooks.knob(hook))

    def _prepare(self) -> Outcome | None:
        """Run PREPARE_JOB: None to go on (the ad and the Pod carrying it edited), else the
        outcome that holds the job or returns it to Idle."""
        knob = self.hooks.knob(PREPARE_JOB)
        run = self._call(PREPARE_JOB, _ad_text(self.job_ad_text, {}))
        if run.failure is not None:
            return self._held(run.failure)
        try:
            output = (
                parse_ad(run.stdout, field=f"the output of {knob}") if run.stdout.strip() else None
            )
        except ExpressionError as err:
            return self._held(f"{knob} printed no ClassAd: {err}")
        values = {} if output is None else {key: _value(output, key) for key in output}
        decided = prepare_outcome(run.exit_code, run.exit_signal, values, knob=knob)
        if decided.action == "hold":
            return self._held(decided.message)
        if decided.action == "idle":
            log.info("%s: the job goes back to Idle: %s", knob, decided.message)
            return Outcome(lost=True, end_time=self.clock())
        if output is None:
            return None
        edits = {k: v for k, v in values.items() if k.lower() not in STATUS_ATTRIBUTES}
        try:
            changed = pod_edits(edits, knob=knob)
        except PodEditError as err:
            return self._held(str(err))
        ad = parse_ad(self.job_ad_text, field="the job ad")
        for key in output:
            if key.lower() not in STATUS_ATTRIBUTES:
                ad[key] = output.lookup(key)
        self.job_ad_text = ad.printOld()
        try:
            self.pod = with_job_ad(apply_pod_edits(self.pod, changed), self.job_ad_text)
        except AdsTooLargeError as err:
            reason = f"Cannot create the job's pod: {knob} edited the job ad and {err}"
            log.info("pod %s is held: %s", self.pod["metadata"]["name"], reason)
            return Outcome(
                hold_reason=reason, hold_reason_code=FAILED_TO_CREATE_PROCESS, end_time=self.clock()
            )
        log.info("%s changed the job ad of pod %s", knob, self.pod["metadata"]["name"])
        return None

    def _held(self, reason: str) -> Outcome:
        log.info("pod %s is held: %s", self.pod["metadata"]["name"], reason)
        return Outcome(
            hold_reason=reason, hold_reason_code=HOOK_PREPARE_JOB_FAILURE, end_time=self.clock()
        )

    def _failed(self, reason: str, message: str) -> None:
        log.warning("%s: %s", reason, message)
        with self._lock:
            self._failures.append((reason, message))

    def _update(self, started: float) -> None:
        knob = self.hooks.knob(UPDATE_JOB_INFO)
        run = self._call(UPDATE_JOB_INFO, _ad_text(self.job_ad_text, self.side.attributes(started)))
        if run.failure is not None:
            self._failed(UPDATE_JOB_INFO_FAILED, run.failure)
        elif run.exit_code:
            self._failed(UPDATE_JOB_INFO_FAILED, f"{knob} exited with status {run.exit_code}")
        elif run.exit_signal is not None:
            self._failed(UPDATE_JOB_INFO_FAILED, f"{knob} was killed by signal {run.exit_signal}")

    def _job_exit(self, outcome: Outcome, started: float) -> None:
        knob = self.hooks.knob(JOB_EXIT)
        with self._lock:
            killed_by, said = self.killed_by, self.how
        how: ExitHow = "exit"
        if killed_by is not None:
            how = said if said in ("remove", "hold", "evict") else "evict"  # type: ignore[assignment]
        code, sig = exit_status(outcome, self.side.terminated(), killed_by)
        extra = self.side.attributes(started)
        begun = started
        if outcome.start_time and outcome.end_time and outcome.end_time > outcome.start_time:
            begun = outcome.start_time  # the container's own start (not a simulation's)
        extra.update(
            {
                "JobState": "Exited",
                "ExitReason": exit_reason(how, exit_code=code, exit_signal=sig),
                "ExitBySignal": sig is not None,
                "JobDuration": round(max(0.0, (outcome.end_time or self.clock()) - begun), 3),
            }
        )
        if sig is not None:
            extra["ExitSignal"] = sig
        else:
            extra["ExitCode"] = code or 0
        run = self._call(JOB_EXIT, _ad_text(self.job_ad_text, extra), how)
        if run.failure is not None:
            self._failed(JOB_EXIT_FAILED, run.failure)
        elif run.exit_code:
            self._failed(JOB_EXIT_FAILED, f"{knob} exited with status {run.exit_code}")
        elif run.exit_signal is not None:
            self._failed(JOB_EXIT_FAILED, f"{knob} was killed by signal {run.exit_signal}")


def exit_status(
    outcome: Outcome, terminated: Mapping[str, Any] | None, killed_by: int | None
) -> tuple[int | None, int | None]:
    """(ExitCode, ExitSignal) of a pod job, one of them None: the container's signal when the
    runtime says it; a code above 128 of a container the agent killed is 128 + the signal (the
    shells' and runtimes' convention); a killed Pod with no container state (deleted at
    once) died of the kill's signal; else its exit code."""
    said = (terminated or {}).get("signal")
    if isinstance(said, int) and said > 0:
        return None, said
    code = outcome.exit_code
    if killed_by is not None:
        if terminated and code is not None and code > 128:
            return None, code - 128
        if not terminated:
            return None, killed_by
    return (code or 0), None


def _value(ad: Any, key: str) -> Any:
    try:
        return ad.eval(key)
    except Exception:  # an expression that does not evaluate: not a status code
        return None


def _ad_text(job_ad_text: str, extra: Mapping[str, Any]) -> str:
    lines = [job_ad_text.rstrip("\n")]
    lines += [f"{name} = {literal(value)}" for name, value in extra.items()]
    return "\n".join(lines) + "\n"
