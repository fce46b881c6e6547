"""Benchmark: freeze and thaw latency of a 100-process job, beside the kernel's own.

Run: .venv/bin/python bench/bench_freeze.py [--runs N] [--processes N]

One job of `--processes` processes (a shell and its sleeping children) runs in its
leaf cgroup through `ProcessLauncher`. Each run times, until the kernel reports the
state reached (v2 `cgroup.events` "frozen 1"/"frozen 0", v1 `freezer.state`):

- the agent's path: `ProcessLauncher.suspend` / `resume`, then `is_suspended` polled
  (what the JobRunner does on SUSPEND / CONTINUE);
- the baseline: writing the freeze file directly (`cgroup.freeze` or `freezer.state`)
  and reading the state file in a tight loop.

Prints median and p95 of each, in ms. Needs root and a freezer (skips with the
reason otherwise). The children sleep: a freeze of busy processes costs the kernel
a little more, and a shared two-core machine is no place to measure that.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kondor_agent.execute.cgroups import SUPERVISORS, CgroupError, JobCgroups
from kondor_agent.runtimes.process_launcher import JobHandle, ProcessLauncher
from kondor_core.api import ProcessRuntime

AD = 'MyType = "Job"'


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit("the kernel did not reach the state in time")


def kernel_frozen(control: Path) -> Callable[[], bool]:
    """Whether the kernel has finished freezing, read from the files beside `control`."""
    if control.name == "cgroup.freeze":
        events = control.parent / "cgroup.events"
        return lambda: "frozen 1" in events.read_text()
    return lambda: control.read_text().strip() == "FROZEN"


def kernel_thawed(control: Path) -> Callable[[], bool]:
    if control.name == "cgroup.freeze":
        events = control.parent / "cgroup.events"
        return lambda: "frozen 0" in events.read_text()
    return lambda: control.read_text().strip() == "THAWED"


def timed(act: Callable[[], object], done: Callable[[], bool]) -> float:
    started = time.perf_counter()
    act()
    until(done)
    return (time.perf_counter() - started) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--processes", type=int, default=100)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("skipped: cgroups can be created only as root")
        return 0
    try:
        cgroups = JobCgroups.open(root=f"kondor-bench-{os.getpid()}")
    except (CgroupError, OSError) as err:
        print(f"skipped: cgroups are not writable here: {err}")
        return 0
    if not cgroups.can_freeze:
        print(f"skipped: no freezer here ({cgroups.describe()})")
        cgroups.remove_root()
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        launcher = ProcessLauncher(Path(tmp) / "execute", cgroups)
        children = args.processes - 1
        script = f"for i in $(seq {children}); do sleep 600 & done; wait"
        runtime = ProcessRuntime(executable="/bin/sh", arguments=["-c", script])
        handle = launcher.launch("frozen", runtime, AD, AD, slot="slot1_1")
        try:
            until(lambda: len(cgroups.pids(handle.cgroup)) >= args.processes)
            run(launcher, handle, cgroups, args.runs, args.processes)
        finally:
            launcher.remove(handle)
            until(lambda: cgroups.pids(SUPERVISORS) == [])
            cgroups.remove_root()
    return 0


def run(
    launcher: ProcessLauncher, handle: JobHandle, cgroups: JobCgroups, runs: int, processes: int
) -> None:
    control = cgroups.freeze_file(handle.cgroup)
    freeze_value, thaw_value = (
        ("1", "0") if control.name == "cgroup.freeze" else ("FROZEN", "THAWED")
    )
    results: dict[str, list[float]] = {
        "agent freeze": [],
        "kernel freeze": [],
        "agent thaw": [],
        "kernel thaw": [],
    }
    for _ in range(runs):
        results["agent freeze"].append(
            timed(lambda: launcher.suspend(handle), lambda: launcher.is_suspended(handle))
        )
        results["agent thaw"].append(
            timed(lambda: launcher.resume(handle), lambda: not launcher.is_suspended(handle))
        )
        results["kernel freeze"].append(
            timed(lambda: control.write_text(freeze_value), kernel_frozen(control))
        )
        results["kernel thaw"].append(
            timed(lambda: control.write_text(thaw_value), kernel_thawed(control))
        )
    print(f"freeze/thaw of a {processes}-process job ({runs} runs; {cgroups.describe()})")
    print(f"{'':14} {'median ms':>10} {'p95 ms':>8}")
    for name, values in results.items():
        print(f"{name:14} {statistics.median(values):10.3f} {percentile(values, 0.95):8.3f}")


if __name__ == "__main__":
    sys.exit(main())
