"""What the agent's loop asks of the node's services, and each service behind that one protocol.

A startd does more than evaluate its policy: it runs the jobs the schedd matched, COD
applications, startd cron jobs, its benchmarks, a backfill process and the fetch-work hooks.
The loop (`kondor_agent.loop.Agent`) knows none of them by name: it holds a list of
`NodeService`s and, each polling tick, asks every one in turn (in the order given) to

1. `observe` the node before the engine runs (merge its ads into the startd, say its events),
2. `settle` once the engine has run (what was told to it is delivered),
3. `carry_out` the engine's actions it knows (and hand back the others),
4. `after_tick`: step itself, and give the slots' attributes it adds (a job's usage, a COD
   claim's) and whether the engine should look again or the status go out now;

and between ticks whether anything it watches calls for a tick now (`between_ticks`) and
when it needs the loop again (`next_wake`). Each service here is a thin adapter over the
runner that does the work (`JobRunner`, `CodRunner`, `CronRunner`, `BenchmarkRunner`,
`BackfillRunner`, `FetchWork`), so those keep their own interfaces and tests.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kondor_agent.backfill import BackfillRunner
from kondor_agent.benchmarks import BenchmarkRunner
from kondor_agent.cod import CodRunner
from kondor_agent.cron import CronRunner
from kondor_agent.jobs import SLOT_USAGE_ATTRIBUTES, JobRunner
from kondor_core import startd
from kondor_core.api import SlotPolicy
from kondor_core.policy import Action, ActionKind, BenchmarksDone, Event
from kondor_core.policy import Activity as EngineActivity
from kondor_core.policy import State as EngineState
from kondor_core.startd.cod import engine_events as cod_engine_events

if TYPE_CHECKING:  # httpx is imported only where work is fetched
    from kondor_agent.fetchwork import FetchWork

log = logging.getLogger("kondor_agent")

#: How often a running job's end is looked for between polling ticks (seconds): one stat per
#: job; at 0.2 s an agent with 8 jobs used 1.3% of a core idle (bench/bench_agent_idle.py).
JOB_WATCH_INTERVAL = 0.5

SlotEvents = dict[str, list[Event]]
SlotAttributes = Mapping[str, Mapping[str, Any]]
CurrentStartd = Callable[[], startd.Startd | None]


@dataclass(frozen=True)
class Observation:
    """What a service adds before the engine runs: the startd with its ads merged in, the
    events per slot it has to tell, and attributes whose changes wait for the heartbeat."""

    node: startd.Startd
    events: SlotEvents = field(default_factory=dict)
    volatile: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Contribution:
    """What a service gives once the actions are carried out: attributes of the slots' ads,
    whether the engine should evaluate again at once, and whether to write now."""

    attributes: SlotAttributes = field(default_factory=dict)
    look_again: bool = False
    write_now: bool = False


class NodeService(Protocol):
    """One of the node's services, as the loop drives it (see the module's docstring).

    Subclass it to inherit the defaults: a service that neither watches, observes, acts nor
    contributes anything."""

    def attach(self, current: CurrentStartd) -> None:
        """Called once by the agent: how to read its current startd (from any thread)."""
        return None

    def between_ticks(self, now: float) -> bool:
        """Do what is due between ticks; whether the loop should evaluate now."""
        return False

    def next_wake(self, now: float) -> float | None:
        """When the loop should step again for this service (None: at its polling tick)."""
        return None

    def execution_point(self, execution_point: Mapping[str, Any]) -> None:
        """The ExecutionPoint as read this tick."""
        return None

    def configure(self, node: startd.Startd | None, *, reconfig: bool) -> None:
        """The slots were carved (again, on `reconfig`) into `node`; None: no policy."""
        return None

    def observe(self, node: startd.Startd, now: float) -> Observation:
        return Observation(node)

    def settle(self, node: startd.Startd) -> None:
        """The engine has evaluated `node`: what `observe` told it is delivered."""
        return None

    def carry_out(
        self, node: startd.Startd, actions: Sequence[Action], policy: SlotPolicy | None
    ) -> list[Action]:
        """Carry out the actions this service knows; the others, in order."""
        return list(actions)

    def after_tick(self, node: startd.Startd, now: float) -> Contribution:
        return Contribution()

    def close(self) -> None:
        """The agent stops: stop the service's threads and what must not outlive it."""
        return None


def _merge(into: SlotEvents, events: Mapping[str, Sequence[Event]]) -> None:
    for slot, said in events.items():
        into.setdefault(slot, []).extend(said)


class JobService(NodeService):
    """The jobs matched to this node (`JobRunner`)."""

    def __init__(self, runner: JobRunner) -> None:
        self.runner = runner

    def between_ticks(self, now: float) -> bool:
        if self.runner.deferred:
            self.runner.start_deferred()  # at their DeferralTime, not at the next tick
        return self.runner.any_ended()  # a job's exit is a state change: act on it now

    def next_wake(self, now: float) -> float | None:
        wake = now + JOB_WATCH_INTERVAL if self.runner.running else None
        deferred = self.runner.next_deferred()
        if deferred is not None:
            wake = max(deferred, now) if wake is None else min(wake, max(deferred, now))
        return wake

    def observe(self, node: startd.Startd, now: float) -> Observation:
        return Observation(node, self.runner.events(node), SLOT_USAGE_ATTRIBUTES)

    def settle(self, node: startd.Startd) -> None:
        self.runner.delivered()

    def carry_out(
        self, node: startd.Startd, actions: Sequence[Action], policy: SlotPolicy | None
    ) -> list[Action]:
        return self.runner.carry_out(node, actions)

    def after_tick(self, node: startd.Startd, now: float) -> Contribution:
        return Contribution(self.runner.slot_usage(now))


class CodService(NodeService):
    """The node's COD claims and their applications (`CodRunner`); the batch jobs under a
    running application are suspended through `jobs`."""

    def __init__(self, cod: CodRunner, jobs: JobRunner | None = None) -> None:
        self.cod = cod
        self.jobs = jobs

    def between_ticks(self, now: float) -> bool:
        return self.cod.any_ended()  # a COD application's exit is a state change too

    def next_wake(self, now: float) -> float | None:
        return now + JOB_WATCH_INTERVAL if self.cod.busy else None

    def observe(self, node: startd.Startd, now: float) -> Observation:
        # The batch claims under running COD applications go Claimed/Suspended (and back).
        suspended = self.cod.suspended_slots()
        return Observation(node, cod_engine_events(node.state.slots, suspended))

    def after_tick(self, node: startd.Startd, now: float) -> Contribution:
        """Step the COD claims, suspend or resume the batch jobs under them, and add what
        the slot ads show of them."""
        self.cod.tick(node, now)
        suspended = self.cod.suspended_slots()
        if self.jobs is not None:
            self.jobs.suspend_for_cod(suspended)
        # A COD application started or ended: the engine follows now.
        look_again = bool(cod_engine_events(node.state.slots, suspended))
        return Contribution(self.cod.slot_attributes(), look_again=look_again)


class CronService(NodeService):
    """The policy's startd cron jobs (`CronRunner`): their ads merged into the startd's."""

    def __init__(self, cron: CronRunner) -> None:
        self.cron = cron
        self._current: CurrentStartd = lambda: None

    def attach(self, current: CurrentStartd) -> None:
        self._current = current
        self.cron.machine_ad = self._machine_ad

    def _machine_ad(self) -> Mapping[str, Any]:
        """What a cron job's CONDITION sees: the machine ad, without slot attributes."""
        node = self._current()
        return startd.machine_ad(node, {}) if node is not None else {}

    def configure(self, node: startd.Startd | None, *, reconfig: bool) -> None:
        if node is None:
            self.cron.configure((), self.cron.settings)
        else:
            self.cron.configure(node.cron_jobs, node.cron_settings, reconfig=reconfig)

    def observe(self, node: startd.Startd, now: float) -> Observation:
        # Cron output goes out with the next write, as HTCondor's with the next update.
        node = startd.with_cron_ads(node, self.cron.ads())
        return Observation(node, volatile=self.cron.attribute_names())

    def after_tick(self, node: startd.Startd, now: float) -> Contribution:
        # `- update:true` (or STARTD_CRON_AUTOPUBLISH): write now, not at the heartbeat.
        return Contribution(write_now=self.cron.take_update())

    def close(self) -> None:
        self.cron.stop()


class BenchmarkService(NodeService):
    """Mips and KFlops, measured when the engine asks (`BenchmarkRunner`)."""

    def __init__(self, benchmarks: BenchmarkRunner) -> None:
        self.benchmarks = benchmarks

    def observe(self, node: startd.Startd, now: float) -> Observation:
        """Finished benchmarks merged into the startd; BenchmarksDone for the slots that
        were benchmarking."""
        done = self.benchmarks.poll()
        if done is None:
            return Observation(node)
        log.info("benchmarks: Mips %d, KFlops %d (%.2fs)", done.mips, done.kflops, done.seconds)
        node = startd.with_benchmarks(node, done.attributes(now))
        events: SlotEvents = {
            slot.name: [BenchmarksDone()]
            for slot in node.state.slots
            if slot.activity is EngineActivity.BENCHMARKING
        }
        return Observation(node, events)

    def carry_out(
        self, node: startd.Startd, actions: Sequence[Action], policy: SlotPolicy | None
    ) -> list[Action]:
        left = []
        for action in actions:
            if action.kind is ActionKind.RUN_BENCHMARKS:
                self.benchmarks.start()
            else:
                left.append(action)
        return left


class BackfillService(NodeService):
    """The SlotPolicy's backfill process on slots in Backfill (`BackfillRunner`)."""

    def __init__(self, backfill: BackfillRunner) -> None:
        self.backfill = backfill

    def observe(self, node: startd.Startd, now: float) -> Observation:
        busy = [
            slot.name
            for slot in node.state.slots
            if slot.state is EngineState.BACKFILL
            and slot.activity in (EngineActivity.BUSY, EngineActivity.KILLING)
        ]
        return Observation(node, self.backfill.events_for(busy))

    def settle(self, node: startd.Startd) -> None:
        """Kill a backfill process whose slot is no longer in Backfill (it moved on before the
        process's start was told to it, or the slot is gone)."""
        if not self.backfill.running:
            return
        backfilling = {slot.name for slot in node.state.slots if slot.state is EngineState.BACKFILL}
        for slot in self.backfill.running - backfilling:
            self.backfill.kill(slot)

    def carry_out(
        self, node: startd.Startd, actions: Sequence[Action], policy: SlotPolicy | None
    ) -> list[Action]:
        spec = policy.spec.backfill if policy is not None else None
        left = []
        for action in actions:
            if action.kind is ActionKind.START_BACKFILL and spec:
                self.backfill.start(action.slot, spec)
            elif action.kind is ActionKind.KILL_BACKFILL:
                self.backfill.kill(action.slot)
            else:
                left.append(action)
        return left

    def close(self) -> None:
        # Backfill processes are expendable: killed when the agent stops, or by the next agent.
        self.backfill.kill_all()


class FetchService(NodeService):
    """The slots' fetch-work hooks (`FetchWork`), stepped each tick and when a fetch is due;
    `jobs` says which jobs run and which are known (to see an accepted job matched)."""

    def __init__(self, fetch: FetchWork, jobs: JobRunner | None = None) -> None:
        self.fetch = fetch
        self.jobs = jobs
        #: When the next fetch is due (a slot's FetchWorkDelay after its last one).
        self._due: float | None = None

    def between_ticks(self, now: float) -> bool:
        return self._due is not None and now >= self._due

    def next_wake(self, now: float) -> float | None:
        return None if self._due is None else max(self._due, now)

    def execution_point(self, execution_point: Mapping[str, Any]) -> None:
        self.fetch.execution_point_uid = (execution_point.get("metadata") or {}).get("uid")

    def after_tick(self, node: startd.Startd, now: float) -> Contribution:
        runs = self.jobs.running.values() if self.jobs is not None else ()
        running = {run.slot: run.job for run in runs}
        known = {} if self.jobs is None else self.jobs.known_jobs()
        self._due = self.fetch.step(node, running, known, now)
        return Contribution()

    def close(self) -> None:
        self.fetch.stop()
