"""The agent's starter side of job deferral ("Time Scheduling for Job Execution"): a matched
job waits on its claimed slot for its DeferralTime, shown Running, and starts then, not
earlier; one arriving past its window is held with HoldReasonCode 20 and never runs."""

from __future__ import annotations

from typing import Any

import pytest
from agent_fakes import EXAMPLES, load_yaml
from test_agent_jobs import Node, _slots, _tick, matched, start_node

NOW = 1_800_000_000.0


@pytest.fixture
def node() -> Node:
    return start_node(load_yaml(EXAMPLES / "policies" / "default.yaml"))


def deferred(name: str, at: float, **spec: Any) -> dict[str, Any]:
    job = matched(name, f"uid-{name}#1", deferralTime=int(at), **spec)
    job["status"]["deferralTime"] = int(at)
    return job


def test_a_deferred_job_waits_on_its_slot_and_starts_at_its_time(node: Node) -> None:
    api, clock, launcher, agent = node
    at = clock.now + 20
    api.job_objects["default/later"] = deferred("later", at)
    _tick(agent, clock)
    assert launcher.launched == []
    waiting = api.execution("later")
    assert waiting["state"] == "Running" and "startTime" not in waiting
    clock.now += 1
    agent.step()
    assert _slots(api)["slot1_1"][:2] == ("Claimed", "Busy")  # the claim is held meanwhile
    clock.now = at - 0.5
    assert agent.step() == at  # the loop wakes at the DeferralTime, not at the next tick
    assert launcher.launched == []
    clock.now = at
    agent.step()
    assert [j for j, _, _ in launcher.launched] == ["default/later"]
    assert api.execution("later")["jobCurrentStartExecutingDate"] == int(at)


def test_a_job_past_its_window_is_held_with_the_manuals_reason(node: Node) -> None:
    api, clock, launcher, agent = node
    api.job_objects["default/late"] = deferred("late", clock.now - 60, deferralWindow=30)
    api.job_objects["default/inside"] = deferred("inside", clock.now - 20, deferralWindow=30)
    _tick(agent, clock)
    late = api.execution("late")
    assert (late["state"], late["holdReasonCode"]) == ("Failed", 20)
    assert late["holdReason"] == (
        "The job missed its deferred execution time and therefore failed to run."
    )
    assert [j for j, _, _ in launcher.launched] == ["default/inside"]


def test_a_hold_while_waiting_ends_the_wait_and_the_job_never_runs(node: Node) -> None:
    api, clock, launcher, agent = node
    at = clock.now + 60
    api.job_objects["default/later"] = deferred("later", at)
    _tick(agent, clock)
    api.job_objects["default/later"]["spec"]["hold"] = True
    _tick(agent, clock)
    assert api.execution("later")["state"] == "Killed"
    clock.now = at + 1
    agent.step()
    _tick(agent, clock)
    assert launcher.launched == []
    assert _slots(api)["slot1"][0] == "Unclaimed"
