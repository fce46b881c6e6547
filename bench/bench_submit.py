"""Benchmark: what one submission costs, an ExecutionJob beside a plain Pod (issue 16's profile).

`bench_scale.py` finds the submission to be the first bound of Kondor's throughput on a small
machine: every process shares its cores, and the API server is the busiest. This bench
measures the submission alone, on an idle dev cluster with the operator and no nodes (nothing
is scheduled or started): N Pods (the baseline: kube-scheduler's submission), then N
ExecutionJobs (as the users, impersonated, so the admission webhook stamps the owner), the
same number at once (24, as `bench_scale.py`), and prints side by side:

* objects created per second;
* CPU per object (ms) of each process (/proc/<pid>/stat over the phase): the API server, etcd,
  the controller manager, kube-scheduler and the operator (its webhook, its watch, and its
  negotiator's write of each new job's ClusterId);
* the API server's mean create latency and, for ExecutionJobs, the mean time of the webhook
  call (apiserver_request_duration_seconds, apiserver_admission_webhook_admission_duration_seconds).

Run (needs `make controlplane`):

    .venv/bin/python bench/bench_submit.py            # 2,000 of each
    .venv/bin/python bench/bench_submit.py --jobs 500
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench_fleet import _cpu_seconds, _pids, _samples
from bench_scale import Bench, execution_job, plain_pod, user_name
from kondor_core.api import GROUP, VERSION
from kondor_devcluster import build, versions
from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port

KINDS: tuple[tuple[str, Callable[[str, str, str], dict[str, Any]], str, bool], ...] = (
    ("pods", plain_pod, "/api/v1/namespaces/{namespace}/pods", False),
    (
        "executionjobs",
        execution_job,
        f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/executionjobs",
        True,
    ),
)
WEBHOOK = "apiserver_admission_webhook_admission_duration_seconds"
REQUEST = "apiserver_request_duration_seconds"


async def metric_sums(http: httpx.AsyncClient) -> dict[tuple[str, str], float]:
    """(metric, resource or webhook) -> sum or count of the latencies measured so far."""
    text = (await http.get("/metrics")).raise_for_status().text
    found: dict[tuple[str, str], float] = {}
    for suffix in ("_sum", "_count"):
        for labels, value in _samples(text, REQUEST + suffix):
            if labels.get("verb") == "POST" and not labels.get("subresource"):
                key = (REQUEST + suffix, labels.get("resource", ""))
                found[key] = found.get(key, 0.0) + value
        for labels, value in _samples(text, WEBHOOK + suffix):
            if labels.get("operation") == "CREATE" and labels.get("type") == "admit":
                key = (WEBHOOK + suffix, "executionjobs")
                found[key] = found.get(key, 0.0) + value
    return found


def mean(
    before: dict[tuple[str, str], float],
    after: dict[tuple[str, str], float],
    metric: str,
    resource: str,
) -> float:
    """The mean latency (ms) of `metric` for `resource` between the two readings."""

    def delta(suffix: str) -> float:
        key = (metric + suffix, resource)
        return after.get(key, 0.0) - before.get(key, 0.0)

    count = delta("_count")
    return delta("_sum") / count * 1000 if count else float("nan")


async def submit_all(
    bench: Bench,
    make: Callable[[str, str, str], dict[str, Any]],
    path: str,
    namespace: str,
    impersonate: bool,
) -> None:
    """`bench.jobs` objects made by `make` in `namespace`, 24 at once, POSTed to `path`."""
    path = path.format(namespace=namespace)
    semaphore = asyncio.Semaphore(24)

    async def submit(index: int) -> None:
        user = user_name(index % bench.users)
        async with semaphore:
            body = make(namespace, f"j{index:05d}", user)
            await bench.post(path, body, user if impersonate else None)

    await asyncio.gather(*(submit(index) for index in range(bench.jobs)))


async def run(cluster: DevCluster, jobs: int) -> list[dict[str, Any]]:
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    async with httpx.AsyncClient(
        base_url=cluster.server, verify=cluster.admin_ssl_context(), timeout=60, limits=limits
    ) as http:
        bench = Bench(
            cluster=cluster, http=http, machines=[], jobs=jobs, users=10, shards=0,
            phase_timeout=0, workdir=Path(), pids={}, operator_metrics="",
        )  # fmt: skip
        rows = []
        for kind, make, path, impersonate in KINDS:
            namespace = f"submit-{kind}"
            await bench.namespace(namespace)
            pids = _pids(cluster)
            before, cpu = await metric_sums(http), {k: _cpu_seconds(p) for k, p in pids.items()}
            started = time.monotonic()
            await submit_all(bench, make, path, namespace, impersonate)
            took = time.monotonic() - started
            await asyncio.sleep(2)  # the operator's follow-up (ClusterId) is part of the cost
            after = await metric_sums(http)
            rows.append(
                {
                    "kind": kind,
                    "per_s": jobs / took,
                    "cpu_ms": {
                        k: (_cpu_seconds(p) - cpu[k]) * 1000 / jobs for k, p in pids.items()
                    },
                    "create_ms": mean(before, after, REQUEST, kind),
                    "webhook_ms": mean(before, after, WEBHOOK, kind),
                }
            )
        return rows


def report(rows: list[dict[str, Any]], jobs: int) -> None:
    print(f"{'figure':<46}" + "".join(f"{row['kind']:>16}" for row in rows) + f"{'ratio':>10}")

    def line(label: str, values: list[float]) -> None:
        ratio = values[1] / values[0] if len(values) == 2 and values[0] else float("nan")
        print(f"{label:<46}" + "".join(f"{v:>16.2f}" for v in values) + f"{ratio:>10.2f}")

    line("created per second", [row["per_s"] for row in rows])
    line("API server create latency, mean (ms)", [row["create_ms"] for row in rows])
    line("of which the webhook call, mean (ms)", [row["webhook_ms"] for row in rows])
    for name in rows[0]["cpu_ms"]:
        line(f"CPU per object, {name} (ms)", [row["cpu_ms"][name] for row in rows])
    print(
        f"({jobs} of each, 24 at once, on an idle dev cluster with no nodes; Kubernetes "
        f"{versions.KUBERNETES}; the ExecutionJobs as their users, through the operator's "
        f"mutating webhook; a new job's ClusterId is one more write by the operator)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=2000)
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error(f"--jobs: {args.jobs} must be at least 1")
    missing = build.missing_binaries(versions.bin_dir())
    if missing:
        print(f"control plane not built ({', '.join(missing)}); run `make controlplane`")
        return 1
    with tempfile.TemporaryDirectory(prefix="kondor-bench-submit-") as tmp:
        spec = ClusterSpec(
            port=free_port(),
            kubeconfig=Path(tmp) / "kubeconfig",
            state_dir=Path(tmp) / "state",
            operator=True,
        )
        with DevCluster(spec, log=sys.stderr) as cluster:
            rows = asyncio.run(run(cluster, args.jobs))
    report(rows, args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
