"""An OOM kill as the supervisor reads it from recorded cgroup files (v1 memory.oom_control,
v2 memory.events), and the hold it puts the job on (HoldReasonCode 34)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kondor_agent.execute import supervisor

V1 = "oom_kill_disable 0\nunder_oom 0\noom_kill {n}\n"
V2 = "low 0\nhigh 0\nmax 12\noom 1\noom_kill {n}\noom_group_kill 0\n"


@pytest.mark.parametrize("recorded", [V1, V2])
@pytest.mark.parametrize("kills", [0, 1, 3])
def test_oom_kills_are_read_from_either_version(tmp_path: Path, recorded: str, kills: int) -> None:
    events = tmp_path / "events"
    events.write_text(recorded.format(n=kills))
    assert supervisor._oom_kills({"oom_kills_file": str(events)}) == kills


@pytest.mark.parametrize("spec", [{}, {"oom_kills_file": "/nonexistent/memory.events"}])
def test_no_oom_file_means_no_oom_kill(spec: dict[str, str]) -> None:
    assert supervisor._oom_kills(spec) == 0


def test_the_hold_names_the_slot_the_limit_and_the_usage() -> None:
    held = supervisor._out_of_memory({"slot": "slot1_2@node-a", "memory_limit_mib": 128}, 131)
    assert held == {
        "hold_reason": "Error from slot1_2@node-a: Job has gone over cgroup memory limit of 128 "
        "megabytes. Peak usage: 131 megabytes. Consider resubmitting with a higher "
        "request_memory.",
        "hold_reason_code": 34,
    }
