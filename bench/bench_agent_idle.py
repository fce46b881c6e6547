"""Benchmark: an idle agent's CPU with 64 slots and 8 running jobs, beside the same agent
with no jobs.

Run: .venv/bin/python bench/bench_agent_idle.py [--window SECONDS]

On a dev cluster of its own (the control plane, the operator, one agent), a node of 64 CPUs
is carved into 64 static slots (`NUM_SLOTS = 64`, the default POLLING_INTERVAL of 5 s and
UPDATE_INTERVAL of 300 s). The agent process's CPU time (utime + stime from /proc) is read
over `--window` seconds first with no jobs, then with 8 running process jobs (`sleep`), once
all 8 are Running and a few seconds have passed. Prints the share of one core of each;
exits 1 when the agent with 8 jobs uses 1% of a core or more.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port, running_pids
from kondor_devcluster.components import Layout
from kondor_devcluster.kondor import agent_name

TARGET = 0.01  # of one core
NODE = "idle-64"
JOBS = 8


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def share_of_a_core(pid: int, window: float) -> float:
    before, started = cpu_seconds(pid), time.monotonic()
    time.sleep(window)
    return (cpu_seconds(pid) - before) / (time.monotonic() - started)


def until(check: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (AssertionError, KeyError, subprocess.CalledProcessError):
            pass
        time.sleep(0.5)
    raise SystemExit(f"{what}: not within {timeout}s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=60.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kondor-bench-idle-"))
    machine = work / f"{NODE}.yaml"
    machine.write_text(
        yaml.safe_dump(
            {
                "name": NODE,
                "cpus": 64,
                "memory": "256Gi",
                "disk": "100Gi",
                "labels": {"kondor.io/pool": "idle"},
                "attributes": {"OpSys": "LINUX"},
            }
        )
    )
    spec = ClusterSpec(
        port=free_port(),
        kubeconfig=work / "kubeconfig",
        state_dir=work / "state",
        nodes=(machine,),
        operator=True,
        agents=True,
    )
    cluster = DevCluster(spec, log=sys.stderr)
    cluster.start()

    def kubectl(*words: str, stdin: str | None = None) -> str:
        command = ["kubectl", "--kubeconfig", str(spec.kubeconfig), "--context", "admin", *words]
        return subprocess.run(
            command, input=stdin, capture_output=True, text=True, check=True, timeout=60
        ).stdout

    def slots() -> list[dict[str, Any]]:
        ep = json.loads(kubectl("get", "executionpoints", NODE, "-o", "json"))
        found: list[dict[str, Any]] = (ep.get("status") or {}).get("slots") or []
        return found

    try:
        policy = {
            "apiVersion": "kondor.io/v1alpha1",
            "kind": "SlotPolicy",
            "metadata": {"name": "idle"},
            "spec": {"nodeSelector": {}, "condorConfig": "NUM_SLOTS = 64\n"},
        }
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump(policy))
        until(
            lambda: len(s := slots()) == 64 and all(x["state"] == "Unclaimed" for x in s),
            90,
            "64 slots Unclaimed",
        )
        agent = next(
            pid for name, pid, _ in running_pids(Layout(spec.state_dir)) if name == agent_name(NODE)
        )
        time.sleep(5)
        no_jobs = share_of_a_core(agent, args.window)
        for i in range(JOBS):
            job = {
                "apiVersion": "kondor.io/v1alpha1",
                "kind": "ExecutionJob",
                "metadata": {"name": f"idle-{i}", "namespace": "default"},
                "spec": {
                    "requestCpus": 1,
                    "requestMemory": "64Mi",
                    "process": {"executable": "/bin/sleep", "arguments": ["3600"]},
                },
            }
            kubectl("apply", "-f", "-", stdin=yaml.safe_dump(job))
        until(
            lambda: sum(1 for s in slots() if s["activity"] == "Busy") == JOBS,
            90,
            f"{JOBS} jobs Running",
        )
        time.sleep(10)
        with_jobs = share_of_a_core(agent, args.window)
    finally:
        cluster.stop()
    print(f"agent CPU, 64 slots, over {args.window:.0f} s (share of one core):")
    print(f"  no jobs       {no_jobs * 100:6.2f}%")
    print(f"  {JOBS} jobs running {with_jobs * 100:6.2f}%   (target < {TARGET * 100:.0f}%)")
    return 0 if with_jobs < TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
