"""Benchmark: a process job's launch latency, from `launch()` to the job's first instruction.

Run: .venv/bin/python bench/bench_launch.py [--runs N] [--no-cgroups]

Each run launches `/bin/sh -c 'date +%s.%N > t'` through `ProcessLauncher` (job
directory, ads, spec, cgroup with the slot's limits, detached supervisor, job
in its leaf cgroup) and reads the time the job wrote as its first act. Beside it,
the baseline: a bare `subprocess.Popen` of the same command, measured in the same
run, in turn with the launcher. Prints median and p95 of both and of their
difference; exits 1 if the launcher's median is over the target (200 ms).

As root, the jobs' cgroups are made under this process's own cgroups
(`kondor-bench-<pid>`), and removed at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kondor_agent.execute.cgroups import SUPERVISORS, CgroupError, JobCgroups
from kondor_agent.execute.limits import slot_limits
from kondor_agent.runtimes.process_launcher import ProcessLauncher
from kondor_core.api import ProcessRuntime

TARGET_MS = 200.0
COMMAND = ["/bin/sh", "-c", "date +%s.%N > t"]


def wait_for(path: Path, timeout: float = 10.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            text = ""
        if text:
            return float(text)
        time.sleep(0.001)
    raise SystemExit(f"{path} was not written within {timeout}s")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--no-cgroups", action="store_true")
    args = parser.parse_args()

    cgroups = JobCgroups.disabled()
    if not args.no_cgroups and os.geteuid() == 0:
        try:
            cgroups = JobCgroups.open(root=f"kondor-bench-{os.getpid()}")
        except CgroupError as err:
            print(f"cgroups not writable ({err}); measuring without them")
    print(f"cgroups: {cgroups.describe()}")

    with tempfile.TemporaryDirectory(prefix="kondor-bench-launch-") as tmp:
        base = Path(tmp)
        launcher = ProcessLauncher(base / "execute", cgroups)
        runtime = ProcessRuntime(executable=COMMAND[0], arguments=COMMAND[1:])
        limits = slot_limits(1, 128)
        launched: list[float] = []
        bare: list[float] = []
        for i in range(args.runs):
            start = time.time()
            handle = launcher.launch(f"job-{i}", runtime, "", "", slot="slot1_1", limits=limits)
            launched.append(wait_for(handle.scratch / "t") - start)
            while launcher.poll(handle) is None:
                time.sleep(0.001)
            launcher.remove(handle)

            cwd = base / f"bare-{i}"
            cwd.mkdir()
            start = time.time()
            proc = subprocess.Popen(COMMAND, cwd=cwd)
            bare.append(wait_for(cwd / "t") - start)
            proc.wait()
        if cgroups.enabled:
            deadline = time.monotonic() + 5
            while cgroups.pids(SUPERVISORS) and time.monotonic() < deadline:
                time.sleep(0.005)
            cgroups.remove_root()

    def row(name: str, values: list[float]) -> str:
        ms = [v * 1000 for v in values]
        median, p95 = statistics.median(ms), percentile(ms, 0.95)
        return f"{name:<34} median {median:7.1f} ms   p95 {p95:7.1f} ms"

    print(f"{args.runs} launches of {' '.join(COMMAND)!r}")
    print(row("ProcessLauncher.launch -> job", launched))
    print(row("baseline: bare Popen -> job", bare))
    print(
        row("launcher overhead (difference)", [a - b for a, b in zip(launched, bare, strict=True)])
    )
    median_ms = statistics.median(launched) * 1000
    verdict = "within" if median_ms <= TARGET_MS else "OVER"
    print(f"target: median <= {TARGET_MS:.0f} ms: {verdict}")
    return 0 if median_ms <= TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
