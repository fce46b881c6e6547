"""The agent's backfill runner (kondor_agent.backfill) with real processes (no cgroups): one
process per slot, BackfillStarted and BackfillExited told once each, a kill reaches what the
process forked, a program that cannot start, and leftovers of an earlier agent."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kondor_agent.backfill import BackfillRunner
from kondor_core.api.backfill import BackfillSpec
from kondor_core.policy import BackfillExited, BackfillStarted

SLOT = "slot1@n"


def spec(script: str) -> BackfillSpec:
    return BackfillSpec(executable="/bin/sh", arguments=["-c", script])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too (the test's runner reaps its own child; a grandchild is init's).
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[-1][0] != "Z"


def wait_for(check: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.02)
    raise AssertionError("timed out")


def test_one_process_per_slot_started_and_killed_with_its_children(tmp_path: Path) -> None:
    runner = BackfillRunner(tmp_path)
    assert runner.start(SLOT, spec("sleep 60 & echo $! > child; echo $_CONDOR_SLOT; wait"))
    assert not runner.start(SLOT, spec("true"))  # one per slot
    assert runner.events() == {SLOT: [BackfillStarted()]}
    child_file = tmp_path / "slot1_n" / "child"
    wait_for(lambda: child_file.exists() and child_file.read_text().strip())
    child = int(child_file.read_text())
    assert alive(child)
    assert runner.events() == {}

    runner.kill(SLOT)
    wait_for(lambda: runner.events() == {SLOT: [BackfillExited()]} or not runner.running)
    assert runner.running == frozenset()
    wait_for(lambda: not alive(child))
    assert (tmp_path / "slot1_n" / "backfill.out").read_text() == f"{SLOT}\n"


def test_a_process_that_ends_on_its_own_is_told(tmp_path: Path) -> None:
    runner = BackfillRunner(tmp_path)
    runner.start(SLOT, spec("exit 3"))
    seen: list[object] = []

    def exited() -> bool:
        seen.extend(runner.events().get(SLOT, []))
        return BackfillExited() in seen

    wait_for(exited)
    assert seen == [BackfillStarted(), BackfillExited()]
    assert not (tmp_path / "slot1_n.pid").exists()


def test_a_program_that_cannot_start_goes_back_to_idle(tmp_path: Path) -> None:
    runner = BackfillRunner(tmp_path)
    assert not runner.start(SLOT, BackfillSpec(executable="/no/such/program"))
    assert runner.events() == {SLOT: [BackfillStarted(), BackfillExited()]}


def test_a_new_runner_kills_what_an_earlier_one_left(tmp_path: Path) -> None:
    first = BackfillRunner(tmp_path)
    first.start(SLOT, spec("exec sleep 60"))
    pid = int((tmp_path / "slot1_n.pid").read_text())
    assert alive(pid)
    assert first.events() == {SLOT: [BackfillStarted()]}
    BackfillRunner(tmp_path)  # the agent restarted
    wait_for(lambda: first.events() == {SLOT: [BackfillExited()]})
    assert not alive(pid)


def test_the_executable_must_be_absolute() -> None:
    with pytest.raises(ValueError, match="must be an absolute path"):
        BackfillSpec(executable="boinc")


def test_a_busy_slot_no_process_serves_is_told_its_client_exited(tmp_path: Path) -> None:
    """A restarted agent: the slot was Backfill/Busy, the earlier agent's process is gone."""
    runner = BackfillRunner(tmp_path)
    assert runner.events_for([SLOT]) == {SLOT: [BackfillExited()]}
    runner.kill("slot2@n")  # Backfill/Killing with nothing running: gone at once
    assert runner.events() == {"slot2@n": [BackfillExited()]}
    runner.start(SLOT, spec("exec sleep 60"))
    assert runner.events_for([SLOT]) == {SLOT: [BackfillStarted()]}
    assert runner.events_for([SLOT]) == {}
    runner.kill_all()
