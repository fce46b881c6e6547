"""condor_drain through the ExecutionPoint's spec (kondor_core.startd.drain): the events the
startd is given for a request, and the drain's state as the node's status shows it."""

from __future__ import annotations

from typing import Any

import pytest

from kondor_core import startd
from kondor_core.api import (
    DrainRequest,
    DrainStatus,
    ExecutionJobSpec,
    ExecutionPoint,
    Machine,
    SlotPolicySpec,
)
from kondor_core.config import compile_policy
from kondor_core.jobs import submit_ad
from kondor_core.policy import (
    ActivateClaim,
    CancelDrain,
    Drain,
    DrainMode,
    Event,
    JobExited,
    JobGone,
    Match,
)
from kondor_core.startd.drain import (
    CORDON_REQUESTER,
    cordon_drains,
    drain_status,
    drain_step,
    exited,
    resumed,
)


def request(at: str = "2026-11-23T10:00:00Z", **fields: Any) -> DrainRequest:
    return DrainRequest.model_validate({"requestedAt": at, **fields})


@pytest.mark.parametrize(
    ("requested", "applied", "events", "now_applied"),
    [
        (None, None, (), None),
        (request(), None, (Drain(DrainMode.GRACEFUL),), "2026-11-23T10:00:00Z"),
        (request(mode="fast"), None, (Drain(DrainMode.FAST),), "2026-11-23T10:00:00Z"),
        (
            request(resumeOnCompletion=True, mode="quick"),
            None,
            (Drain(DrainMode.QUICK, resume_on_completion=True),),
            "2026-11-23T10:00:00Z",
        ),
        (request(), "2026-11-23T10:00:00Z", (), "2026-11-23T10:00:00Z"),  # given already
        (None, "2026-11-23T10:00:00Z", (CancelDrain(),), None),  # -cancel
        (  # a new request replaces the one being carried out
            request("2026-11-23T11:00:00Z", mode="quick"),
            "2026-11-23T10:00:00Z",
            (CancelDrain(), Drain(DrainMode.QUICK)),
            "2026-11-23T11:00:00Z",
        ),
    ],
)
def test_the_startd_is_told_each_request_once(
    requested: DrainRequest | None,
    applied: str | None,
    events: tuple[object, ...],
    now_applied: str | None,
) -> None:
    step = drain_step(requested, applied)
    assert (step.events, step.applied) == (events, now_applied)


def node_with_a_job(retirement: int) -> startd.Startd:
    machine = Machine.model_validate({"name": "n", "cpus": 2, "memory": "4Gi", "disk": "1Gi"})
    policy = compile_policy(
        SlotPolicySpec.model_validate({"condorConfig": f"MAXJOBRETIREMENTTIME = {retirement}"})
    )
    node = startd.tick(startd.start(machine, policy, 0), {}, 0).startd
    events: dict[str, list[Event]] = {
        "slot1@n": [Match("c1", submit_ad(ExecutionJobSpec(), "j"), job_id="j"), ActivateClaim()]
    }
    return startd.tick(node, {}, 1, slot_events=events).startd


def states(node: startd.Startd) -> dict[str, tuple[str, str]]:
    return {s.name: (s.state.value, s.activity.value) for s in node.state.slots}


def test_a_graceful_drain_lets_the_job_retire_then_shows_drained() -> None:
    wanted = request()
    node = node_with_a_job(retirement=3600)  # longer than MachineMaxVacateTime's 600 s
    step = drain_step(wanted, None)
    node = startd.tick(node, {}, 2, machine_events=step.events).startd
    status = drain_status(wanted, node.state, None, 2)
    assert status is not None and (status.state, status.mode) == ("Draining", "graceful")
    assert ("Claimed", "Retiring") in states(node).values()
    # The job ends within its retirement time: its slot goes Drained, and so the node.
    job_slot = next(n for n, s in states(node).items() if s == ("Claimed", "Retiring"))
    node = startd.tick(node, {}, 30, slot_events={job_slot: [JobExited(0)]}).startd
    node = startd.tick(node, {}, 31).startd
    assert set(states(node).values()) == {("Drained", "Idle")}
    drained = drain_status(wanted, node.state, status, 31)
    assert drained is not None and (drained.state, drained.since) == (
        "Drained",
        "1970-01-01T00:00:31Z",
    )
    assert drain_status(wanted, node.state, drained, 40) is drained  # unchanged: same object


def test_cancel_returns_the_slots_and_clears_the_status() -> None:
    wanted = request(mode="fast")
    node = node_with_a_job(retirement=3600)
    node = startd.tick(node, {}, 2, machine_events=drain_step(wanted, None).events).startd
    node = startd.tick(node, {}, 3, slot_events={"slot1_1@n": [JobGone()]}).startd  # killed
    assert all(state == "Drained" for state, _ in states(node).values())
    node = startd.tick(
        node, {}, 4, machine_events=drain_step(None, wanted.requested_at).events
    ).startd
    assert all(state in ("Owner", "Unclaimed") for state, _ in states(node).values())
    assert drain_status(None, node.state, None, 4) is None


def test_resume_on_completion_is_not_repeated_by_a_restarted_agent() -> None:
    wanted = request(resumeOnCompletion=True, mode="fast")
    node = node_with_a_job(retirement=0)
    node = startd.tick(node, {}, 2, machine_events=drain_step(wanted, None).events).startd
    status = drain_status(wanted, node.state, None, 2)
    assert status is not None and status.state == "Draining"
    for now, events in ((3, {"slot1_1@n": [JobGone()]}), (4, {}), (5, {})):
        node = startd.tick(node, {}, now, slot_events=events).startd
        status = drain_status(wanted, node.state, status, now)
    assert status is not None and status.state == "Resumed"
    assert node.state.draining is None
    # A new agent reads the published status: the spec still names this request, done.
    assert resumed(wanted, status) == wanted.requested_at
    assert drain_step(wanted, resumed(wanted, status)).events == ()
    assert resumed(request("2026-11-23T12:00:00Z"), status) is None
    assert (
        resumed(wanted, DrainStatus.model_validate({**status.dump(), "state": "Drained"})) is None
    )


def test_exit_on_completion_ends_exited_until_the_request_goes() -> None:
    wanted = request(exitOnCompletion=True, mode="fast")
    node = node_with_a_job(retirement=3600)
    node = startd.tick(node, {}, 2, machine_events=drain_step(wanted, None).events).startd
    status = drain_status(wanted, node.state, None, 2)
    assert status is not None and status.state == "Draining" and not exited(wanted, status)
    node = startd.tick(node, {}, 3, slot_events={"slot1_1@n": [JobGone()]}).startd
    node = startd.tick(node, {}, 4).startd
    status = drain_status(wanted, node.state, status, 4)
    assert status is not None and status.state == "Exited"
    assert node.state.draining is not None  # the slots stay Drained: nothing resumes
    assert exited(wanted, status)
    assert not exited(None, status)  # cancelled
    assert not exited(request("2026-11-23T12:00:00Z", exitOnCompletion=True), status)  # replaced


def test_exit_on_completion_wins_over_resume_on_completion() -> None:
    both = request(resumeOnCompletion=True, exitOnCompletion=True)
    assert drain_step(both, None).events == (Drain(DrainMode.GRACEFUL),)


def test_start_lets_freed_resources_take_jobs_until_the_last_old_job_exits() -> None:
    """condor_drain -graceful -start: the partitionable slot keeps taking jobs the -start
    expression accepts while the job that ran when the drain began retires; once that job
    exits, the jobs accepted while draining are evicted and the machine drains."""
    wanted = request(start="TARGET.Short =?= true")
    node = node_with_a_job(retirement=3600)
    node = startd.tick(node, {}, 2, machine_events=drain_step(wanted, None).events).startd
    assert node.state.drain_start == "TARGET.Short =?= true"
    assert states(node)["slot1@n"] == ("Unclaimed", "Idle")  # not Drained: it takes jobs
    assert states(node)["slot1_1@n"] == ("Claimed", "Retiring")
    ad = next(a for a in startd.published_ads(node, {}, 2) if a.name == "slot1@n")
    assert ad.attributes["Start"] == "TARGET.Short =?= true"
    assert "Start" in ad.expressions

    long_job = submit_ad(ExecutionJobSpec(), "long")
    refused = startd.tick(
        node,
        {},
        3,
        slot_events={"slot1@n": [Match("c2", long_job, job_id="long"), ActivateClaim()]},
    )
    assert any(a.kind.value == "refuse-claim" for a in refused.actions)
    short = submit_ad(ExecutionJobSpec.model_validate({"attributes": {"Short": "true"}}), "short")
    node = startd.tick(
        node, {}, 4, slot_events={"slot1@n": [Match("c3", short, job_id="short"), ActivateClaim()]}
    ).startd
    accepted = next(s for s in node.state.slots if s.claim and s.claim.job_id == "short")
    assert accepted.claim is not None and accepted.claim.accepted_while_draining
    assert (accepted.state.value, accepted.activity.value) == ("Claimed", "Busy")
    node = startd.tick(node, {}, 10).startd
    assert states(node)[accepted.name] == ("Claimed", "Busy")  # not retired while old runs

    # The job that ran when the drain began exits: the accepted one is evicted at once.
    node = startd.tick(node, {}, 20, slot_events={"slot1_1@n": [JobExited(0)]}).startd
    node = startd.tick(node, {}, 21).startd
    assert states(node)[accepted.name][0] == "Preempting"
    node = startd.tick(node, {}, 22, slot_events={accepted.name: [JobGone()]}).startd
    node = startd.tick(node, {}, 23).startd
    assert set(states(node).values()) == {("Drained", "Idle")}
    assert drain_status(wanted, node.state, None, 23) is not None


def cordon_ep(name: str, drain: dict[str, Any] | None = None, policy: str = "p") -> ExecutionPoint:
    spec: dict[str, Any] = {"nodeName": name, "policy": {"name": policy}}
    if drain is not None:
        spec["drain"] = drain
    return ExecutionPoint.model_validate({"metadata": {"name": name}, "spec": spec})


def test_a_cordoned_node_drains_gracefully_and_uncordoning_cancels_only_that_drain() -> None:
    admin = {"requestedAt": "2026-11-23T09:00:00Z", "requestedBy": "admin"}
    cordon = {"requestedAt": "2026-11-23T09:00:00Z", "requestedBy": CORDON_REQUESTER}
    points = [
        cordon_ep("a"),  # cordoned, policy drains on cordon: drained
        cordon_ep("b", policy="other"),  # cordoned, its policy does not
        cordon_ep("c", drain=admin),  # cordoned, an admin's drain already: left alone
        cordon_ep("d", drain=cordon),  # uncordoned: its cordon drain cancelled
        cordon_ep("e", drain=admin),  # uncordoned, an admin's drain: left alone
    ]
    plan = cordon_drains({"a", "b", "c"}, points, lambda policy: policy == "p", "T")
    assert plan.drain == {
        "a": {
            "mode": "graceful",
            "reason": "the Node is cordoned",
            "requestedAt": "T",
            "requestedBy": CORDON_REQUESTER,
        }
    }
    assert plan.cancel == ("d",)
    assert DrainRequest.model_validate(plan.drain["a"]).mode == "graceful"


def test_a_re_carved_startd_keeps_draining_with_the_same_request() -> None:
    """A reconfig does not end a drain: the re-carved slots drain under the same mode,
    -resume-on-completion and -start."""
    node = node_with_a_job(retirement=0)
    drain = Drain(DrainMode.GRACEFUL, resume_on_completion=True, start="TARGET.Wanted")
    node = startd.tick(node, {}, 2, machine_events=(drain,)).startd
    re_carved = startd.start(node.machine, node.policy, 3, previous=node)
    state = re_carved.state
    assert (state.draining, state.resume_on_completion, state.drain_start) == (
        DrainMode.GRACEFUL,
        True,
        "TARGET.Wanted",
    )
    fresh = startd.start(node.machine, node.policy, 3)
    assert fresh.state.draining is None
