"""`run_timeline`: a day of a desktop replayed on paper, as `kondor simulate --timeline` will."""

from __future__ import annotations

import json

from policy_helpers import DESKTOP, job, policy_from

from kondor_core.policy import (
    ActivateClaim,
    Drain,
    DrainMode,
    JobExited,
    MachineState,
    Match,
)
from kondor_core.sim import SimulatedAgent, Timeline, TimelineStep, run_timeline

IDLE = {"LoadAvg": 0.05, "CondorLoadAvg": 0.0, "KeyboardIdle": 0, "ConsoleIdle": 0}


def desktop_day(agent: SimulatedAgent | None = None) -> Timeline:
    policy = policy_from("WANT_VACATE = True", use=DESKTOP)
    machine = MachineState.start(["slot1@desk"])
    steps = [
        TimelineStep(at=0, facts=IDLE),
        # KeyboardIdle grows from 0: StartIdleTime (15 min) passes at 900 s.
        TimelineStep(
            at=1000,
            slot_events={"slot1@desk": [Match("c1", job(), job_id="sleep"), ActivateClaim()]},
        ),
        # The owner comes back and keeps typing for ten minutes.
        *(TimelineStep(at=at, facts={"KeyboardIdle": 0}) for at in (1102, 1300, 1500, 1700)),
    ]
    return run_timeline(policy, machine, steps, until=2400, agent=agent)


def test_desktop_day_transitions_happen_at_polling_ticks_with_reasons() -> None:
    timeline = desktop_day()
    rows = [(t.time, f"{t.state}/{t.activity}", t.reason) for t in timeline.transitions]
    # Owner until the keyboard has been idle 15 minutes (IS_OWNER = START =?= FALSE).
    assert rows[0][0] == 905 and rows[0][1] == "Unclaimed/Idle"
    assert rows[1][:2] == (1000, "Claimed/Idle")
    assert rows[2][:2] == (1000, "Claimed/Busy")
    # The keystroke at 1102 is seen at the first tick at or after it.
    assert rows[3] == (1105, "Claimed/Suspended", "SUSPEND")
    # Suspended longer than MaxSuspendTime (10 minutes): PREEMPT, then vacate.
    assert rows[4][:2] == (1710, "Claimed/Retiring")
    assert rows[5][:2] == (1710, "Preempting/Vacating")
    # The soft-killed job exits at the next tick; the owner is still there.
    assert rows[6][:2] == (1715, "Owner/Idle")
    assert len(rows) == 7


def test_timeline_json_has_transitions_and_actions() -> None:
    out = desktop_day().as_dict()
    json.dumps(out)  # plain data
    first = out["transitions"][0]
    assert first == {
        "time": 905,
        "slot": "slot1@desk",
        "state": "Unclaimed",
        "activity": "Idle",
        "from": "Owner/Idle",
        "reason": "IS_OWNER is FALSE",
        "transition": 1,
    }
    suspended = next(t for t in out["transitions"] if t["activity"] == "Suspended")
    assert suspended["job"] == "sleep" and suspended["transition"] == 14
    kinds = [a["kind"] for a in out["actions"]]
    assert kinds == [
        "start-job",
        "suspend-job",
        "continue-job",
        "soft-kill",
        "release-claim",
    ]
    assert out["actions"][3]["signal"] == "SIGTERM"


def test_a_job_that_ignores_its_soft_kill_is_hard_killed() -> None:
    timeline = desktop_day(SimulatedAgent(ignores_soft_kill=frozenset({"sleep"})))
    rows = [(t.time, f"{t.state}/{t.activity}") for t in timeline.transitions]
    # MachineMaxVacateTime (10 minutes) after the soft kill at 1710: Killing.
    assert (2310, "Preempting/Killing") in rows
    assert rows[-1] == (2315, "Owner/Idle")


def test_job_exit_releases_the_claim_and_the_slot_is_matched_again() -> None:
    policy = policy_from()
    machine = MachineState.start(["slot1@n"])
    steps = [
        TimelineStep(at=0, facts=IDLE),
        TimelineStep(
            at=10, slot_events={"slot1@n": [Match("c1", job(), job_id="a"), ActivateClaim()]}
        ),
        TimelineStep(at=60, slot_events={"slot1@n": [JobExited(0)]}),
    ]
    timeline = run_timeline(policy, machine, steps, until=100)
    states = [f"{t.state}/{t.activity}" for t in timeline.transitions]
    assert states == [
        "Unclaimed/Idle",
        "Claimed/Idle",
        "Claimed/Busy",
        "Claimed/Idle",
        "Preempting/Vacating",
        "Owner/Idle",
        "Unclaimed/Idle",
    ]
    assert timeline.machine.slots[0].claim is None


def test_keep_alives_renew_leases_unless_the_schedd_is_gone() -> None:
    policy = policy_from()
    steps = [
        TimelineStep(at=0, facts=IDLE),
        TimelineStep(
            at=10,
            slot_events={
                "slot1@n": [Match("c1", job(JobLeaseDuration=600), job_id="a"), ActivateClaim()]
            },
        ),
    ]
    alive = run_timeline(policy, MachineState.start(["slot1@n"]), steps, until=3600)
    assert alive.machine.slots[0].activity.value == "Busy"
    gone = run_timeline(
        policy,
        MachineState.start(["slot1@n"]),
        steps,
        until=3600,
        agent=SimulatedAgent(alive_interval=None),
    )
    lease = [t for t in gone.transitions if t.reason == "claim lease expired"]
    assert lease and lease[0].time == 615


def test_drain_in_a_timeline() -> None:
    policy = policy_from("MaxJobRetirementTime = 300\nMachineMaxVacateTime = 60")
    machine = MachineState.start(["slot1@n", "slot2@n"])
    steps = [
        TimelineStep(at=0, facts=IDLE),
        TimelineStep(
            at=10, slot_events={"slot1@n": [Match("c1", job(), job_id="a"), ActivateClaim()]}
        ),
        TimelineStep(at=100, events=[Drain(DrainMode.GRACEFUL, resume_on_completion=True)]),
    ]
    timeline = run_timeline(policy, machine, steps, until=400)
    final = [f"{s.state}/{s.activity}" for s in timeline.machine.slots]
    assert final == ["Unclaimed/Idle", "Unclaimed/Idle"]
    numbers = [t.number for t in timeline.transitions if t.time >= 100]
    assert numbers == [13, 37, 18, 22, 36, 33, 33, 34, 1, 34, 1]
