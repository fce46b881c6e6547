"""The agent's loop drives its services through one protocol (`kondor_agent.services`): each
tick it asks every service in the order given to observe, settle, carry out the actions it
knows and contribute to the slot ads; between ticks, whether one needs a tick now and when it
needs the loop again; and it closes them when it stops."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent_fakes import FakeAPI, FakeClock, MachineBox, example_machine

from kondor_agent.loop import Agent, AgentConfig
from kondor_agent.services import Contribution, NodeService, Observation
from kondor_core import startd
from kondor_core.api import SlotPolicy
from kondor_core.policy import Action

POLICY = {
    "apiVersion": "kondor.io/v1alpha1",
    "kind": "SlotPolicy",
    "metadata": {"name": "plain"},
    "spec": {},
}


class Recording(NodeService):
    """A service that records what the loop asks of it, in one log shared with the others."""

    def __init__(self, name: str, log: list[str], **contribution: Any) -> None:
        self.name = name
        self.log = log
        self.contribution = Contribution(**contribution)
        self.wake_at: float | None = None
        self.due = False

    def between_ticks(self, now: float) -> bool:
        self.log.append(f"{self.name}.between_ticks")
        return self.due

    def next_wake(self, now: float) -> float | None:
        return self.wake_at

    def execution_point(self, execution_point: Mapping[str, Any]) -> None:
        self.log.append(f"{self.name}.execution_point")

    def configure(self, node: startd.Startd | None, *, reconfig: bool) -> None:
        self.log.append(f"{self.name}.configure({'again' if reconfig else 'first'})")

    def observe(self, node: startd.Startd, now: float) -> Observation:
        self.log.append(f"{self.name}.observe")
        return Observation(node)

    def settle(self, node: startd.Startd) -> None:
        self.log.append(f"{self.name}.settle")

    def carry_out(
        self, node: startd.Startd, actions: Sequence[Action], policy: SlotPolicy | None
    ) -> list[Action]:
        self.log.append(f"{self.name}.carry_out")
        return list(actions)

    def after_tick(self, node: startd.Startd, now: float) -> Contribution:
        self.log.append(f"{self.name}.after_tick")
        return self.contribution

    def close(self) -> None:
        self.log.append(f"{self.name}.close")


def _node(*services: NodeService) -> tuple[FakeAPI, FakeClock, Agent]:
    api, clock = FakeAPI(), FakeClock()
    machines = MachineBox(example_machine("desk.yaml"))
    api.add_policy(POLICY)
    api.add_execution_point(machines.machine.name, "plain")
    api.clock = clock
    agent = Agent(
        AgentConfig(node_name=machines.machine.name, polling_interval=5.0, update_interval=300),
        api,
        machines,
        clock=clock,
        services=services,
    )
    return api, clock, agent


def test_each_phase_asks_every_service_in_the_order_given() -> None:
    log: list[str] = []
    _api, _clock, agent = _node(Recording("a", log), Recording("b", log))
    agent.step()
    phases = [
        "between_ticks",
        "execution_point",
        "configure(first)",
        "observe",
        "settle",
        "carry_out",
        "after_tick",
    ]
    assert log == [f"{name}.{phase}" for phase in phases for name in ("a", "b")]
    log.clear()
    agent.close()
    assert log == ["a.close", "b.close"]


def test_a_services_attributes_reach_its_slots_ads() -> None:
    log: list[str] = []
    api, _clock, agent = _node(
        Recording("a", log, attributes={"slot1@desk": {"Answer": 42}}, write_now=True)
    )
    agent.step()
    agent.step()
    ads = {ad["Name"]: ad for ad in api.slot_ads(agent.name)}
    assert ads["slot1@desk"]["Answer"] == 42


def test_a_service_due_between_ticks_gets_a_tick_and_its_wake_time_is_kept() -> None:
    log: list[str] = []
    service = Recording("a", log)
    _api, clock, agent = _node(service)
    agent.step()
    clock.now += 1
    service.wake_at = clock.now + 0.25
    assert agent.step() == clock.now + 0.25  # before the next polling tick (5 s)
    log.clear()
    service.due = True
    agent.step()
    assert "a.observe" in log  # evaluated now, not at the polling tick
