"""`kubectl kondor userprio` as condor_userprio: the accountant's table, -setfactor and
-resetusage as patches of the Pool's spec."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from datetime import UTC
from typing import Any

import pytest

from kondor_cli.main import build_parser
from kondor_cli.userprio import run_userprio
from kondor_core.api import format_time

NOW = 1_800_000_000.0


class FakePool:
    def __init__(self, pool: dict[str, Any] | None) -> None:
        self.pool = pool
        self.patches: list[dict[str, Any]] = []

    def get_pool(self, name: str) -> dict[str, Any] | None:
        return self.pool

    def patch_pool(self, name: str, patch: Mapping[str, Any]) -> None:
        self.patches.append(dict(patch))


POOL = {
    "status": {
        "lastUpdate": format_time(NOW),
        "users": [
            {
                "name": "bob",
                "realPriority": 2.0,
                "priorityFactor": 3000.0,
                "effectivePriority": 6000.0,
                "resourcesUsed": 2,
                "accumulatedUsage": 7200.0,
                "lastUsageTime": format_time(NOW),
            },
            {
                "name": "alice",
                "realPriority": 6.0,
                "priorityFactor": 1000.0,
                "effectivePriority": 6000.0 - 1,
                "resourcesUsed": 6,
                "accumulatedUsage": 21600.0,
                "lastUsageTime": format_time(NOW),
            },
            {
                "name": "old",
                "realPriority": 0.5,
                "effectivePriority": 500.0,
                "lastUsageTime": format_time(NOW - 5 * 86400),
            },
        ],
    }
}


def run(argv: list[str], api: FakePool) -> int:
    args: argparse.Namespace = build_parser().parse_args(["userprio", *argv])
    return run_userprio(args, connect=lambda _: api, clock=lambda: NOW, tz=UTC)


def test_userprio_lists_active_users_best_priority_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run([], FakePool(POOL)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Last Priority Update: 1/15/2027 08:00"
    rows = [line.split() for line in out[4:-2]]
    assert rows == [
        ["alice", "5999.00", "1000.00", "6", "6.00", "<now>"],
        ["bob", "6000.00", "3000.00", "2", "2.00", "<now>"],
    ]
    assert out[-1].startswith("Number of users: 2")


def test_userprio_all_shows_every_user_with_real_priority(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(["-all"], FakePool(POOL)) == 0
    out = capsys.readouterr().out
    assert "Real" in out and "old" in out
    row = next(line for line in out.splitlines() if line.startswith("bob"))
    assert row.split()[:6] == ["bob", "6000.00", "2.00", "3000.00", "2", "2.00"]


def test_setfactor_and_resetusage_patch_the_pool_spec(capsys: pytest.CaptureFixture[str]) -> None:
    api = FakePool(None)
    assert run(["-setfactor", "bob", "3000"], api) == 0
    assert run(["-resetusage", "alice"], api) == 0
    assert api.patches == [
        {"spec": {"priorityFactors": {"bob": 3000.0}}},
        {"spec": {"usageResets": {"alice": format_time(NOW)}}},
    ]
    assert "The priority factor of bob was set to 3000.000000" in capsys.readouterr().out
