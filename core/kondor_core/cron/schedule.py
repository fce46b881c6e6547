"""When a startd cron job starts and when a running one is signalled: pure functions of
(job, state, now).

HTCondor's configuration macros for Daemon ClassAd Hooks (STARTD_CRON_<JobName>_MODE,
_PERIOD, _KILL, _RECONFIG, _RECONFIG_RERUN and STARTD_CRON_MAX_JOB_LOAD, the manual's
"Configuration File Entries Relating to Daemon ClassAd Hooks") are the specification:

- Periodic (the default): PERIOD is the time between starts. A job still running when its
  next start is due is killed and a new instance started at once when KILL is true;
  when KILL is false it is left to finish and the next instance starts at the first period
  boundary after it exits.
- WaitForExit: PERIOD is the time from an exit to the next start; KILL does not apply (it
  applies to every mode but WaitForExit, and a OneShot run has no next start to be late for).
- OneShot: runs once when the job is configured (HTCondor: when the daemon starts) and, with
  RECONFIG_RERUN, again after each reconfiguration (here: a new policy generation); a
  reconfiguration during a run asks for one more run after it exits.
- OnDemand belongs to the benchmark mechanism ("any other jobs specified as OnDemand will
  never run"); Kondor refuses it when compiling (`kondor_core.cron.jobs.parse_mode`), so no
  job here has it.
- RECONFIG: a running job gets SIGHUP when the daemon is reconfigured.
- STARTD_CRON_MAX_JOB_LOAD: a job is not started while the sum of the JOB_LOAD of the jobs
  running plus its own would exceed it (one job alone always may start).

A kill is SIGTERM to the job's process group, then SIGKILL `grace` seconds later if it still
runs. A start held back (its CONDITION is not TRUE, or MAX_JOB_LOAD is reached) is tried
again `HOLD_RETRY` seconds later.

The runner (`kondor_agent.cron`) keeps one `CronState` per job, asks `due` what to do at
`now`, records what it did with the transition functions here (`started`, `held`,
`terminated`, ...), and sleeps until the earliest `next_wakeup` or until a process exits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum

from kondor_core.cron.jobs import CronJob, CronMode

#: Seconds before a start held back by CONDITION or STARTD_CRON_MAX_JOB_LOAD is tried again.
HOLD_RETRY = 1.0
#: Loads are sums of decimal fractions (0.1 + 0.2 ...): compare with this much slack.
_LOAD_SLACK = 1e-9


class CronAction(StrEnum):
    """What the runner does about one job at `now`."""

    #: Nothing until `next_wakeup` (or an exit, or a reconfiguration).
    WAIT = "Wait"
    START = "Start"
    #: SIGTERM to its process group: a Periodic job with KILL still running at its period.
    TERMINATE = "Terminate"
    #: SIGKILL to its process group: still running `grace` seconds after SIGTERM.
    KILL = "Kill"
    #: A Periodic job without KILL still running at its period: it runs on (said once a run).
    OVERRUN = "Overrun"


@dataclass(frozen=True)
class CronState:
    """What the schedule needs to know about one job: the runner replaces it on every
    transition and never edits it."""

    #: When the runner was given the job: its first start is due then.
    configured: float
    running: bool = False
    #: The start of the current run, or of the last one.
    started: float | None = None
    #: The end of the last run (None until one has ended).
    exited: float | None = None
    #: The last run ended because it was killed (a Periodic job then starts again at once).
    killed: bool = False
    #: When the current run was sent SIGTERM.
    terminated: float | None = None
    #: SIGKILL was sent to the current run.
    kill_sent: bool = False
    #: The current run passed its period without KILL (and that was said).
    overran: bool = False
    #: When a start was last held back (None once a run starts).
    held: float | None = None
    #: A reconfiguration asked a OneShot job with RECONFIG_RERUN to run again.
    rerun: bool = False


# -- transitions: what the runner did ---------------------------------------------------------


def started(state: CronState, now: float) -> CronState:
    return replace(
        state,
        running=True,
        started=now,
        killed=False,
        terminated=None,
        kill_sent=False,
        overran=False,
        held=None,
        rerun=False,
    )


def exited(state: CronState, now: float) -> CronState:
    """The run ended (or could not start at all); it was killed if it had been signalled."""
    return replace(state, running=False, exited=now, killed=state.terminated is not None)


def held(state: CronState, now: float) -> CronState:
    return replace(state, held=now)


def terminated(state: CronState, now: float) -> CronState:
    return state if state.terminated is not None else replace(state, terminated=now)


def kill_sent(state: CronState) -> CronState:
    return replace(state, kill_sent=True)


def overran(state: CronState) -> CronState:
    return replace(state, overran=True)


def reconfigured(job: CronJob, state: CronState) -> CronState:
    """The daemon was reconfigured (a new policy generation) and `job` is unchanged."""
    if job.mode is CronMode.ONE_SHOT and job.reconfig_rerun:
        return replace(state, rerun=True)
    return state


def hangs_up(job: CronJob, state: CronState) -> bool:
    """Whether a reconfiguration sends SIGHUP to the job (STARTD_CRON_<name>_RECONFIG)."""
    return job.reconfig and state.running


# -- decisions --------------------------------------------------------------------------------


def next_start(job: CronJob, state: CronState) -> float | None:
    """When a job that is not running starts next; None: not until a reconfiguration."""
    if state.held is not None:
        return state.held + HOLD_RETRY
    if state.started is None:
        return state.configured
    if state.running or state.exited is None:
        return None
    if job.mode is CronMode.PERIODIC:
        if state.killed:
            return state.exited  # killed at its period: the new instance starts at once
        period = _period(job)
        # The next period boundary; boundaries passed while it overran are skipped.
        return state.started + period * max(1, math.ceil((state.exited - state.started) / period))
    if job.mode is CronMode.WAIT_FOR_EXIT:
        return state.exited + _period(job)
    return state.exited if state.rerun else None


def due(job: CronJob, state: CronState, now: float, *, grace: float) -> CronAction:
    """What to do about `job` at `now`."""
    if not state.running:
        at = next_start(job, state)
        return CronAction.START if at is not None and now >= at else CronAction.WAIT
    escalation = _escalation(state, now, grace=grace)
    if escalation is not None:
        return escalation
    assert state.started is not None
    if job.mode is CronMode.PERIODIC and now >= state.started + _period(job):
        if job.kill:
            return CronAction.TERMINATE
        if not state.overran:
            return CronAction.OVERRUN
    return CronAction.WAIT


def due_once(state: CronState, now: float, *, deadline: float, grace: float) -> CronAction:
    """One run with a deadline (`kondor-agent --oneshot`): a run still going at `deadline`
    is killed, whatever its mode."""
    if not state.running:
        return CronAction.WAIT
    escalation = _escalation(state, now, grace=grace)
    if escalation is not None:
        return escalation
    return CronAction.TERMINATE if now >= deadline else CronAction.WAIT


def next_wakeup_once(state: CronState, *, deadline: float, grace: float) -> float | None:
    """`next_wakeup` for `due_once`."""
    if not state.running:
        return None
    if state.terminated is not None:
        return None if state.kill_sent else state.terminated + grace
    return deadline


def next_wakeup(job: CronJob, state: CronState, *, grace: float) -> float | None:
    """The earliest time `due` answers other than WAIT if nothing happens meanwhile (no exit,
    no reconfiguration); None: only something happening can change it."""
    if not state.running:
        return next_start(job, state)
    if state.terminated is not None:
        return None if state.kill_sent else state.terminated + grace
    assert state.started is not None
    if job.mode is CronMode.PERIODIC and (job.kill or not state.overran):
        return state.started + _period(job)
    return None


def fits(running_load: float, job: CronJob, max_job_load: float) -> bool:
    """Whether `job` may start beside jobs whose JOB_LOAD sums to `running_load`
    (STARTD_CRON_MAX_JOB_LOAD)."""
    return running_load <= 0 or running_load + job.job_load <= max_job_load + _LOAD_SLACK


def _period(job: CronJob) -> float:
    """PERIOD in seconds; the manual's minimum of 1 second (compiled jobs have it already)."""
    return float(max(job.period, 1))


def _escalation(state: CronState, now: float, *, grace: float) -> CronAction | None:
    """For a run already sent SIGTERM: KILL once `grace` has passed, else WAIT."""
    if state.terminated is None:
        return None
    if not state.kill_sent and now >= state.terminated + grace:
        return CronAction.KILL
    return CronAction.WAIT
