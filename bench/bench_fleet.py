"""Benchmark: a fleet of simulated nodes against the dev cluster — what Kondor costs the API server.

A dev cluster with the operator; N kwok nodes (1,000 by default) created through the API; one
SlotPolicy selecting them (POLLING_INTERVAL 5 s, UPDATE_INTERVAL `--update-interval`); one real
`kondor_agent.loop.Agent` per node, each on its own machine file (`MachineFile`), all in this
process (`fleet_sim.Fleet`, beside this file). Once every ExecutionPoint is published and the
operator judges every heartbeat fresh, it measures over a window of whole update intervals:

* API writes per second at steady state, counted by the API server (`apiserver_request_total`:
  POST, PUT, PATCH, DELETE) on ExecutionPoints and SlotPolicy status, plus the operator's
  Events (listed by their source), and by the clients themselves (the agents'
  `kondor_agent_api_writes_total`, the operator's `kondor_operator_changes_total`);
* the same as writes per node per update interval, exactly: each agent's successful writes
  stamped with its own clock (a node that keeps the promise writes at most window /
  update_interval times in the window, whatever its phase), plus failed writes and the
  operator's writes from the counters;
* after a policy change that re-carves every node (one partitionable slot becomes four static
  ones): the time until every node has re-published its slots for the new generation (the
  agents follow their SlotPolicy themselves; the operator rewrites no ExecutionPoint), writes
  per second over a window that holds the whole change, the writes per node the change cost
  beyond the heartbeats, and the operator's Events posted one by one and summarised;
* the operator's CPU (cores, /proc/<pid>/stat) and memory (RSS, peak RSS), the API server's,
  etcd's and this process's CPU (the agent loops and the harness), and the API server's write
  requests by resource.

The operator's targets (issue 16, at 1,000 nodes): idle CPU at most 0.05 cores, a re-carve
visible in every ExecutionPoint within 15 s, RSS at most 200 MiB; each is printed beside its
target and the baseline below, measured before the operator watched Node metadata only and
wrote on a bounded pool (0.27 cores on kwok's Node heartbeats, ~10 ExecutionPoint writes a
second, a re-carve in 73 to 104 s). The re-carve's end-to-end time also holds the simulated
agents' own work, 1,000 of them in this one process (~10 ms of CPU each to reload the policy,
carve and write), which a real fleet spreads over its nodes.

Beside each figure: the baseline measured here, and the reference. The kubelet writes its
node's status about once per node per 10 s (N / 10 writes/s, the rate Kubernetes itself is
sized for; kwok's Lease and Node writes in the same run are its measured stand-in). The
target: at steady state at most one write per node per update interval (N / update_interval
writes/s) — the agent's coalescer promises one heartbeat per interval and nothing else while
nothing changes, so an idle fleet sits at the target, below the kubelet by update_interval /
10. Exits 1 when the exact per-node figure is over 1. The operator's leader Lease (one renewal
per 2 s, whatever the fleet size) is a fixed cost, listed with the API server's counts.

How the agents share this process (a real node runs one `kondor-agent` of its own): one
`kubernetes` client and connection pool for their reads and writes (`KubernetesAPI`), their
steps on 16 worker threads (WORKERS), first steps staggered over one polling interval, and —
instead of two watches per agent (`WatchedExecutionPoint`: its ExecutionPoint and the
SlotPolicies, a thread and a connection each) — one watch of all ExecutionPoints whose events
wake the agent concerned, and one of the SlotPolicies whose changes wake every agent. The
agents share one compile of each SlotPolicy spec (`fleet_sim.SharedCompile`): a real node
compiles it on its own CPU, not on the machine that runs the control plane. Everything else
an agent does (its ticks, its re-carve, its status, its writes) each simulated agent does
itself, here, on the same two cores as the API server.

Run (needs the built control plane, `make controlplane`):

    .venv/bin/python bench/bench_fleet.py       # 1,000 nodes, update interval 60 s, 180 s windows
    .venv/bin/python bench/bench_fleet.py --nodes 50 --update-interval 10 --window 30  # smoke

A full run takes 8 to 10 minutes here (2 cores, 24 GiB): 1 to 2.5 to start the cluster,
create the nodes and publish every ExecutionPoint, then the two windows of 3 update
intervals each. `--update-interval 300` (HTCondor's default) with
`--window 900` is the same experiment at the real interval, in about 33 minutes; the windows
are rounded to whole update intervals, since each node writes once per interval at a phase of
its own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from fleet_sim import Fleet, SharedCompile
from kondor_agent.kube import KubernetesAPI, SlotPolicies
from kondor_agent.loop import Agent, AgentConfig
from kondor_agent.machinefile import MachineFile
from kondor_core.api import GROUP, VERSION
from kondor_core.fleet import policy_verdict
from kondor_devcluster import build, kondor, nodes, versions
from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port
from kondor_kube.events import EVENTS_NAMESPACE
from kondor_operator.kube import COMPONENT as OPERATOR_COMPONENT

ROOT = Path(__file__).resolve().parents[1]
MACHINE = ROOT / "examples/machines/kwok-small.yaml"
POLICY = "bench-fleet"
LABEL = ("kondor.io/bench", "fleet")
POLLING_INTERVAL = 5.0
#: The kubelet's node-status write: about one per node per 10 s (Lease renewals, and the
#: status itself when it changes); the rate Kubernetes is sized for.
KUBELET_PERIOD = 10.0
#: The fleet's step threads: steps wait on the API server as much as they compute, and a
#: real fleet makes its requests from every node at once (as bench_scale's fleet, 16).
WORKERS = 16
EPS = f"/apis/{GROUP}/{VERSION}/executionpoints"
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"})
READ_VERBS = frozenset({"GET", "LIST"})

#: Measured on the project machine (2 cores, 24 GiB), 1,000 nodes, update interval 60 s,
#: windows of 180 s; Kubernetes v1.32.5, etcd v3.5.35, kwok v0.7.0.
#: Timings (the *_s figures) depend on the operator's serial writes, ~10 ExecutionPoints a second.
#: The fleet ran on 4 step threads then (8 now).
BASELINE: dict[str, float] = {
    "nodes_ready_s": 16.55,
    "publish_all_s": 86.38,
    "steady_kondor_writes_per_s": 16.70,
    "steady_agent_writes_per_s": 16.69,
    "steady_operator_writes_per_s": 0.00,
    "steady_kondor_reads_per_s": 0.00,
    "steady_kwok_writes_per_s": 145.56,
    "steady_operator_cpu_cores": 0.27,  # kopf handling ~44 Node and ~17 ExecutionPoint events/s
    "steady_apiserver_cpu_cores": 0.71,
    "steady_etcd_cpu_cores": 0.11,
    "steady_fleet_cpu_cores": 0.32,
    "steady_writes_per_node_per_interval": 1.00,
    "steady_busiest_node_writes_per_interval": 1.00,
    "recarve_all_s": 72.92,
    "change_kondor_writes_per_s": 28.59,
    "change_agent_writes_per_s": 17.66,
    "change_operator_writes_per_s": 11.04,
    "change_kondor_reads_per_s": 5.52,
    "change_kwok_writes_per_s": 124.19,
    "change_operator_cpu_cores": 0.26,
    "change_apiserver_cpu_cores": 0.73,
    "change_etcd_cpu_cores": 0.09,
    "change_fleet_cpu_cores": 0.48,
    "change_writes_per_node": 2.16,
    "operator_rss_mib": 153.91,
    "operator_peak_rss_mib": 153.91,
    "fleet_rss_mib": 263.15,
}

#: The operator's targets at 1,000 nodes (issue 16): figure -> the most it may be.
TARGETS: dict[str, float] = {
    "steady_operator_cpu_cores": 0.05,
    "recarve_all_s": 15.0,
    "operator_rss_mib": 200.0,
    "operator_peak_rss_mib": 200.0,
}


# ---- the processes' own figures --------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def _memory_mib(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of `pid`, MiB."""
    found: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) / 1024
    return found


def _pids(cluster: DevCluster) -> dict[str, int]:
    data = json.loads(cluster.layout.pids.read_text())
    return {name: int(entry["pid"]) for name, entry in data.items()}


def _operator_metrics_port(pid: int) -> int:
    """The port the dev cluster gave the operator's /metrics (its KONDOR_METRICS_PORT)."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    for entry in environ:
        key, _, value = entry.decode(errors="replace").partition("=")
        if key == "KONDOR_METRICS_PORT":
            return int(value)
    raise RuntimeError("the operator has no KONDOR_METRICS_PORT")


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?P<labels>.*)\})? (?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _samples(text: str, name: str) -> Iterable[tuple[dict[str, str], float]]:
    """(labels, value) of every sample of metric `name` in Prometheus text format."""
    prefix = name + "{"
    for line in text.splitlines():
        if not (line.startswith(prefix) or line.startswith(name + " ")):
            continue
        match = _SAMPLE.match(line)
        if match is None or match["name"] != name:
            continue
        labels = dict(_LABEL.findall(match["labels"] or ""))
        yield labels, float(match["value"])


# ---- one snapshot of every counter ----------------------------------------------------------


@dataclass
class Snapshot:
    at: float
    #: API server requests: (verb, resource[/subresource]) -> count.
    requests: dict[tuple[str, str], float]
    agent_writes: float
    agent_failed_writes: float
    operator_changes: float
    #: Events the operator posted (source kondor-operator), counted by listing them.
    operator_events: float
    cpu: dict[str, float]
    fleet_cpu: float
    #: The operator's Events by delivery (posted one by one, or summarised: the changes its
    #: summaries stood for), from its own counter.
    event_deliveries: dict[str, float] = field(default_factory=dict)

    def writes(self, earlier: Snapshot, resources: Callable[[str], bool]) -> float:
        """Writes the API server counted on `resources` since `earlier`."""
        return sum(
            count - earlier.requests.get(key, 0.0)
            for key, count in self.requests.items()
            if key[0] in WRITE_VERBS and resources(key[1])
        )

    def kondor_writes(self, earlier: Snapshot) -> float:
        """Writes of the agents and the operator since `earlier`: ExecutionPoints and SlotPolicy
        status as the API server counts them, and the operator's Events."""
        events = self.operator_events - earlier.operator_events
        return self.writes(earlier, kondor_resource) + events

    def breakdown(self, earlier: Snapshot) -> dict[tuple[str, str], float]:
        """Writes per (verb, resource) since `earlier`, those that happened."""
        counts = {
            key: count - earlier.requests.get(key, 0.0)
            for key, count in self.requests.items()
            if key[0] in WRITE_VERBS
        }
        return {key: count for key, count in sorted(counts.items()) if count > 0}

    def reads(self, earlier: Snapshot, resources: Callable[[str], bool]) -> float:
        return sum(
            count - earlier.requests.get(key, 0.0)
            for key, count in self.requests.items()
            if key[0] in READ_VERBS and resources(key[1])
        )


def kondor_resource(resource: str) -> bool:
    """Kondor's own objects, as the agents and the operator write them (the SlotPolicy itself is
    the administrator's)."""
    return resource.partition("/")[0] == "executionpoints" or resource == "slotpolicies/status"


def kondor_read(resource: str) -> bool:
    """Reads of Kondor's objects (the agents read the SlotPolicy their ExecutionPoint names)."""
    return resource.partition("/")[0] in ("executionpoints", "slotpolicies")


def kubelet_stand_in(resource: str) -> bool:
    """kwok's writes for its nodes (Leases and Node status), and the control plane's and the
    operator's leader Leases."""
    return resource.partition("/")[0] in ("leases", "nodes")


# ---- the fleet's view of the ExecutionPoints ------------------------------------------------


@dataclass
class SharedExecutionPoints:
    """`ExecutionPointAPI` for every agent of the fleet: ExecutionPoints are read from one
    watch of all of them (a real agent watches its own: `WatchedExecutionPoint`), SlotPolicies
    from one watch (`SlotPolicies`, as a real agent's); status writes go to the API server
    through one shared client."""

    api: KubernetesAPI
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    on_change: Callable[[str], None] = lambda _name: None
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    policies: SlotPolicies = field(default_factory=SlotPolicies)

    def read_execution_point(self, name: str) -> dict[str, Any] | None:
        if not self.synced.is_set():
            return self.api.read_execution_point(name)
        return self.objects.get(name)  # the watch's own: read-only (ExecutionPointAPI)

    def read_slot_policy(self, name: str) -> dict[str, Any] | None:
        return self.policies.read(name, self.api)

    def patch_status(self, name: str, patch: Mapping[str, Any]) -> None:
        self.api.patch_status(name, patch)

    def _set(self, name: str, found: dict[str, Any] | None) -> None:
        before = self.objects.get(name)
        if found is None:
            self.objects.pop(name, None)
        else:
            self.objects[name] = found
        if _spec_of(before) != _spec_of(found):
            self.on_change(name)

    async def run(self, http: httpx.AsyncClient) -> None:
        """List, then watch from that version; list again when the watch ends or fails."""
        while True:
            try:
                listing = (await http.get(EPS)).raise_for_status().json()
                seen = {item["metadata"]["name"]: item for item in listing.get("items") or []}
                for name in set(self.objects) - set(seen):
                    self._set(name, None)
                for name, item in seen.items():
                    self._set(name, item)
                self.synced.set()
                version = listing["metadata"]["resourceVersion"]
                params = {"watch": "true", "resourceVersion": version}
                timeout = httpx.Timeout(30, read=None)
                async with http.stream("GET", EPS, params=params, timeout=timeout) as response:
                    async for line in response.aiter_lines():
                        event = json.loads(line)
                        body = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            break  # expired: list again
                        key = str((body.get("metadata") or {}).get("name") or "")
                        if event.get("type") in ("ADDED", "MODIFIED") and key:
                            self._set(key, body)
                        elif event.get("type") == "DELETED" and key:
                            self._set(key, None)
            except (httpx.HTTPError, ValueError, KeyError) as err:
                logging.getLogger("bench").info("watch of executionpoints: %s; again", err)
                await asyncio.sleep(1)


def _spec_of(found: Mapping[str, Any] | None) -> Any:
    if found is None:
        return None
    return (found.get("spec"), (found.get("metadata") or {}).get("generation"))


# ---- the benchmark --------------------------------------------------------------------------


def policy_manifest(update_interval: float) -> dict[str, Any]:
    """One partitionable slot with everything (HTCondor's default) on every benchmark node."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SlotPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "nodeSelector": {"matchLabels": {LABEL[0]: LABEL[1]}},
            "condorConfig": (
                f"POLLING_INTERVAL = {POLLING_INTERVAL:g}\nUPDATE_INTERVAL = {update_interval:g}\n"
            ),
        },
    }


#: The policy change: four static slots of a quarter each, so that every node re-carves.
RECARVE = {"spec": {"slotTypes": [{"id": 1, "count": 4, "resources": "25%"}]}}


def write_machines(directory: Path, count: int) -> list[Path]:
    """`count` machine files like kwok-small.yaml, named fleet-0000..., labelled for the policy."""
    base = yaml.safe_load(MACHINE.read_text())
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        machine = {**base, "name": f"fleet-{index:04d}"}
        machine["labels"] = {**base.get("labels", {}), LABEL[0]: LABEL[1]}
        path = directory / f"{machine['name']}.yaml"
        path.write_text(yaml.safe_dump(machine))
        paths.append(path)
    return paths


@dataclass
class Bench:
    cluster: DevCluster
    machines: list[Path]
    update_interval: float
    window: float
    http: httpx.AsyncClient
    shared: SharedExecutionPoints
    agents: list[Agent]
    operator_url: str
    pids: dict[str, int]
    results: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: (when, node) of every successful status write, `when` the agent's own time of the step
    #: that wrote (its coalescer's `last_write`, from which the next heartbeat is due).
    written: list[tuple[float, str]] = field(default_factory=list)
    #: Writes per second by (verb, resource), per window.
    breakdowns: dict[str, dict[tuple[str, str], float]] = field(default_factory=dict)
    #: CPU seconds each process used from the policy change until every node re-published.
    recarve_cpu: dict[str, float] = field(default_factory=dict)
    #: Each window's CPU cores by process, every process of the cluster and the fleet.
    cpu_by_process: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return len(self.machines)

    def say(self, message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    async def snapshot(self) -> Snapshot:
        at = time.monotonic()  # when the API server's counters are read: its rates' clock
        apiserver = (await self.http.get("/metrics")).raise_for_status().text
        operator = (await self.http.get(self.operator_url)).raise_for_status().text

        def parse() -> tuple[dict[tuple[str, str], float], float, dict[str, float]]:
            requests: dict[tuple[str, str], float] = {}
            for labels, value in _samples(apiserver, "apiserver_request_total"):
                resource = labels.get("resource", "")
                if labels.get("subresource"):
                    resource += "/" + labels["subresource"]
                key = (labels.get("verb", ""), resource)
                requests[key] = requests.get(key, 0.0) + value
            changes = sum(v for _, v in _samples(operator, "kondor_operator_changes_total"))
            deliveries = {
                labels.get("delivery", ""): value
                for labels, value in _samples(operator, "kondor_operator_events_total")
            }
            return requests, changes, deliveries

        requests, changes, deliveries = await asyncio.to_thread(parse)
        events = (
            (
                await self.http.get(
                    f"/api/v1/namespaces/{EVENTS_NAMESPACE}/events",
                    params={"fieldSelector": f"source={OPERATOR_COMPONENT}"},
                )
            )
            .raise_for_status()
            .json()
        )
        operator_events = sum(int(item.get("count") or 1) for item in events["items"])
        agent_ok = sum(
            agent.metrics.value("kondor_agent_api_writes_total", result="ok")
            for agent in self.agents
        )
        agent_failed = sum(
            agent.metrics.value("kondor_agent_api_writes_total", result=result)
            for agent in self.agents
            for result in ("error", "not-found")
        )
        cpu = self.cpu_seconds()
        fleet_cpu = cpu.pop("fleet")
        return Snapshot(
            at=at,
            requests=requests,
            agent_writes=agent_ok + agent_failed,
            agent_failed_writes=agent_failed,
            operator_changes=changes,
            operator_events=operator_events,
            cpu=cpu,
            fleet_cpu=fleet_cpu,
            event_deliveries=deliveries,
        )

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds used so far by each process: the cluster's, and this one (the fleet)."""
        cpu = {name: _cpu_seconds(pid) for name, pid in self.pids.items()}
        return cpu | {"fleet": time.process_time()}

    async def wait_for(
        self, what: str, condition: Callable[[], bool], timeout: float, poll: float = 0.5
    ) -> float:
        started = time.monotonic()
        while not condition():
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"not {what} after {timeout:.0f}s")
            await asyncio.sleep(poll)
        return time.monotonic() - started

    def published(self, generation: int, slots: int) -> bool:
        """Every node's ExecutionPoint carries the agent's slots for `generation` and the
        operator's verdict that its heartbeat is fresh."""
        return self.published_count(generation, slots) == self.count

    def published_count(self, generation: int, slots: int) -> int:
        """How many ExecutionPoints carry the agent's `slots` for `generation`, fresh."""
        count = 0
        for body in self.shared.objects.values():
            status = body.get("status") or {}
            count += (
                (status.get("policy") or {}).get("generation") == generation
                and len(status.get("slots") or ()) == slots
                and (status.get("operator") or {}).get("heartbeat") == "Fresh"
            )
        return count

    def recarve_progress(self, changed: float) -> Callable[[], bool]:
        """The re-carve's end (every node re-published) as a `wait_for` condition, noting its
        milestones on the way: the operator's verdict on generation 2 seen by the agents, the
        first node re-published, half of them."""

        def check() -> bool:
            at = time.monotonic() - changed
            milestones = self.results
            if "recarve_checked_s" not in milestones:
                raw = self.shared.policies.get(POLICY)
                verdict = policy_verdict(raw) if raw is not None else None
                if verdict is not None and (verdict.generation, verdict.state) == (2, "valid"):
                    milestones["recarve_checked_s"] = at
            done = self.published_count(2, 4)
            if done and "recarve_first_s" not in milestones:
                milestones["recarve_first_s"] = at
            if 2 * done >= self.count and "recarve_half_s" not in milestones:
                milestones["recarve_half_s"] = at
            return done == self.count

        return check

    async def create_nodes(self) -> float:
        started = time.monotonic()
        semaphore = asyncio.Semaphore(16)

        async def create(path: Path) -> None:
            manifest = nodes.node_manifest(nodes.load_machine(path))
            async with semaphore:
                (await self.http.post("/api/v1/nodes", json=manifest)).raise_for_status()

        await asyncio.gather(*(create(path) for path in self.machines))
        selector = f"{LABEL[0]}={LABEL[1]}"
        while True:
            listing = (
                (await self.http.get("/api/v1/nodes", params={"labelSelector": selector}))
                .raise_for_status()
                .json()
            )
            ready = sum(
                1
                for node in listing["items"]
                for c in node.get("status", {}).get("conditions", [])
                if c["type"] == "Ready" and c["status"] == "True"
            )
            if ready >= self.count:
                return time.monotonic() - started
            if time.monotonic() - started > 600:
                raise RuntimeError(f"only {ready} of {self.count} nodes Ready after 600s")
            await asyncio.sleep(1)

    async def quiet(self, seconds: float = 5.0, timeout: float = 120.0) -> None:
        """Wait until the operator has written nothing for `seconds` (its last pass is done)."""
        deadline = time.monotonic() + timeout
        last = (await self.snapshot()).operator_changes
        while time.monotonic() < deadline:
            await asyncio.sleep(seconds)
            now = (await self.snapshot()).operator_changes
            if now == last:
                return
            last = now
        self.notes.append(f"the operator was still writing {timeout:.0f}s after the change")

    def per_node(self, first: Snapshot, last: Snapshot, start: float) -> None:
        """Writes per node per update interval over [start, start + window), exactly: each
        agent's successful writes by its own clock (a node that keeps its promise writes at
        most window / update_interval times in it, whatever its phase), its failed writes and
        the operator's writes (from the counters)."""
        intervals = self.window / self.update_interval
        counts = Counter(
            name for when, name in list(self.written) if start <= when < start + self.window
        )
        failed = last.agent_failed_writes - first.agent_failed_writes
        operator = last.operator_changes - first.operator_changes
        operator += last.operator_events - first.operator_events
        total = sum(counts.values()) + failed + operator
        self.results["steady_writes_per_node_per_interval"] = total / self.count / intervals
        self.results["steady_busiest_node_writes_per_interval"] = (
            max(counts.values(), default=0) / intervals
        )

    def measure(self, prefix: str, first: Snapshot, last: Snapshot) -> None:
        seconds = last.at - first.at
        results = self.results
        results[f"{prefix}_kondor_writes_per_s"] = last.kondor_writes(first) / seconds
        results[f"{prefix}_agent_writes_per_s"] = (last.agent_writes - first.agent_writes) / seconds
        operator = last.operator_changes - first.operator_changes
        operator += last.operator_events - first.operator_events
        results[f"{prefix}_operator_writes_per_s"] = operator / seconds
        results[f"{prefix}_kondor_reads_per_s"] = last.reads(first, kondor_read) / seconds
        results[f"{prefix}_kwok_writes_per_s"] = last.writes(first, kubelet_stand_in) / seconds
        cores = {name: (last.cpu[name] - first.cpu[name]) / seconds for name in last.cpu}
        cores["fleet"] = (last.fleet_cpu - first.fleet_cpu) / seconds
        self.cpu_by_process[prefix] = cores
        for name, label in (
            ("kondor-operator", "operator"),
            ("kube-apiserver", "apiserver"),
            ("etcd", "etcd"),
            ("fleet", "fleet"),
        ):
            results[f"{prefix}_{label}_cpu_cores"] = cores[name]
        self.breakdowns[prefix] = {
            key: count / seconds for key, count in last.breakdown(first).items()
        }

    async def run(self) -> None:
        self.say(f"creating {self.count} kwok nodes")
        self.results["nodes_ready_s"] = await self.create_nodes()
        stop = asyncio.Event()
        fleet = Fleet(self.agents, workers=WORKERS, stagger=POLLING_INTERVAL)
        self.shared.on_change = fleet.wake

        def wake_all() -> None:  # a policy changed: each agent looks whether it is its own
            for agent in self.agents:
                fleet.wake(agent.name)

        self.shared.policies.on_change = wake_all
        watch = asyncio.create_task(self.shared.run(self.http), name="watch")
        policies_stop = threading.Event()
        self.shared.policies.follow(self.shared.api, policies_stop)
        await self.shared.synced.wait()
        fleet_task = asyncio.create_task(fleet.run(stop), name="fleet")
        try:
            await self._measure()
        finally:
            stop.set()
            policies_stop.set()
            await fleet_task
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch

    async def _measure(self) -> None:
        self.say(f"{self.count} agents running; applying SlotPolicy {POLICY}")
        applied = time.monotonic()
        (
            await self.http.post(
                f"/apis/{GROUP}/{VERSION}/slotpolicies", json=policy_manifest(self.update_interval)
            )
        ).raise_for_status()
        await self.wait_for("published", lambda: self.published(1, 1), 900)
        self.results["publish_all_s"] = time.monotonic() - applied
        self.say(
            f"every ExecutionPoint published and fresh after {self.results['publish_all_s']:.1f}s"
        )
        await self.quiet()

        self.say(f"steady state: measuring over {self.window:.0f}s")
        first = await self.snapshot()
        start = time.time()
        await asyncio.sleep(self.window)
        last = await self.snapshot()
        self.measure("steady", first, last)
        await asyncio.sleep(2.0)  # writes of steps that began inside the window
        self.per_node(first, last, start)

        self.say("changing the policy: every node re-carves")
        first = await self.snapshot()
        changed = time.monotonic()
        cpu_before = self.cpu_seconds()
        (
            await self.http.patch(
                f"/apis/{GROUP}/{VERSION}/slotpolicies/{POLICY}",
                content=json.dumps(RECARVE),
                headers={"Content-Type": "application/merge-patch+json"},
            )
        ).raise_for_status()
        await self.wait_for(
            "re-carved", self.recarve_progress(changed), max(self.window, 900), poll=0.1
        )
        self.results["recarve_all_s"] = time.monotonic() - changed
        self.recarve_cpu = {k: v - cpu_before[k] for k, v in self.cpu_seconds().items()}
        await self.quiet(seconds=2.0)
        # The window holds the whole change, in whole update intervals.
        took = time.monotonic() - changed
        window = max(self.window, math.ceil(took / self.update_interval) * self.update_interval)
        if window > self.window:
            self.notes.append(f"the change window grew to {window:g}s to hold the change")
        await asyncio.sleep(max(0.0, window - took))
        last = await self.snapshot()
        self.measure("change", first, last)
        steady = self.results["steady_kondor_writes_per_s"] * (last.at - first.at)
        extra = last.kondor_writes(first) - steady
        self.results["change_writes_per_node"] = extra / self.count
        for delivery in ("posted", "summarised"):
            count = last.event_deliveries.get(delivery, 0.0)
            count -= first.event_deliveries.get(delivery, 0.0)
            self.results[f"change_events_{delivery}"] = count
        memory = _memory_mib(self.pids["kondor-operator"])
        self.results["operator_rss_mib"] = memory["VmRSS"]
        self.results["operator_peak_rss_mib"] = memory["VmHWM"]
        self.results["fleet_rss_mib"] = _memory_mib(os.getpid())["VmRSS"]


def _agents(
    machines: Iterable[Path], shared: SharedExecutionPoints, written: list[tuple[float, str]]
) -> list[Agent]:
    agents = []
    compiler = SharedCompile()  # each real node compiles on its own CPU
    for path in machines:
        source = MachineFile(path)
        machine = source.read()
        # The policy's POLLING_INTERVAL and UPDATE_INTERVAL apply, as on a real node.
        agent = Agent(AgentConfig(node_name=machine.name), shared, source.read, compiler=compiler)
        agent.on_written = _recorder(agent, written)
        agents.append(agent)
    return agents


def _recorder(
    agent: Agent, written: list[tuple[float, str]]
) -> Callable[[Mapping[str, Any]], None]:
    def record(_status: Mapping[str, Any]) -> None:
        written.append((agent.coalescer.last_write or agent.clock(), agent.name))

    return record


def report(bench: Bench, window: float) -> int:
    """Print the figures beside the baseline, the targets and the reference; 1 if a figure is
    over its target."""
    results = bench.results
    count, interval = bench.count, bench.update_interval
    target = count / interval
    kubelet = f"kubelet {count / KUBELET_PERIOD:g}"
    per_node = results["steady_writes_per_node_per_interval"]
    reference: dict[str, str] = {
        "steady_kondor_writes_per_s": f"target <= {target:.2f}; {kubelet}",
        "steady_agent_writes_per_s": f"one heartbeat per node per interval {target:.2f}",
        "steady_writes_per_node_per_interval": (
            f"target <= 1; kubelet {interval / KUBELET_PERIOD:g}"
        ),
        "steady_busiest_node_writes_per_interval": "target <= 1",
        "change_writes_per_node": "at most 3 (issue 16); the agent's re-carve, 1",
        "recarve_checked_s": "the operator's verdict on the new generation, seen by the agents",
        "recarve_first_s": "the first node re-published",
        "recarve_half_s": "half of the nodes re-published",
        "recarve_all_s": "every node re-published for the new generation",
        "change_events_posted": "Events posted one by one (25, then 1/s)",
        "change_events_summarised": "changes told in summaries on the SlotPolicy",
        "steady_operator_cpu_cores": "idle: agents' heartbeats, kwok's Node heartbeats",
        "steady_kwok_writes_per_s": kubelet,
        "change_kondor_writes_per_s": kubelet,
        "change_kwok_writes_per_s": kubelet,
        "steady_apiserver_cpu_cores": "0.48 at 1,000 kwok nodes, status every 20-45 s, no Kondor",
    }
    # The baseline was measured with the defaults; other sizes give other figures.
    comparable = count == 1000 and interval == 60.0 and window == 180.0
    print(f"{'figure':<40}{'now':>10}{'baseline':>10}{'target':>10}  reference")
    missed: list[str] = []
    for name, value in results.items():
        base = BASELINE.get(name) if comparable else None
        digits = 3 if "per_node" in name or "cpu" in name else 2  # show the margins
        shown = f"{base:>10.{digits}f}" if base is not None else f"{'-':>10}"
        most = TARGETS.get(name)
        goal = f"{'<= ' + format(most, 'g'):>10}" if most is not None else f"{'':>10}"
        if most is not None and value > most:
            missed.append(f"{name} {value:.{digits}f}, over the target of {most:g}")
        print(f"{name:<40}{value:>10.{digits}f}{shown}{goal}  {reference.get(name, '')}")
    print(
        f"({count} nodes, update interval {interval:g}s, polling interval {POLLING_INTERVAL:g}s, "
        f"windows of {window:g}s. Kondor writes: POST/PUT/PATCH/DELETE on ExecutionPoints and "
        f"SlotPolicy status as the API server counts them, plus the operator's Events. kwok: "
        f"its Lease and Node writes, the kubelet's stand-in, plus the leader Leases. Not in "
        f"the Kondor figure: the operator's leader Lease, one renewal per 2 s whatever the size.)"
    )
    for prefix, counts in bench.breakdowns.items():
        listed = ", ".join(
            f"{verb} {resource} {rate:.2f}" for (verb, resource), rate in counts.items()
        )
        print(f"{prefix}: writes/s by request, as the API server counts them: {listed}")
    for prefix, cores_by in bench.cpu_by_process.items():
        listed = ", ".join(
            f"{name} {cores:.3f}" for name, cores in sorted(cores_by.items(), key=lambda kv: -kv[1])
        )
        print(f"{prefix}: CPU cores by process: {listed}; {sum(cores_by.values()):.2f} in all")
    if bench.recarve_cpu:
        # Where the re-carve's time goes: every process shares this machine's cores.
        spent = sorted(bench.recarve_cpu.items(), key=lambda kv: -kv[1])
        total, cores = sum(bench.recarve_cpu.values()), os.cpu_count() or 1
        listed = ", ".join(f"{name} {seconds:.1f}" for name, seconds in spent if seconds >= 0.05)
        print(
            f"CPU seconds used during the re-carve ({results['recarve_all_s']:.1f}s): {listed}; "
            f"{total:.1f} in all, at least {total / cores:.1f}s of this machine's {cores} cores"
        )
    for note in bench.notes:
        print(f"note: {note}")
    for miss in missed:
        print(f"FAIL: {miss}")
    if per_node > 1.0:
        print(
            f"FAIL: {per_node:.3f} writes per node per update interval at steady state, over "
            f"the target of one ({target:.2f} writes/s for {count} nodes)"
        )
        return 1
    return 1 if missed else 0


async def _run(cluster: DevCluster, machines: list[Path], interval: float, window: float) -> Bench:
    pids = _pids(cluster)
    if "kondor-operator" not in pids:
        raise RuntimeError("the dev cluster did not start the operator")
    port = _operator_metrics_port(pids["kondor-operator"])
    # A connection for each worker and the shared watches (urllib3 keeps 10 otherwise, and
    # opens a new TLS connection for each request beyond them).
    api = KubernetesAPI.connect(kondor.kondor_kubeconfig(cluster.layout), connections=WORKERS + 5)
    shared = SharedExecutionPoints(api)
    written: list[tuple[float, str]] = []
    limits = httpx.Limits(max_connections=8)
    async with httpx.AsyncClient(
        base_url=cluster.server, verify=cluster.admin_ssl_context(), timeout=60, limits=limits
    ) as http:
        bench = Bench(
            cluster=cluster,
            machines=machines,
            update_interval=interval,
            window=window,
            http=http,
            shared=shared,
            agents=_agents(machines, shared, written),
            operator_url=f"http://127.0.0.1:{port}/metrics",
            pids=pids,
            written=written,
        )
        await bench.run()
    return bench


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument(
        "--update-interval",
        type=float,
        default=60.0,
        help="the SlotPolicy's UPDATE_INTERVAL, seconds (HTCondor's default is 300)",
    )
    parser.add_argument(
        "--window",
        type=float,
        default=180.0,
        help="seconds of each measurement, rounded to whole update intervals (default 180)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    missing = build.missing_binaries(versions.bin_dir())
    if missing:
        print(f"control plane not built ({', '.join(missing)}); run `make controlplane`")
        return 1
    intervals = max(1, round(args.window / args.update_interval))
    window = intervals * args.update_interval
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kondor-bench-fleet-") as tmp:
        workdir = Path(tmp)
        machines = write_machines(workdir / "machines", args.nodes)
        spec = ClusterSpec(
            port=free_port(),
            kubeconfig=workdir / "kubeconfig",
            state_dir=workdir / "state",
            operator=True,
        )
        with DevCluster(spec, log=sys.stderr) as cluster:
            bench = asyncio.run(_run(cluster, machines, args.update_interval, window))
    bench.notes.append(f"the whole run took {time.monotonic() - started:.0f}s")
    if window != args.window:
        bench.notes.append(f"--window {args.window:g} rounded to {intervals} update intervals")
    return report(bench, window)


if __name__ == "__main__":
    sys.exit(main())
