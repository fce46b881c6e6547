"""Benchmark: a job's path to its first instruction, with its baselines in the same run.

Run: .venv/bin/python bench/bench_jobs.py [--jobs N] [--agent-only]

1. The agent's own overhead: the agent's loop (its startd, the JobRunner, the real
   `ProcessLauncher` with cgroups where this process may make them) sees a new claim in an
   ExecutionJob and starts the job; measured from the moment the agent is woken with the
   claim to the job's first instruction (the job writes `date +%s.%N` as its first act).
   Beside it: a bare fork/exec (`subprocess.Popen`) of the same command. Target: 200 ms.
2. Submit -> running through the whole path on the dev cluster (a cluster of its own, one
   kwok node with a real agent, the operator's negotiator triggered on submit): from the
   API create of an ExecutionJob to its process's first instruction. Beside it: a bare Pod
   created bound to the kwok node, to Running as the API server reports it. Target: 2 s.

Prints median and p95 of each beside its baseline.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench_launch import percentile as _percentile
from bench_launch import wait_for as _wait_for

AGENT_TARGET_MS = 200.0
SUBMIT_TARGET_S = 2.0
ROOT = Path(__file__).resolve().parents[1]
FIRST = "date +%s.%N > {path}"


def _row(
    name: str, values: list[float], baseline_name: str, baseline: list[float], unit: str
) -> None:
    scale = 1000.0 if unit == "ms" else 1.0
    print(
        f"  {name:<34} median {statistics.median(values) * scale:8.1f} {unit}"
        f"   p95 {_percentile(values, 0.95) * scale:8.1f} {unit}"
    )
    print(
        f"  {baseline_name:<34} median {statistics.median(baseline) * scale:8.1f} {unit}"
        f"   p95 {_percentile(baseline, 0.95) * scale:8.1f} {unit}"
    )


# ---- 1. the agent's overhead --------------------------------------------------------------------


class _Jobs:
    """The agent's job API in memory: the matched jobs, and the status patches applied."""

    synced = True

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}

    def jobs(self) -> list[dict[str, Any]]:
        return list(self.objects.values())

    def patch_job_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        from kondor_core.api.meta import apply_merge_patch  # noqa: PLC0415

        body = self.objects[name]
        body["status"] = apply_merge_patch(body.get("status", {}), patch.get("status", {}))


class _EP:
    """The agent's ExecutionPoint API in memory."""

    def __init__(self, node: str, policy: dict[str, Any]) -> None:
        self.node = node
        self.policy = policy
        self.status: dict[str, Any] = {}

    def read_execution_point(self, name: str) -> dict[str, Any]:
        return {
            "apiVersion": "kondor.io/v1alpha1",
            "kind": "ExecutionPoint",
            "metadata": {"name": name},
            "spec": {"nodeName": name, "policy": {"name": "default", "generation": 1}},
            "status": self.status,
        }

    def read_slot_policy(self, name: str) -> dict[str, Any]:
        return self.policy

    def patch_status(self, name: str, patch: Mapping[str, Any]) -> None:
        from kondor_core.api.meta import apply_merge_patch  # noqa: PLC0415

        self.status = apply_merge_patch(self.status, patch.get("status", {}))


def agent_overhead(runs: int) -> tuple[list[float], list[float]]:
    import subprocess  # noqa: PLC0415

    from kondor_agent.execute.cgroups import CgroupError, JobCgroups  # noqa: PLC0415
    from kondor_agent.jobs import JobRunner, RuntimeLaunchers  # noqa: PLC0415
    from kondor_agent.loop import Agent, AgentConfig  # noqa: PLC0415
    from kondor_agent.runtimes.process import ProcessJobs  # noqa: PLC0415
    from kondor_agent.runtimes.process_launcher import ProcessLauncher  # noqa: PLC0415
    from kondor_agent.services import JobService  # noqa: PLC0415
    from kondor_core.api import Machine  # noqa: PLC0415

    node = "bench-node"
    machine = Machine.model_validate({"name": node, "cpus": 64, "memory": "64Gi", "disk": "100Gi"})
    policy = {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "SlotPolicy",
        "metadata": {"name": "default", "generation": 1},
        "spec": {},
    }
    work = Path(tempfile.mkdtemp(prefix="kondor-bench-jobs-"))
    try:
        cgroups = JobCgroups.open(root=f"kondor-bench-{node}")
    except (CgroupError, OSError):
        cgroups = JobCgroups.disabled()
    print(f"  job cgroups: {cgroups.describe()}")
    jobs = _Jobs()
    launcher = ProcessLauncher(work / "execute", cgroups)
    runner = JobRunner(jobs, RuntimeLaunchers(process=ProcessJobs(launcher)), time.time)
    agent = Agent(
        AgentConfig(node_name=node, polling_interval=5.0),
        _EP(node, policy),
        lambda: machine,
        live=lambda _now: {},
        services=[JobService(runner)],
    )
    agent.step()  # carve and go Unclaimed
    seen: list[float] = []
    bare: list[float] = []
    for i in range(runs):
        first = work / f"first-{i}"
        jobs.objects[f"j{i}"] = {
            "apiVersion": "kondor.io/v1alpha1",
            "kind": "ExecutionJob",
            "metadata": {"name": f"j{i}", "namespace": "default", "uid": f"u{i}"},
            "spec": {
                "owner": "bench",
                "requestCpus": 1,
                "process": {"executable": "/bin/sh", "arguments": ["-c", FIRST.format(path=first)]},
            },
            "status": {"jobStatus": "Idle", "slot": f"slot1@{node}", "claimId": f"u{i}#1"},
        }
        woken = time.time()
        agent.wake()
        agent.step()
        seen.append(_wait_for(first) - woken)
        baseline = work / f"bare-{i}"
        started = time.time()
        subprocess.Popen(["/bin/sh", "-c", FIRST.format(path=baseline)]).wait()
        bare.append(_wait_for(baseline) - started)
        _drain(agent, runner.running)
    for name in list(jobs.objects):
        del jobs.objects[name]
    agent.wake()
    agent.step()
    if cgroups.enabled:
        cgroups.remove_root()
    return seen, bare


def _drain(agent: Any, running: Mapping[str, Any]) -> None:
    deadline = time.monotonic() + 10
    while running and time.monotonic() < deadline:
        time.sleep(0.01)
        agent.step()


# ---- 2. submit -> running on the dev cluster ----------------------------------------------------


def submit_to_running(jobs: int) -> tuple[list[float], list[float]]:
    from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port  # noqa: PLC0415
    from kondor_kube import managers, paths  # noqa: PLC0415
    from kondor_kube.client import Client  # noqa: PLC0415
    from kondor_kube.config import connect  # noqa: PLC0415

    work = Path(tempfile.mkdtemp(prefix="kondor-bench-submit-"))
    spec = ClusterSpec(
        port=free_port(),
        kubeconfig=work / "kubeconfig",
        state_dir=work / "state",
        nodes=(ROOT / "examples" / "machines" / "kwok-small.yaml",),
        operator=True,
        agents=True,
    )
    cluster = DevCluster(spec, log=sys.stderr)
    cluster.start()
    try:
        kube = Client(connect(spec.kubeconfig, "admin"), field_manager=managers.BENCH)
        kube.create(
            paths.kondor("slotpolicies"),
            {
                "apiVersion": "kondor.io/v1alpha1",
                "kind": "SlotPolicy",
                "metadata": {"name": "everything"},
                "spec": {"nodeSelector": {}},
            },
        )
        _until(lambda: _unclaimed(kube), 60, "the node's slot Unclaimed")
        submit: list[float] = []
        pods: list[float] = []
        for i in range(jobs):
            first = work / f"first-{i}"
            body = {
                "apiVersion": "kondor.io/v1alpha1",
                "kind": "ExecutionJob",
                "metadata": {"name": f"bench-{i}", "namespace": "default"},
                "spec": {
                    "requestCpus": 1,
                    "requestMemory": "64Mi",
                    "process": {
                        "executable": "/bin/sh",
                        "arguments": ["-c", FIRST.format(path=first)],
                    },
                },
            }
            started = time.time()
            kube.create(paths.kondor("executionjobs", namespace="default"), body)
            submit.append(_wait_for(first) - started)
            pods.append(_bare_pod(kube, f"bare-{i}"))
            _until(lambda i=i: _completed(kube, f"bench-{i}"), 30, f"bench-{i} Completed")
        return submit, pods
    finally:
        cluster.stop()


def _bare_pod(kube: Any, name: str) -> float:
    """Seconds from a bare Pod's create to Running (`kube`: a kondor_kube.Client)."""
    from kondor_kube import paths  # noqa: PLC0415

    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": "kwok-small-0",
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }
    started = time.time()
    kube.create(paths.core("pods", namespace="default"), body)
    status = paths.core("pods", name, namespace="default", subresource="status")
    _until(
        lambda: (kube.get(status).get("status") or {}).get("phase") == "Running",
        30,
        f"pod {name} Running",
        pause=0.005,
    )
    elapsed = time.time() - started
    kube.delete(paths.core("pods", name, namespace="default"), query=[("gracePeriodSeconds", "0")])
    return elapsed


def _unclaimed(kube: Any) -> bool:
    from kondor_kube import paths  # noqa: PLC0415

    found = kube.get(paths.kondor("executionpoints", "kwok-small-0"))
    slots = (found.get("status") or {}).get("slots") or []
    return bool(slots) and all(s["state"] == "Unclaimed" for s in slots)


def _completed(kube: Any, name: str) -> bool:
    from kondor_kube import paths  # noqa: PLC0415

    found = kube.get(paths.kondor("executionjobs", name, namespace="default"))
    return bool((found.get("status") or {}).get("jobStatus") == "Completed")


def _until(check: Callable[[], bool], timeout: float, what: str, pause: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(pause)
    raise SystemExit(f"{what}: not within {timeout}s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--agent-only", action="store_true", help="skip the dev-cluster part")
    args = parser.parse_args()
    failed = False

    print(f"agent overhead, {args.jobs} jobs (claim seen -> the job's first instruction):")
    seen, bare = agent_overhead(args.jobs)
    _row("agent: claim -> first instruction", seen, "baseline: bare fork/exec", bare, "ms")
    if statistics.median(seen) * 1000 > AGENT_TARGET_MS:
        print(f"  over the target of {AGENT_TARGET_MS:.0f} ms")
        failed = True

    if not args.agent_only:
        print(f"submit -> running on the dev cluster, {args.jobs} jobs:")
        submit, pods = submit_to_running(args.jobs)
        _row(
            "ExecutionJob: create -> first instr.",
            submit,
            "baseline: Pod create -> Running",
            pods,
            "ms",
        )
        if statistics.median(submit) > SUBMIT_TARGET_S:
            print(f"  over the target of {SUBMIT_TARGET_S:.0f} s")
            failed = True
    print(json.dumps({"ok": not failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
