"""Benchmark: the API server's CPU per ExecutionPoint status patch, by the size of the object
(issue 16: what a re-carve of 1,000 nodes costs the API server, `bench_fleet.py`).

On an idle dev cluster (no operator, no nodes, Kondor's CRDs, one watch of ExecutionPoints as
the operator keeps), N ExecutionPoints get their status patched once per variant, 8 patches at
a time, as an agent patches it (a JSON merge patch of the status subresource). The variants:

* `near-empty` (the baseline: what any patch costs): a summary and the policy, no slots;
* `1 partitionable slot`: the agent's status for HTCondor's default layout (kwok-small.yaml);
* `4 static slots`: the status after bench_fleet's re-carve;
* `4 static, whole slot ads`: the same as stored before the slot ads left out what they share
  with the machine ad and the clock (`ExecutionPointStatus.dump`), each slot ad whole.

Each variant runs `--rounds` times, interleaved; printed: the stored object's size and the
API server's CPU per patch (/proc/<pid>/stat over the round), median and range, beside the
baseline.

Run (needs `make controlplane`):

    .venv/bin/python bench/bench_patch_cost.py        # 300 ExecutionPoints, 3 rounds
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from bench_fleet import RECARVE, _cpu_seconds, _pids
from kondor_core import startd
from kondor_core.api import API_VERSION, Machine, SlotPolicySpec, whole_slot_ad
from kondor_core.api.crds import all_crds
from kondor_core.config import compile_policy
from kondor_devcluster import build, versions
from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port
from kondor_kube import managers, paths
from kondor_kube.client import Client
from kondor_kube.config import connect
from kondor_kube.errors import KubeError

MACHINE = Path(__file__).resolve().parents[1] / "examples" / "machines" / "kwok-small.yaml"
EPS = "executionpoints"

Variant = Callable[[str, int], dict[str, Any]]


def agent_status(name: str, generation: int, spec: dict[str, Any]) -> dict[str, Any]:
    """The status an agent publishes for a kwok-small machine `name` under `spec`."""
    values = yaml.safe_load(MACHINE.read_text())
    machine = Machine.model_validate({**values, "name": name})
    now = time.time()
    node = startd.start(machine, compile_policy(SlotPolicySpec.model_validate(spec)), now)
    status = startd.status(startd.tick(node, {}, now).startd, {}, now).dump()
    status["policy"]["generation"] = generation
    return status


def near_empty(_name: str, generation: int) -> dict[str, Any]:
    return {
        "summary": {"slots": 0},
        "policy": {"name": "", "generation": generation, "hash": ""},
        "slots": None,
        "machine": None,
        "conditions": None,
        "operator": None,
    }


def one_pslot(name: str, generation: int) -> dict[str, Any]:
    return agent_status(name, generation, {})


def four_static(name: str, generation: int) -> dict[str, Any]:
    return agent_status(name, generation, RECARVE["spec"])


def four_static_whole(name: str, generation: int) -> dict[str, Any]:
    status = four_static(name, generation)
    for slot in status["slots"]:
        slot["ad"] = whole_slot_ad(status["machine"], slot["ad"])
    return status


VARIANTS: dict[str, Variant] = {
    "near-empty": near_empty,
    "1 partitionable slot": one_pslot,
    "4 static slots": four_static,
    "4 static, whole slot ads": four_static_whole,
}


def measure(cluster: DevCluster, count: int, rounds: int) -> dict[str, tuple[int, list[float]]]:
    """Per variant: the stored object's size (bytes) and the API server's ms per patch."""
    kube = Client(connect(cluster.spec.kubeconfig, "admin"), field_manager=managers.BENCH)
    for body in all_crds():
        kube.create(paths.group("apiextensions.k8s.io/v1", "customresourcedefinitions"), body)
    names = [f"patch-{i:04d}" for i in range(count)]
    deadline = time.monotonic() + 30
    while True:
        try:
            kube.list(paths.kondor(EPS))
            break
        except KubeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    for name in names:
        body = {
            "apiVersion": API_VERSION,
            "kind": "ExecutionPoint",
            "metadata": {"name": name},
            "spec": {"nodeName": name},
        }
        kube.create(paths.kondor(EPS), body)

    def follow() -> None:  # the operator's watch: every patch is also a watch event
        with contextlib.suppress(Exception):  # ended by the cluster's stop
            for _ in kube.watch(paths.kondor(EPS), "", 3600):
                pass

    threading.Thread(target=follow, daemon=True).start()
    apiserver = _pids(cluster)["kube-apiserver"]
    results: dict[str, tuple[int, list[float]]] = {}
    generation = 0
    with ThreadPoolExecutor(8) as pool:
        for _ in range(rounds):
            for label, make in VARIANTS.items():
                generation += 1
                bodies = {name: {"status": make(name, generation)} for name in names}
                time.sleep(1.0)  # the last round's watch events delivered
                before = _cpu_seconds(apiserver)

                def patch(name: str, bodies: dict[str, Any] = bodies) -> None:
                    kube.merge_patch(paths.kondor(EPS, name, subresource="status"), bodies[name])

                list(pool.map(patch, names))
                per_patch = 1000 * (_cpu_seconds(apiserver) - before) / count
                stored = kube.get(paths.kondor(EPS, names[0]))
                size = len(json.dumps(stored, separators=(",", ":")))
                results.setdefault(label, (size, []))[1].append(per_patch)
    return results


def report(results: dict[str, tuple[int, list[float]]], count: int, rounds: int) -> None:
    base = statistics.median(results["near-empty"][1])
    print(f"{'variant':<34}{'object B':>9}{'ms/patch':>10}{'range':>14}{'- baseline':>12}")
    for label, (size, costs) in results.items():
        median = statistics.median(costs)
        spread = f"{min(costs):.2f}-{max(costs):.2f}"
        print(f"{label:<34}{size:>9}{median:>10.2f}{spread:>14}{median - base:>12.2f}")
    print(
        f"({count} ExecutionPoints, {rounds} rounds, 8 patches at a time, one watch; the API "
        f"server's CPU from /proc; Kubernetes {versions.KUBERNETES}; object B: the stored "
        "ExecutionPoint as the API server returns it, managedFields included)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--execution-points", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.execution_points < 1:
        parser.error(f"--execution-points: {args.execution_points} must be at least 1")
    if args.rounds < 1:
        parser.error(f"--rounds: {args.rounds} must be at least 1")
    missing = build.missing_binaries(versions.bin_dir())
    if missing:
        print(f"control plane not built ({', '.join(missing)}); run `make controlplane`")
        return 1
    with tempfile.TemporaryDirectory(prefix="kondor-bench-patch-") as tmp:
        spec = ClusterSpec(
            port=free_port(), kubeconfig=Path(tmp) / "kubeconfig", state_dir=Path(tmp) / "state"
        )
        with DevCluster(spec, log=sys.stderr) as cluster:
            results = measure(cluster, args.execution_points, args.rounds)
    report(results, args.execution_points, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
