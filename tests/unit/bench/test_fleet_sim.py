"""Many agents in one event loop (`bench/fleet_sim.py`): every one publishes, a wake-up is acted
on at once rather than at the next polling tick, and stopping returns promptly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from agent_fakes import EXAMPLES, FakeAPI, MachineBox, example_machine, load_yaml

import fleet_sim
from fleet_sim import Fleet, SharedCompile
from kondor_agent.loop import Agent, AgentConfig
from kondor_core.api import SlotPolicySpec
from kondor_core.config import EffectivePolicy, PolicyError, compile_policy

pytestmark = pytest.mark.timeout(5)


def _agents(api: FakeAPI, names: list[str], polling_interval: float) -> list[Agent]:
    api.add_policy(load_yaml(EXAMPLES / "policies" / "default.yaml"))
    machine = example_machine("kwok-small.yaml")
    return [
        Agent(
            AgentConfig(node_name=name, polling_interval=polling_interval, debounce=0.0),
            api,
            MachineBox(machine.model_copy(update={"name": name})),
        )
        for name in names
    ]


async def _until(condition: Callable[[], bool], timeout: float = 2.0) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, "not within the timeout"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


def test_every_agent_publishes_its_slots_and_stop_returns() -> None:
    api = FakeAPI()
    names = [f"node-{index}" for index in range(20)]
    agents = _agents(api, names, polling_interval=0.05)
    for name in names:
        api.add_execution_point(name, "default")

    async def scenario() -> float:
        fleet = Fleet(agents, workers=2, stagger=0.1)
        stop = asyncio.Event()
        running = asyncio.create_task(fleet.run(stop))
        await _until(lambda: all(api.status(name).get("slots") for name in names))
        stop.set()
        return await _until(running.done)

    assert asyncio.run(scenario()) < 0.5
    for name in names:
        [slot] = api.status(name)["slots"]
        assert slot["name"] == f"slot1@{name}"


def test_a_woken_agent_acts_at_once_not_at_its_next_polling_tick() -> None:
    api = FakeAPI()
    [agent] = _agents(api, ["late"], polling_interval=60.0)

    async def scenario() -> float:
        fleet = Fleet([agent])
        stop = asyncio.Event()
        running = asyncio.create_task(fleet.run(stop))
        await asyncio.sleep(0.1)  # the first step finds no ExecutionPoint: next tick in 60 s
        api.add_execution_point("late", "default")  # the operator creates it
        fleet.wake("late")  # as a watch of the ExecutionPoints would
        fleet.wake("not-in-this-fleet")  # ignored
        took = await _until(lambda: bool(api.status("late").get("slots")))
        stop.set()
        await running
        return took

    assert asyncio.run(scenario()) < 1.0


def test_the_agents_of_a_fleet_share_one_compile_of_a_spec_and_get_its_errors() -> None:
    compiled: list[SlotPolicySpec] = []

    def counting(spec: SlotPolicySpec) -> EffectivePolicy:
        compiled.append(spec)
        return compile_policy(spec)

    shared = SharedCompile(keep=2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fleet_sim, "compile_policy", counting)
        one = SlotPolicySpec.model_validate({"condorConfig": "NUM_SLOTS = 2\n"})
        two = SlotPolicySpec.model_validate({"condorConfig": "NUM_SLOTS = 4\n"})
        first = shared(one)
        assert shared(SlotPolicySpec.model_validate({"condorConfig": "NUM_SLOTS = 2\n"})) is first
        assert shared(two) == compile_policy(two) and len(compiled) == 2
        shared(SlotPolicySpec())  # a third spec: the oldest is forgotten
        assert shared(one) is not first and len(compiled) == 4
        bad = SlotPolicySpec.model_validate({"condorConfig": "START = (\n"})
        for _ in range(2):  # an error is not remembered: each agent gets it, as on its node
            with pytest.raises(PolicyError):
                shared(bad)
        assert len(compiled) == 6


def test_fleet_agents_carve_with_the_shared_compile() -> None:
    api = FakeAPI()
    agents = _agents(api, ["n1", "n2"], polling_interval=5.0)
    shared = SharedCompile()
    for agent in agents:
        api.add_execution_point(agent.name, "default")
        agent.compiler = shared
        agent.step()
    assert [len(api.status(name)["slots"]) for name in ("n1", "n2")] == [1, 1]
    assert agents[0].startd is not None and agents[1].startd is not None
    assert agents[0].startd.policy is agents[1].startd.policy
