"""The agent's side of the negotiator's preemptions: a match that preempts for user priority
(status.preemption UserPriority) is taken by the startd although the slot's RANK does not
prefer the new job, and a partitionable-slot preemption (status.preemptSlots) vacates the
named dynamic slots first, then claims the partitionable slot for the new job."""

from __future__ import annotations

from test_agent_jobs import _slots, _tick, matched, policy, start_node


def test_a_user_priority_match_preempts_a_claim_rank_would_keep() -> None:
    api, clock, launcher, agent = start_node(
        policy("one", 'NUM_SLOTS = 1\nNUM_CPUS = 1\nRANK = Owner == "bob"')
    )
    bob = matched("bob", "uid-bob#1", owner="bob")
    api.job_objects["default/bob"] = bob
    _tick(agent, clock)
    bob["status"]["jobStatus"] = "Running"
    # Without the negotiator's word the startd refuses: RANK 0 does not exceed CurrentRank 1.
    api.job_objects["default/alice"] = matched("alice", "uid-alice#1")
    _tick(agent, clock)
    assert api.execution("alice")["state"] == "Rejected"
    assert "does not exceed CurrentRank" in api.execution("alice")["reason"]
    again = matched("alice2", "uid-alice2#1")
    again["status"]["preemption"] = "UserPriority"
    api.job_objects["default/alice2"] = again
    for _ in range(4):
        _tick(agent, clock)
        clock.now += 0.2
        agent.step()
    assert ("default/bob", "SIGTERM") in launcher.signals
    assert api.execution("bob")["state"] == "Killed"
    assert api.execution("alice2")["state"] == "Running"


def test_pslot_preemption_vacates_the_named_dynamic_slots_then_claims_the_rest() -> None:
    api, clock, launcher, agent = start_node(policy("p", "NUM_CPUS = 2"))
    pslot = _pslot(_slots(api))
    runners = []
    for who in ("bob", "dave"):
        job = matched(who, f"uid-{who}#1", slot=pslot, owner=who)
        api.job_objects[f"default/{who}"] = job
        runners.append(job)
        _tick(agent, clock)
        job["status"]["jobStatus"] = "Running"
    dynamic = sorted(name for name in _slots(api) if "_" in name)
    assert len(dynamic) == 2
    bob_slot = next(s["name"] for s in api.status("node-a")["slots"] if _runs(s, "bob"))
    alice = matched("alice", "uid-alice#1", slot=pslot)
    alice["status"]["preemption"] = "UserPriority"
    alice["status"]["preemptSlots"] = [bob_slot]
    api.job_objects["default/alice"] = alice
    _tick(agent, clock)
    assert ("default/bob", "SIGTERM") in launcher.signals
    assert ("default/dave", "SIGTERM") not in launcher.signals
    for _ in range(4):
        _tick(agent, clock)
        clock.now += 0.2
        agent.step()
    assert api.execution("bob")["state"] == "Killed"
    assert api.execution("dave")["state"] == "Running"
    assert api.execution("alice")["state"] == "Running"


def _pslot(slots: dict[str, tuple[str, str, int]]) -> str:
    return next(f"{name}@node-a" for name in slots if "_" not in name)


def _runs(slot: dict[str, object], owner: str) -> bool:
    ad = slot.get("ad")
    return isinstance(ad, dict) and ad.get("RemoteOwner") == owner
