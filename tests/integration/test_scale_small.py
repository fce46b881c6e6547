"""bench-scale in small, for CI (issue 16): 500 pod jobs from two users onto 50 kwok nodes
of eight one-core slots (four static, one partitionable of four cores), more jobs than slots.
Every job completes exactly once (one pod, numJobStarts 1, Completed), and no slot was ever
over-allocated: every ExecutionPoint status the test saw through a watch of them, from
submission to the end, carves no more than the node has and runs each job in one slot at
most, no job ever ran on two nodes, and no node ever ran more job pods at once than it has
slots (from a watch of the pods).

The nodes' agents are real `Agent`s with their `JobRunner`, all in one process
(`bench/fleet_sim.py`, as `make bench-scale` runs them)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from kondor_core.api import EXECUTION_POINT_LABEL, GROUP, VERSION
from kondor_devcluster import kondor, nodes
from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port
from kondor_devcluster.rbac import USERS_GROUP

from .conftest import ROOT, skip_reason

NODES = 50
JOBS = 500
CPUS = 8
MEMORY_MIB = 16 * 1024
SLOTS_PER_NODE = 8
NAMESPACE = "scale-small"
LABEL = ("kondor.io/bench", "scale-small")
POLICY = """POLLING_INTERVAL = 30
SLOT_TYPE_1 = 1/8
NUM_SLOTS_TYPE_1 = 4
SLOT_TYPE_2 = 1/2
SLOT_TYPE_2_PARTITIONABLE = TRUE
NUM_SLOTS_TYPE_2 = 1
"""
EPS = f"/apis/{GROUP}/{VERSION}/executionpoints"
JOBS_PATH = f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/executionjobs"

pytestmark = pytest.mark.timeout(240)


@dataclass
class History:
    """What the watches saw: every ExecutionPoint status, every job pod's phases."""

    statuses: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: pod -> (node, job, phase) as last seen, and (time, node, +1/-1) when one runs and ends.
    pods: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    steps: list[tuple[float, str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def status(self, body: dict[str, Any]) -> None:
        with self.lock:
            self.statuses.append((body["metadata"]["name"], body.get("status") or {}))

    def pod(self, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        labels = meta.get("labels") or {}
        node = labels.get(EXECUTION_POINT_LABEL) or ""
        phase = (body.get("status") or {}).get("phase") or "Pending"
        with self.lock:
            before = self.pods.get(meta["name"], ("", "", "Pending"))[2]
            self.pods[meta["name"]] = (node, labels.get("kondor.io/job", ""), phase)
            now = time.monotonic()
            if before == "Pending" and phase != "Pending":
                self.steps.append((now, node, 1))
            if before in ("Pending", "Running") and phase in ("Succeeded", "Failed"):
                self.steps.append((now, node, -1))


def _watch(http: httpx.Client, path: str, feed: Any, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            listing = http.get(path).raise_for_status().json()
            for item in listing["items"]:
                feed(item)
            params = {
                "watch": "true",
                "resourceVersion": listing["metadata"]["resourceVersion"],
                "timeoutSeconds": "5",
            }
            with http.stream("GET", path, params=params, timeout=None) as response:
                for line in response.iter_lines():
                    event = json.loads(line)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        feed(event["object"])
                    if stop.is_set():
                        return
        except (httpx.HTTPError, KeyError, ValueError):
            time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("scale")
    spec = ClusterSpec(
        port=free_port(), kubeconfig=tmp / "kubeconfig", state_dir=tmp / "state", operator=True
    )
    with DevCluster(spec, log=sys.stderr) as dev:
        yield dev


def _machines(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(NODES):
        path = directory / f"small-{index:02d}.yaml"
        machine = {
            "name": f"small-{index:02d}",
            "cpus": CPUS,
            "memory": f"{MEMORY_MIB}Mi",
            "disk": "100Gi",
            "labels": {LABEL[0]: LABEL[1]},
        }
        path.write_text(yaml.safe_dump(machine))
        paths.append(path)
    return paths


def _job(index: int) -> dict[str, Any]:
    name = f"j{index:03d}"
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ExecutionJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "requestCpus": 1,
            "requestMemory": "1Gi",
            "pod": {
                "template": {
                    "metadata": {"annotations": {nodes.SIM_DURATION_ANNOTATION: "4s"}},
                    "spec": {"containers": [{"name": "main", "image": "busybox"}]},
                }
            },
        },
    }


def _until(check: Any, timeout: float, what: str, last: Any = lambda: None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"not {what} within {timeout:.0f}s; last seen: {last()}")


def test_500_jobs_on_50_nodes_each_run_once_and_no_slot_is_over_allocated(
    cluster: DevCluster, tmp_path: Path
) -> None:
    history = History()
    stop = threading.Event()
    machines = _machines(tmp_path / "machines")
    with httpx.Client(
        base_url=cluster.server, verify=cluster.admin_ssl_context(), timeout=30
    ) as http:
        for path in machines:
            manifest = nodes.node_manifest(nodes.load_machine(path))
            http.post("/api/v1/nodes", json=manifest).raise_for_status()
        http.post("/api/v1/namespaces", json={"metadata": {"name": NAMESPACE}}).raise_for_status()
        http.post(
            f"/apis/{GROUP}/{VERSION}/slotpolicies",
            json={
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "SlotPolicy",
                "metadata": {"name": "scale-small"},
                "spec": {"nodeSelector": {"matchLabels": dict([LABEL])}, "condorConfig": POLICY},
            },
        ).raise_for_status()
        agents = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "bench" / "fleet_sim.py"),
                "--kubeconfig",
                str(kondor.kondor_kubeconfig(cluster.layout)),
                "--stagger",
                "2",
                "--workers",
                "16",
                *map(str, machines),
            ],
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "agents.log").open("wb"),
        )
        try:
            _run(http, history, stop)
        finally:
            stop.set()
            agents.terminate()
            agents.wait(30)


def _run(http: httpx.Client, history: History, stop: threading.Event) -> None:
    def published() -> bool:
        items = http.get(EPS).raise_for_status().json()["items"]
        ready = [i for i in items if len((i.get("status") or {}).get("slots") or ()) == 5]
        return len(ready) == NODES

    _until(published, 60, "every node's five slots published")
    watchers = [
        threading.Thread(target=_watch, args=(http, EPS, history.status, stop), daemon=True),
        threading.Thread(
            target=_watch,
            args=(http, f"/api/v1/namespaces/{NAMESPACE}/pods", history.pod, stop),
            daemon=True,
        ),
    ]
    for watcher in watchers:
        watcher.start()
    started = time.monotonic()

    def submit(index: int) -> None:
        user = ("alice", "bob")[index % 2]
        headers = {"Impersonate-User": user, "Impersonate-Group": USERS_GROUP}
        http.post(JOBS_PATH, json=_job(index), headers=headers).raise_for_status()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(submit, range(JOBS)))

    states: Counter[tuple[str, str]] = Counter()

    def all_completed() -> bool:
        items = http.get(JOBS_PATH).raise_for_status().json()["items"]
        states.clear()
        for item in items:
            status = item.get("status") or {}
            execution = (status.get("execution") or {}).get("state") or "-"
            states[(status.get("jobStatus") or "-", execution)] += 1
        return states[("Completed", "Exited")] == JOBS

    _until(all_completed, 150, f"all {JOBS} jobs Completed", lambda: dict(states))
    took = time.monotonic() - started
    time.sleep(1.0)  # the watches' last events
    stop.set()
    items = http.get(JOBS_PATH).raise_for_status().json()["items"]
    owners = Counter(item["spec"]["owner"] for item in items)
    assert owners == {"alice": JOBS // 2, "bob": JOBS // 2}
    for item in items:
        status = item["status"]
        assert status["numJobStarts"] == 1, (item["metadata"]["name"], status)
        assert status["exitCode"] == 0
    with history.lock:
        pods = dict(history.pods)
        statuses = list(history.statuses)
        steps = sorted(history.steps)
    per_job = Counter(job for _node, job, _phase in pods.values())
    assert len(per_job) == JOBS and set(per_job.values()) == {1}, "a job had another pod"
    assert all(phase == "Succeeded" for _n, _j, phase in pods.values())
    _check_statuses(statuses)
    running: dict[str, int] = defaultdict(int)
    peak = 0
    for _when, node, step in steps:
        running[node] += step
        assert running[node] <= SLOTS_PER_NODE, f"{node} ran {running[node]} pods at once"
        peak = max(peak, sum(running.values()))
    print(f"{JOBS} jobs in {took:.1f}s; peak {peak} pods running; {len(statuses)} statuses seen")


def _check_statuses(statuses: list[tuple[str, dict[str, Any]]]) -> None:
    """Each status carves at most the node's cores and memory, runs a job in one slot at
    most, and no job shows on two nodes over the whole history."""
    nodes_of: dict[str, set[str]] = defaultdict(set)
    claimed = 0
    for node, status in statuses:
        slots = status.get("slots") or []
        assert sum(float(s.get("cpus") or 0) for s in slots) <= CPUS, (node, slots)
        assert sum(int(s.get("memory") or 0) for s in slots) <= MEMORY_MIB, (node, slots)
        jobs = [s["job"] for s in slots if s.get("job")]
        assert len(jobs) == len(set(jobs)), f"{node}: a job in two slots: {jobs}"
        assert len(jobs) <= SLOTS_PER_NODE
        claimed = max(claimed, len(jobs))
        for job in jobs:
            nodes_of[job].add(node)
    twice = {job: sorted(where) for job, where in nodes_of.items() if len(where) > 1}
    assert not twice, f"jobs on two nodes: {twice}"
    assert claimed > 0, "no status showed a running job: the watch saw nothing"
