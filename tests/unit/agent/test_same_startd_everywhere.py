"""`kondor simulate --request`, `kondor simulate --timeline` and the agent drive one startd
(`kondor_core.startd`) and one negotiator: for every example policy, machine and job in
examples/ they publish the same slot ads and take the same accept/refuse decision.

- the ads: the agent's first published status and `kondor simulate` with no request, at the
  same time and with the same (no) live facts, are equal attribute for attribute;
- the decision: the job submitted at t=0 to the timeline is matched at its first negotiation
  after the startd's first cycle (t = one polling interval); `kondor simulate` placing the
  job at that time puts it on the same slot or refuses it, and the slot ads afterwards are
  equal except the attributes that say when the slots entered their states (the timeline's
  slots went Unclaimed at t=0, simulate's at its own start). The agent's startd, its ads
  offered to the negotiator and sent the match, claims the slot `kondor simulate` names
  (or refuses as it does).
"""

from __future__ import annotations

import itertools
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from agent_fakes import EXAMPLES, FakeAPI, FakeClock, MachineBox, load_yaml

from kondor_agent.loop import Agent, AgentConfig
from kondor_core import startd
from kondor_core.api import ExecutionJob, Machine, SlotPolicy
from kondor_core.config import compile_policy
from kondor_core.jobs import submit_ad
from kondor_core.negotiation import IdleJob, negotiate, slot_offer
from kondor_core.policy import ActivateClaim, Match
from kondor_core.sim import replay, simulate
from kondor_core.sim.scenario import Scenario, Step
from kondor_core.slots import LayoutError

POLICIES = sorted(
    path
    for path in [*EXAMPLES.glob("policies/*.yaml"), *EXAMPLES.glob("demo/policies/*.yaml")]
    if load_yaml(path).get("kind") == "SlotPolicy"
)
MACHINES = sorted([*EXAMPLES.glob("machines/*.yaml"), *EXAMPLES.glob("demo/machines/*.yaml")])
JOBS = sorted(EXAMPLES.glob("jobs/*.yaml"))
#: What differs only by when a driver's slots entered their states.
_WHEN = ("EnteredCurrentState", "EnteredCurrentActivity")


@cache
def _policy(path: Path) -> SlotPolicy:
    return SlotPolicy.model_validate(load_yaml(path))


@cache
def _machine(path: Path) -> Machine:
    return Machine.model_validate(load_yaml(path))


@cache
def _job(path: Path) -> ExecutionJob:
    return ExecutionJob.model_validate(load_yaml(path))


def _fits(policy: Path, machine: Path) -> bool:
    try:
        startd.start(_machine(machine), compile_policy(_policy(policy).spec), 0)
    except LayoutError:
        return False
    return True


PAIRS = [(p, m) for p, m in itertools.product(POLICIES, MACHINES) if _fits(p, m)]


def test_the_examples_cover_many_policies_machines_and_jobs() -> None:
    assert len(POLICIES) >= 15 and len(MACHINES) >= 8 and len(JOBS) >= 8
    assert len(PAIRS) >= 100


def _agent_ads(policy: Path, machine: Path, now: float) -> tuple[list[dict[str, Any]], Agent]:
    api = FakeAPI()
    manifest = load_yaml(policy)
    api.add_policy(manifest)
    node = _machine(machine)
    api.add_execution_point(node.name, manifest["metadata"]["name"])
    clock = FakeClock(now)
    api.clock = clock
    agent = Agent(
        AgentConfig(node_name=node.name, polling_interval=5.0, update_interval=300.0),
        api,
        MachineBox(node),
        live=lambda _now: {},
        clock=clock,
    )
    agent.step()
    return api.slot_ads(node.name), agent


@pytest.mark.parametrize(("policy", "machine"), PAIRS, ids=[f"{p.stem}-{m.stem}" for p, m in PAIRS])
def test_agent_simulate_and_timeline_agree(policy: Path, machine: Path) -> None:
    effective = compile_policy(_policy(policy).spec)
    node = _machine(machine)
    interval = 5.0

    # The ads: the agent's first status equals `kondor simulate` with no job, at t=0.
    published, agent = _agent_ads(policy, machine, 0.0)
    assert published == simulate(node, effective, []).slots
    assert agent.startd is not None
    offers = [
        slot_offer(ad.attributes, ad.expressions, 0.0)
        for ad in startd.published_ads(agent.startd, {}, 0.0)
    ]

    for path in JOBS:
        job = _job(path)
        name = job.metadata.name
        ad = submit_ad(job.spec, name)
        where = f"{policy.stem} x {machine.stem} x {path.stem}"

        # The timeline, and simulate at the time the timeline first negotiates.
        scenario = Scenario(node, _policy(policy), interval, interval, (Step(0, 0.0, submit=job),))
        timeline = replay(scenario)
        queued = next(j for j in timeline.jobs if j.name == name)
        later = simulate(node, effective, [(name, ad)], now=interval)
        assert later.placements[0].slot == queued.slot, where
        assert (queued.slot is None) == (later.placements[0].reason is not None), where
        ads = [a.attributes for a in startd.published_ads(timeline.startd, {}, interval)]
        assert _without_when(ads) == _without_when(later.slots), where

        # The agent's startd, offered to the negotiator and sent its match, decides as
        # simulate does at t=0.
        now = simulate(node, effective, [(name, ad)], now=0.0).placements[0]
        cycle = negotiate([IdleJob(name, ad)], offers)
        if not cycle.matches:
            assert now.slot is None, where
            continue
        events = {cycle.matches[0].slot: [Match(name, ad, job_id=name), ActivateClaim()]}
        result = startd.tick(agent.startd, {}, 0.0, slot_events=events)
        claimed = [s.name for s in result.startd.state.slots if s.claim is not None]
        assert claimed == ([now.slot] if now.slot else []), where


def _without_when(ads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in ad.items() if k not in _WHEN} for ad in ads]


def test_a_vanilla_only_policy_starts_an_execution_job_in_simulate_and_the_timeline() -> None:
    """The copies used to disagree: `simulate --request`'s job ad had no JobUniverse."""
    policy = EXAMPLES / "policies" / "vanilla-only.yaml"
    machine = EXAMPLES / "machines" / "node-a.yaml"
    job = _job(EXAMPLES / "jobs" / "small.yaml")
    effective = compile_policy(_policy(policy).spec)
    placed = simulate(_machine(machine), effective, [("small", submit_ad(job.spec, "small"))])
    assert placed.placements[0].slot == f"slot1_1@{_machine(machine).name}"
    scenario = Scenario(_machine(machine), _policy(policy), 5.0, 5.0, (Step(0, 0.0, submit=job),))
    assert [j.slot for j in replay(scenario).jobs] == [placed.placements[0].slot]
