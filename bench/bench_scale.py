"""Benchmark: Kondor beside kube-scheduler and Kueue, the same short jobs on the same cluster.

One dev cluster (the operator, no per-node agent processes), N kwok nodes (1,000 by default)
of 8 cores and 16 GiB, one SlotPolicy carving each into four static one-core slots and one
partitionable slot of four cores (8 one-core jobs a node: 8,000 at once on 1,000 nodes), and
the nodes' agents: real `kondor_agent.loop.Agent`s with their `JobRunner` and pod launcher,
sharded over a few processes (`fleet_sim.py` beside this file: one watch per kind per process
instead of three per node). Then, one system after the other, M short jobs (10,000 by
default) from U users (10), interleaved, each one core and 1 GiB, whose pod kwok runs for 30 s
(`kondor.io/sim-duration`):

1. **Kondor**: ExecutionJobs with a pod runtime, submitted as each user (impersonated, so the
   admission webhook stamps the owner); the operator's negotiator matches them, the agents
   claim their slots and create the pods.
2. **kube-scheduler**: the same pods (1 core, 1 GiB), created directly, scheduled by the dev
   cluster's kube-scheduler (its defaults: client QPS 50, burst 100).
3. **Kueue** (`kondor_devcluster.kueue`, built from its Go module): the same pods as batch/v1
   Jobs, one LocalQueue per user onto one ClusterQueue whose quota is the nodes' capacity;
   the controller manager's Job controller creates the pods (its defaults: QPS 20, burst 30)
   and kube-scheduler places them.

For each: submit → every job Running (first seen Running by one watch of the phase's pods),
jobs started per second, the time until the pool is full, the API server's writes per job
(apiserver_request_total over the phase, split into the submission's own creates, kwok's pod
status and the nodes' heartbeats, and the rest: the system's own writes), the CPU (cores,
/proc/<pid>/stat) and peak memory of the system's own processes, and fairness: each user's share
of the running jobs when the pool first filled (or just before the first job ended, if
sooner) against its due share: every user has the same priority factor, so the same share
(the accountant's effective priorities at that time are recorded beside it). Kondor's
negotiation cycles are read from the operator's metrics. Every job must run exactly once (one
pod each) and end Succeeded.

Printed as one table with ratios (Kondor ÷ peer), written as JSON with a PNG plot of running
jobs over time per system (`--out`, default bench/results/). Exits 1 when a target of issue 16
is missed: Kondor's throughput ≥ kube-scheduler's and ≥ 3x Kueue's, ≤ 4 API writes per job
on the job's own objects, shares within 5% of the priorities.

Each system has the same time from its first submission (`--phase-timeout`, 300 s), its
submission included; at 10,000 jobs on two cores no system runs them all within it, so the
rates are those of the jobs submitted and started within the same window. After Kondor's
phase its agents stop, and its operator when a peer runs next; a phase that did not end has
its pods, jobs and namespace deleted before the next opens, so each system starts on a quiet
cluster.

Run (needs `make controlplane`; Kueue is built on first use, a few minutes):

    .venv/bin/python bench/bench_scale.py                    # 1,000 nodes, 10,000 jobs
    .venv/bin/python bench/bench_scale.py --nodes 50 --jobs 500 --systems kondor,scheduler

The simulated agents run with POLLING_INTERVAL 30 (HTCondor's default is 5): a thousand of
them in two processes on two cores would otherwise spend most of the machine re-evaluating
idle slots; jobs still start at once, since a claim wakes its agent.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench_fleet import _cpu_seconds, _memory_mib, _operator_metrics_port, _pids, _samples
from kondor_core.api import GROUP, VERSION
from kondor_devcluster import build, kondor, kueue, nodes, versions
from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port
from kondor_devcluster.rbac import USERS_GROUP

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
POLICY = "bench-scale"
NODE_LABEL = ("kondor.io/bench", "scale")
JOB_LABEL = "bench.kondor.io/job"
USER_LABEL = "bench.kondor.io/user"
NODE_CPUS = 8
NODE_MEMORY_GI = 16
JOB_CPUS = 1
JOB_MEMORY = "1Gi"
DURATION = "30s"
#: Four static slots of an eighth each (1 core, 2 GiB) and one partitionable slot of half the
#: node (4 cores, 8 GiB: four 1-core, 1 GiB dynamic slots): 8 one-core jobs a node.
CONDOR_CONFIG = """POLLING_INTERVAL = 30
UPDATE_INTERVAL = 300
SLOT_TYPE_1 = 1/8
NUM_SLOTS_TYPE_1 = 4
SLOT_TYPE_2 = 1/2
SLOT_TYPE_2_PARTITIONABLE = TRUE
NUM_SLOTS_TYPE_2 = 1
"""
SLOTS_PER_NODE = 8
PUBLISHED_SLOTS = 5  # four static and one partitionable
SYSTEMS = ("kondor", "scheduler", "kueue")
TITLES = {"kondor": "Kondor", "scheduler": "kube-scheduler", "kueue": "Kueue"}
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"})
#: Targets (issue 16): Kondor's throughput over kube-scheduler's, over Kueue's; its writes
#: per job; the largest relative gap between a user's share and its priority's.
TARGETS = {"vs_scheduler": 1.0, "vs_kueue": 3.0, "writes_per_job": 4.0, "fairness": 0.05}


# ---- pure figures ---------------------------------------------------------------------------


def running_series(
    starts: Mapping[str, float], ends: Mapping[str, float]
) -> list[tuple[float, int]]:
    """(time, jobs running) at every start and end, in time order; an end at the same
    instant as a start counts after it."""
    steps = sorted(
        [(when, 0, 1) for when in starts.values()] + [(when, 1, -1) for when in ends.values()]
    )
    series: list[tuple[float, int]] = []
    running = 0
    for when, _order, step in steps:
        running += step
        series.append((when, running))
    return series


def time_to_reach(series: Sequence[tuple[float, int]], count: int) -> float | None:
    """When the running count first reached `count`; None if it never did."""
    return next((when for when, running in series if running >= count), None)


def shares_before_first_end(
    starts: Mapping[str, float],
    ends: Mapping[str, float],
    users: Mapping[str, str],
    full_at: float | None = None,
) -> dict[str, int]:
    """Running jobs per user when the pool first filled (`full_at`), or just before the first
    job ended if that came first (all of them if none ended)."""
    first_end = min(ends.values(), default=float("inf"))
    until = first_end if full_at is None else min(first_end, full_at)
    counts: Counter[str] = Counter()
    for job, when in starts.items():
        if when < until or (when == until and until != first_end):
            counts[users[job]] += 1
    return dict(counts)


def fairness_gap(running: Mapping[str, int], weights: Mapping[str, float]) -> float:
    """The largest relative gap between a user's share of the running jobs and its share of
    the weights (1 / effective priority): 0.05 means some user is 5% off its due."""
    total = sum(running.values())
    weight = sum(weights.values())
    if total == 0 or weight == 0:
        return float("nan")
    gaps = []
    for user, share in weights.items():
        due = share / weight
        gaps.append(abs(running.get(user, 0) / total - due) / due)
    return max(gaps)


def classify(resource: str, verb: str, submitted: str) -> str:
    """Whose write a (verb, resource) is in a phase: the submission's own creates, the
    simulated kubelet's (kwok: pod status, nodes, leases), or the system's."""
    if verb == "POST" and resource == submitted:
        return "submission"
    if resource in ("pods/status", "nodes", "nodes/status", "leases"):
        return "kubelet"
    return "system"


#: The system's writes that publish the state of nodes and queues rather than carry a job:
#: Kondor's slot ads (ExecutionPoint status: on each slot's state change, and a heartbeat per
#: UPDATE_INTERVAL), the Pool's accountant, Kueue's queue status, Events.
PUBLICATION = frozenset(
    {
        "executionpoints/status",
        "pools/status",
        "clusterqueues/status",
        "localqueues/status",
        "events",
    }
)


def job_path_writes(detail: Mapping[str, float], submitted: str) -> float:
    """The system's writes on the jobs' own objects (the job, its workload, its pod): all
    but the publication (`PUBLICATION`) and the kubelet's."""
    total = 0.0
    for key, count in detail.items():
        verb, _, resource = key.partition(" ")
        if classify(resource, verb, submitted) == "system" and resource not in PUBLICATION:
            total += count
    return total


def writes_by_kind(
    before: Mapping[tuple[str, str], float],
    after: Mapping[tuple[str, str], float],
    submitted: str,
) -> tuple[dict[str, float], dict[str, float]]:
    """(writes by whose, writes by 'VERB resource') between two counter snapshots."""
    whose: dict[str, float] = defaultdict(float)
    detail: dict[str, float] = {}
    for key, count in after.items():
        verb, resource = key
        if verb not in WRITE_VERBS:
            continue
        delta = count - before.get(key, 0.0)
        if delta <= 0:
            continue
        whose[classify(resource, verb, submitted)] += delta
        detail[f"{verb} {resource}"] = delta
    return dict(whose), dict(sorted(detail.items(), key=lambda item: -item[1]))


# ---- manifests ------------------------------------------------------------------------------


def user_name(index: int) -> str:
    return f"user-{index:02d}"


def pod_template(job: str, user: str) -> dict[str, Any]:
    return {
        "metadata": {
            "labels": {JOB_LABEL: job, USER_LABEL: user},
            "annotations": {nodes.SIM_DURATION_ANNOTATION: DURATION},
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }


def execution_job(namespace: str, job: str, user: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ExecutionJob",
        "metadata": {"name": job, "namespace": namespace, "labels": {USER_LABEL: user}},
        "spec": {
            "requestCpus": JOB_CPUS,
            "requestMemory": JOB_MEMORY,
            "pod": {"template": pod_template(job, user)},
        },
    }


def plain_pod(namespace: str, job: str, user: str) -> dict[str, Any]:
    template = pod_template(job, user)
    resources = {"cpu": str(JOB_CPUS), "memory": JOB_MEMORY}
    spec = template["spec"]
    spec["containers"][0]["resources"] = {"requests": resources, "limits": resources}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": job, "namespace": namespace, **template["metadata"]},
        "spec": spec,
    }


def batch_job(namespace: str, job: str, user: str) -> dict[str, Any]:
    pod = plain_pod(namespace, job, user)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job,
            "namespace": namespace,
            "labels": {kueue.QUEUE_LABEL: user, USER_LABEL: user},
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": {
                "metadata": {k: v for k, v in pod["metadata"].items() if k != "name"},
                "spec": pod["spec"],
            },
        },
    }


def write_machines(directory: Path, count: int) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        machine = {
            "name": f"scale-{index:04d}",
            "cpus": NODE_CPUS,
            "memory": f"{NODE_MEMORY_GI}Gi",
            "disk": "100Gi",
            "labels": {NODE_LABEL[0]: NODE_LABEL[1]},
        }
        path = directory / f"{machine['name']}.yaml"
        path.write_text(yaml.safe_dump(machine))
        paths.append(path)
    return paths


# ---- one phase ------------------------------------------------------------------------------


@dataclass
class Phase:
    system: str
    namespace: str
    jobs: int
    #: job -> when (seconds since the phase's first submission) its pod was first Running.
    starts: dict[str, float] = field(default_factory=dict)
    ends: dict[str, float] = field(default_factory=dict)
    users: dict[str, str] = field(default_factory=dict)
    pods: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    failed: set[str] = field(default_factory=set)
    t0: float = 0.0
    submitted_s: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def seen(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        job = labels.get(JOB_LABEL)
        if not job:
            return
        now = time.monotonic() - self.t0
        self.users[job] = str(labels.get(USER_LABEL) or "")
        self.pods[job].add(str(meta.get("name")))
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Running", "Succeeded", "Failed"):
            self.starts.setdefault(job, now)
        if phase in ("Succeeded", "Failed"):
            self.ends.setdefault(job, now)
            if phase == "Failed":
                self.failed.add(job)

    def done(self) -> bool:
        return len(self.ends) >= self.jobs


async def watch_pods(http: httpx.AsyncClient, phase: Phase, ready: asyncio.Event) -> None:
    """List then watch the phase namespace's pods, feeding `phase.seen`, until cancelled."""
    path = f"/api/v1/namespaces/{phase.namespace}/pods"
    while True:
        try:
            listing = (await http.get(path)).raise_for_status().json()
            for item in listing.get("items") or []:
                phase.seen(item)
            ready.set()
            params = {"watch": "true", "resourceVersion": listing["metadata"]["resourceVersion"]}
            timeout = httpx.Timeout(30, read=None)
            async with http.stream("GET", path, params=params, timeout=timeout) as response:
                async for line in response.aiter_lines():
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        break
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        phase.seen(event.get("object") or {})
        except (httpx.HTTPError, ValueError, KeyError) as err:
            logging.getLogger("bench").info("watch of pods: %s; again", err)
            await asyncio.sleep(1)


@dataclass
class Bench:
    cluster: DevCluster
    http: httpx.AsyncClient
    machines: list[Path]
    jobs: int
    users: int
    shards: int
    phase_timeout: float
    workdir: Path
    pids: dict[str, int]
    operator_metrics: str
    #: The system measured last: what it leaves unfinished goes with the cluster.
    last_system: str = ""
    phases: dict[str, Phase] = field(default_factory=dict)
    setup: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def slots(self) -> int:
        return len(self.machines) * SLOTS_PER_NODE

    def say(self, message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    async def requests(self) -> dict[tuple[str, str], float]:
        text = (await self.http.get("/metrics")).raise_for_status().text
        found: dict[tuple[str, str], float] = defaultdict(float)
        for labels, value in _samples(text, "apiserver_request_total"):
            resource = labels.get("resource", "")
            if labels.get("subresource"):
                resource += "/" + labels["subresource"]
            found[(labels.get("verb", ""), resource)] += value
        return dict(found)

    async def operator_figures(self) -> dict[str, float]:
        text = (await self.http.get(self.operator_metrics)).raise_for_status().text
        figures: dict[str, float] = defaultdict(float)
        for name in (
            "kondor_operator_negotiation_cycle_seconds_sum",
            "kondor_operator_negotiation_cycle_seconds_count",
            "kondor_operator_negotiation_matches_total",
        ):
            for _labels, value in _samples(text, name):
                figures[name] += value
        return dict(figures)

    async def post(
        self, path: str, body: Mapping[str, Any], user: str | None = None, ok: Iterable[int] = ()
    ) -> None:
        headers = {"Content-Type": "application/json"}
        if user is not None:
            headers |= {"Impersonate-User": user, "Impersonate-Group": USERS_GROUP}
        for attempt in range(5):
            response = await self.http.post(path, content=json.dumps(body), headers=headers)
            if response.status_code in (200, 201, *ok):
                return
            if response.status_code in (429, 500, 503, 504) and attempt < 4:
                await asyncio.sleep(0.5 * (attempt + 1))
                continue
            raise RuntimeError(f"POST {path}: {response.status_code} {response.text[:300]}")

    # -- set-up

    async def create_nodes(self) -> None:
        started = time.monotonic()
        semaphore = asyncio.Semaphore(16)

        async def create(path: Path) -> None:
            manifest = nodes.node_manifest(nodes.load_machine(path))
            async with semaphore:
                await self.post("/api/v1/nodes", manifest, ok=(409,))

        await asyncio.gather(*(create(path) for path in self.machines))
        selector = f"{NODE_LABEL[0]}={NODE_LABEL[1]}"

        async def ready() -> bool:
            listing = (
                (await self.http.get("/api/v1/nodes", params={"labelSelector": selector}))
                .raise_for_status()
                .json()
            )
            return sum(
                1
                for node in listing["items"]
                for c in node.get("status", {}).get("conditions", [])
                if c["type"] == "Ready" and c["status"] == "True"
            ) >= len(self.machines)

        await self.until("nodes Ready", ready, 600)
        self.setup["nodes_ready_s"] = time.monotonic() - started

    async def until(
        self, what: str, check: Callable[[], Any], timeout: float, poll: float = 1.0
    ) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                result = check()
                if asyncio.iscoroutine(result):
                    result = await result
            except httpx.TimeoutException:  # a slow answer (a loaded machine): ask again
                result = False
            if result:
                return True
            await asyncio.sleep(poll)
        self.notes.append(f"not {what} within {timeout:.0f}s")
        return False

    async def published(self) -> bool:
        listing = (
            (await self.http.get(f"/apis/{GROUP}/{VERSION}/executionpoints"))
            .raise_for_status()
            .json()
        )
        fresh = [
            item
            for item in listing.get("items") or []
            if len((item.get("status") or {}).get("slots") or ()) == PUBLISHED_SLOTS
        ]
        return len(fresh) >= len(self.machines)

    async def namespace(self, name: str) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        await self.post("/api/v1/namespaces", body, ok=(409,))

    # -- a phase

    async def run_phase(
        self,
        system: str,
        make: Callable[[str, str, str], dict[str, Any]],
        path: str,
        submitted: str,
        processes: Mapping[str, int],
        *,
        impersonate: bool,
        stop: Callable[[], None] | None = None,
    ) -> Phase:
        namespace = f"scale-{system}"
        await self.namespace(namespace)
        phase = Phase(system, namespace, self.jobs)
        self.phases[system] = phase
        ready = asyncio.Event()
        watcher = asyncio.create_task(watch_pods(self.http, phase, ready))
        await ready.wait()
        before = await self.requests()
        operator_before = await self.operator_figures() if system == "kondor" else {}
        cpu_before = {name: _cpu_seconds(pid) for name, pid in processes.items()}
        self.say(f"{TITLES[system]}: submitting {self.jobs} jobs from {self.users} users")
        phase.t0 = time.monotonic()
        semaphore = asyncio.Semaphore(24)
        fairness_task = (
            asyncio.create_task(self.watch_priorities(phase)) if system == "kondor" else None
        )

        submitted_jobs = 0

        async def submit(index: int) -> None:
            nonlocal submitted_jobs
            user = user_name(index % self.users)
            job = f"j{index:05d}"
            async with semaphore:
                await self.post(
                    path.format(namespace=namespace),
                    make(namespace, job, user),
                    user if impersonate else None,
                )
            submitted_jobs += 1

        # Every system has the same time from its first submission (--phase-timeout), the
        # submission included: what is not submitted or not started by then is left out.
        deadline = phase.t0 + self.phase_timeout
        submitting = asyncio.gather(*(submit(index) for index in range(self.jobs)))
        try:
            await asyncio.wait_for(asyncio.shield(submitting), self.phase_timeout)
            phase.submitted_s = time.monotonic() - phase.t0
            self.say(f"{TITLES[system]}: submitted in {phase.submitted_s:.1f}s")
        except TimeoutError:
            submitting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await submitting
            phase.submitted_s = float("nan")
            phase.notes.append(
                f"{TITLES[system]}: {submitted_jobs} of {self.jobs} jobs submitted within "
                f"--phase-timeout {self.phase_timeout:g}s"
            )
            self.say(phase.notes[-1])
        last_report = 0.0

        def finished() -> bool:
            nonlocal last_report
            now = time.monotonic() - phase.t0
            if now - last_report >= 15:
                last_report = now
                self.say(
                    f"{TITLES[system]}: {now:.0f}s, {len(phase.starts)} started, "
                    f"{len(phase.ends)} ended"
                )
            return phase.done()

        completed = await self.until(
            f"every {TITLES[system]} job ended",
            finished,
            max(0.0, deadline - time.monotonic()),
            poll=0.5,
        )
        elapsed = time.monotonic() - phase.t0
        after = await self.requests()
        cpu = {
            name: (_cpu_seconds(pid) - cpu_before[name]) / elapsed
            for name, pid in processes.items()
            if _alive(pid)
        }
        memory = {name: _memory_mib(pid)["VmHWM"] for name, pid in processes.items() if _alive(pid)}
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        if fairness_task is not None:
            fairness_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await fairness_task
        whose, detail = writes_by_kind(before, after, submitted)
        series = running_series(phase.starts, phase.ends)
        last_start = max(phase.starts.values(), default=float("nan"))
        # Not every job started within the time: no "all Running" time, and the rate is
        # that of the jobs that did start.
        all_running = last_start if len(phase.starts) >= phase.jobs else None
        full = min(self.slots, self.jobs)
        # Every user has the same priority factor, so each is due the same share; the
        # accountant's effective priorities are kept beside it (they start equal).
        weights = {user_name(i): 1.0 for i in range(self.users)}
        full_at = time_to_reach(series, int(full * 0.95))
        running = shares_before_first_end(phase.starts, phase.ends, phase.users, full_at)
        figures = phase.figures
        per_job = max(1, len(phase.ends) if completed else len(phase.starts))
        figures.update(
            {
                "completed": completed,
                "jobs_started": len(phase.starts),
                "jobs_ended": len(phase.ends),
                "jobs_failed": len(phase.failed),
                "jobs_with_more_than_one_pod": sum(1 for p in phase.pods.values() if len(p) > 1),
                "submit_s": phase.submitted_s,
                "all_running_s": all_running,
                "started_per_s": len(phase.starts) / last_start if last_start > 0 else 0.0,
                "pool_full_s": full_at,
                "peak_running": max((r for _, r in series), default=0),
                "phase_s": elapsed,
                "writes": whose,
                "writes_detail": detail,
                # Per job that ran (started, where not every job ended: then approximate).
                "writes_per_job": whose.get("system", 0.0) / per_job,
                "job_writes_per_job": job_path_writes(detail, submitted) / per_job,
                "all_writes_per_job": sum(whose.values()) / per_job,
                "cpu_cores": cpu,
                # Where the time goes on a machine whose cores every process shares.
                "cpu_ms_per_job_by_process": {
                    name: cores * elapsed * 1000 / max(1, len(phase.starts))
                    for name, cores in cpu.items()
                },
                "peak_rss_mib": memory,
                "running_before_first_end": running,
                "fairness_gap": fairness_gap(running, weights),
                "series": series,
            }
        )
        if system == "kondor":
            operator_after = await self.operator_figures()
            cycles = operator_after.get(
                "kondor_operator_negotiation_cycle_seconds_count", 0
            ) - operator_before.get("kondor_operator_negotiation_cycle_seconds_count", 0)
            seconds = operator_after.get(
                "kondor_operator_negotiation_cycle_seconds_sum", 0
            ) - operator_before.get("kondor_operator_negotiation_cycle_seconds_sum", 0)
            figures["negotiation_cycles"] = cycles
            figures["negotiation_cycle_mean_s"] = seconds / cycles if cycles else float("nan")
            figures["matches"] = operator_after.get(
                "kondor_operator_negotiation_matches_total", 0
            ) - operator_before.get("kondor_operator_negotiation_matches_total", 0)
            figures["matched_per_s"] = figures["matches"] / last_start if last_start > 0 else 0.0
            figures["effective_priorities"] = figures.pop("priorities", None)
        self.say(
            f"{TITLES[system]}: {len(phase.starts)} of {phase.jobs} started, the last after "
            f"{last_start:.1f}s; {figures['writes_per_job']:.2f} own writes per job"
        )
        if not completed:
            phase.notes.append(
                f"{TITLES[system]}: {len(phase.ends)} of {phase.jobs} jobs ended within "
                f"--phase-timeout {self.phase_timeout:g}s; the rest were left unmeasured"
            )
            if system != self.last_system:  # the next system finds the nodes empty
                if stop is not None:  # what would still start pods stops first
                    await asyncio.to_thread(stop)
                await self.clear(namespace, path.format(namespace=namespace))
        return phase

    async def clear(self, namespace: str, jobs: str, timeout: float = 180.0) -> None:
        """Delete a phase's pods, then its jobs (collection `jobs`), each in one request, then
        its namespace, and wait until the namespace is gone, so that the next system finds
        the nodes free and the API server quiet (the namespace controller alone deletes pods
        one by one; a run whose next phase began while 10,000 jobs and pods were still being
        deleted measured the deletions)."""
        background = {"gracePeriodSeconds": "0", "propagationPolicy": "Background"}
        for path in (f"/api/v1/namespaces/{namespace}/pods", jobs):
            # Past the API server's request timeout (60 s) it drops the request: the
            # namespace's deletion finishes what is left.
            with contextlib.suppress(httpx.TransportError):
                await self.http.request("DELETE", path, params=background, timeout=120)
        (await self.http.delete(f"/api/v1/namespaces/{namespace}")).raise_for_status()

        async def gone() -> bool:
            response = await self.http.get(f"/api/v1/namespaces/{namespace}")
            return response.status_code == 404

        started = time.monotonic()
        await self.until(f"namespace {namespace} deleted", gone, timeout, poll=1.0)
        self.setup[f"{namespace}_cleared_s"] = time.monotonic() - started
        self.say(f"namespace {namespace} deleted in {self.setup[f'{namespace}_cleared_s']:.0f}s")

    async def watch_priorities(self, phase: Phase) -> None:
        """The accountant's effective priorities just before the first job ends, and the
        slowest negotiation cycle seen."""
        slowest = 0.0
        while True:
            with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
                pool = (
                    (await self.http.get(f"/apis/{GROUP}/{VERSION}/pools/default"))
                    .raise_for_status()
                    .json()
                )
                status = pool.get("status") or {}
                cycle = status.get("lastCycle") or {}
                slowest = max(slowest, float(cycle.get("durationSeconds") or 0.0))
                phase.figures["negotiation_cycle_max_s"] = slowest
                if not phase.ends:
                    users = status.get("users") or []
                    priorities = {
                        str(u["name"]): float(u.get("effectivePriority") or 0) for u in users
                    }
                    if priorities:
                        phase.figures["priorities"] = priorities
            await asyncio.sleep(2.0)


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


# ---- the run --------------------------------------------------------------------------------


def start_shards(
    kubeconfig: Path, machines: Sequence[Path], shards: int, workdir: Path
) -> list[tuple[subprocess.Popen[bytes], Path]]:
    started = []
    for index in range(shards):
        part = [str(p) for p in machines[index::shards]]
        ready = workdir / f"shard-{index}.ready"
        log = (workdir / f"shard-{index}.log").open("ab")
        process = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "fleet_sim.py"),
                "--kubeconfig",
                str(kubeconfig),
                "--ready-file",
                str(ready),
                "--stagger",
                "10",
                # Steps wait on the API server (claim, ConfigMap, Pod, status): a real fleet
                # does them on every node at once.
                "--workers",
                "16",
                *part,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        started.append((process, ready))
    return started


def stop_shards(shards: Sequence[tuple[subprocess.Popen[bytes], Path]]) -> None:
    """SIGTERM, then SIGKILL after 5 s: a graceful stop waits for the steps under way, which
    took 30 s on a loaded machine, and nothing of the agents is measured after their phase."""
    for process, _ in shards:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 5
    for process, _ in shards:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


async def run(args: argparse.Namespace, cluster: DevCluster, workdir: Path) -> Bench:
    pids = _pids(cluster)
    port = _operator_metrics_port(pids["kondor-operator"])
    machines = write_machines(workdir / "machines", args.nodes)
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    async with httpx.AsyncClient(
        base_url=cluster.server, verify=cluster.admin_ssl_context(), timeout=60, limits=limits
    ) as http:
        bench = Bench(
            cluster=cluster,
            http=http,
            machines=machines,
            jobs=args.jobs,
            users=args.users,
            shards=args.shards,
            phase_timeout=args.phase_timeout,
            workdir=workdir,
            pids=pids,
            operator_metrics=f"http://127.0.0.1:{port}/metrics",
            last_system=args.systems[-1],
        )
        bench.say(f"creating {args.nodes} kwok nodes of {NODE_CPUS} cores")
        await bench.create_nodes()
        control = {name: pids[name] for name in ("kube-apiserver", "etcd", "kwok")}
        if "kondor" in args.systems:
            await run_kondor(bench, args, control)
        if "scheduler" in args.systems:
            processes = {**control, "kube-scheduler": pids["kube-scheduler"]}
            await bench.run_phase(
                "scheduler",
                plain_pod,
                "/api/v1/namespaces/{namespace}/pods",
                "pods",
                processes,
                impersonate=False,
            )
        if "kueue" in args.systems:
            await run_kueue(bench, args, control)
    return bench


async def run_kondor(bench: Bench, args: argparse.Namespace, control: Mapping[str, int]) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SlotPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "nodeSelector": {"matchLabels": {NODE_LABEL[0]: NODE_LABEL[1]}},
            "condorConfig": CONDOR_CONFIG,
        },
    }
    await bench.post(f"/apis/{GROUP}/{VERSION}/slotpolicies", body, ok=(409,))
    kubeconfig = kondor.kondor_kubeconfig(bench.cluster.layout)
    bench.say(f"starting {len(bench.machines)} agents in {args.shards} processes")
    started = time.monotonic()
    shards = start_shards(kubeconfig, bench.machines, args.shards, bench.workdir)
    stop = kondor_stopper(bench, shards)
    try:
        await bench.until(
            "every agent process ready", lambda: all(r.exists() for _, r in shards), 300
        )
        await bench.until("every ExecutionPoint published", bench.published, 600, poll=2.0)
        bench.setup["agents_published_s"] = time.monotonic() - started
        bench.say(f"every node's slots published after {bench.setup['agents_published_s']:.0f}s")
        processes = {
            **control,
            "kondor-operator": bench.pids["kondor-operator"],
            **{f"agents-{i}": process.pid for i, (process, _) in enumerate(shards)},
        }
        phase = await bench.run_phase(
            "kondor",
            execution_job,
            f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/executionjobs",
            "executionjobs",
            processes,
            impersonate=True,
            stop=stop,
        )
        if phase.figures["completed"]:
            await check_kondor_jobs(bench, phase)
    finally:
        stop()


def kondor_stopper(
    bench: Bench, shards: Sequence[tuple[subprocess.Popen[bytes], Path]]
) -> Callable[[], None]:
    """Stops the agents and, when a peer runs next, the operator: the peers run without
    Kondor's processes, and the operator's webhooks go with it (kopf removes them), so that
    deleting 10,000 ExecutionJobs does not call a webhook 10,000 times (70 s here)."""

    def stop() -> None:
        stop_shards(shards)
        if bench.last_system != "kondor":
            bench.cluster.stop_process(kondor.OPERATOR)

    return stop


async def check_kondor_jobs(bench: Bench, phase: Phase) -> None:
    """Every ExecutionJob Completed, started exactly once (numJobStarts 1)."""
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{phase.namespace}/executionjobs"

    async def completed() -> bool:
        items = (await bench.http.get(path)).raise_for_status().json().get("items") or []
        states = Counter((i.get("status") or {}).get("jobStatus") for i in items)
        phase.figures["job_states"] = dict(states)
        starts = Counter((i.get("status") or {}).get("numJobStarts") for i in items)
        phase.figures["num_job_starts"] = {str(k): v for k, v in starts.items()}
        return states.get("Completed", 0) >= phase.jobs

    await bench.until("every ExecutionJob Completed", completed, 120, poll=2.0)


async def run_kueue(bench: Bench, args: argparse.Namespace, control: Mapping[str, int]) -> None:
    bench.say("Kueue: building (cached) and starting it")
    kubeconfig = kondor.kondor_kubeconfig(bench.cluster.layout)
    ports = [free_port(), free_port(), free_port()]
    with bench.cluster.admin_client() as api:
        context = kueue.running(api, kubeconfig, bench.workdir / "kueue", ports)
        with context as manager:
            flavor, queue = "kwok", "scale"
            await bench.post(
                "/apis/kueue.x-k8s.io/v1beta1/resourceflavors",
                kueue.resource_flavor(flavor),
                ok=(409,),
            )
            quotas = {
                "cpu": str(len(bench.machines) * NODE_CPUS),
                "memory": f"{len(bench.machines) * NODE_MEMORY_GI}Gi",
            }
            await bench.post(
                "/apis/kueue.x-k8s.io/v1beta1/clusterqueues",
                kueue.cluster_queue(queue, flavor, quotas),
                ok=(409,),
            )
            namespace = "scale-kueue"
            await bench.namespace(namespace)
            for index in range(args.users):
                await bench.post(
                    f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{namespace}/localqueues",
                    kueue.local_queue(namespace, user_name(index), queue),
                    ok=(409,),
                )
            processes = {
                **control,
                "kube-scheduler": bench.pids["kube-scheduler"],
                "kube-controller-manager": bench.pids["kube-controller-manager"],
                "kueue": manager.pid,
            }
            await bench.run_phase(
                "kueue",
                batch_job,
                "/apis/batch/v1/namespaces/{namespace}/jobs",
                "jobs",
                processes,
                impersonate=False,
            )


# ---- the report -----------------------------------------------------------------------------


def own_cpu(system: str, figures: Mapping[str, float]) -> float:
    """The sum of a per-process figure (CPU, RSS) over the system's own processes (not the
    API server, etcd or kwok, which every system shares)."""
    return sum(v for k, v in figures.items() if k not in ("kube-apiserver", "etcd", "kwok"))


ROWS: tuple[tuple[str, str, bool], ...] = (
    # (figure, label, higher is better)
    ("all_running_s", "submit -> all Running (s)", False),
    ("started_per_s", "jobs started per second", True),
    ("pool_full_s", "submit -> pool 95% full (s)", False),
    ("submit_s", "submission of every job (s)", False),
    ("job_writes_per_job", "API writes per job on the job's objects", False),
    ("writes_per_job", "API writes per job, the system's own", False),
    ("all_writes_per_job", "API writes per job, all", False),
    ("own_cpu_cores", "CPU of the system's processes (cores)", False),
    ("own_peak_rss_mib", "peak RSS of the system's processes (MiB)", False),
    ("apiserver_cpu_cores", "CPU of kube-apiserver (cores)", False),
    ("cpu_ms_per_job", "CPU per job started, every process (ms)", False),
    ("fairness_gap", "largest gap of a user's share", False),
)


def table(bench: Bench) -> tuple[list[str], dict[str, Any]]:
    lines: list[str] = []
    results: dict[str, Any] = {}
    systems = list(bench.phases)
    for system, phase in bench.phases.items():
        figures = phase.figures
        figures["own_cpu_cores"] = own_cpu(system, figures["cpu_cores"])
        figures["own_peak_rss_mib"] = own_cpu(system, figures["peak_rss_mib"])
        figures["apiserver_cpu_cores"] = figures["cpu_cores"].get("kube-apiserver", float("nan"))
        figures["cpu_ms_per_job"] = sum(figures["cpu_ms_per_job_by_process"].values())
        results[system] = figures
    header = f"{'figure':<42}" + "".join(f"{TITLES[s]:>16}" for s in systems)
    peers = [s for s in systems if s != "kondor"]
    if "kondor" in systems:
        header += "".join(f"{'K / ' + TITLES[p][:8]:>16}" for p in peers)
    lines.append(header)
    for key, label, _higher in ROWS:
        row = f"{label:<42}"
        for system in systems:
            value = results[system].get(key)
            row += f"{_fmt(value):>16}"
        if "kondor" in systems:
            for peer in peers:
                mine, theirs = results["kondor"].get(key), results[peer].get(key)
                ratio = (
                    mine / theirs
                    if isinstance(mine, int | float) and isinstance(theirs, int | float) and theirs
                    else None
                )
                row += f"{_fmt(ratio):>16}"
        lines.append(row)
    return lines, results


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int | float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def check_targets(results: Mapping[str, Any]) -> list[str]:
    missed: list[str] = []
    kondor_figures = results.get("kondor")
    if kondor_figures is None:
        return missed
    rate = kondor_figures["started_per_s"]
    for peer, key in (("scheduler", "vs_scheduler"), ("kueue", "vs_kueue")):
        if peer in results and results[peer]["started_per_s"] > 0:
            ratio = rate / results[peer]["started_per_s"]
            if ratio < TARGETS[key]:
                missed.append(
                    f"Kondor starts {ratio:.2f}x {TITLES[peer]}'s jobs per second "
                    f"(target >= {TARGETS[key]:g}x)"
                )
    if kondor_figures["job_writes_per_job"] > TARGETS["writes_per_job"]:
        missed.append(
            f"Kondor writes {kondor_figures['job_writes_per_job']:.2f} times per job on its "
            f"objects from match to completion (target <= {TARGETS['writes_per_job']:g})"
        )
    gap = kondor_figures["fairness_gap"]
    if not gap <= TARGETS["fairness"]:
        missed.append(f"a user's share is {gap:.1%} off its due (target <= 5%)")
    for system, figures in results.items():
        if figures["jobs_failed"]:  # one not ended within the window is in the notes
            missed.append(f"{TITLES[system]}: {figures['jobs_failed']} jobs failed")
        if figures["jobs_with_more_than_one_pod"]:
            missed.append(
                f"{TITLES[system]}: {figures['jobs_with_more_than_one_pod']} jobs ran twice"
            )
    return missed


def plot(bench: Bench, path: Path) -> str | None:
    series = {system: phase.figures["series"] for system, phase in bench.phases.items()}
    title = (
        f"{bench.jobs} jobs of {DURATION} from {bench.users} users on {len(bench.machines)} "
        f"kwok nodes ({bench.slots} slots)"
    )
    return plot_series(series, min(bench.slots, bench.jobs), title, path)


def plot_series(
    series: Mapping[str, Sequence[Sequence[float]]], most: int, title: str, path: Path
) -> str | None:
    """Running jobs over time, one step line per system, beside the most that can run
    (the slots, or the jobs when there are fewer); why not, when matplotlib is missing."""
    try:
        import matplotlib  # noqa: PLC0415 - optional: `pip install kondor[bench]`

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]'): no plot"
    figure, axes = plt.subplots(figsize=(9, 4.5))
    for system, points in series.items():
        times = [0.0] + [float(point[0]) for point in points]
        counts = [0.0] + [float(point[1]) for point in points]
        axes.step(times, counts, where="post", label=TITLES.get(system, system))
    axes.axhline(most, color="grey", linestyle=":", label=f"{most} at most")
    axes.set_xlabel("seconds since the first submission")
    axes.set_ylabel("jobs running")
    axes.set_title(title)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return None


def replot(data_path: Path) -> int:
    """Draw the PNG again from a JSON this benchmark wrote (beside it)."""
    data = json.loads(data_path.read_text())
    series = {system: figures["series"] for system, figures in data["results"].items()}
    shape = data.get("shape") or {}
    most = int(shape.get("most") or max(n for points in series.values() for _, n in points))
    why = plot_series(series, most, str(shape.get("title") or ""), data_path.with_suffix(".png"))
    if why:
        print(why)
        return 1
    print(f"wrote {data_path.with_suffix('.png')}")
    return 0


def report(bench: Bench, args: argparse.Namespace, took: float, load: str) -> int:
    lines, results = table(bench)
    print("\n".join(lines))
    conditions = (
        f"{len(bench.machines)} kwok nodes of {NODE_CPUS} cores / {NODE_MEMORY_GI} GiB "
        f"({bench.slots} one-core slots), {bench.jobs} jobs of {DURATION} ({JOB_CPUS} core, "
        f"{JOB_MEMORY}) from {bench.users} users; Kubernetes {versions.KUBERNETES}, kwok "
        f"{versions.KWOK}, Kueue {versions.KUEUE}; {os.cpu_count()} cores; {args.shards} agent "
        f"processes; load before the run: {load}"
    )
    print(conditions)
    for system, figures in results.items():
        top = ", ".join(f"{k} {v:.0f}" for k, v in list(figures["writes_detail"].items())[:8])
        print(f"{TITLES[system]} writes: {top}")
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in figures["cpu_cores"].items())
        print(f"{TITLES[system]} CPU (cores over {figures['phase_s']:.0f}s): {cpu}")
        cpu = ", ".join(f"{k} {v:.1f}" for k, v in figures["cpu_ms_per_job_by_process"].items())
        print(f"{TITLES[system]} CPU per job started (ms): {cpu}")
        rss = ", ".join(f"{k} {v:.0f}" for k, v in figures["peak_rss_mib"].items())
        print(f"{TITLES[system]} peak RSS (MiB): {rss}")
    if "kondor" in results:
        k = results["kondor"]
        print(
            f"Kondor: {k.get('negotiation_cycles', 0):.0f} negotiation cycles, mean "
            f"{k.get('negotiation_cycle_mean_s', float('nan')):.2f}s, slowest "
            f"{k.get('negotiation_cycle_max_s', float('nan')):.2f}s; "
            f"{k.get('matches', 0):.0f} matches ({k.get('matched_per_s', 0):.1f}/s); "
            f"job states {k.get('job_states')}, numJobStarts {k.get('num_job_starts')}"
        )
    notes = [*bench.notes, f"the whole run took {took:.0f}s"]
    for phase in bench.phases.values():
        notes += phase.notes
    missed = check_targets(results)
    args.out.mkdir(parents=True, exist_ok=True)
    png = args.out / "bench_scale.png"
    why = plot(bench, png)
    if why:
        notes.append(why)
    data = {
        "conditions": conditions,
        "setup": bench.setup,
        "table": lines,
        "results": {
            system: {k: v for k, v in figures.items() if k != "series"}
            | {"series": _thin(figures["series"])}
            for system, figures in results.items()
        },
        "shape": {
            "most": min(bench.slots, bench.jobs),
            "title": f"{bench.jobs} jobs of {DURATION} from {bench.users} users on "
            f"{len(bench.machines)} kwok nodes ({bench.slots} slots)",
        },
        "targets": TARGETS,
        "missed": missed,
        "notes": notes,
        "took_s": took,
    }
    (args.out / "bench_scale.json").write_text(json.dumps(data, indent=1, default=str) + "\n")
    for note in notes:
        print(f"note: {note}")
    for miss in missed:
        print(f"MISSED: {miss}")
    print(f"wrote {args.out / 'bench_scale.json'}" + ("" if why else f" and {png}"))
    return 1 if missed else 0


def _thin(series: Sequence[tuple[float, int]], most: int = 600) -> list[tuple[float, int]]:
    """At most `most` points of a step series (every k-th, and the last)."""
    if len(series) <= most:
        return [(round(t, 2), n) for t, n in series]
    step = len(series) / most
    picked = [series[int(i * step)] for i in range(most)] + [series[-1]]
    return [(round(t, 2), n) for t, n in picked]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--shards", type=int, default=2, help="agent processes (default 2)")
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"which to run, in order (default {','.join(SYSTEMS)})",
    )
    parser.add_argument(
        "--phase-timeout",
        type=float,
        default=300,
        help="seconds each system has from its first submission, the submission included, "
        "for every job to end (default 300: the three systems and the 1,000 nodes fit in "
        "20 minutes here; the figures are those of what was submitted and started by then)",
    )
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument(
        "--replot", type=Path, metavar="JSON", help="draw the PNG of an earlier run again"
    )
    args = parser.parse_args()
    if args.replot is not None:
        return replot(args.replot)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown:
        parser.error(f"--systems: {', '.join(unknown)} unknown; choose from {', '.join(SYSTEMS)}")
    for name in ("nodes", "jobs", "users", "shards"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: {getattr(args, name)} must be at least 1")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    missing = build.missing_binaries(versions.bin_dir())
    if missing:
        print(f"control plane not built ({', '.join(missing)}); run `make controlplane`")
        return 1
    if "kueue" in args.systems:
        try:
            kueue.ensure_kueue()
        except kueue.KueueError as error:
            print(f"Kueue cannot be built, running without it: {error}", file=sys.stderr)
            args.systems = [s for s in args.systems if s != "kueue"]
    load = Path("/proc/loadavg").read_text().split()[:3]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kondor-bench-scale-") as tmp:
        workdir = Path(tmp)
        spec = ClusterSpec(
            port=free_port(),
            kubeconfig=workdir / "kubeconfig",
            state_dir=workdir / "state",
            operator=True,
        )
        with DevCluster(spec, log=sys.stderr) as cluster:
            bench = asyncio.run(run(args, cluster, workdir))
    return report(bench, args, time.monotonic() - started, " ".join(load))


if __name__ == "__main__":
    sys.exit(main())
