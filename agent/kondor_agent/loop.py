"""The agent's loop: detect → read the ExecutionPoint and its SlotPolicy → carve → evaluate →
act → report, one polling interval at a time.

Everything that decides is pure (`kondor_agent.startd`, `kondor_agent.report`, the core);
this module gathers the inputs through injected objects (the API, the machine source, the
live facts, the clock) and applies the results, so tests drive it with fakes and fake time.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from kondor_agent.backfill import BackfillRunner
from kondor_agent.benchmarks import BenchmarkRunner
from kondor_agent.cod import CodRunner
from kondor_agent.cron import CronRunner
from kondor_agent.jobs import SLOT_USAGE_ATTRIBUTES, JobRunner
from kondor_agent.kube import ExecutionPointAPI, NotFoundError, WriteError
from kondor_agent.metrics import AgentMetrics
from kondor_agent.report import Coalescer
from kondor_core import startd
from kondor_core.api import (
    InvalidObjectError,
    Machine,
    PolicyRef,
    ResolvedPolicy,
    SlotPolicy,
    SlotPolicySpec,
    describe_errors,
    validate,
)
from kondor_core.api.base import Condition
from kondor_core.api.conditions import set_condition
from kondor_core.api.executionpoint import (
    DrainStatus,
    ExecutionPointSpec,
    ExecutionPointStatus,
    PowerStatus,
)
from kondor_core.api.meta import format_time
from kondor_core.config import EffectivePolicy, PolicyError, compile_policy
from kondor_core.fleet import policy_verdict
from kondor_core.policy import Action, ActionKind, BenchmarksDone, EngineError, Event
from kondor_core.policy import Activity as EngineActivity
from kondor_core.policy import State as EngineState
from kondor_core.slots import LayoutError
from kondor_core.startd.cod import engine_events as cod_engine_events
from kondor_core.startd.drain import drain_status, drain_step, exited, resumed
from kondor_core.startd.power import PowerConfigError, check_interval, power_status
from kondor_core.startd.power import evaluate as evaluate_hibernate

if TYPE_CHECKING:  # httpx is imported only where work is fetched
    from kondor_agent.fetchwork import FetchWork

log = logging.getLogger("kondor_agent")

Fact = Any
LiveFacts = Callable[[float], Mapping[str, Fact]]
READY = "Ready"


def no_live_facts(_now: float) -> Mapping[str, Fact]:
    """A simulated node's live facts: none beyond its machine file (the engine computes
    ClockMin and ClockDay from the time itself)."""
    return {}


@dataclass(frozen=True)
class AgentConfig:
    node_name: str
    #: Seconds between policy evaluations; None: the policy's POLLING_INTERVAL.
    polling_interval: float | None = None
    #: Seconds between heartbeat writes; None: the policy's UPDATE_INTERVAL.
    update_interval: float | None = None
    #: A change is written this long after it is seen, with whatever else changed meanwhile.
    debounce: float = 0.5


#: Actions `kondor_core.startd.tick` has already carried out in its carve model.
_DONE_BY_THE_STARTD = (ActionKind.CARVE_DYNAMIC_SLOT, ActionKind.RELEASE_DYNAMIC_SLOT)
#: How often a running job's end is looked for between polling ticks (seconds): one stat per
#: job; at 0.2 s an agent with 8 jobs used 1.3% of a core idle (bench/bench_agent_idle.py).
JOB_WATCH_INTERVAL = 0.5


class Agent:
    """One node's agent. `step()` runs what is due and returns when to call it next."""

    def __init__(
        self,
        config: AgentConfig,
        api: ExecutionPointAPI,
        machines: Callable[[], Machine],
        *,
        live: LiveFacts = no_live_facts,
        clock: Callable[[], float] = time.time,
        metrics: AgentMetrics | None = None,
        cron: CronRunner | None = None,
        benchmarks: BenchmarkRunner | None = None,
        jobs: JobRunner | None = None,
        cod: CodRunner | None = None,
        fetch: FetchWork | None = None,
        compiler: Callable[[SlotPolicySpec], EffectivePolicy] = compile_policy,
    ) -> None:
        self.config = config
        #: Compiles a SlotPolicy's spec (`compile_policy`; a fleet simulation shares one
        #: compile among its agents, as if each node had compiled it on its own CPU).
        self.compiler = compiler
        #: The node's COD claims and their applications; None: no COD (tests, --oneshot).
        self.cod = cod
        #: Runs the slots' fetch-work hooks; None: no work is fetched.
        self.fetch = fetch
        #: When the next fetch is due (a slot's FetchWorkDelay after its last one).
        self._fetch_due: float | None = None
        #: Runs the policy's startd cron jobs; None: no cron (their ads stay empty).
        self.cron = cron
        #: Runs Mips/KFlops when the engine asks (run-benchmarks); None: not carried out.
        self.benchmarks = benchmarks
        #: Claims and runs the jobs matched to this node; None: no jobs (tests, --oneshot).
        self.jobs = jobs
        if cron is not None:
            cron.machine_ad = self._machine_ad
        self.api = api
        self.machines = machines
        self.live = live
        self.clock = clock
        self.metrics = metrics or AgentMetrics()
        self.startd: startd.Startd | None = None
        #: The SlotPolicy spec `self.startd` was carved under.
        self._carved_spec: SlotPolicySpec | None = None
        self.coalescer = Coalescer(
            debounce=config.debounce,
            volatile=frozenset(startd.CLOCK_ATTRIBUTES) | SLOT_USAGE_ATTRIBUTES,
        )
        self.conditions: list[Condition] = []
        self._published: ExecutionPointStatus | None = None
        self._started = False
        self._policy_ref: ResolvedPolicy | None = None
        self._policy: SlotPolicy | None = None
        self._next_tick: float | None = None
        self._waiting_for_ep = False
        #: Called with the whole status after each successful write.
        self.on_written: Callable[[Mapping[str, Any]], None] | None = None
        self._wakeup = threading.Event()
        self._woken = False
        self._degraded = False
        #: The drain request (its requestedAt) the startd was given, and how it goes.
        self._drain_applied: str | None = None
        self._drain: DrainStatus | None = None
        #: Power management: the slots' last HIBERNATE agreement and when it was checked.
        self._power: PowerStatus | None = None
        self._power_checked: float | None = None
        #: Runs the SlotPolicy's backfill process on slots in Backfill; None: not carried out.
        self.backfill: BackfillRunner | None = None

    @property
    def name(self) -> str:
        return self.config.node_name

    # -- one step ----------------------------------------------------------------------------

    def step(self) -> float:
        """Evaluate if a polling tick is due, write if a write is due; the next wake time."""
        now = self.clock()
        if self.jobs is not None and self.jobs.deferred:
            self.jobs.start_deferred()  # at their DeferralTime, not at the next tick
        if self.jobs is not None and self.jobs.any_ended():
            self._woken = True  # a job's exit is a state change: act on it now
        if self.cod is not None and self.cod.any_ended():
            self._woken = True  # a COD application's exit too
        fetch_due = self._fetch_due is not None and now >= self._fetch_due
        if self._woken or fetch_due or self._next_tick is None or now >= self._next_tick:
            self._woken = False  # before the tick: a wake during it asks for another one
            self._tick(now)
            self._next_tick = now + self._polling_interval()
        if self.coalescer.due(now):
            self._write(now)
        wake = self._next_tick
        if (self.jobs is not None and self.jobs.running) or (
            self.cod is not None and self.cod.busy
        ):
            wake = min(wake, now + JOB_WATCH_INTERVAL)
        deferred = self.jobs.next_deferred() if self.jobs is not None else None
        if deferred is not None:
            wake = min(wake, max(deferred, now))
        if self._fetch_due is not None:
            wake = min(wake, max(self._fetch_due, now))
        due = self.coalescer.next_due()
        return wake if due is None else min(wake, max(due, now))

    def wake(self) -> None:
        """Evaluate now rather than at the next polling tick: the ExecutionPoint changed (a
        new policy, say). Safe to call from another thread."""
        self._woken = True
        self._wakeup.set()

    def run(self, stop: threading.Event) -> None:
        """Step until `stop` is set (SIGTERM, Ctrl-C; call `wake()` after setting it)."""
        while not stop.is_set():
            wake = self.step()
            self._wakeup.wait(max(0.0, wake - self.clock()))
            self._wakeup.clear()

    def _polling_interval(self) -> float:
        if self.config.polling_interval is not None:
            return self.config.polling_interval
        return self.startd.polling_interval if self.startd is not None else 5.0

    def _update_interval(self) -> float:
        if self.config.update_interval is not None:
            return self.config.update_interval
        return self.startd.update_interval if self.startd is not None else 300.0

    # -- the cycle ---------------------------------------------------------------------------

    def _tick(self, now: float) -> None:
        self._degraded = False
        try:
            machine = self.machines()
        except Exception as err:  # a bad machine file, a failed detection: said in Ready
            self._condition(now, "False", "MachineUnknown", f"cannot describe the machine: {err}")
            self._observe_nothing(now)
            return
        try:
            ep = self.api.read_execution_point(self.name)
        except Exception as err:  # a read that fails is retried at the next tick
            log.warning("cannot read executionpoint %s: %s", self.name, err)
            return
        if ep is None:
            if not self._waiting_for_ep:
                log.info(
                    "executionpoint %s does not exist yet; waiting for the operator", self.name
                )
            self._waiting_for_ep = True
            return
        self._waiting_for_ep = False
        if self.fetch is not None:
            self.fetch.execution_point_uid = (ep.get("metadata") or {}).get("uid")
        if not self._started:
            self._restart_from(ep.get("status"))
        spec = self._spec(ep)
        if spec is None:
            return
        if spec.policy is None:
            self.startd = None
            if self.cron is not None:
                self.cron.configure((), self.cron.settings)
            self._condition(now, "False", "NoPolicy", "no SlotPolicy selects this node")
            self._observe_nothing(now)
            return
        self._load_policy(spec.policy, now)
        if self._policy is None:
            self._observe_nothing(now)
            return
        self._carve(machine, self._policy, now)
        if self.startd is None:
            self._observe_nothing(now)
            return
        if exited(spec.drain, self._drain):
            self._serve_nothing_after_exit(now)
            return
        live = self.live(now)
        self.coalescer.volatile = self.coalescer.volatile | frozenset(live)
        events = self._gather_hooks(now)
        if self.jobs is not None:
            for slot, said in self.jobs.events(self.startd).items():
                events.setdefault(slot, []).extend(said)
        if self.backfill is not None:
            busy = [
                slot.name
                for slot in self.startd.state.slots
                if slot.state is EngineState.BACKFILL
                and slot.activity in (EngineActivity.BUSY, EngineActivity.KILLING)
            ]
            for slot, said in self.backfill.events_for(busy).items():
                events.setdefault(slot, []).extend(said)
        if self.cod is not None:
            # The batch claims under running COD applications go Claimed/Suspended (and back).
            suspended = self.cod.suspended_slots()
            for slot, said in cod_engine_events(self.startd.state.slots, suspended).items():
                events.setdefault(slot, []).extend(said)
        if self._drain_applied is None:
            self._drain_applied = resumed(spec.drain, self._drain)  # an earlier agent's, done
        drain = drain_step(spec.drain, self._drain_applied)
        started = time.perf_counter()
        result = startd.tick(
            self.startd, live, now, slot_events=events, machine_events=drain.events
        )
        self.metrics.evaluation.observe(time.perf_counter() - started)
        self._drain_applied = drain.applied
        self._drain = drain_status(spec.drain, result.startd.state, self._drain, now)
        if self.jobs is not None:
            self.jobs.delivered()
        self.startd = result.startd
        self._check_power(live, now)
        self._stop_stray_backfill()
        for transition in result.transitions:
            log.info(
                "%s: %s/%s -> %s/%s (%s)",
                transition.slot,
                transition.from_state,
                transition.from_activity,
                transition.state,
                transition.activity,
                transition.reason,
            )
        pending = self._carry_out(result.actions)
        if pending:
            for action in pending:
                log.warning("not carried out: %s", action.as_dict())
            self.metrics.not_carried_out(pending)
        if self.fetch is not None:
            runs = self.jobs.running.values() if self.jobs is not None else ()
            running = {run.slot: run.job for run in runs}
            known = {} if self.jobs is None else self.jobs.known_jobs()
            self._fetch_due = self.fetch.step(self.startd, running, known, now)
        if not self._degraded:
            self._condition(
                now, "True", "SlotsPublished", f"slots carved with SlotPolicy {spec.policy.name}"
            )
        usage = self.jobs.slot_usage(now) if self.jobs is not None else None
        if self.cod is not None:
            usage = self._cod_tick(now, usage)
        status = startd.status(self.startd, live, now, conditions=self.conditions, usage=usage)
        status = status.model_copy(update={"drain": self._drain})
        self.metrics.set_slots((slot.state, slot.activity) for slot in status.slots)
        self._observe_status(now, status)
        if (
            self.cron is not None
            and self.cron.take_update()
            and self.coalescer.changed_since is None
        ):
            # `- update:true` (or STARTD_CRON_AUTOPUBLISH): write now, not at the heartbeat.
            self.coalescer.changed_since = now

    def _cod_tick(
        self, now: float, usage: dict[str, dict[str, Any]] | None
    ) -> dict[str, dict[str, Any]]:
        """Step the COD claims, suspend or resume the batch jobs under them, and add what
        the slot ads show of them to the slots' attributes."""
        assert self.cod is not None and self.startd is not None
        self.cod.tick(self.startd, now)
        suspended = self.cod.suspended_slots()
        if self.jobs is not None:
            self.jobs.suspend_for_cod(suspended)
        if cod_engine_events(self.startd.state.slots, suspended):
            self._woken = True  # a COD application started or ended: the engine follows now
        merged = {slot: dict(attributes) for slot, attributes in (usage or {}).items()}
        for slot, attributes in self.cod.slot_attributes().items():
            merged.setdefault(slot, {}).update(attributes)
        return merged

    def _check_power(self, live: Mapping[str, Any], now: float) -> None:
        """HIBERNATE in every slot, each HIBERNATE_CHECK_INTERVAL seconds (power management
        is off, and `status.power` absent, when the policy does not set it)."""
        assert self.startd is not None
        try:
            interval = check_interval(self.startd.policy.macros)
        except PowerConfigError as err:
            self._condition(now, "False", "PolicyInvalid", str(err))
            interval = 0.0
        if interval <= 0:
            self._power = self._power_checked = None
            return
        if self._power_checked is not None and now - self._power_checked < interval:
            return
        self._power_checked = now
        agreement = evaluate_hibernate(self.startd, live, now)
        if self._power is None or agreement.state != self._power.sleep_state:
            log.info("power: sleep state %s (%s)", agreement.state, agreement.why or "all agree")
        self._power = power_status(agreement, self._power, now)

    def _serve_nothing_after_exit(self, now: float) -> None:
        """condor_drain -exit-on-completion, carried out: as an exited startd's ads leave the
        collector, the node publishes no slots (so nothing is matched to it) until the drain
        is cancelled or replaced; the drain's status stays to say why."""
        self._condition(
            now,
            "False",
            "Exited",
            "the startd exited after draining (-exit-on-completion); "
            f"`kubectl kondor drain -cancel {self.name}` brings the node back",
        )
        self.metrics.set_slots(())
        self._observe_status(
            now, ExecutionPointStatus(conditions=self.conditions, drain=self._drain)
        )

    def _stop_stray_backfill(self) -> None:
        """Kill a backfill process whose slot is no longer in Backfill (it moved on before the
        process's start was told to it, or the slot is gone)."""
        if self.backfill is None or not self.backfill.running:
            return
        assert self.startd is not None
        backfilling = {
            slot.name for slot in self.startd.state.slots if slot.state is EngineState.BACKFILL
        }
        for slot in self.backfill.running - backfilling:
            self.backfill.kill(slot)

    def _gather_hooks(self, now: float) -> dict[str, list[Event]]:
        """Merge the cron jobs' latest ads and finished benchmarks into the startd; the
        BenchmarksDone events for the slots that were benchmarking."""
        assert self.startd is not None
        if self.cron is not None:
            self.startd = startd.with_cron_ads(self.startd, self.cron.ads())
            # Cron output goes out with the next write, as HTCondor's with the next update.
            self.coalescer.volatile = self.coalescer.volatile | self.cron.attribute_names()
        done = self.benchmarks.poll() if self.benchmarks is not None else None
        if done is None:
            return {}
        log.info("benchmarks: Mips %d, KFlops %d (%.2fs)", done.mips, done.kflops, done.seconds)
        self.startd = startd.with_benchmarks(self.startd, done.attributes(now))
        return {
            slot.name: [BenchmarksDone()]
            for slot in self.startd.state.slots
            if slot.activity is EngineActivity.BENCHMARKING
        }

    def _carry_out(self, actions: Sequence[Action]) -> list[Action]:
        """Carry out the jobs' actions, the benchmarks and backfill; the actions left."""
        assert self.startd is not None
        if self.jobs is not None:
            actions = self.jobs.carry_out(self.startd, actions)
        left = []
        spec = self._policy.spec.backfill if self._policy is not None else None
        for action in actions:
            if action.kind is ActionKind.RUN_BENCHMARKS and self.benchmarks is not None:
                self.benchmarks.start()
            elif action.kind is ActionKind.START_BACKFILL and self.backfill and spec:
                self.backfill.start(action.slot, spec)
            elif action.kind is ActionKind.KILL_BACKFILL and self.backfill is not None:
                self.backfill.kill(action.slot)
            elif action.kind not in _DONE_BY_THE_STARTD:
                left.append(action)
        return left

    def _machine_ad(self) -> Mapping[str, Any]:
        """What a cron job's CONDITION sees: the machine ad, without slot attributes."""
        node = self.startd
        return startd.machine_ad(node, {}) if node is not None else {}

    def _restart_from(self, raw: Any) -> None:
        """A (re)started agent takes back what it last published."""
        self._started = True
        if not isinstance(raw, Mapping):
            return
        raw = copy.deepcopy(raw)  # kept: not the watch's own object
        self.coalescer.start_from(raw)
        try:
            self._published = ExecutionPointStatus.model_validate(dict(raw))
        except ValidationError as err:
            log.warning("ignoring the published status: %s", "; ".join(describe_errors(err)))
            return
        self.conditions = list(self._published.conditions)
        self._drain = self._published.drain
        self._power = self._published.power
        if self._published.slots:
            log.info("restarting from %d published slots", len(self._published.slots))

    def _spec(self, ep: Mapping[str, Any]) -> ExecutionPointSpec | None:
        try:
            return ExecutionPointSpec.model_validate(ep.get("spec") or {})
        except ValidationError as err:
            log.error("executionpoint %s: bad spec: %s", self.name, "; ".join(describe_errors(err)))
            return None

    def _load_policy(self, ref: PolicyRef, now: float) -> None:
        """Follow the SlotPolicy the ExecutionPoint names: take each new generation of it (as
        read, from the watch's cache) once the operator's status calls it valid, as a startd
        reads its configuration again at condor_reconfig. Until then, or when the operator
        found it invalid, the slots stay as they were (Ready says why when there are none,
        or when the generation is invalid)."""
        try:
            raw = self.api.read_slot_policy(ref.name)
        except Exception as err:
            log.warning("cannot read slotpolicy %s: %s", ref.name, err)
            return
        if raw is None:
            self._condition(now, "False", "PolicyNotFound", f"SlotPolicy {ref.name} not found")
            self._policy = None
            self.startd = None
            return
        verdict = policy_verdict(raw)
        current = self._policy_ref
        if (
            self._policy is not None
            and current is not None
            and (current.name, current.generation) == (ref.name, verdict.generation)
        ):
            return
        what = f"SlotPolicy {ref.name} generation {verdict.generation}"
        kept = "; the slots stay as they were" if self.startd is not None else ""
        if verdict.state == "pending":
            if self.startd is None:
                message = f"{what} is not checked by the operator yet"
                self._condition(now, "False", "PolicyPending", message)
            return
        if verdict.state == "invalid":
            message = f"{what} is invalid: {verdict.message}{kept}"
            self._condition(now, "False", "PolicyInvalid", message)
            return
        try:
            policy = validate(SlotPolicy, _manifest(raw), what=f"slotpolicy {ref.name}")
        except InvalidObjectError as err:
            self._condition(now, "False", "PolicyInvalid", f"{err}{kept}")
            return
        assert isinstance(policy, SlotPolicy)
        self._policy = policy
        self._policy_ref = ResolvedPolicy(
            name=ref.name, generation=verdict.generation, hash=verdict.hash
        )

    def _carve(self, machine: Machine, policy: SlotPolicy, now: float) -> None:
        ref = self._policy_ref
        assert ref is not None
        current = self.startd
        same_policy = (
            current is not None
            and self._carved_spec == policy.spec
            and current.applied.name == ref.name
            and current.applied.generation == ref.generation
        )
        if current is not None and same_policy:
            if current.machine == machine:
                return
            # New facts on the same slots: the claims, the jobs and the states stay.
            refreshed = startd.with_machine(current, machine)
            if refreshed is not None:
                self.startd = refreshed
                return
        try:
            self.startd = startd.start(
                machine,
                self.compiler(policy.spec),
                now,
                applied=ref,
                previous=current,
                published=self._published if current is None else None,
            )
            self._carved_spec = policy.spec
        except (PolicyError, LayoutError, EngineError) as err:
            # As a startd keeps its configuration when a reconfig fails, the slots stay.
            kept = "" if current is None else "; the slots stay as they were"
            message = f"SlotPolicy {ref.name} does not fit this machine: {err}{kept}"
            self._condition(now, "False", "PolicyInvalid", message)
            return
        if ref.hash and ref.hash != self.startd.compiled_hash:
            log.warning(
                "slotpolicy %s compiles to %s here, the operator's hash is %s",
                ref.name,
                self.startd.compiled_hash,
                ref.hash,
            )
        for warning in self.startd.warnings:
            log.warning("slotpolicy %s: %s", ref.name, warning)
        if self.cron is not None:
            self.cron.configure(
                self.startd.cron_jobs, self.startd.cron_settings, reconfig=current is not None
            )
        what = "carved" if current is None else "re-carved"
        log.info(
            "%s %d slots with slotpolicy %s generation %d",
            what,
            len(self.startd.state.slots),
            ref.name,
            ref.generation,
        )

    def _condition(self, now: float, status: str, reason: str, message: str) -> None:
        """Set the Ready condition; log it when it changes (not on every tick): a wait for
        the operator's check is news, anything else not Ready an error."""
        self._degraded = self._degraded or status != "True"
        old = next((c for c in self.conditions if c.type == READY), None)
        if old is None or (old.status, old.reason, old.message) != (status, reason, message):
            news = status == "True" or reason == "PolicyPending"
            log.log(logging.INFO if news else logging.ERROR, "%s: %s", reason, message)
        self.conditions = set_condition(
            self.conditions,
            Condition(type=READY, status=status, reason=reason, message=message),
            now,
        )

    def _observe_nothing(self, now: float) -> None:
        """Publish no slots (nothing carved), with the conditions that say why."""
        status = ExecutionPointStatus(conditions=self.conditions)
        self.metrics.set_slots(())
        self._observe_status(now, status)

    def _observe_status(self, now: float, status: ExecutionPointStatus) -> None:
        if self.startd is not None and self._power is not None:
            status = status.model_copy(update={"power": self._power})
        document = status.dump()
        document.pop("operator", None)  # the operator's subtree: never written here
        self.coalescer.update_interval = self._update_interval()
        self.coalescer.observe(document, now)

    # -- report ------------------------------------------------------------------------------

    def _write(self, now: float) -> None:
        patch = self.coalescer.patch(format_time(now))
        try:
            self.api.patch_status(self.name, patch)
        except NotFoundError:
            self.metrics.api_writes.labels("not-found").inc()
            log.warning("executionpoint %s is gone; waiting for it again", self.name)
            self.coalescer.failed(now)
            self._started = False
            self.coalescer.published = None
            return
        except (WriteError, OSError, Exception) as err:
            self.metrics.api_writes.labels("error").inc()
            log.warning("writing the status of executionpoint %s failed: %s", self.name, err)
            self.coalescer.failed(now)
            return
        self.metrics.api_writes.labels("ok").inc()
        self.coalescer.written(patch, now)
        if self.on_written is not None and self.coalescer.published is not None:
            self.on_written(self.coalescer.published)


def _manifest(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A SlotPolicy object as read from the API server, reduced to what the model knows."""
    metadata = raw.get("metadata") or {}
    return {
        "apiVersion": raw.get("apiVersion"),
        "kind": raw.get("kind"),
        "metadata": {"name": metadata.get("name")},
        "spec": raw.get("spec") or {},
    }
