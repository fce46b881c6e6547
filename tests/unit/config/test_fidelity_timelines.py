"""Issue "Config fidelity": policies that build on HTCondor's built-in defaults behave in
`kondor simulate --timeline` as HTCondor's engine says they are configured."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kondor_cli.main import main

SCENARIOS = Path(__file__).resolve().parents[3] / "examples" / "scenarios"


def _transitions(capsys: pytest.CaptureFixture[str], name: str) -> list[tuple[Any, ...]]:
    assert main(["simulate", "--timeline", str(SCENARIOS / name), "--output", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    return [
        (t["time"], t["slot"].split("@")[0], f"{t['state']}/{t['activity']}", t["job"], t["reason"])
        for t in document["transitions"]
    ]


def test_memory_hold_then_runtime_limit_preempts_at_the_limit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Hold_If_Memory_Exceeded then Limit_Job_Runtimes(5 minutes): WANT_SUSPEND is
    `X =!= true && False` (HTCondor's default WANT_SUSPEND), so the startd checks PREEMPT,
    true once the job has run 5 minutes: it leaves Claimed/Busy at the first poll after 310."""
    rows = _transitions(capsys, "memory-hold-runtime-limit.yaml")
    first = [row for row in rows if row[1] == "slot1_1"]
    assert first[:4] == [
        (10, "slot1_1", "Claimed/Idle", "sleep", "match with sleep"),
        (10, "slot1_1", "Claimed/Busy", "sleep", "claim activated"),
        (315, "slot1_1", "Claimed/Retiring", "sleep", "PREEMPT"),
        (
            315,
            "slot1_1",
            "Preempting/Killing",
            "sleep",
            "PREEMPT: retirement time expired; WANT_VACATE is FALSE",
        ),
    ]
    assert not any("Suspended" in row[2] for row in rows)


def test_the_test_job_policy_on_the_default_policy(capsys: pytest.CaptureFixture[str]) -> None:
    """ "Test-job Policy Example" added to the default policy: coltrane's job starts and is
    neither suspended nor preempted while the owner types and the load is high."""
    rows = _transitions(capsys, "test-job-default.yaml")
    coltrane = [row[2] for row in rows if row[3] == "coltrane"]
    assert coltrane[:2] == ["Claimed/Idle", "Claimed/Busy"]
    assert [row for row in rows if row[3] == "coltrane" and row[0] < 600] == [
        (10, "slot1_1", "Claimed/Idle", "coltrane", "match with coltrane"),
        (10, "slot1_1", "Claimed/Busy", "coltrane", "claim activated"),
    ]
    assert (600, "slot1_1", "Claimed/Idle", "coltrane", "job exited with code 0") in rows
    assert (605, "slot1_2", "Claimed/Busy", "jones", "claim activated") in rows
