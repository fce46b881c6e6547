"""`kondor simulate --timeline` with a crontab job ("Time Scheduling for Job Execution"):
`cronMinute: "*"` on a simulated clock runs once a minute, at the minute, for three minutes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kondor_cli.main import main

SCENARIO = Path(__file__).resolve().parents[3] / "examples/scenarios/crontab-every-minute.yaml"


def test_a_crontab_job_runs_once_a_minute_for_three_minutes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "--timeline", str(SCENARIO), "--output", "json"]) == 0
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    starts = [a["time"] for a in document["actions"] if a["kind"] == "start-job"]
    assert starts == [60, 120, 180]
    busy = [
        t["time"]
        for t in document["transitions"]
        if t["job"] == "every-minute" and t["activity"] == "Busy"
    ]
    assert busy == [60, 120, 180]  # never before its minute
    # matched one polling interval (the timeline's SCHEDD_INTERVAL) ahead, as the manual's
    # ( time() + SCHEDD_INTERVAL ) >= ( DeferralTime - CronPrepTime ) says
    carved = [a["time"] for a in document["actions"] if a["kind"] == "carve-dynamic-slot"]
    assert carved == [55, 115, 175]
    (job,) = document["jobs"]
    assert job == {"name": "every-minute", "status": "Idle", "deferralTime": 240}
