"""What the startd hears from the schedd, read off the ExecutionJobs matched to its node.

In HTCondor the schedd claims a matched slot, activates the claim, keeps its lease alive
and releases it ("The Claimed State and Leases"). In Kondor the operator's negotiator
writes the match into the job's status (docs/jobs.md), so the agent turns the jobs it
sees into those events, one polling cycle at a time:

- a job whose `status.claimId` the agent has not answered yet, Idle, neither held nor
  removed, is a new match: Match + ActivateClaim for `status.slot` (the startd re-checks
  START and the resources and may refuse); on a Claimed slot the match preempts (for RANK,
  or for user priority when the job's `status.preemption` says so), and its claim is
  activated once it has taken the slot over;
- a match on a partitionable slot that preempts some of its dynamic slots
  (`status.preemptSlots`, ALLOW_PSLOT_PREEMPTION) first releases their claims (the startd
  vacates their jobs by its policy) and is sent to the slot once they are all gone;
- a job still naming the claim a slot holds renews its lease (LeaseRenewed);
- a claim whose job is held, removed, deleted, or now names another claim is released
  (ReleaseClaim: the startd preempts the job by its policy, soft kill first);
- a job whose process ended is reported to its slot: JobExited with the exit code when it
  ended by itself, JobGone when it was killed, then ReleaseClaim (the schedd has no more
  work for the claim), unless the claim is retiring or a preempting claim waits;
- a job a restarted agent re-adopts (its process outlived the previous agent) is matched and
  activated again on the slot the negotiator gave it, though it is Running and its claim
  was answered: the new startd claims the slot for it and re-checks START, as for any match.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from kondor_core.api import ExecutionJob
from kondor_core.jobs import job_ad, job_id
from kondor_core.policy import (
    ActivateClaim,
    Activity,
    Event,
    JobExited,
    JobGone,
    LeaseRenewed,
    Match,
    ReleaseClaim,
    SlotState,
    State,
)
from kondor_core.startd.node import Startd


@dataclass(frozen=True)
class Ended:
    """A job's process ended: by itself with `exit_code`, or `killed` by the agent."""

    exit_code: int = 0
    killed: bool = False


@dataclass(frozen=True)
class Said:
    """What the schedd says this cycle: events by slot, and the matches that name no slot of
    this node (job id, claim id, why), which the agent refuses without asking the startd."""

    events: dict[str, list[Event]]
    refused: list[tuple[str, str, str]]


def schedd_events(
    node: Startd,
    jobs: Collection[ExecutionJob],
    answered: Collection[str],
    ended: Mapping[str, Ended],
    adopting: Collection[str] = (),
) -> Said:
    """The events for each slot this cycle.

    `jobs` are the ExecutionJobs labelled with this node, `answered` the claim ids the
    agent has already answered (refused or started), `ended` the jobs whose process ended
    since the last cycle, by job id, `adopting` the jobs whose running process a restarted
    agent takes back (claimed anew)."""
    events: dict[str, list[Event]] = {}
    refused: list[tuple[str, str, str]] = []
    holders = {s.claim.job_id: s for s in node.state.slots if s.claim is not None}
    # A preempting claim waits on its slot until the claim it preempts is gone.
    waiting = {s.pending_claim.job_id for s in node.state.slots if s.pending_claim is not None}
    by_id = {job_id(job): job for job in jobs}
    for name, job in by_id.items():
        status = job.status
        if status is None or status.claim_id is None:
            continue
        slot = holders.get(name)
        if slot is None:
            new = status.claim_id not in answered and status.job_status == "Idle"
            if (
                _wanted(job)
                and name not in waiting
                and (new or name in adopting)
                and status.slot is not None
                and name not in ended
            ):
                _claim(node, job, name, new=new, events=events, refused=refused)
        elif name not in ended:
            _held(slot, job, events)
    for name, slot in holders.items():
        if name not in by_id and name not in ended and not _releasing(slot):
            events.setdefault(slot.name, []).append(ReleaseClaim())  # the job is gone
    for name, end in ended.items():
        slot = holders.get(name)
        if slot is None:
            continue
        own = events.setdefault(slot.name, [])
        own.append(JobGone() if end.killed else JobExited(end.exit_code))
        if slot.pending_claim is None and slot.activity is not Activity.RETIRING:
            own.append(ReleaseClaim())
    return Said(events, refused)


def _wanted(job: ExecutionJob) -> bool:
    """The job still wants its claim: neither held nor removed."""
    return not (job.spec.hold or job.spec.remove)


def _claim(
    node: Startd,
    job: ExecutionJob,
    name: str,
    *,
    new: bool,
    events: dict[str, list[Event]],
    refused: list[tuple[str, str, str]],
) -> None:
    """A match for a slot no claim of this job holds: refused when the node has no such
    slot; the preempted dynamic slots' claims released first (pslot preemption); else Match
    with the job's ad (`kondor_core.jobs.job_ad`, the one the negotiator matched), and
    ActivateClaim unless the slot is Claimed (a preempting claim is activated later)."""
    status = job.status
    assert status is not None and status.claim_id is not None and status.slot is not None
    if status.slot not in {s.name for s in node.state.slots}:
        refused.append(
            (name, status.claim_id, f"match refused: this node has no slot {status.slot}")
        )
        return
    victims = [s for s in node.state.slots if s.name in (status.preempt_slots or ()) and s.claim]
    if new and victims:
        for victim in victims:  # pslot preemption: make room first
            if not _releasing(victim):
                events.setdefault(victim.name, []).append(ReleaseClaim())
        return
    preempts = status.preemption == "UserPriority"
    sent: list[Event] = [
        Match(status.claim_id, job_ad(job), job_id=name, for_user_priority=preempts)
    ]
    if node.state.slot(status.slot).state is not State.CLAIMED:
        sent.append(ActivateClaim())
    events.setdefault(status.slot, []).extend(sent)


def _held(slot: SlotState, job: ExecutionJob, events: dict[str, list[Event]]) -> None:
    """A slot holding a claim of this job: the lease renewed while the job still names the
    claim and wants it (and the claim activated once a preempting claim took the slot over,
    transition 23); else the claim released."""
    assert slot.claim is not None and job.status is not None
    if _wanted(job) and slot.claim.claim_id == job.status.claim_id:
        own = events.setdefault(slot.name, [])
        own.append(LeaseRenewed())
        if (
            slot.state is State.CLAIMED
            and slot.activity is Activity.IDLE
            and slot.claim.activations == 0
        ):
            own.append(ActivateClaim())
    elif not _releasing(slot):
        events.setdefault(slot.name, []).append(ReleaseClaim())


def _releasing(slot: SlotState) -> bool:
    """The claim is already on its way out (preempting, or retiring for good after a release
    or a vacate): nothing more to tell the slot."""
    claim = slot.claim
    return slot.state is State.PREEMPTING or (claim is not None and not claim.may_unretire)
