"""When a startd cron job runs and when it is killed, as HTCondor's configuration macros for
Daemon ClassAd Hooks say (STARTD_CRON_<JobName>_MODE, _PERIOD, _KILL, _RECONFIG,
_RECONFIG_RERUN, STARTD_CRON_MAX_JOB_LOAD). Jobs are the reference's example configuration
(`test`, `date`, `foo`) where one fits; times are seconds since the job was configured."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kondor_core.cron import HOLD_RETRY, CronAction, CronJob, CronMode, CronState
from kondor_core.cron.schedule import (
    due,
    due_once,
    exited,
    fits,
    hangs_up,
    held,
    kill_sent,
    next_wakeup,
    next_wakeup_once,
    overran,
    reconfigured,
    started,
    terminated,
)

GRACE = 2.0
WAIT, START, TERMINATE, KILL, OVERRUN = (
    CronAction.WAIT,
    CronAction.START,
    CronAction.TERMINATE,
    CronAction.KILL,
    CronAction.OVERRUN,
)

# STARTD_CRON_DATE_MODE = Periodic, _PERIOD = 15s
DATE = CronJob(name="date", executable="date", mode=CronMode.PERIODIC, period=15)
DATE_KILL = replace(DATE, kill=True)
# STARTD_CRON_FOO_MODE = Periodic, _PERIOD = 10m, _JOB_LOAD = 0.2
FOO = CronJob(name="foo", executable="foo", period=600, job_load=0.2)
# STARTD_CRON_TEST_MODE = OneShot, _RECONFIG_RERUN = True, _KILL = True
TEST = CronJob(
    name="test", executable="test", mode=CronMode.ONE_SHOT, reconfig_rerun=True, kill=True
)
ONCE = replace(TEST, reconfig_rerun=False)
STREAM = CronJob(name="temp", executable="temp", mode=CronMode.WAIT_FOR_EXIT, period=60)

NEW = CronState(configured=0.0)


def ran(start: float, end: float) -> CronState:
    """Configured at 0, one run from `start` to `end`."""
    return exited(started(NEW, start), end)


def running(start: float) -> CronState:
    return started(NEW, start)


# (why, job, state, now, action, next_wakeup)
TABLE = [
    # A job starts when it is configured (HTCondor: when the daemon starts).
    ("every mode starts at once: Periodic", DATE, NEW, 0.0, START, 0.0),
    ("every mode starts at once: WaitForExit", STREAM, NEW, 0.0, START, 0.0),
    ("every mode starts at once: OneShot", TEST, NEW, 0.0, START, 0.0),
    # PERIOD, Periodic: "the time interval that passes between starting the execution".
    ("Periodic: the next start is a period after the last start", DATE, ran(0, 2), 14.9, WAIT, 15),
    ("Periodic: due a period after the last start", DATE, ran(0, 2), 15.0, START, 15),
    ("Periodic: late steps still start it", DATE, ran(0, 2), 17.0, START, 15),
    ("Periodic: nothing to do while it runs within its period", DATE, running(0), 10, WAIT, 15),
    # KILL = True: still running when it is due again: killed, a new instance started.
    ("KILL: still running at its period: SIGTERM", DATE_KILL, running(0), 15, TERMINATE, 15),
    (
        "KILL: SIGKILL when `grace` passes after SIGTERM",
        DATE_KILL,
        terminated(running(0), 15),
        15 + GRACE,
        KILL,
        15 + GRACE,
    ),
    (
        "KILL: no more signals after SIGKILL",
        DATE_KILL,
        kill_sent(terminated(running(0), 15)),
        30,
        WAIT,
        None,
    ),
    (
        "KILL: the new instance starts as soon as the killed one exits",
        DATE_KILL,
        exited(terminated(running(0), 15), 16),
        16,
        START,
        16,
    ),
    # KILL = False: the running one finishes first; the next start is the next boundary.
    ("no KILL: still running at its period: runs on", DATE, running(0), 15, OVERRUN, 15),
    ("no KILL: said once", DATE, overran(running(0)), 29, WAIT, None),
    (
        "no KILL: the next start is the period boundary after it exits",
        DATE,
        ran(0, 20),
        29,
        WAIT,
        30,
    ),
    ("no KILL: boundaries passed while it ran are skipped", DATE, ran(0, 47), 47, WAIT, 60),
    # PERIOD, WaitForExit: "the time after the job exits before it is restarted".
    ("WaitForExit: restarted a period after it exits", STREAM, ran(0, 10), 69, WAIT, 70),
    ("WaitForExit: due a period after it exits", STREAM, ran(0, 10), 70, START, 70),
    ("WaitForExit: never killed, however long it runs", STREAM, running(0), 1e6, WAIT, None),
    # OneShot: once at start; RECONFIG_RERUN: again after a reconfiguration.
    ("OneShot: not again", ONCE, ran(0, 1), 1e6, WAIT, None),
    ("OneShot: KILL does nothing, there is no next run", TEST, running(0), 1e6, WAIT, None),
    ("OneShot: RECONFIG_RERUN runs it again", TEST, reconfigured(TEST, ran(0, 1)), 5, START, 1),
    (
        "OneShot: without RECONFIG_RERUN no rerun",
        ONCE,
        reconfigured(ONCE, ran(0, 1)),
        5,
        WAIT,
        None,
    ),
    (
        "OneShot: a reconfiguration during a run runs it once more after it exits",
        TEST,
        exited(reconfigured(TEST, running(0)), 3),
        3,
        START,
        3,
    ),
    (
        "OneShot: the rerun is used up by the run it caused",
        TEST,
        exited(started(reconfigured(TEST, ran(0, 1)), 5), 6),
        100,
        WAIT,
        None,
    ),
    # A start held back (CONDITION, MAX_JOB_LOAD) is tried again a second later.
    ("held: not before the retry", DATE, held(NEW, 0), 0.5, WAIT, HOLD_RETRY),
    ("held: tried again", DATE, held(NEW, 0), HOLD_RETRY, START, HOLD_RETRY),
    ("held OneShot: tried again too", ONCE, held(NEW, 3), 4, START, 3 + HOLD_RETRY),
]


@pytest.mark.parametrize(
    ("job", "state", "now", "action", "wakeup"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_schedule_table(
    job: CronJob, state: CronState, now: float, action: CronAction, wakeup: float | None
) -> None:
    assert due(job, state, now, grace=GRACE) is action
    assert next_wakeup(job, state, grace=GRACE) == wakeup


def test_a_killed_periodic_job_end_to_end() -> None:
    """STARTD_CRON_DATE with KILL: hangs at 0, SIGTERM at 15, SIGKILL at 17, restarted at 17."""
    state = running(0)
    assert due(DATE_KILL, state, 15, grace=GRACE) is TERMINATE
    state = terminated(state, 15)
    assert due(DATE_KILL, state, 16, grace=GRACE) is WAIT
    assert due(DATE_KILL, state, 17, grace=GRACE) is KILL
    state = exited(kill_sent(state), 17)
    assert state.killed
    assert due(DATE_KILL, state, 17, grace=GRACE) is START
    state = started(state, 17)
    assert not state.killed and state.terminated is None
    assert next_wakeup(DATE_KILL, state, grace=GRACE) == 32


@pytest.mark.parametrize(
    ("running_load", "job", "maximum", "fits_"),
    [
        # STARTD_CRON_MAX_JOB_LOAD = 0.2 with `date` (0.01) and `foo` (0.2) of the example.
        (0.0, FOO, 0.2, True),
        (0.01, FOO, 0.2, False),
        (0.2, DATE, 0.2, False),
        # One job alone always starts, even above the maximum.
        (0.0, FOO, 0.1, True),
        # Sums of fractions are compared with slack: 0.1 + 0.2 is 0.3.
        (0.1, FOO, 0.3, True),
        (0.1, replace(FOO, job_load=0.1), 0.2, True),
    ],
)
def test_max_job_load(running_load: float, job: CronJob, maximum: float, fits_: bool) -> None:
    assert fits(running_load, job, maximum) is fits_


@pytest.mark.parametrize(
    ("reconfig", "state", "hup"),
    [(True, running(0), True), (True, ran(0, 1), False), (False, running(0), False)],
)
def test_reconfig_sends_sighup_to_a_running_job(
    reconfig: bool, state: CronState, hup: bool
) -> None:
    assert hangs_up(replace(DATE, reconfig=reconfig), state) is hup


def test_one_run_with_a_deadline_is_killed_whatever_its_mode() -> None:
    """`kondor-agent --oneshot`: each job once, killed when still running at the deadline."""
    state = running(0)
    assert due_once(state, 0.9, deadline=1.0, grace=GRACE) is WAIT
    assert next_wakeup_once(state, deadline=1.0, grace=GRACE) == 1.0
    assert due_once(state, 1.0, deadline=1.0, grace=GRACE) is TERMINATE
    state = terminated(state, 1.0)
    assert due_once(state, 1.0 + GRACE, deadline=1.0, grace=GRACE) is KILL
    assert next_wakeup_once(kill_sent(state), deadline=1.0, grace=GRACE) is None
    assert due_once(ran(0, 0.5), 5, deadline=1.0, grace=GRACE) is WAIT


_jobs = st.builds(
    CronJob,
    name=st.just("j"),
    executable=st.just("j"),
    mode=st.sampled_from(list(CronMode)),
    period=st.integers(1, 600),
    kill=st.booleans(),
    reconfig_rerun=st.booleans(),
)
_times = st.floats(0, 1000, allow_nan=False)


@st.composite
def _states(draw: st.DrawFn) -> CronState:
    state = CronState(configured=draw(_times))
    if draw(st.booleans()):
        start = state.configured + draw(_times)
        state = started(state, start)
        if draw(st.booleans()):
            state = terminated(state, start + draw(_times))
            if draw(st.booleans()):
                state = kill_sent(state)
        elif draw(st.booleans()):
            state = overran(state)
        if draw(st.booleans()):
            state = exited(state, start + draw(_times))
    if draw(st.booleans()):
        state = replace(state, rerun=True)
    if not state.running and draw(st.booleans()):
        state = held(state, state.configured + draw(_times))
    return state


@given(job=_jobs, state=_states(), before=st.floats(1e-6, 2000))
def test_nothing_is_due_before_the_next_wakeup(
    job: CronJob, state: CronState, before: float
) -> None:
    """The runner may sleep until `next_wakeup`: nothing is due before it, and something is
    at it; with no wakeup nothing is ever due (until an exit or a reconfiguration)."""
    wakeup = next_wakeup(job, state, grace=GRACE)
    if wakeup is None:
        assert due(job, state, 1e9, grace=GRACE) is WAIT
        return
    assert due(job, state, wakeup - before, grace=GRACE) is WAIT
    assert due(job, state, wakeup, grace=GRACE) is not WAIT
