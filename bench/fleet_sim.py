"""Many agents in one process, for benchmarks (`bench_fleet.py`): each agent's loop is an asyncio
task and its steps run on a small shared thread pool, so that a thousand simulated nodes need
neither a thousand threads (`Agent.run` blocks one) nor a thousand processes.

A real node runs one agent (`kondor-agent`, one per node from the DaemonSet); this only packs
many `Agent`s, unchanged, into one event loop. The agents' API objects are the caller's: give
them one shared client (one connection pool) and, for reads of their ExecutionPoints, one
shared watch that calls `Fleet.wake` when an ExecutionPoint's spec changes.

Benchmark support, not part of the agent: it lives beside the benchmarks, which import it as
`fleet_sim` (a script's own directory is on its path; the tests add `bench/` to theirs).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kondor_agent.jobs import JobRunner, RuntimeLaunchers
from kondor_agent.kube import (
    ConflictError,
    KubernetesAPI,
    NotFoundError,
    SlotPolicies,
    WriteError,
    informer,
)
from kondor_agent.loop import Agent, AgentConfig
from kondor_agent.machinefile import MachineFile
from kondor_agent.runtimes.pod import PodHandle, PodLauncher
from kondor_agent.services import JobService
from kondor_core.api import (
    EXECUTION_JOBS,
    EXECUTION_POINT_LABEL,
    EXECUTION_POINTS,
    Machine,
    SlotPolicySpec,
)
from kondor_core.config import EffectivePolicy, compile_policy
from kondor_kube import paths
from kondor_kube.client import Client, Query
from kondor_kube.errors import ConflictError as ApiConflictError
from kondor_kube.errors import KubeError
from kondor_kube.errors import NotFoundError as ApiNotFoundError

log = logging.getLogger("kondor_agent")

#: After a step raised (a bug, not a failed API call: the loop handles those), try again after
#: this long rather than spin.
RETRY_AFTER_ERROR = 5.0


class SharedCompile:
    """`compile_policy` shared by the agents of one process: a real node compiles its
    SlotPolicy on its own CPU, once per generation; a thousand simulated nodes would compile
    the same spec a thousand times on the machine that also runs the control plane. The
    result is immutable; the last `keep` specs are remembered."""

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self._compiled: dict[str, EffectivePolicy] = {}

    def __call__(self, spec: SlotPolicySpec) -> EffectivePolicy:
        key = spec.model_dump_json()
        found = self._compiled.get(key)
        if found is None:
            found = compile_policy(spec)  # PolicyError: raised to each agent, as on its node
            if len(self._compiled) >= self.keep:
                self._compiled.pop(next(iter(self._compiled)), None)
            self._compiled[key] = found
        return found


class Fleet:
    """Runs `agents` concurrently until stopped. Steps of one agent never overlap; at most
    `workers` steps run at once. The first steps are spread over `stagger` seconds (a fleet
    of nodes does not boot in the same millisecond), which also spreads their heartbeats."""

    def __init__(self, agents: Iterable[Agent], *, workers: int = 4, stagger: float = 0.0) -> None:
        self.agents: dict[str, Agent] = {}
        for agent in agents:
            if agent.name in self.agents:
                raise ValueError(f"agents: node {agent.name!r} twice; one agent per node")
            self.agents[agent.name] = agent
        if workers < 1:
            raise ValueError(f"workers: {workers} must be at least 1")
        if stagger < 0:
            raise ValueError(f"stagger: {stagger} must not be negative")
        self.workers = workers
        self.stagger = stagger
        self._woken: dict[str, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def wake(self, name: str) -> None:
        """Have agent `name` evaluate now (its ExecutionPoint changed). Safe from any thread;
        a name the fleet does not run is ignored."""
        agent = self.agents.get(name)
        loop = self._loop
        if agent is None or loop is None:
            return
        agent.wake()
        event = self._woken.get(name)
        if event is not None:
            loop.call_soon_threadsafe(event.set)

    async def run(self, stop: asyncio.Event) -> None:
        """Step every agent when it asks to be stepped (or is woken) until `stop` is set;
        return once the steps under way have finished."""
        self._loop = asyncio.get_running_loop()
        self._woken = {name: asyncio.Event() for name in self.agents}
        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="kondor-fleet")
        count = len(self.agents)
        tasks = [
            asyncio.create_task(
                self._loop_one(agent, pool, self.stagger * index / count), name=agent.name
            )
            for index, agent in enumerate(self.agents.values())
        ]
        try:
            await stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.get_running_loop().run_in_executor(None, pool.shutdown)
            self._loop = None

    async def _loop_one(self, agent: Agent, pool: ThreadPoolExecutor, delay: float) -> None:
        loop = asyncio.get_running_loop()
        woken = self._woken[agent.name]
        await self._sleep(woken, delay)
        while True:
            woken.clear()  # before the step: a wake during it asks for another one
            try:
                wake_at = await loop.run_in_executor(pool, agent.step)
            except Exception:
                log.exception("agent %s: step failed; trying again shortly", agent.name)
                wake_at = agent.clock() + RETRY_AFTER_ERROR
            await self._sleep(woken, wake_at - agent.clock())

    @staticmethod
    async def _sleep(woken: asyncio.Event, seconds: float) -> None:
        """Sleep `seconds`, or less if woken. A timer handle, not a task: cheap by the thousand."""
        if woken.is_set() or seconds <= 0:
            return
        timer = asyncio.get_running_loop().call_later(seconds, woken.set)
        try:
            await woken.wait()
        finally:
            timer.cancel()


# ---- shared watches: one list+watch per kind for every agent of the process ------------------


def job_node(found: Mapping[str, Any]) -> str | None:
    """The node an ExecutionJob is matched to: its `status.executionPoint` (the agent's
    field selector)."""
    value = (found.get("status") or {}).get("executionPoint")
    return str(value) if value else None


def node_label(found: Mapping[str, Any]) -> str | None:
    """The node a job Pod belongs to: its `kondor.io/execution-point` label."""
    labels = (found.get("metadata") or {}).get("labels") or {}
    value = labels.get(EXECUTION_POINT_LABEL)
    return str(value) if value else None


def object_name(found: Mapping[str, Any]) -> str | None:
    """An ExecutionPoint's node: its name."""
    name = (found.get("metadata") or {}).get("name")
    return str(name) if name else None


def object_key(found: Mapping[str, Any]) -> str:
    meta = found.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def job_signature(found: Mapping[str, Any] | None) -> Any:
    """What of a job an agent acts on: its spec (hold, remove), the match the negotiator wrote
    and its deletion; not the operator's jobStatus nor the agent's own `status.execution`."""
    if found is None:
        return None
    status = found.get("status") or {}
    meta = found.get("metadata") or {}
    return (
        found.get("spec"),
        status.get("claimId"),
        status.get("executionPoint"),
        status.get("jobStatus") in ("Held", "Removed", "Completed"),
        meta.get("deletionTimestamp"),
    )


def pod_signature(found: Mapping[str, Any] | None) -> Any:
    """What of a job's pod an agent acts on: whether it ended."""
    if found is None:
        return None
    return (found.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def spec_signature(found: Mapping[str, Any] | None) -> Any:
    """What of an ExecutionPoint an agent acts on: its spec (policy, drain)."""
    if found is None:
        return None
    return (found.get("spec"), (found.get("metadata") or {}).get("generation"))


Signature = Callable[[Mapping[str, Any] | None], Any]


class Routed:
    """The objects of one kind as one watch saw them, grouped by node (`node_of`); each change
    that alters an object's `signature` calls `on_change(node)` for the nodes it touched (a
    job matched away from one node to another touches both). `nodes` limits the routing to
    the nodes this process runs (None: all). Fed by `listed` and `changed`, as
    `kondor_agent.kube.informer` calls them, so tests feed it by hand."""

    def __init__(
        self,
        node_of: Callable[[Mapping[str, Any]], str | None],
        signature: Signature,
        *,
        nodes: Collection[str] | None = None,
        key: Callable[[Mapping[str, Any]], str] = object_key,
    ) -> None:
        self.node_of = node_of
        self.signature = signature
        self.nodes = None if nodes is None else frozenset(nodes)
        self.key = key
        self.on_change: Callable[[str], None] = lambda _node: None
        #: node -> called with (key, the object or None when gone) on every change routed
        #: to that node (the pod launchers keep their own view of their pods).
        self.observers: dict[str, Callable[[str, Mapping[str, Any] | None], None]] = {}
        self.synced = threading.Event()
        self._by_node: dict[str, dict[str, Mapping[str, Any]]] = {}
        self._where: dict[str, str] = {}
        self._lock = threading.Lock()

    def of(self, node: str) -> list[Mapping[str, Any]]:
        with self._lock:
            return list((self._by_node.get(node) or {}).values())

    def one(self, node: str) -> Mapping[str, Any] | None:
        """The one object of `node` (an ExecutionPoint), if any."""
        with self._lock:
            found = self._by_node.get(node) or {}
            return next(iter(found.values()), None)

    def listed(self, items: list[Mapping[str, Any]]) -> None:
        seen = {self.key(item): item for item in items}
        with self._lock:
            gone = [key for key in self._where if key not in seen]
        for key in gone:
            self._apply(key, None)
        for key, item in seen.items():
            self._apply(key, item)
        self.synced.set()

    def changed(self, kind: str, found: Mapping[str, Any]) -> None:
        self._apply(self.key(found), None if kind == "DELETED" else found)

    def _apply(self, key: str, found: Mapping[str, Any] | None) -> None:
        node = self.node_of(found) if found is not None else None
        if node is not None and self.nodes is not None and node not in self.nodes:
            node = None  # another process's node: as if gone from here
        touched: list[str] = []
        with self._lock:
            old_node = self._where.pop(key, None)
            before = self._by_node.get(old_node or "", {}).pop(key, None)
            if node is not None and found is not None:
                self._by_node.setdefault(node, {})[key] = found
                self._where[key] = node
            if old_node is not None and old_node != node:
                touched.append(old_node)
                before = None if node is not None else before
            if node is not None and self.signature(before) != self.signature(found):
                touched.append(node)
            elif node is None and old_node is not None and old_node not in touched:
                touched.append(old_node)
        if node is not None and found is not None and node in self.observers:
            self.observers[node](key, found)
        elif old_node is not None and old_node in self.observers:
            self.observers[old_node](key, None)
        for name in touched:
            self.on_change(name)


class FleetExecutionPoints:
    """`ExecutionPointAPI` of every agent of the process: ExecutionPoints from one watch
    (`Routed`), SlotPolicies from another (`SlotPolicies`), status writes through one shared
    client."""

    def __init__(self, api: KubernetesAPI, routed: Routed, policies: SlotPolicies) -> None:
        self.api = api
        self.routed = routed
        self.policies = policies

    def read_execution_point(self, name: str) -> dict[str, Any] | None:
        if not self.routed.synced.is_set():
            return self.api.read_execution_point(name)
        found = self.routed.one(name)  # the watch's own: read-only (ExecutionPointAPI)
        return dict(found) if found is not None else None

    def read_slot_policy(self, name: str) -> dict[str, Any] | None:
        return self.policies.read(name, self.api)

    def patch_status(self, name: str, patch: Mapping[str, Any]) -> None:
        self.api.patch_status(name, patch)


class NodeJobs:
    """`JobAPI` of one node: its ExecutionJobs from the process's one watch of them."""

    def __init__(self, api: KubernetesAPI, routed: Routed, node: str) -> None:
        self.api = api
        self.routed = routed
        self.node = node

    @property
    def synced(self) -> bool:
        return self.routed.synced.is_set()

    @synced.setter
    def synced(self, _value: bool) -> None:
        raise AttributeError("synced: set by the shared watch, not by its readers")

    def jobs(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(dict(job)) for job in self.routed.of(self.node)]

    def patch_job_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        path = paths.kondor(EXECUTION_JOBS, name, namespace=namespace, subresource="status")
        try:
            self.api.client.merge_patch(path, patch)
        except ApiNotFoundError:
            raise NotFoundError(f"executionjob {namespace}/{name} does not exist") from None
        except ApiConflictError:
            raise ConflictError(f"executionjob {namespace}/{name} changed meanwhile") from None
        except KubeError as error:
            raise WriteError(str(error)) from None


class FleetPodLauncher(PodLauncher):
    """The agent's `PodLauncher`, unchanged, but told of its node's pods by the process's one
    watch of job pods (`Routed.observers`) instead of a watch (and a thread) of its own."""

    def __init__(self, api: KubernetesAPI, node: str, routed: Routed) -> None:
        super().__init__(api, node)
        routed.observers[node] = self.seen

    def start(self) -> None:
        """No watch of its own: the shared one calls `seen`."""

    def seen(self, key: str, found: Mapping[str, Any] | None) -> None:
        """A pod of this node as the shared watch saw it (None: gone), as the launcher's own
        watch takes it: a pod this launcher deleted stays ended (`_delete` marks it so)
        whatever the watch still shows, and a deletion changes nothing known."""
        if found is None:
            return
        namespace, _, name = key.partition("/")
        with self._lock:
            known = self._pods.get((namespace, name))
            if known is not None and "metadata" not in known:
                return
            self._pods[(namespace, name)] = found

    def _identity(self, handle: PodHandle) -> tuple[str, str] | None:
        return None  # a simulated node: no cgroup on this host


def start_watch(
    routed: Routed,
    client: Client,
    path: str,
    query: Query,
    *,
    stop: threading.Event,
    what: str,
) -> threading.Thread:
    """`informer` of the objects at `path` on a daemon thread, feeding `routed`."""
    thread = threading.Thread(
        target=informer,
        args=(client, path, query),
        kwargs={
            "listed": routed.listed,
            "changed": routed.changed,
            "lost": lambda: None,
            "stop": stop,
            "what": what,
            "timeout_seconds": 300,
        },
        name=f"watch-{what}",
        daemon=True,
    )
    thread.start()
    return thread


@dataclass
class FleetProcess:
    """Everything one process of simulated agents runs: the shared watches and the agents
    (each with a `JobRunner` whose pod jobs go to kwok), ready for `Fleet.run`."""

    api: KubernetesAPI
    agents: list[Agent]
    execution_points: Routed
    jobs: Routed
    pods: Routed
    policies: SlotPolicies
    stop: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def build(
        cls,
        api: KubernetesAPI,
        machines: Sequence[Machine],
        *,
        polling_interval: float | None = None,
    ) -> FleetProcess:
        names = [machine.name for machine in machines]
        eps = Routed(object_name, spec_signature, nodes=names)
        jobs = Routed(job_node, job_signature, nodes=names)
        pods = Routed(node_label, pod_signature, nodes=names)
        policies = SlotPolicies()
        shared = FleetExecutionPoints(api, eps, policies)
        agents = []
        compiler = SharedCompile()
        for machine in machines:
            runner = JobRunner(
                NodeJobs(api, jobs, machine.name),
                RuntimeLaunchers(pod=FleetPodLauncher(api, machine.name, pods)),
                time.time,
            )
            config = AgentConfig(node_name=machine.name, polling_interval=polling_interval)
            agents.append(
                Agent(
                    config,
                    shared,
                    _constant(machine),
                    services=[JobService(runner)],
                    compiler=compiler,
                )
            )
        return cls(api, agents, eps, jobs, pods, policies)

    def start_watches(self, fleet: Fleet) -> None:
        for routed in (self.execution_points, self.jobs, self.pods):
            routed.on_change = fleet.wake
        names = [agent.name for agent in self.agents]

        def wake_all() -> None:  # a policy changed: each agent looks whether it is its own
            for name in names:
                fleet.wake(name)

        self.policies.on_change = wake_all
        self.policies.follow(self.api, self.stop)
        api = self.api.client
        pods = [("labelSelector", EXECUTION_POINT_LABEL)]
        matched = [("fieldSelector", "status.executionPoint!=")]
        eps, jobs = paths.kondor(EXECUTION_POINTS), paths.kondor(EXECUTION_JOBS)
        start_watch(self.execution_points, api, eps, (), stop=self.stop, what="executionpoints")
        start_watch(self.jobs, api, jobs, matched, stop=self.stop, what="executionjobs")
        start_watch(self.pods, api, paths.core("pods"), pods, stop=self.stop, what="job pods")

    def synced(self) -> bool:
        watches = (self.execution_points, self.jobs, self.pods, self.policies)
        return all(watch.synced.is_set() for watch in watches)


def _constant(machine: Machine) -> Callable[[], Machine]:
    return lambda: machine


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agents of some simulated nodes (machine files) until SIGTERM: how
    `bench_scale.py` shards a thousand agents over a few processes."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--stagger", type=float, default=5.0)
    parser.add_argument("--polling-interval", type=float, default=None)
    parser.add_argument("--ready-file", type=Path, help="created once every watch has listed")
    parser.add_argument("machines", type=Path, nargs="+", help="machine files, one per node")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    machines = [MachineFile(path).read() for path in args.machines]
    # A connection for each worker and each shared watch (ExecutionPoints, jobs, pods,
    # SlotPolicies).
    api = KubernetesAPI.connect(args.kubeconfig, connections=args.workers + 5)
    process = FleetProcess.build(api, machines, polling_interval=args.polling_interval)
    fleet = Fleet(process.agents, workers=args.workers, stagger=args.stagger)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        running = asyncio.create_task(fleet.run(stop))
        await asyncio.sleep(0)  # the fleet's loop is set: wakes from the watches reach it
        process.start_watches(fleet)
        while not process.synced():
            await asyncio.sleep(0.1)
        if args.ready_file is not None:
            args.ready_file.touch()
        await running
        process.stop.set()

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
