"""The agent's backfill runner (kondor_agent.backfill) with real processes (no cgroups): one
process per slot, BackfillStarted and BackfillExited told once each, a kill reaches what the
process forked, a program that cannot start, and leftovers of an earlier agent."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

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


class FakePods:
    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], str] = {}
        self.created: list[dict[str, Any]] = []

    def create(self, namespace: str, manifest: dict[str, Any]) -> None:
        self.created.append(manifest)
        self.pods[(namespace, manifest["metadata"]["name"])] = "Pending"

    def phase(self, namespace: str, name: str) -> str | None:
        return self.pods.get((namespace, name))

    def delete(self, namespace: str, name: str) -> None:
        self.pods.pop((namespace, name), None)

    def delete_all(self, node: str) -> int:
        return 0


POD = {"metadata": {"labels": {"app": "boinc"}}, "spec": {"containers": [{"name": "c"}]}}


def test_a_pod_backfill_is_created_bound_to_the_node_and_deleted_on_kill(tmp_path: Path) -> None:
    pods = FakePods()
    runner = BackfillRunner(tmp_path, pods=pods, node="node-a")
    spec = BackfillSpec.model_validate({"pod": POD, "namespace": "backfill"})
    assert runner.start("slot1@node-a", spec)
    (manifest,) = pods.created
    assert manifest["metadata"]["name"] == "backfill-node-a-slot1"
    assert manifest["metadata"]["labels"] == {
        "app": "boinc",
        "kondor.io/backfill-node": "node-a",
        "kondor.io/backfill-slot": "slot1",
    }
    assert (manifest["spec"]["nodeName"], manifest["spec"]["restartPolicy"]) == ("node-a", "Never")
    # Hardened as a job pod: slot1's own user, no escalation, no capabilities.
    context = manifest["spec"]["securityContext"]
    assert (context["runAsNonRoot"], context["runAsUser"], context["runAsGroup"]) == (
        True,
        101000,
        101000,
    )
    assert manifest["spec"]["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert runner.events() == {"slot1@node-a": [BackfillStarted()]}
    assert runner.running == {"slot1@node-a"}
    runner.kill("slot1@node-a")
    assert runner.events() == {"slot1@node-a": [BackfillExited()]}
    assert pods.pods == {}


def test_a_pod_that_ends_is_told_and_a_pod_without_an_api_goes_back_to_idle(
    tmp_path: Path,
) -> None:
    pods = FakePods()
    runner = BackfillRunner(tmp_path, pods=pods, node="n")
    spec = BackfillSpec.model_validate({"pod": POD})
    runner.start(SLOT, spec)
    pods.pods[("default", "backfill-n-slot1")] = "Succeeded"
    assert runner.events() == {SLOT: [BackfillStarted(), BackfillExited()]}
    assert pods.pods == {}  # the finished pod is deleted
    no_api = BackfillRunner(tmp_path / "other")
    assert not no_api.start(SLOT, spec)
    assert no_api.events() == {SLOT: [BackfillStarted(), BackfillExited()]}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "either executable"),
        ({"executable": "/bin/true", "pod": POD}, "either executable"),
        ({"pod": POD, "arguments": ["x"]}, "arguments and environment go with executable"),
        ({"pod": {"metadata": {}}}, "needs a spec"),
    ],
)
def test_a_backfill_is_a_process_or_a_pod(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BackfillSpec.model_validate(fields)


def test_a_node_that_never_backfills_gets_no_backfill_directory(tmp_path: Path) -> None:
    # The execute directory holds the jobs' directories only (a restarted agent adopts them).
    runner = BackfillRunner(tmp_path / "backfill")
    runner.kill_all()
    assert not (tmp_path / "backfill").exists()
