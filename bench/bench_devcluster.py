"""Benchmark: the ceiling of the dev cluster harness on this machine.

Prints, beside the baseline measured on the project machine (2 cores, 24 GiB):

* warm start-up: `up` to ready (API server `/readyz`, controllers healthy, 2 nodes Ready),
  binaries already built;
* merge patches per second from 8 concurrent clients while 100 watches are open;
* 1,000 kwok nodes: time until all are Ready, and the API server's and kwok's CPU while they
  heartbeat.

Run: `make bench-devcluster` (needs the built control plane).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from kondor_devcluster import build, versions
from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port
from kondor_devcluster.components import KWOK_NODE_ANNOTATION, KWOK_NODE_ANNOTATION_VALUE

ROOT = Path(__file__).resolve().parents[1]
MACHINES = (ROOT / "examples/machines/kwok-small.yaml", ROOT / "examples/machines/kwok-gpu.yaml")

#: Measured on the project machine (2 cores, 24 GiB), Kubernetes v1.32.5, etcd v3.5.35, kwok v0.7.0.
BASELINE: dict[str, float] = {
    "startup_s": 3.70,
    "patches_per_s": 124.6,  # bounded by this one Python process, which also reads the watches
    "watch_events_per_s": 12400.0,
    "patch_apiserver_cpu_cores": 0.47,
    "patch_client_cpu_cores": 0.94,  # one core: the client, not the server, is the bound
    "nodes_ready_s": 8.86,
    "apiserver_cpu_cores": 0.48,  # 1,000 leases renewed every 10 s, status every 20-45 s
    "kwok_cpu_cores": 0.13,
}

CLIENTS = 8
WATCHES = 100
OBJECTS = 64


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def _pid(cluster: DevCluster, name: str) -> int:
    data = json.loads(cluster.layout.pids.read_text())
    return int(data[name]["pid"])


def bench_startup(workdir: Path, runs: int) -> float:
    times = []
    for run in range(runs):
        state = workdir / f"startup-{run}"
        spec = ClusterSpec(
            port=free_port(),
            kubeconfig=state / "kubeconfig",
            state_dir=state / "state",
            nodes=MACHINES,
        )
        started = time.monotonic()
        with open(os.devnull, "w") as sink, DevCluster(spec, log=sink):
            times.append(time.monotonic() - started)
    return statistics.median(times)


async def _patches(cluster: DevCluster, seconds: float) -> tuple[float, float, float, float]:
    namespace = "bench"
    context = cluster.admin_ssl_context()
    limits = httpx.Limits(max_connections=WATCHES + 10)
    async with httpx.AsyncClient(
        base_url=cluster.server, verify=context, timeout=30, limits=limits
    ) as setup:
        await setup.post(
            "/api/v1/namespaces",
            json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )
        for index in range(OBJECTS):
            await setup.post(
                f"/api/v1/namespaces/{namespace}/configmaps",
                json={"metadata": {"name": f"cm-{index}"}, "data": {"n": "0"}},
            )
        events = 0
        stop = asyncio.Event()

        async def watch() -> None:
            nonlocal events
            async with setup.stream(
                "GET",
                f"/api/v1/namespaces/{namespace}/configmaps",
                params={"watch": "true", "resourceVersion": "0"},
                timeout=httpx.Timeout(30, read=None),
            ) as response:
                async for _line in response.aiter_lines():
                    events += 1
                    if stop.is_set():
                        return

        async def patcher(worker: int) -> int:
            done = 0
            async with httpx.AsyncClient(
                base_url=cluster.server, verify=context, timeout=30
            ) as api:
                while not stop.is_set():
                    name = f"cm-{(worker * 8 + done) % OBJECTS}"
                    response = await api.patch(
                        f"/api/v1/namespaces/{namespace}/configmaps/{name}",
                        content=json.dumps({"data": {"n": str(done), "w": str(worker)}}),
                        headers={"Content-Type": "application/merge-patch+json"},
                    )
                    response.raise_for_status()
                    done += 1
            return done

        watchers = [asyncio.create_task(watch()) for _ in range(WATCHES)]
        await asyncio.sleep(2)  # let the watches open
        events = 0
        apiserver = _pid(cluster, "kube-apiserver")
        cpu_before = (_cpu_seconds(apiserver), time.process_time())
        patchers = [asyncio.create_task(patcher(worker)) for worker in range(CLIENTS)]
        await asyncio.sleep(seconds)
        stop.set()
        cpu_after = (_cpu_seconds(apiserver), time.process_time())
        total = sum(await asyncio.gather(*patchers))
        received = events
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
    return (
        total / seconds,
        received / seconds,
        (cpu_after[0] - cpu_before[0]) / seconds,
        (cpu_after[1] - cpu_before[1]) / seconds,
    )


def _node(name: str) -> dict[str, Any]:
    capacity = {"cpu": "8", "memory": "16Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"type": "kwok", "kubernetes.io/hostname": name},
            "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE},
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }


async def _many_nodes(cluster: DevCluster, count: int, window: float) -> tuple[float, float, float]:
    context = cluster.admin_ssl_context()
    async with httpx.AsyncClient(base_url=cluster.server, verify=context, timeout=60) as api:
        started = time.monotonic()
        semaphore = asyncio.Semaphore(16)

        async def create(index: int) -> None:
            async with semaphore:
                response = await api.post("/api/v1/nodes", json=_node(f"bench-node-{index:04d}"))
                response.raise_for_status()

        await asyncio.gather(*(create(index) for index in range(count)))
        while True:
            nodes = (await api.get("/api/v1/nodes", params={"labelSelector": "type=kwok"})).json()
            ready = sum(
                1
                for node in nodes["items"]
                for c in node.get("status", {}).get("conditions", [])
                if c["type"] == "Ready" and c["status"] == "True"
            )
            if ready >= count:
                break
            if time.monotonic() - started > 600:
                raise RuntimeError(f"only {ready} of {count} nodes Ready after 600s")
            await asyncio.sleep(1)
        ready_after = time.monotonic() - started
    apiserver, kwok = _pid(cluster, "kube-apiserver"), _pid(cluster, "kwok")
    before = (_cpu_seconds(apiserver), _cpu_seconds(kwok))
    await asyncio.sleep(window)
    after = (_cpu_seconds(apiserver), _cpu_seconds(kwok))
    return ready_after, (after[0] - before[0]) / window, (after[1] - before[1]) / window


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--startup-runs", type=int, default=3)
    parser.add_argument("--patch-seconds", type=float, default=10.0)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--cpu-window", type=float, default=30.0)
    args = parser.parse_args()
    missing = build.missing_binaries(versions.bin_dir())
    if missing:
        print(f"control plane not built ({', '.join(missing)}); run `make controlplane`")
        return 1
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="kondor-bench-") as tmp:
        workdir = Path(tmp)
        results["startup_s"] = bench_startup(workdir, args.startup_runs)
        spec = ClusterSpec(
            port=free_port(), kubeconfig=workdir / "kubeconfig", state_dir=workdir / "state"
        )
        with DevCluster(spec, log=sys.stderr) as cluster:
            patches, events, server_cpu, client_cpu = asyncio.run(
                _patches(cluster, args.patch_seconds)
            )
            results["patches_per_s"] = patches
            results["watch_events_per_s"] = events
            results["patch_apiserver_cpu_cores"] = server_cpu
            results["patch_client_cpu_cores"] = client_cpu
            ready, apiserver_cpu, kwok_cpu = asyncio.run(
                _many_nodes(cluster, args.nodes, args.cpu_window)
            )
            results["nodes_ready_s"] = ready
            results["apiserver_cpu_cores"] = apiserver_cpu
            results["kwok_cpu_cores"] = kwok_cpu
    print(f"{'figure':<24}{'now':>12}{'baseline':>12}")
    for name, value in results.items():
        print(f"{name:<24}{value:>12.2f}{BASELINE[name]:>12.2f}")
    print(
        f"(startup: median of {args.startup_runs}, 2 nodes; patches: {CLIENTS} clients, "
        f"{WATCHES} watches, {args.patch_seconds:.0f}s; nodes: {args.nodes}, "
        f"CPU over {args.cpu_window:.0f}s of heartbeats)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
