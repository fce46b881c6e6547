"""Many agents in one event loop (`bench/fleet_sim.py`): every one publishes, a wake-up is acted
on at once rather than at the next polling tick, and stopping returns promptly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from agent_fakes import EXAMPLES, FakeAPI, MachineBox, example_machine, load_yaml

from fleet_sim import Fleet
from kondor_agent.loop import Agent, AgentConfig

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
