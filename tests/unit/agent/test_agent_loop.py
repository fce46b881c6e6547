"""The agent's loop against a fake API server and a fake clock: what a node publishes, when it
writes, and how it follows policy edits, machine changes and restarts."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from typing import Any

import pytest
from agent_fakes import (
    EXAMPLES,
    FakeAPI,
    FakeClock,
    MachineBox,
    example_machine,
    load_yaml,
)

from kondor_agent.loop import Agent, AgentConfig
from kondor_agent.metrics import AgentMetrics
from kondor_core.config import compile_policy
from kondor_core.sim import simulate

NODE = "gpu-mixed"


def _agent(
    api: FakeAPI,
    clock: FakeClock,
    machines: MachineBox,
    *,
    live: Any = None,
    update_interval: float = 300.0,
) -> Agent:
    api.clock = clock
    return Agent(
        AgentConfig(
            node_name=machines.machine.name, polling_interval=5.0, update_interval=update_interval
        ),
        api,
        machines,
        live=live or (lambda _now: {}),
        clock=clock,
        metrics=AgentMetrics(),
    )


def _run(agent: Agent, clock: FakeClock, until: float) -> None:
    """Step the agent, moving the fake clock to each wake-up it asks for, until `until`."""
    while True:
        wake = agent.step()
        if wake > until:
            clock.now = until
            return
        clock.now = max(wake, clock.now)


@pytest.fixture
def gpu_node() -> tuple[FakeAPI, FakeClock, MachineBox]:
    api = FakeAPI()
    api.add_policy(load_yaml(EXAMPLES / "policies" / "gpu-split.yaml"))
    api.add_execution_point(NODE, "gpu-split")
    return api, FakeClock(), MachineBox(example_machine("gpu-mixed.yaml"))


def _simulated(machine_file: str, policy_file: str) -> list[dict[str, Any]]:
    machine = example_machine(machine_file)
    policy = load_yaml(EXAMPLES / "policies" / policy_file)
    from kondor_core.api import SlotPolicySpec

    return simulate(
        machine, compile_policy(SlotPolicySpec.model_validate(policy["spec"])), []
    ).slots


_SHAPE = ("Name", "SlotType", "SlotTypeID", "Cpus", "Memory", "Disk", "GPUs", "AssignedGPUs")


def _shape(ads: list[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    return [tuple(ad.get(key) for key in _SHAPE) for ad in ads]


def test_first_cycle_publishes_the_slots_simulate_prints(gpu_node: Any) -> None:
    api, clock, machines = gpu_node
    agent = _agent(api, clock, machines)
    agent.step()
    status = api.status(NODE)
    ads = [slot["ad"] for slot in status["slots"]]
    assert _shape(ads) == _shape(_simulated("gpu-mixed.yaml", "gpu-split.yaml"))
    # The first cycle takes every slot from Owner to Unclaimed (IS_OWNER is FALSE).
    assert {(s["state"], s["activity"]) for s in status["slots"]} == {("Unclaimed", "Idle")}
    assert status["summary"]["slots"] == 4
    assert status["summary"]["unclaimed"] == 4
    assert status["summary"]["state"] == "Unclaimed"
    assert status["policy"]["name"] == "gpu-split"
    assert status["lastHeartbeat"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert status["machine"]["Machine"] == NODE
    for _time, patch in api.patches:
        assert "operator" not in patch["status"]


def test_operator_subtree_is_left_alone(gpu_node: Any) -> None:
    api, clock, machines = gpu_node
    api.execution_points[NODE]["status"] = {"operator": {"heartbeatFresh": True}}
    agent = _agent(api, clock, machines)
    _run(agent, clock, clock.now + 700)  # the first write and two heartbeats
    assert api.status(NODE)["operator"] == {"heartbeatFresh": True}


def test_idle_node_writes_once_per_update_interval(gpu_node: Any) -> None:
    api, clock, machines = gpu_node
    load = iter(range(1_000_000))
    # LoadAvg changes on every tick: a live fact, not a state change.
    agent = _agent(api, clock, machines, live=lambda _now: {"LoadAvg": next(load) / 100})
    start = clock.now
    _run(agent, clock, start + 3600)
    times = [time for time, _ in api.patches]
    assert len(times) == 1 + 3600 // 300
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(gap >= 300 for gap in gaps)
    # The heartbeat writes carry the volatile facts and the heartbeat, not the slots again.
    assert set(api.patches[-1][1]["status"]) <= {"lastHeartbeat", "machine", "slots"}
    assert agent.metrics.value("kondor_agent_api_writes_total", result="ok") == len(times)


def test_a_change_is_written_within_a_second_debounced(gpu_node: Any) -> None:
    api, clock, machines = gpu_node
    agent = _agent(api, clock, machines)
    _run(agent, clock, clock.now + 100)
    writes = len(api.patches)
    changed_at = clock.now
    machines.machine = machines.machine.model_copy(
        update={"attributes": {**machines.machine.attributes, "KondorTestFact": 7}}
    )
    _run(agent, clock, changed_at + 30)
    new = api.patches[writes:]
    assert len(new) == 1
    assert new[0][0] - changed_at <= 5 + 1  # seen at the next tick, written within a second
    assert all(ad["KondorTestFact"] == 7 for ad in api.slot_ads(NODE))


def test_policy_edit_recarves_within_one_polling_interval(gpu_node: Any) -> None:
    api, clock, machines = gpu_node
    agent = _agent(api, clock, machines)
    _run(agent, clock, clock.now + 60)
    assert len(api.status(NODE)["slots"]) == 4
    edited_at = clock.now
    api.add_policy(load_yaml(EXAMPLES / "policies" / "default.yaml"), generation=1)
    api.execution_points[NODE]["spec"]["policy"] = {"name": "default"}
    _run(agent, clock, edited_at + 6)
    status = api.status(NODE)
    ads = [slot["ad"] for slot in status["slots"]]
    assert _shape(ads) == _shape(_simulated("gpu-mixed.yaml", "default.yaml"))
    assert status["policy"]["name"] == "default"
    assert api.patches[-1][0] - edited_at <= 6


def test_an_edit_of_its_policy_recarves_once_the_operator_has_checked_it(
    gpu_node: Any,
) -> None:
    """The ExecutionPoint names its policy; the agent follows that policy's generations, as a
    startd reads its configuration again at condor_reconfig, once the operator's status on
    the SlotPolicy calls the generation valid. Until then, and for a generation the operator
    found invalid, the slots stay as they were (and Ready says why)."""
    api, clock, machines = gpu_node
    agent = _agent(api, clock, machines)
    _run(agent, clock, clock.now + 30)
    assert api.status(NODE)["policy"]["generation"] == 1
    spec_before = dict(api.execution_points[NODE]["spec"])
    split = _shape([slot["ad"] for slot in api.status(NODE)["slots"]])
    edited = load_yaml(EXAMPLES / "policies" / "default.yaml")
    edited["metadata"]["name"] = "gpu-split"

    api.add_policy(edited, generation=2, checked=None)  # not checked by the operator yet
    _run(agent, clock, clock.now + 12)
    assert api.status(NODE)["policy"]["generation"] == 1
    assert _shape([slot["ad"] for slot in api.status(NODE)["slots"]]) == split

    api.add_policy(edited, generation=2)  # the operator's status: valid
    checked_at = clock.now
    _run(agent, clock, checked_at + 6)
    status = api.status(NODE)
    assert status["policy"]["generation"] == 2
    assert _shape([slot["ad"] for slot in status["slots"]]) == _shape(
        _simulated("gpu-mixed.yaml", "default.yaml")
    )
    assert api.patches[-1][0] - checked_at <= 6
    assert api.execution_points[NODE]["spec"] == spec_before  # nobody rewrote it

    broken = dict(edited, spec={**edited["spec"], "start": "X >"})
    api.add_policy(broken, generation=3, checked=False)
    _run(agent, clock, clock.now + 6)
    status = api.status(NODE)
    assert status["policy"]["generation"] == 2
    assert _shape([slot["ad"] for slot in status["slots"]]) == _shape(
        _simulated("gpu-mixed.yaml", "default.yaml")
    )
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "PolicyInvalid")
    assert ready["message"] == (
        "SlotPolicy gpu-split generation 3 is invalid: spec.start: 'X >' is not valid; the "
        "slots stay as they were"
    )


def test_a_node_waits_for_the_operators_check_before_its_first_slots(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kondor_agent")
    api = FakeAPI()
    api.add_policy(load_yaml(EXAMPLES / "policies" / "gpu-split.yaml"), checked=None)
    api.add_execution_point(NODE, "gpu-split")
    clock, machines = FakeClock(), MachineBox(example_machine("gpu-mixed.yaml"))
    agent = _agent(api, clock, machines)
    _run(agent, clock, clock.now + 10)
    status = api.status(NODE)
    assert status.get("slots", []) == []
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "PolicyPending")
    assert (
        ready["message"] == "SlotPolicy gpu-split generation 1 is not checked by the operator yet"
    )
    # A wait, not an error: a fleet of 1,000 nodes logs it 1,000 times for each new policy.
    assert [r.levelname for r in caplog.records if "PolicyPending" in r.getMessage()] == ["INFO"]
    api.add_policy(load_yaml(EXAMPLES / "policies" / "gpu-split.yaml"))
    _run(agent, clock, clock.now + 6)
    assert len(api.status(NODE)["slots"]) == 4


def test_a_drain_goes_on_through_a_policy_edit(gpu_node: Any) -> None:
    """As a startd keeps draining through a reconfig: a policy edit landing while the node
    drains re-carves the slots, and the new ones come up Drained, not Unclaimed."""
    api, clock, machines = gpu_node
    agent = _agent(api, clock, machines)
    _run(agent, clock, clock.now + 30)
    api.execution_points[NODE]["spec"]["drain"] = {
        "mode": "graceful",
        "requestedAt": "2027-01-15T08:00:00Z",
    }
    _run(agent, clock, clock.now + 10)
    assert api.status(NODE)["drain"]["state"] == "Drained"
    api.add_policy(load_yaml(EXAMPLES / "policies" / "default.yaml"), generation=1)
    api.execution_points[NODE]["spec"]["policy"] = {"name": "default"}
    _run(agent, clock, clock.now + 10)
    status = api.status(NODE)
    assert status["policy"]["name"] == "default"
    assert _shape([s["ad"] for s in status["slots"]]) == _shape(
        _simulated("gpu-mixed.yaml", "default.yaml")
    )
    assert {(s["state"], s["activity"]) for s in status["slots"]} == {("Drained", "Idle")}
    assert status["drain"]["state"] == "Drained"
    del api.execution_points[NODE]["spec"]["drain"]  # -cancel still returns the slots
    _run(agent, clock, clock.now + 10)
    status = api.status(NODE)
    assert "drain" not in status
    assert {s["state"] for s in status["slots"]} <= {"Owner", "Unclaimed"}


def test_restarted_agent_publishes_the_same_slots(gpu_node: Any) -> None:
    api, clock, machines = gpu_node
    first = _agent(api, clock, machines)
    _run(first, clock, clock.now + 120)
    before = api.status(NODE)
    clock.now += 30  # the agent was down for a while
    second = _agent(api, clock, machines)
    _run(second, clock, clock.now + 60)
    after = api.status(NODE)
    names = [slot["name"] for slot in after["slots"]]
    assert names == [slot["name"] for slot in before["slots"]]
    assert len(names) == len(set(names))
    # Idle slots keep the times they entered their state: the restart is not a transition.
    assert [s["enteredCurrentState"] for s in after["slots"]] == [
        s["enteredCurrentState"] for s in before["slots"]
    ]
    assert after["lastHeartbeat"] > before["lastHeartbeat"]


def test_no_policy_means_no_slots_and_says_why(gpu_node: Any) -> None:
    api, clock, machines = gpu_node
    api.add_execution_point(NODE, None)
    agent = _agent(api, clock, machines)
    agent.step()
    status = api.status(NODE)
    assert status.get("slots", []) == []
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NoPolicy")


def test_missing_policy_is_reported(gpu_node: Any) -> None:
    api, clock, machines = gpu_node
    api.add_execution_point(NODE, "nope")
    agent = _agent(api, clock, machines)
    agent.step()
    ready = next(c for c in api.status(NODE)["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PolicyNotFound")
    assert "nope" in ready["message"]


def test_waits_for_its_execution_point(gpu_node: Any) -> None:
    api, clock, machines = gpu_node
    del api.execution_points[NODE]
    agent = _agent(api, clock, machines)
    _run(agent, clock, clock.now + 20)
    assert api.patches == []
    api.add_execution_point(NODE, "gpu-split")
    _run(agent, clock, clock.now + 6)
    assert len(api.status(NODE)["slots"]) == 4


def test_failed_write_is_retried_and_counted(gpu_node: Any) -> None:
    api, clock, machines = gpu_node
    agent = _agent(api, clock, machines)
    api.fail_writes = True
    _run(agent, clock, clock.now + 12)
    assert agent.metrics.value("kondor_agent_api_writes_total", result="error") >= 2
    api.fail_writes = False
    _run(agent, clock, clock.now + 6)
    assert len(api.status(NODE)["slots"]) == 4


def test_slot_metrics_by_state_and_activity(gpu_node: Any) -> None:
    api, clock, machines = gpu_node
    agent = _agent(api, clock, machines)
    agent.step()
    assert agent.metrics.value("kondor_agent_slots", state="Unclaimed", activity="Idle") == 4
    assert agent.metrics.value("kondor_agent_evaluation_seconds_count") == 1


def test_actions_without_a_launcher_are_counted_not_faked() -> None:
    api = FakeAPI()
    policy = {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "SlotPolicy",
        "metadata": {"name": "bench"},
        "spec": {"runBenchmarks": "True"},
    }
    api.add_policy(policy)
    machines = MachineBox(example_machine("kwok-small.yaml"))
    api.add_execution_point(machines.machine.name, "bench")
    clock = FakeClock()
    agent = _agent(api, clock, machines)
    _run(agent, clock, clock.now + 12)
    assert (
        agent.metrics.value("kondor_agent_actions_not_carried_out_total", kind="run-benchmarks")
        >= 1
    )


def test_wake_evaluates_at_once_when_the_execution_point_changes(gpu_node: Any) -> None:
    api, clock, machines = gpu_node
    agent = _agent(api, clock, machines)
    agent.step()
    api.add_policy(load_yaml(EXAMPLES / "policies" / "default.yaml"))
    api.execution_points[NODE]["spec"]["policy"] = {"name": "default"}
    clock.now += 0.1
    agent.wake()  # what the watch does on a spec change
    agent.step()
    clock.now += 0.5
    agent.step()
    assert [slot["name"] for slot in api.status(NODE)["slots"]] == ["slot1@gpu-mixed"]


def test_a_policy_that_does_not_fit_keeps_the_slots_and_says_why(gpu_node: Any) -> None:
    api, clock, machines = gpu_node
    agent = _agent(api, clock, machines)
    _run(agent, clock, clock.now + 10)
    before = [slot["name"] for slot in api.status(NODE)["slots"]]
    too_big = {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "SlotPolicy",
        "metadata": {"name": "too-big"},
        "spec": {"slotTypes": [{"id": 1, "count": 1, "resources": "cpus=512"}]},
    }
    api.add_policy(too_big)
    api.execution_points[NODE]["spec"]["policy"] = {"name": "too-big"}
    _run(agent, clock, clock.now + 10)
    status = api.status(NODE)
    assert [slot["name"] for slot in status["slots"]] == before
    assert status["policy"]["name"] == "gpu-split"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PolicyInvalid")
    assert "too-big" in ready["message"] and "cpus" in ready["message"].lower()
