"""`kondor simulate --timeline`: every scenario in examples/scenarios, run as a user runs it,
shows the transitions the reference's "Examples of Policy Configuration" (and the
sections named in each test) say happen."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kondor_cli.main import main

ROOT = Path(__file__).resolve().parents[3]
SCENARIOS = ROOT / "examples" / "scenarios"

Row = tuple[float, str, str, str | None, str]


def timeline(capsys: pytest.CaptureFixture[str], name: str) -> dict[str, Any]:
    assert main(["simulate", "--timeline", str(SCENARIOS / name), "--output", "json"]) == 0
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


def rows(document: dict[str, Any]) -> list[Row]:
    """(time, slot without the machine, State/Activity, job, reason) per transition."""
    return [
        (
            t["time"],
            t["slot"].split("@")[0],
            f"{t['state']}/{t['activity']}",
            t["job"],
            t["reason"],
        )
        for t in document["transitions"]
    ]


def path(document: dict[str, Any], slot: str) -> list[tuple[float, str]]:
    return [(time, where) for time, name, where, _, _ in rows(document) if name == slot]


def kinds(document: dict[str, Any]) -> list[tuple[float, str, str | None]]:
    return [(a["time"], a["kind"], a.get("job_id")) for a in document["actions"]]


def test_every_scenario_file_runs_and_has_the_contract_fields(
    capsys: pytest.CaptureFixture[str],
) -> None:
    names = sorted(p.name for p in SCENARIOS.glob("*.yaml"))
    assert len(names) >= 15
    for name in names:
        document = timeline(capsys, name)
        assert document["transitions"], name
        for transition in document["transitions"]:
            assert {"time", "slot", "state", "activity", "job", "reason"} <= set(transition)


def test_default_policy_always_runs_the_job_until_it_exits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # "Default Policy": START TRUE, never SUSPEND or PREEMPT, whatever the owner does.
    document = timeline(capsys, "default-policy.yaml")
    assert path(document, "slot1_1") == [
        (10, "Claimed/Idle"),
        (10, "Claimed/Busy"),
        (600, "Claimed/Idle"),
        (600, "Preempting/Vacating"),
        (600, "Owner/Idle"),
    ]
    assert (10, "carve-dynamic-slot", "sleep") in kinds(document)
    assert (600, "release-dynamic-slot", None) in kinds(document)


def test_desktop_day_suspends_then_vacates_after_max_suspend_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = timeline(capsys, "desktop-day.yaml")
    assert path(document, "slot1") == [(905, "Unclaimed/Idle"), (1105, "Owner/Idle")]
    assert path(document, "slot1_1") == [
        (1000, "Claimed/Idle"),
        (1000, "Claimed/Busy"),
        (1105, "Claimed/Suspended"),
        (1710, "Claimed/Retiring"),
        (1710, "Preempting/Vacating"),
        (1715, "Owner/Idle"),
    ]
    suspended = next(t for t in document["transitions"] if t["activity"] == "Suspended")
    assert suspended == {
        "time": 1105,
        "slot": "slot1_1@desk",
        "state": "Claimed",
        "activity": "Suspended",
        "job": "sleep",
        "reason": "SUSPEND",
        "from": "Claimed/Busy",
        "transition": 14,
    }


@pytest.mark.parametrize(
    ("name", "suspended_at"),
    [
        # The desktop suspends on the keystroke (IsDesktop && KeyboardBusy).
        ("desktop-non-desktop-desk.yaml", 200),
        # The server ignores the keyboard: CpuBusyTime passes 2 minutes after LoadAvg at 300.
        ("desktop-non-desktop-server.yaml", 425),
    ],
)
def test_desktop_and_non_desktop_differ_only_in_isdesktop(
    capsys: pytest.CaptureFixture[str], name: str, suspended_at: int
) -> None:
    document = timeline(capsys, name)
    assert path(document, "slot1_1") == [
        (10, "Claimed/Idle"),
        (10, "Claimed/Busy"),
        (suspended_at, "Claimed/Suspended"),
    ]


def test_test_job_policy_runs_coltranes_job_while_the_owner_types(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # "Test-job Policy Example": START is FALSE || UNDEFINED locally, so not Owner.
    document = timeline(capsys, "test-job.yaml")
    assert path(document, "slot1") == [(0, "Unclaimed/Idle")]
    assert path(document, "slot1_1") == [(20, "Claimed/Idle"), (20, "Claimed/Busy")]
    assert {job for _, _, _, job, _ in rows(document)} == {None, "coltrane"}


def test_owner_unclaimed_start_with_undefined(capsys: pytest.CaptureFixture[str]) -> None:
    # "The START expression": FALSE || UNDEFINED is UNDEFINED, and IS_OWNER (START =?= FALSE)
    # is FALSE, so the slot is Unclaimed while the owner types; Desktop's SUSPEND applies.
    document = timeline(capsys, "owner-undefined.yaml")
    assert path(document, "slot1") == [(0, "Unclaimed/Idle")]
    assert path(document, "slot1_1") == [
        (20, "Claimed/Idle"),
        (20, "Claimed/Busy"),
        (20, "Claimed/Suspended"),
        (505, "Claimed/Busy"),  # KeyboardIdle > ContinueIdleTime (5 minutes) after 200
    ]
    assert "jones" not in {job for _, _, _, job, _ in rows(document)}


def test_time_of_day_vacates_when_work_hours_begin(capsys: pytest.CaptureFixture[str]) -> None:
    document = timeline(capsys, "time-of-day.yaml")
    assert path(document, "slot1_1") == [
        (60, "Claimed/Idle"),
        (60, "Claimed/Busy"),
        (28800, "Claimed/Retiring"),  # 08:00 on a Thursday: WorkHours, PREEMPT
        (28800, "Preempting/Vacating"),  # WANT_VACATE = True
        (28860, "Owner/Idle"),
    ]
    # START is $(AfterHours): the vacated job is not matched again.
    assert not [t for t in rows(document) if t[0] > 28860 and t[2] == "Claimed/Busy"]


def test_suspendable_slot_pair(capsys: pytest.CaptureFixture[str]) -> None:
    document = timeline(capsys, "suspendable-pair.yaml")
    assert path(document, "slot2") == [
        (0, "Unclaimed/Idle"),
        (10, "Claimed/Idle"),
        (10, "Claimed/Busy"),
        (100, "Claimed/Suspended"),  # slot1_State is "Claimed"
        (400, "Claimed/Busy"),  # slot1's job exited: CONTINUE
    ]
    assert path(document, "slot1")[1:3] == [(100, "Claimed/Idle"), (100, "Claimed/Busy")]


@pytest.mark.parametrize(
    ("name", "preemptions"),
    [
        ("rank-preemption.yaml", [("jones", "garrison", 300)]),
        (
            "rank-preemption-bass.yaml",
            [("elvis-job", "jones-job", 100), ("jones-job", "garrison-job", 300)],
        ),
    ],
)
def test_rank_preemption_jones_then_garrison(
    capsys: pytest.CaptureFixture[str], name: str, preemptions: list[tuple[str, str, int]]
) -> None:
    # "The RANK Expression": a job the machine RANKs higher preempts the running one.
    document = timeline(capsys, name)
    transitions = document["transitions"]
    for running, preempting, at in preemptions:
        retiring = [t for t in transitions if t["activity"] == "Retiring" and t["job"] == running]
        assert retiring[0]["time"] == at and retiring[0]["transition"] == 13
        assert preempting in retiring[0]["reason"]
        takeover = next(
            t for t in transitions if t.get("transition") == 23 and t["job"] == preempting
        )
        assert takeover["time"] == at + 5
        busy = next(t for t in transitions if t["job"] == preempting and t["activity"] == "Busy")
        assert busy["time"] == at + 10


def test_retirement_lets_the_job_finish(capsys: pytest.CaptureFixture[str]) -> None:
    # "Claimed/Retiring": PREEMPT at 100, but the job finishes by itself at 400, within its
    # MaxJobRetirementTime: no soft kill is ever sent.
    document = timeline(capsys, "retirement.yaml")
    assert path(document, "slot1_1") == [
        (10, "Claimed/Idle"),
        (10, "Claimed/Busy"),
        (100, "Claimed/Retiring"),
        (400, "Preempting/Vacating"),
        (400, "Owner/Idle"),
    ]
    assert "soft-kill" not in {kind for _, kind, _ in kinds(document)}


def test_disabled_preemption_waits_for_the_running_job(
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = timeline(capsys, "no-preemption.yaml")
    assert path(document, "slot1_1") == [
        (10, "Claimed/Idle"),
        (10, "Claimed/Busy"),
        (200, "Claimed/Retiring"),  # garrison's match; retirement is practically infinite
        (900, "Preempting/Vacating"),  # jones's job exits by itself
        (900, "Claimed/Idle"),
        (905, "Claimed/Busy"),
    ]
    assert [job for _, kind, job in kinds(document) if kind == "start-job"] == [
        "jones",
        "garrison",
    ]
    assert "soft-kill" not in {kind for _, kind, _ in kinds(document)}


def test_backfill_runs_until_the_owner_returns(capsys: pytest.CaptureFixture[str]) -> None:
    document = timeline(capsys, "backfill.yaml")
    numbered = [
        (t["time"], t["state"], t["activity"], t.get("transition")) for t in document["transitions"]
    ]
    assert [t for t, kind, _ in kinds(document) if kind == "start-backfill"] == [305]
    assert numbered == [
        (0, "Unclaimed", "Idle", 1),
        (305, "Backfill", "Idle", 7),
        (310, "Backfill", "Busy", 26),
        (900, "Backfill", "Killing", 28),
        (905, "Backfill", "Idle", 29),
        (905, "Owner", "Idle", 30),
        (905, "Unclaimed", "Idle", 1),
    ]


def test_backfill_gives_way_to_a_matched_job(capsys: pytest.CaptureFixture[str]) -> None:
    document = timeline(capsys, "backfill-job.yaml")
    numbered = [
        (t["time"], f"{t['state']}/{t['activity']}", t.get("transition"))
        for t in document["transitions"]
    ]
    assert numbered[3:7] == [
        (600, "Backfill/Killing", 28),
        (605, "Backfill/Idle", 29),
        (605, "Claimed/Idle", 31),
        (610, "Claimed/Busy", 11),
    ]
    # The client is started only when the slot backfills, never on its way to the claim.
    assert [t for t, kind, _ in kinds(document) if kind == "start-backfill"] == [305, 1205]


def test_drain_graceful_retires_then_drains(capsys: pytest.CaptureFixture[str]) -> None:
    document = timeline(capsys, "drain-graceful.yaml")
    assert path(document, "slot2")[1:] == [
        (100, "Drained/Retiring"),
        (495, "Drained/Idle"),
        (1100, "Owner/Idle"),
        (1100, "Unclaimed/Idle"),
    ]
    # Retirement 10 minutes from 10, vacated MachineMaxVacateTime (2 minutes) before it ends.
    assert path(document, "slot1")[3:7] == [
        (100, "Claimed/Retiring"),
        (490, "Preempting/Vacating"),
        (495, "Owner/Idle"),
        (495, "Drained/Retiring"),
    ]


def test_drain_quick_vacates_at_once_and_kills_a_stubborn_job(
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = timeline(capsys, "drain-quick.yaml")
    assert path(document, "slot1")[3:6] == [
        (100, "Preempting/Vacating"),
        (105, "Owner/Idle"),
        (105, "Drained/Retiring"),
    ]
    # stubborn ignores its soft kill: MachineMaxVacateTime (2 minutes) later, Killing.
    assert path(document, "slot2")[3:7] == [
        (100, "Preempting/Vacating"),
        (220, "Preempting/Killing"),
        (225, "Owner/Idle"),
        (225, "Drained/Retiring"),
    ]
    assert (225, "slot1", "Drained/Idle") in [(t, s, w) for t, s, w, _, _ in rows(document)]
    # Cancelled at 400: both jobs, back in the queue, are matched again.
    assert [(t, j) for t, k, j in kinds(document) if k == "start-job"][-2:] == [
        (405, "sleep"),
        (405, "stubborn"),
    ]


def test_drain_fast_hard_kills_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    document = timeline(capsys, "drain-fast.yaml")
    for slot in ("slot1", "slot2"):
        assert path(document, slot)[3:6] == [
            (100, "Preempting/Killing"),
            (105, "Owner/Idle"),
            (105, "Drained/Retiring"),
        ]
    killed = [a for a in document["actions"] if a["time"] == 100]
    assert {a["kind"] for a in killed} == {"hard-kill"}


def test_table_output_is_readable(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--timeline", str(SCENARIOS / "desktop-day.yaml")]) == 0
    out = capsys.readouterr().out
    header, *lines = out.splitlines()
    assert header.split() == ["Time", "Slot", "From", "To", "Job", "Reason"]
    assert any(
        line.split()[:5] == ["1105", "slot1_1@desk", "Claimed/Busy", "Claimed/Suspended", "sleep"]
        for line in lines
    )
    assert "soft-kill" in out
