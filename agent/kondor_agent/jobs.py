"""The agent's starter side: the ExecutionJobs matched to this node, claimed, run and reported.

Every polling cycle the loop asks `events()` for what the schedd said (new matches, lease
renewals, releases, ended processes: `kondor_core.startd.claims`), steps the startd with
them, and hands the engine's actions to `carry_out()`: a refused match is answered
Rejected, start-job launches the job, soft-kill / hard-kill / suspend / continue act on its
process. Each answer is written to the job's `status.execution` (the agent's subtree,
docs/jobs.md) through a merge patch built from the `JobExecution` model: the agent reports,
the operator's schedd decides the rest of the status from it.

Jobs outlive the agent (DESIGN "Running a job on the node"): a restarted agent finds the
jobs its node was running from their status and the launcher's records, claims their slots
anew, and takes the running process back instead of starting it: never twice. A job that
ended while no agent watched is reported then, once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import ValidationError

from kondor_core import startd
from kondor_core.api import ExecutionJob, JobExecution
from kondor_core.api.job import ExecutionAccount, ExecutionState
from kondor_core.api.meta import format_time, model_patch, parse_time
from kondor_core.jobs import job_ad, job_id
from kondor_core.jobs.deferral import (
    HOLD_MISSED_DEFERRED_EXECUTION_TIME,
    MISSED_REASON,
    Start,
    start_decision,
)
from kondor_core.jobs.hooks import HOOK_PREPARE_JOB_FAILURE, PREPARE_JOB_FAILED
from kondor_core.policy import Action, ActionKind, Event
from kondor_core.slots import SlotAd
from kondor_core.startd.claims import Ended, schedd_events

log = logging.getLogger("kondor_agent.jobs")


class JobAPI(Protocol):
    #: The jobs have been listed once (before, `jobs()` would say there are none).
    synced: bool

    def jobs(self) -> list[dict[str, Any]]:
        """The ExecutionJobs labelled with this node, as plain JSON."""

    def patch_job_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """Merge-patch a job's status subresource (the agent's `execution` alone)."""


@dataclass(frozen=True)
class Outcome:
    """How a job's process ended, as the launcher recorded it."""

    exit_code: int | None = None
    exit_signal: int | None = None
    #: It never started: HTCondor's hold reason and code (6 FailedToCreateProcess, 14 ...).
    hold_reason: str | None = None
    hold_reason_code: int | None = None
    start_time: float | None = None
    end_time: float | None = None
    user_cpu: float | None = None
    sys_cpu: float | None = None
    peak_memory_mib: int | None = None
    #: Its supervisor vanished without a result (a reboot): the job is evicted, not ended.
    lost: bool = False


class Launcher(Protocol):
    """Starts and controls job processes (`kondor_agent.execute`)."""

    def launch(self, job: ExecutionJob, job_id: str, slot: SlotAd, job_ad_text: str) -> Any:
        """Start the job for `slot` (its published ad); return a handle."""

    def poll(self, handle: Any) -> Outcome | None:
        """The outcome once the process has ended, else None."""

    def ended(self, handle: Any) -> bool:
        """Whether the process has ended (its outcome is ready for `poll`)."""

    def directory(self, handle: Any) -> str: ...

    def soft_kill(self, handle: Any, signal: str) -> None: ...

    def hard_kill(self, handle: Any) -> None: ...

    def suspend(self, handle: Any) -> None: ...

    def resume(self, handle: Any) -> None: ...

    def is_suspended(self, handle: Any) -> bool:
        """Whether the job is frozen now, as the kernel says."""

    def remove(self, handle: Any) -> None:
        """Delete what the job left on the node (its directory, its pod)."""

    def clear(self) -> int:
        """Kill whatever jobs a previous agent left running on the node; how many."""


@runtime_checkable
class Configurable(Protocol):
    """A launcher that takes settings from the node's policy (the knobs in its macros)."""

    def configure(self, macros: Mapping[str, str]) -> None: ...


@dataclass(frozen=True)
class Usage:
    """What a running job uses now, as HTCondor's starter reports it to the schedd."""

    user_cpu: float | None = None
    sys_cpu: float | None = None
    #: Its memory now and the most it has used (MiB).
    memory_mib: int | None = None
    peak_memory_mib: int | None = None
    num_pids: int | None = None
    #: The job's GPU use (GPUsUsage, GPUsMemoryUsage) and its slot's GPUs' own
    #: (DeviceGPUsAverageUsage, DeviceGPUsMemoryPeakUsage), by HTCondor's names.
    gpus: dict[str, float | int] | None = None


#: The job usage attributes a busy slot's ad carries (HTCondor's names), for the coalescer:
#: they change every polling interval and are written with the next update, not at once.
SLOT_USAGE_ATTRIBUTES = frozenset(
    {
        "CondorLoadAvg",
        "RemoteUserCpu",
        "RemoteSysCpu",
        "ImageSize",
        "MemoryUsage",
        "ResidentSetSize",
        "NumPids",
        "GPUsUsage",
        "GPUsMemoryUsage",
        "DeviceGPUsAverageUsage",
        "DeviceGPUsMemoryPeakUsage",
    }
)


def slot_usage_attributes(
    usage: Usage, *, load: float | None
) -> dict[str, bool | int | float | str]:
    """A slot's job usage as its ad names it: the slot's CondorLoadAvg (the cores its job's
    cgroup used over the last polling interval, 0 while no earlier sample exists), the job's
    RemoteUserCpu and RemoteSysCpu (s), ImageSize (KiB, the peak), MemoryUsage (MiB) and
    ResidentSetSize (KiB) now, and NumPids: the names and units of the job's status."""
    out: dict[str, bool | int | float | str] = {"CondorLoadAvg": round(load or 0.0, 2)}
    if usage.user_cpu is not None:
        out["RemoteUserCpu"] = round(usage.user_cpu, 2)
    if usage.sys_cpu is not None:
        out["RemoteSysCpu"] = round(usage.sys_cpu, 2)
    peak = usage.peak_memory_mib if usage.peak_memory_mib is not None else usage.memory_mib
    if peak is not None:
        out["ImageSize"] = peak * 1024
    if usage.memory_mib is not None:
        out["MemoryUsage"] = usage.memory_mib
        out["ResidentSetSize"] = usage.memory_mib * 1024
    if usage.num_pids is not None:
        out["NumPids"] = usage.num_pids
    out.update(usage.gpus or {})
    return out


def cpu_load(previous: tuple[float, float] | None, now: float, cpu: float) -> float | None:
    """The cores used between a sample `previous` (time, CPU seconds) and (`now`, `cpu`)."""
    if previous is None or now <= previous[0]:
        return None
    return max(0.0, cpu - previous[1]) / (now - previous[0])


@runtime_checkable
class Explaining(Protocol):
    """A launcher that tells a job's JOB_EXIT hook why the agent ends it (the reference's
    "Hooks": remove, hold or evict)."""

    def note_exit_how(self, handle: Any, how: str) -> None: ...


@runtime_checkable
class ReportingHooks(Protocol):
    """A launcher that says how a job's UPDATE_JOB_INFO and JOB_EXIT hooks failed since it
    was last asked: (Event reason, message) each, reported on the ExecutionPoint."""

    def hook_failures(self, handle: Any) -> list[tuple[str, str]]: ...


@runtime_checkable
class Measuring(Protocol):
    """A launcher that can say what a running job uses."""

    def usage(self, handle: Any) -> Usage | None: ...


@runtime_checkable
class Accounting(Protocol):
    """A launcher that can say which Unix account a job runs as (`kondor_core.jobs.runas`)."""

    def account(self, handle: Any) -> ExecutionAccount | None: ...


@runtime_checkable
class Adopting(Protocol):
    """A launcher that can take back a job a previous agent started (its process outlives it)."""

    def adopt(self, job: ExecutionJob, execution: JobExecution) -> Any | None:
        """The handle of the job's run recorded by `execution`, None when there is none."""


@dataclass
class _Running:
    job: ExecutionJob
    claim_id: str
    slot: str
    handle: Any
    started: float
    killed: bool = False
    #: The startd suspended it (SUSPEND) and has not continued it yet.
    suspended: bool = False
    #: A COD application on its slot suspends it (kondor_agent.cod).
    cod_suspended: bool = False
    #: When its usage was last written (the clock's time).
    measured: float = 0.0
    #: Its CPU seconds (user + system) at the last slot-ad sample, and when: CondorLoadAvg.
    cpu_sample: tuple[float, float] | None = None
    cpu_load: float | None = None


@dataclass
class _Deferred:
    """A claimed job waiting on its slot for its DeferralTime ("Job Deferral")."""

    action: Action
    slot: SlotAd
    at: float
    #: SUSPEND came while it waited: it starts suspended ("When the deferral time arrives,
    #: HTCondor begins execution for the job, but immediately suspends it").
    suspended: bool = False


@dataclass
class _Answers:
    """The agent's answers to its jobs' claims: `status.execution`, the one field of an
    ExecutionJob's status the agent writes (HTCondor's startd and starter report, the schedd
    decides: the operator follows each answer and writes JobStatus, NumJobStarts, ExitCode,
    ... itself, `kondor_core.schedd.follow`)."""

    api: JobAPI
    launcher: Launcher
    clock: Callable[[], float]

    def write(self, job: ExecutionJob, execution: JobExecution) -> None:
        """Write the answer to the job's `status.execution` (a merge patch of the status
        subresource, the agent's field alone). A failed write is logged: the next change
        writes again, and the operator times an unanswered match out."""
        namespace, name = job.metadata.namespace or "default", job.metadata.name
        try:
            self.api.patch_job_status(
                namespace, name, {"status": {"execution": model_patch(execution)}}
            )
        except Exception as err:
            log.warning("cannot write the execution of %s: %s", job_id(job), err)

    def reject(self, job: ExecutionJob, claim_id: str, reason: str | None) -> None:
        """The match refused (by the startd, or naming no slot of this node): Rejected, with
        why; the one place a Rejected answer is written."""
        self.write(job, JobExecution(claim_id=claim_id, state="Rejected", reason=reason))

    def running(self, run: _Running, state: ExecutionState, usage: Usage | None = None) -> None:
        """Answer Running or Suspended for a run, with its usage when measured."""
        now = self.clock()
        measured: dict[str, Any] = {}
        if run.measured == 0.0:
            run.measured = now  # the first usage one interval after the start
        if usage is not None:
            run.measured = now
            measured = {
                "remote_user_cpu": usage.user_cpu,
                "remote_sys_cpu": usage.sys_cpu,
                "memory_usage": usage.memory_mib,
                "resident_set_size": None if usage.memory_mib is None else usage.memory_mib * 1024,
                "image_size": (
                    None if usage.peak_memory_mib is None else usage.peak_memory_mib * 1024
                ),
                "peak_memory": usage.peak_memory_mib,
                "num_pids": usage.num_pids,
                "gpus_usage": (usage.gpus or {}).get("GPUsUsage"),
                "gpus_memory_usage": (usage.gpus or {}).get("GPUsMemoryUsage"),
                "usage_time": format_time(now),
            }
        self.write(
            run.job,
            JobExecution(
                claim_id=run.claim_id,
                state=state,
                slot=run.slot,
                directory=self.launcher.directory(run.handle),
                start_time=format_time(run.started),
                job_current_start_executing_date=int(run.started),
                account=self.account(run),
                **measured,
            ),
        )

    def ended(self, run: _Running, outcome: Outcome) -> None:
        """Answer how the run ended: Failed (a hold reason), Killed, or Exited."""
        state: ExecutionState
        if outcome.hold_reason is not None:
            state = "Failed"
        elif run.killed:
            state = "Killed"
        else:
            state = "Exited"
        self.write(
            run.job,
            JobExecution(
                claim_id=run.claim_id,
                state=state,
                slot=run.slot,
                directory=self.launcher.directory(run.handle),
                start_time=format_time(outcome.start_time or run.started),
                end_time=format_time(outcome.end_time or self.clock()),
                exit_code=outcome.exit_code,
                exit_signal=outcome.exit_signal,
                remote_user_cpu=outcome.user_cpu,
                remote_sys_cpu=outcome.sys_cpu,
                peak_memory=outcome.peak_memory_mib,
                memory_usage=outcome.peak_memory_mib,
                image_size=(
                    None if outcome.peak_memory_mib is None else outcome.peak_memory_mib * 1024
                ),
                num_pids=0,
                job_current_start_executing_date=int(outcome.start_time or run.started),
                hold_reason=outcome.hold_reason,
                hold_reason_code=outcome.hold_reason_code,
                account=self.account(run),
            ),
        )

    def account(self, run: _Running) -> ExecutionAccount | None:
        """Who the job runs (or ran) as, for every write of its execution: a write without
        it would delete it."""
        if not isinstance(self.launcher, Accounting):
            return None
        return self.launcher.account(run.handle)


@dataclass
class JobRunner:
    """The jobs of one node: what the schedd says to the startd, and what the startd's
    actions do to the jobs' processes."""

    api: JobAPI
    launcher: Launcher
    clock: Callable[[], float]
    #: Claim ids already answered (refused or started): not offered to the startd again.
    answered: set[str] = field(default_factory=set)
    running: dict[str, _Running] = field(default_factory=dict)
    #: Ended jobs whose output stays on the node until the job is deleted (or matched away).
    finished: dict[str, list[_Running]] = field(default_factory=dict)
    _jobs: dict[str, ExecutionJob] = field(default_factory=dict)
    _ended: dict[str, Ended] = field(default_factory=dict)
    _recovered: bool = False
    #: Jobs a previous agent started whose process this one takes back: job id -> handle,
    #: until the startd has claimed their slot again (start-job) or refused to.
    _adopting: dict[str, Any] = field(default_factory=dict)
    #: Seconds between writes of a running job's usage (HTCondor's STARTER_UPDATE_INTERVAL).
    usage_interval: float = 300.0
    #: Claimed jobs waiting for their DeferralTime: job id -> what starts them.
    deferred: dict[str, _Deferred] = field(default_factory=dict)
    #: Told (job, slot) when the startd evicts a running job (fetched work's EVICT_CLAIM).
    on_evict: Callable[[ExecutionJob, str], None] | None = None
    #: Told (reason, message) when a job hook fails (an Event on the ExecutionPoint).
    on_hook_failure: Callable[[str, str], None] | None = None

    def __post_init__(self) -> None:
        self._answers = _Answers(self.api, self.launcher, self.clock)

    def known_jobs(self) -> Mapping[str, ExecutionJob]:
        """The ExecutionJobs labelled with this node at the last `events()`, by job id."""
        return self._jobs

    def events(self, node: startd.Startd) -> dict[str, list[Event]]:
        """Read the node's jobs, collect ended processes, and say what the schedd says."""
        if not self.api.synced:
            return {}  # not listed yet: nothing is known, nothing is said
        self._jobs = {}
        for raw in self.api.jobs():
            try:
                job = ExecutionJob.model_validate(raw)
            except ValidationError as err:
                log.warning("skipping an ExecutionJob that does not parse: %s", err)
                continue
            self._jobs[job_id(job)] = job
        if not self._recovered:
            self._recover()
        for name, run in list(self.running.items()):
            outcome = self.launcher.poll(run.handle)
            self._report_hook_failures(run)  # JOB_EXIT's too: recorded before the outcome
            if outcome is None:
                frozen = run.suspended or run.cod_suspended
                if frozen and not self.launcher.is_suspended(run.handle):
                    # Runtimes freeze and thaw cgroups for their own updates: freeze it again.
                    log.warning("%s was thawed behind the startd's back; freezing it again", name)
                    self.launcher.suspend(run.handle)
                if self.clock() - run.measured >= self.usage_interval:
                    self._report_usage(run)
                continue
            del self.running[name]
            self.finished.setdefault(name, []).append(run)
            run.killed = run.killed or outcome.lost
            self._ended[name] = Ended(outcome.exit_code or 0, killed=run.killed)
            self._report_end(run, outcome)
        for name in [n for n in self.finished if n not in self._jobs]:
            for run in self.finished.pop(name):
                self.launcher.remove(run.handle)
        said = schedd_events(
            node, self._jobs.values(), self.answered, self._ended, adopting=self._adopting
        )
        for name, claim_id, why in said.refused:
            self.answered.add(claim_id)
            self._answers.reject(self._jobs[name], claim_id, why)
        return said.events

    def _recover(self) -> None:
        """A (re)started agent holds no claim, as a restarted startd holds none ("Machine
        States"). The jobs its node was running whose process outlived the previous agent
        (the launcher adopts them) are claimed anew and taken back; the others (pods, runs
        the launcher has no record of) are vacated: killed and answered Killed, so the
        operator returns them to Idle and the negotiator matches them again."""
        self._recovered = True
        vacate: list[tuple[ExecutionJob, JobExecution]] = []
        for name, job in self._jobs.items():
            status = job.status
            execution = status.execution if status is not None else None
            if status is None or execution is None:
                continue
            self.answered.add(execution.claim_id)  # answered by an earlier agent
            if execution.state not in ("Running", "Suspended"):
                continue
            if status.claim_id != execution.claim_id:
                continue
            handle = None
            if isinstance(self.launcher, Adopting):
                handle = self.launcher.adopt(job, execution)
            if handle is not None:
                log.info("%s: taking back its run in %s", name, execution.directory)
                self._adopting[name] = handle
            else:
                vacate.append((job, execution))
        killed = self.launcher.clear()  # what is left running and was not taken back
        if killed:
            log.warning("killed %d job(s) a previous agent left running", killed)
        for job, execution in vacate:
            vacated = execution.model_copy(
                update={
                    "state": "Killed",
                    "end_time": format_time(self.clock()),
                    "reason": "vacated: the node's agent restarted",
                }
            )
            self._answers.write(job, vacated)

    def any_ended(self) -> bool:
        """Whether a running job's process has ended (cheap: the launcher looks for its
        result file)."""
        return any(self.launcher.ended(run.handle) for run in self.running.values())

    def delivered(self) -> None:
        """The ended processes were told to the startd."""
        self._ended = {}

    def carry_out(self, node: startd.Startd, actions: Sequence[Action]) -> list[Action]:
        """Act on the actions about jobs; the others are returned."""
        left: list[Action] = []
        ads: dict[str, SlotAd] | None = None
        for action in actions:
            name = action.job_id or ""
            run = self.running.get(name)
            if name in self.deferred and self._while_deferred(name, action):
                continue
            if action.kind is ActionKind.REFUSE_CLAIM and name in self._adopting:
                self._give_up(name, action.reason)
            elif action.kind is ActionKind.REFUSE_CLAIM and action.claim_id:
                self.answered.add(action.claim_id)
                job = self._jobs.get(name)
                if job is not None:
                    self._answers.reject(job, action.claim_id, action.reason)
            elif action.kind is ActionKind.START_JOB:
                if isinstance(self.launcher, Configurable):
                    self.launcher.configure(node.policy.macros)
                ads = (
                    ads
                    if ads is not None
                    else {ad.name: ad for ad in startd.published_ads(node, {}, self.clock())}
                )
                self._start(action, ads)
            elif action.kind is ActionKind.SOFT_KILL and run is not None:
                self._explain_kill(name, run)
                run.killed = True
                run.suspended = False  # the launcher thaws it to take its KillSig
                self.launcher.soft_kill(run.handle, action.signal or "SIGTERM")
            elif action.kind is ActionKind.HARD_KILL and run is not None:
                self._explain_kill(name, run)
                run.killed = True
                self.launcher.hard_kill(run.handle)
            elif action.kind is ActionKind.SUSPEND_JOB and run is not None:
                self.launcher.suspend(run.handle)
                run.suspended = True
                self._answers.running(run, "Suspended")
            elif action.kind is ActionKind.CONTINUE_JOB and run is not None:
                run.suspended = False
                if not run.cod_suspended:  # else it stays frozen while the COD job runs
                    self.launcher.resume(run.handle)
                    self._answers.running(run, "Running")
            elif action.kind is ActionKind.RELEASE_CLAIM:
                pass  # the operator follows the job's status
            elif action.kind in (ActionKind.SOFT_KILL, ActionKind.HARD_KILL) and run is None:
                pass  # the process is already gone; JobGone reaches the startd
            else:
                left.append(action)
        return left

    def suspend_for_cod(self, slots: set[str]) -> None:
        """Suspend the batch jobs of `slots`, where a COD application runs, and resume the
        others a COD application suspended (the reference's COD: "any batch HTCondor job on
        the same resource will be suspended" while the claim is Running; "The batch HTCondor
        job then resumes"). A job the startd suspended itself (SUSPEND) stays frozen."""
        for run in self.running.values():
            wanted = run.slot in slots
            if wanted == run.cod_suspended or run.killed:
                continue
            run.cod_suspended = wanted
            if run.suspended:
                continue
            if wanted:
                self.launcher.suspend(run.handle)
                self._answers.running(run, "Suspended")
            else:
                self.launcher.resume(run.handle)
                self._answers.running(run, "Running")

    def _explain_kill(self, name: str, run: _Running) -> None:
        """Why the job is being killed, for its JOB_EXIT hook: removed (condor_rm, or gone),
        held (condor_hold), else evicted (policy, drain, preemption): then `on_evict`, once."""
        job = self._jobs.get(name)
        status = job.status.job_status if job is not None and job.status is not None else None
        how = "evict"
        if job is None or job.spec.remove or status == "Removed":
            how = "remove"
        elif job.spec.hold or status == "Held":
            how = "hold"
        if isinstance(self.launcher, Explaining):
            self.launcher.note_exit_how(run.handle, how)
        if how == "evict" and self.on_evict is not None and job is not None and not run.killed:
            self.on_evict(job, run.slot)

    def _give_up(self, name: str, why: str | None) -> None:
        """The restarted startd refused the claim of a job it was taking back: vacated."""
        handle = self._adopting.pop(name)
        job = self._jobs[name]
        self.launcher.hard_kill(handle)
        status = job.status
        execution = status.execution if status is not None else None
        claim_id = execution.claim_id if execution is not None else ""
        slot = (execution.slot if execution is not None else None) or ""
        run = _Running(job, claim_id, slot, handle, 0.0)
        self.finished.setdefault(name, []).append(run)
        reason = f"vacated: the node's agent restarted and refused the claim ({why})"
        self._answers.write(
            job,
            JobExecution(
                claim_id=claim_id,
                state="Killed",
                directory=self.launcher.directory(handle),
                end_time=format_time(self.clock()),
                reason=reason,
            ),
        )

    def _start(self, action: Action, ads: Mapping[str, SlotAd]) -> None:
        name = action.job_id or ""
        job = self._jobs.get(name)
        claim_id = action.claim_id or ""
        self.answered.add(claim_id)
        if job is None:
            log.warning("start-job for %s, which is no longer matched here", name)
            self._ended[name] = Ended(killed=True)
            return
        adopted = self._adopting.pop(name, None)
        if adopted is not None:
            # Its process outlived the previous agent: taken back, never started twice.
            execution = job.status.execution if job.status is not None else None
            began = parse_time(execution.start_time or "") if execution is not None else None
            started = began.timestamp() if began is not None else self.clock()
            run = _Running(job, claim_id, action.slot, adopted, started)
            if self.launcher.is_suspended(adopted):
                self.launcher.resume(adopted)  # SUSPEND, if it still holds, freezes it again
            self.running[name] = run
            self._answers.running(run, "Running")
            return
        if self._defer(job, action, ads[action.slot]):
            return
        self._launch(job, action, ads[action.slot])

    def _launch(self, job: ExecutionJob, action: Action, slot_ad: SlotAd) -> None:
        name = action.job_id or ""
        claim_id = action.claim_id or ""
        handle = self.launcher.launch(job, name, slot_ad, job_ad(job).printOld())
        run = _Running(job, claim_id, action.slot, handle, self.clock())
        self.running[name] = run
        self._answers.running(run, "Running")

    # -- job deferral ("Time Scheduling for Job Execution"): the starter's wait ----------------

    def _defer(self, job: ExecutionJob, action: Action, slot_ad: SlotAd) -> bool:
        """The starter's check of DeferralTime on arrival (`deferral.start_decision`): a job
        whose time is ahead waits on its claimed slot, answered Running (the manual: "While
        a job waits, its ... JobStatus indicates the job is in the Running state"); one past
        its DeferralWindow is answered Failed with HoldReasonCode 20 and never starts. True
        when the job does not start now."""
        status = job.status
        at = status.deferral_time if status is not None else None
        decision = start_decision(at, job.spec.window_seconds, self.clock())
        if decision is Start.NOW or at is None:
            return False
        name = action.job_id or ""
        claim_id = action.claim_id or ""
        if decision is Start.MISSED:
            log.info("%s missed its DeferralTime %s: held", name, format_time(at))
            self._ended[name] = Ended(killed=True)
            answer = JobExecution(
                claim_id=claim_id,
                state="Failed",
                slot=action.slot,
                end_time=format_time(self.clock()),
                hold_reason=MISSED_REASON,
                hold_reason_code=HOLD_MISSED_DEFERRED_EXECUTION_TIME,
            )
            self._answers.write(job, answer)
            return True
        log.info("%s waits on %s for its DeferralTime %s", name, action.slot, format_time(at))
        self.deferred[name] = _Deferred(action, slot_ad, at)
        self._answers.write(job, JobExecution(claim_id=claim_id, state="Running", slot=action.slot))
        return True

    def start_deferred(self) -> None:
        """Start the waiting jobs whose DeferralTime has come (the loop calls this every
        step and wakes at `next_deferred`)."""
        now = self.clock()
        for name, waiting in list(self.deferred.items()):
            if now < waiting.at:
                continue
            del self.deferred[name]
            job = self._jobs.get(name)
            if job is None:
                self._ended[name] = Ended(killed=True)
                continue
            self._launch(job, waiting.action, waiting.slot)
            run = self.running.get(name)
            if waiting.suspended and run is not None:
                self.launcher.suspend(run.handle)
                run.suspended = True
                self._answers.running(run, "Suspended")

    def next_deferred(self) -> float | None:
        """The earliest DeferralTime a waiting job starts at (None: none waits)."""
        return min((waiting.at for waiting in self.deferred.values()), default=None)

    def _while_deferred(self, name: str, action: Action) -> bool:
        """The startd's actions on a job still waiting for its DeferralTime: a kill ends the
        wait (answered Killed: the operator holds, removes or re-queues it), SUSPEND and
        CONTINUE only mark it. True when the action was taken here."""
        waiting = self.deferred[name]
        if action.kind in (ActionKind.SOFT_KILL, ActionKind.HARD_KILL):
            del self.deferred[name]
            self._ended[name] = Ended(killed=True)
            job = self._jobs.get(name)
            if job is not None:
                claim_id = waiting.action.claim_id or ""
                killed = JobExecution(
                    claim_id=claim_id,
                    state="Killed",
                    slot=waiting.action.slot,
                    end_time=format_time(self.clock()),
                    reason="vacated while waiting for its DeferralTime",
                )
                self._answers.write(job, killed)
            return True
        if action.kind in (ActionKind.SUSPEND_JOB, ActionKind.CONTINUE_JOB):
            waiting.suspended = action.kind is ActionKind.SUSPEND_JOB
            return True
        return False

    def slot_usage(self, now: float) -> dict[str, dict[str, bool | int | float | str]]:
        """Per busy slot, its job's usage for the slot ad (`slot_usage_attributes`): one
        reading of each running job's cgroup, each polling interval."""
        out: dict[str, dict[str, bool | int | float | str]] = {}
        if not isinstance(self.launcher, Measuring):
            return out
        for run in self.running.values():
            usage = self.launcher.usage(run.handle)
            if usage is None:
                continue
            cpu = (usage.user_cpu or 0.0) + (usage.sys_cpu or 0.0)
            load = cpu_load(run.cpu_sample, now, cpu)
            if load is None and run.cpu_sample is not None:
                load = run.cpu_load  # sampled twice at one time: the last interval's load
            else:
                run.cpu_sample = (now, cpu)
            run.cpu_load = load
            out[run.slot] = slot_usage_attributes(usage, load=load)
        return out

    def _report_usage(self, run: _Running) -> None:
        """Write what the running job uses now (CPU time, memory, processes)."""
        run.measured = self.clock()
        if not isinstance(self.launcher, Measuring):
            return
        usage = self.launcher.usage(run.handle)
        if usage is not None:
            frozen = run.suspended or run.cod_suspended
            self._answers.running(run, "Suspended" if frozen else "Running", usage)

    def _report_end(self, run: _Running, outcome: Outcome) -> None:
        """A PREPARE_JOB hook that failed the job is an Event too; then the answer."""
        if outcome.hold_reason_code == HOOK_PREPARE_JOB_FAILURE and self.on_hook_failure:
            self.on_hook_failure(PREPARE_JOB_FAILED, f"{job_id(run.job)}: {outcome.hold_reason}")
        self._answers.ended(run, outcome)

    def _report_hook_failures(self, run: _Running) -> None:
        """The job's failed UPDATE_JOB_INFO and JOB_EXIT runs, as Events (`on_hook_failure`)."""
        if not isinstance(self.launcher, ReportingHooks):
            return
        for reason, message in self.launcher.hook_failures(run.handle):
            if self.on_hook_failure is not None:
                self.on_hook_failure(reason, f"{job_id(run.job)}: {message}")


@dataclass(frozen=True)
class _Tagged:
    launcher: Launcher
    inner: Any


class RuntimeLaunchers:
    """The launcher of each runtime: `process` and `apptainer` jobs run as processes under a
    supervisor, `pod` jobs as Pods. A runtime with no launcher on this node fails the job
    with a hold reason saying so."""

    def __init__(self, process: Launcher | None = None, pod: Launcher | None = None) -> None:
        self.process = process
        self.pod = pod

    def launch(self, job: ExecutionJob, job_id: str, slot: SlotAd, job_ad_text: str) -> Any:
        runtime = job.spec.runtime
        launcher = self.pod if runtime == "pod" else self.process
        if launcher is None:
            return _Tagged(
                _Unavailable(f"this node runs no {runtime or 'runtime-less'} jobs"), None
            )
        return _Tagged(launcher, launcher.launch(job, job_id, slot, job_ad_text))

    def poll(self, handle: _Tagged) -> Outcome | None:
        return handle.launcher.poll(handle.inner)

    def ended(self, handle: _Tagged) -> bool:
        return handle.launcher.ended(handle.inner)

    def directory(self, handle: _Tagged) -> str:
        return handle.launcher.directory(handle.inner)

    def soft_kill(self, handle: _Tagged, signal: str) -> None:
        handle.launcher.soft_kill(handle.inner, signal)

    def note_exit_how(self, handle: _Tagged, how: str) -> None:
        if isinstance(handle.launcher, Explaining):
            handle.launcher.note_exit_how(handle.inner, how)

    def hard_kill(self, handle: _Tagged) -> None:
        handle.launcher.hard_kill(handle.inner)

    def suspend(self, handle: _Tagged) -> None:
        handle.launcher.suspend(handle.inner)

    def resume(self, handle: _Tagged) -> None:
        handle.launcher.resume(handle.inner)

    def is_suspended(self, handle: _Tagged) -> bool:
        return handle.launcher.is_suspended(handle.inner)

    def remove(self, handle: _Tagged) -> None:
        handle.launcher.remove(handle.inner)

    def clear(self) -> int:
        return sum(launcher.clear() for launcher in (self.process, self.pod) if launcher)

    def configure(self, macros: Mapping[str, str]) -> None:
        for launcher in (self.process, self.pod):
            if isinstance(launcher, Configurable):
                launcher.configure(macros)

    def hook_failures(self, handle: _Tagged) -> list[tuple[str, str]]:
        if not isinstance(handle.launcher, ReportingHooks):
            return []
        return handle.launcher.hook_failures(handle.inner)

    def account(self, handle: _Tagged) -> ExecutionAccount | None:
        if not isinstance(handle.launcher, Accounting):
            return None
        return handle.launcher.account(handle.inner)

    def usage(self, handle: _Tagged) -> Usage | None:
        if not isinstance(handle.launcher, Measuring):
            return None
        return handle.launcher.usage(handle.inner)

    def adopt(self, job: ExecutionJob, execution: JobExecution) -> Any | None:
        launcher = self.pod if job.spec.runtime == "pod" else self.process
        if not isinstance(launcher, Adopting):
            return None
        inner = launcher.adopt(job, execution)
        return None if inner is None else _Tagged(launcher, inner)


@dataclass(frozen=True)
class _Unavailable:
    """A runtime this node cannot run: the job ends at once, Failed (HoldReasonCode 6)."""

    why: str

    def launch(self, job: ExecutionJob, job_id: str, slot: SlotAd, job_ad_text: str) -> None:
        return None

    def poll(self, handle: Any) -> Outcome:
        return Outcome(hold_reason=self.why, hold_reason_code=6)

    def ended(self, handle: Any) -> bool:
        return True

    def directory(self, handle: Any) -> str:
        return ""

    def soft_kill(self, handle: Any, signal: str) -> None:
        pass

    def hard_kill(self, handle: Any) -> None:
        pass

    def suspend(self, handle: Any) -> None:
        pass

    def resume(self, handle: Any) -> None:
        pass

    def is_suspended(self, handle: Any) -> bool:
        return False

    def remove(self, handle: Any) -> None:
        pass

    def clear(self) -> int:
        return 0
