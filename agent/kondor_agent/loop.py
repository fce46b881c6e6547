"""The agent's loop: detect → read the ExecutionPoint and its SlotPolicy → carve → evaluate →
act → report, one polling interval at a time.

Everything that decides is pure (`kondor_agent.startd`, `kondor_agent.report`, the core);
this module gathers the inputs through injected objects (the API, the machine source, the
live facts, the clock, the node's services: `kondor_agent.services`) and applies the results,
so tests drive it with fakes and fake time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError

from kondor_agent.kube import ExecutionPointAPI
from kondor_agent.metrics import AgentMetrics
from kondor_agent.services import NodeService
from kondor_agent.status import PowerWatch, StatusReport, Written
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
from kondor_core.api.executionpoint import (
    DrainStatus,
    ExecutionPointSpec,
    ExecutionPointStatus,
)
from kondor_core.config import EffectivePolicy, PolicyError, compile_policy
from kondor_core.fleet import policy_verdict
from kondor_core.policy import Action, ActionKind, EngineError, Event, Transition
from kondor_core.slots import LayoutError
from kondor_core.startd.drain import drain_status, drain_step, exited, resumed

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
#: A kind of service (`Agent.service`).
S = TypeVar("S", bound=NodeService)


class Agent:
    """One node's agent. `step()` runs what is due and returns when to call it next.

    `services` are the node's services (jobs, COD, cron, benchmarks, backfill, fetch work:
    `kondor_agent.services`), driven in the order given; none (tests, --oneshot, a fleet
    simulation) publishes the slots alone."""

    def __init__(
        self,
        config: AgentConfig,
        api: ExecutionPointAPI,
        machines: Callable[[], Machine],
        *,
        live: LiveFacts = no_live_facts,
        clock: Callable[[], float] = time.time,
        metrics: AgentMetrics | None = None,
        services: Sequence[NodeService] = (),
        compiler: Callable[[SlotPolicySpec], EffectivePolicy] = compile_policy,
    ) -> None:
        self.config = config
        #: Compiles a SlotPolicy's spec (`compile_policy`; a fleet simulation shares one
        #: compile among its agents, as if each node had compiled it on its own CPU).
        self.compiler = compiler
        self.services = list(services)
        self.api = api
        self.machines = machines
        self.live = live
        self.clock = clock
        self.metrics = metrics or AgentMetrics()
        self.startd: startd.Startd | None = None
        #: The SlotPolicy spec `self.startd` was carved under.
        self._carved_spec: SlotPolicySpec | None = None
        self.report = StatusReport(
            debounce=config.debounce, volatile=frozenset(startd.CLOCK_ATTRIBUTES)
        )
        #: The writes' coalescer (`report`'s).
        self.coalescer = self.report.coalescer
        self._published: ExecutionPointStatus | None = None
        self._started = False
        self._policy_ref: ResolvedPolicy | None = None
        self._policy: SlotPolicy | None = None
        self._next_tick: float | None = None
        self._waiting_for_ep = False
        self._wakeup = threading.Event()
        self._woken = False
        #: The drain request (its requestedAt) the startd was given, and how it goes.
        self._drain_applied: str | None = None
        self._drain: DrainStatus | None = None
        #: Power management: the slots' last HIBERNATE agreement and when it was checked.
        self.power = PowerWatch()
        for service in self.services:
            service.attach(lambda: self.startd)

    @property
    def name(self) -> str:
        return self.config.node_name

    @property
    def on_written(self) -> Callable[[Mapping[str, Any]], None] | None:
        """Called with the whole status after each successful write."""
        return self.report.on_written

    @on_written.setter
    def on_written(self, call: Callable[[Mapping[str, Any]], None] | None) -> None:
        self.report.on_written = call

    def service(self, kind: type[S]) -> S | None:
        """The first of the agent's services of type `kind`, None if it has none."""
        return next((s for s in self.services if isinstance(s, kind)), None)

    def close(self) -> None:
        """Stop the services (their threads, the backfill processes)."""
        for service in self.services:
            service.close()

    # -- one step ----------------------------------------------------------------------------

    def step(self) -> float:
        """Evaluate if a polling tick is due, write if a write is due; the next wake time."""
        now = self.clock()
        # Every service is asked (deferred jobs start at their DeferralTime, not at a tick).
        due = [service.between_ticks(now) for service in self.services]
        if any(due) or self._woken or self._next_tick is None or now >= self._next_tick:
            self._woken = False  # before the tick: a wake during it asks for another one
            self._tick(now)
            self._next_tick = now + self._polling_interval()
        if self.coalescer.due(now):
            self._write(now)
        wakes = [service.next_wake(now) for service in self.services]
        wake = min([self._next_tick, *(w for w in wakes if w is not None)])
        write = self.coalescer.next_due()
        return wake if write is None else min(wake, max(write, now))

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
        """One polling tick: the inputs, the services' observations, the engine, the
        actions, the status."""
        self.report.begin_tick()
        spec = self._carved_for(now)
        if spec is None or self.startd is None:
            return
        live = self.live(now)
        self.coalescer.volatile = self.coalescer.volatile | frozenset(live)
        events = self._observe_services(now)
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
        self.startd = result.startd
        for service in self.services:
            service.settle(self.startd)
        trouble = self.power.check(self.startd, live, now)
        if trouble is not None:
            self.report.condition(now, "False", "PolicyInvalid", trouble)
        _log_transitions(result.transitions)
        pending = self._carry_out(result.actions)
        if pending:
            for action in pending:
                log.warning("not carried out: %s", action.as_dict())
            self.metrics.not_carried_out(pending)
        if not self.report.degraded:
            assert spec.policy is not None
            message = f"slots carved with SlotPolicy {spec.policy.name}"
            self.report.condition(now, "True", "SlotsPublished", message)
        self._publish_slots(live, now)

    def _carved_for(self, now: float) -> ExecutionPointSpec | None:
        """Read the machine, the ExecutionPoint and its SlotPolicy, and carve the slots; the
        ExecutionPoint's spec when the engine has slots to evaluate, else None (with no slots
        published and Ready saying why, or nothing written when the ExecutionPoint cannot
        be read)."""
        try:
            machine = self.machines()
        except Exception as err:  # a bad machine file, a failed detection: said in Ready
            self.report.condition(
                now, "False", "MachineUnknown", f"cannot describe the machine: {err}"
            )
            self._observe_nothing(now)
            return None
        ep = self._read_execution_point()
        if ep is None:
            return None
        spec = _parse_spec(self.name, ep)
        if spec is None:
            return None
        if spec.policy is None:
            self.startd = None
            for service in self.services:
                service.configure(None, reconfig=False)
            self.report.condition(now, "False", "NoPolicy", "no SlotPolicy selects this node")
            self._observe_nothing(now)
            return None
        self._load_policy(spec.policy, now)
        if self._policy is not None:
            self._carve(machine, self._policy, now)
        if self._policy is None or self.startd is None:
            self._observe_nothing(now)
            return None
        if exited(spec.drain, self._drain):
            self._serve_nothing_after_exit(now)
            return None
        return spec

    def _read_execution_point(self) -> Mapping[str, Any] | None:
        """The node's ExecutionPoint (None: unreadable, or not created yet); the first one
        read restarts the agent from what it last published."""
        try:
            ep = self.api.read_execution_point(self.name)
        except Exception as err:  # a read that fails is retried at the next tick
            log.warning("cannot read executionpoint %s: %s", self.name, err)
            return None
        if ep is None:
            if not self._waiting_for_ep:
                log.info(
                    "executionpoint %s does not exist yet; waiting for the operator", self.name
                )
            self._waiting_for_ep = True
            return None
        self._waiting_for_ep = False
        for service in self.services:
            service.execution_point(ep)
        if not self._started:
            self._restart_from(ep.get("status"))
        return ep

    def _observe_services(self, now: float) -> dict[str, list[Event]]:
        """Each service's ads merged into the startd, in turn; the events they tell it."""
        events: dict[str, list[Event]] = {}
        for service in self.services:
            assert self.startd is not None
            seen = service.observe(self.startd, now)
            self.startd = seen.node
            self.coalescer.volatile = self.coalescer.volatile | seen.volatile
            for slot, said in seen.events.items():
                events.setdefault(slot, []).extend(said)
        return events

    def _carry_out(self, actions: Sequence[Action]) -> list[Action]:
        """The services carry out the actions they know, in turn; the actions left."""
        assert self.startd is not None
        left = list(actions)
        for service in self.services:
            left = service.carry_out(self.startd, left, self._policy)
        return [action for action in left if action.kind not in _DONE_BY_THE_STARTD]

    def _publish_slots(self, live: Mapping[str, Any], now: float) -> None:
        """The slots' status, with what the services add to the slot ads, observed for the
        next write (at once where a service asks)."""
        assert self.startd is not None
        usage: dict[str, dict[str, Any]] = {}
        write_now = False
        for service in self.services:
            given = service.after_tick(self.startd, now)
            for slot, attributes in given.attributes.items():
                usage.setdefault(slot, {}).update(attributes)
            self._woken = self._woken or given.look_again
            write_now = write_now or given.write_now
        status = startd.status(
            self.startd, live, now, conditions=self.report.conditions, usage=usage
        )
        status = status.model_copy(update={"drain": self._drain})
        self.metrics.set_slots((slot.state, slot.activity) for slot in status.slots)
        self._observe_status(now, status)
        if write_now and self.coalescer.changed_since is None:
            self.coalescer.changed_since = now

    def _serve_nothing_after_exit(self, now: float) -> None:
        """condor_drain -exit-on-completion, carried out: as an exited startd's ads leave the
        collector, the node publishes no slots (so nothing is matched to it) until the drain
        is cancelled or replaced; the drain's status stays to say why."""
        message = (
            "the startd exited after draining (-exit-on-completion); "
            f"`kubectl kondor drain -cancel {self.name}` brings the node back"
        )
        self.report.condition(now, "False", "Exited", message)
        self._observe_nothing(now, drain=self._drain)

    def _restart_from(self, raw: Any) -> None:
        """A (re)started agent takes back what it last published."""
        self._started = True
        published = self.report.restart_from(raw)
        if published is not None:
            self._published = published
            self._drain = published.drain
            self.power.status = published.power

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
            self.report.condition(
                now, "False", "PolicyNotFound", f"SlotPolicy {ref.name} not found"
            )
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
                self.report.condition(now, "False", "PolicyPending", message)
            return
        if verdict.state == "invalid":
            message = f"{what} is invalid: {verdict.message}{kept}"
            self.report.condition(now, "False", "PolicyInvalid", message)
            return
        try:
            policy = validate(SlotPolicy, _manifest(raw), what=f"slotpolicy {ref.name}")
        except InvalidObjectError as err:
            self.report.condition(now, "False", "PolicyInvalid", f"{err}{kept}")
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
            self.report.condition(now, "False", "PolicyInvalid", message)
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
        for service in self.services:
            service.configure(self.startd, reconfig=current is not None)
        what = "carved" if current is None else "re-carved"
        log.info(
            "%s %d slots with slotpolicy %s generation %d",
            what,
            len(self.startd.state.slots),
            ref.name,
            ref.generation,
        )

    def _observe_nothing(self, now: float, *, drain: DrainStatus | None = None) -> None:
        """Publish no slots (nothing carved, or the startd exited), with the conditions that
        say why (and the drain's status, after an exit)."""
        status = ExecutionPointStatus(conditions=self.report.conditions, drain=drain)
        self.metrics.set_slots(())
        self._observe_status(now, status)

    def _observe_status(self, now: float, status: ExecutionPointStatus) -> None:
        if self.startd is not None and self.power.status is not None:
            status = status.model_copy(update={"power": self.power.status})
        self.report.observe(now, status, self._update_interval())

    # -- report ------------------------------------------------------------------------------

    def _write(self, now: float) -> None:
        if self.report.write(self.api, self.name, self.metrics, now) is Written.GONE:
            self._started = False  # a new one is taken back from its status, as at a restart


def _parse_spec(name: str, ep: Mapping[str, Any]) -> ExecutionPointSpec | None:
    try:
        return ExecutionPointSpec.model_validate(ep.get("spec") or {})
    except ValidationError as err:
        log.error("executionpoint %s: bad spec: %s", name, "; ".join(describe_errors(err)))
        return None


def _log_transitions(transitions: Sequence[Transition]) -> None:
    for transition in transitions:
        log.info(
            "%s: %s/%s -> %s/%s (%s)",
            transition.slot,
            transition.from_state,
            transition.from_activity,
            transition.state,
            transition.activity,
            transition.reason,
        )


def _manifest(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A SlotPolicy object as read from the API server, reduced to what the model knows."""
    metadata = raw.get("metadata") or {}
    return {
        "apiVersion": raw.get("apiVersion"),
        "kind": raw.get("kind"),
        "metadata": {"name": metadata.get("name")},
        "spec": raw.get("spec") or {},
    }
