"""Recorded cgroup trees (what the kernel shows), a fake kill, and waiting on real jobs."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kondor_agent.execute.records import JobResult
from kondor_agent.runtimes.process_launcher import JobHandle, ProcessLauncher


def _others_can_run(path: Path) -> bool:
    """Whether a user other than root may execute `path` (every directory above searchable)."""
    real = path.resolve()
    if not real.stat().st_mode & stat.S_IXOTH:
        return False
    return all(parent.stat().st_mode & stat.S_IXOTH for parent in real.parents)


def job_python() -> str:
    """A Python interpreter a job may execute. Jobs never run as root (a root agent drops
    them to a slot user), and this venv's interpreter may sit under /root (mode 0700), out of
    a job's reach, as on this project's machines; the system's python3 is then used."""
    if os.geteuid() != 0 or _others_can_run(Path(sys.executable)):
        return sys.executable
    found = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if found is None or not _others_can_run(Path(found)):
        raise RuntimeError("no python3 that an unprivileged job can run")
    return found


def _files(base: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def v2_tree(root: Path) -> Path:
    """A pure v2 node (Debian 12, kernel 6.1) where `/kondor` already exists, as mkdir leaves it."""
    cg = root / "sys/fs/cgroup"
    _files(
        cg,
        {
            "cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc\n",
            "cgroup.subtree_control": "cpuset cpu io memory pids\n",
            "cgroup.procs": "1\n",
            "kondor/cgroup.controllers": "cpuset cpu io memory pids\n",
            "kondor/cgroup.subtree_control": "",
            "kondor/cgroup.freeze": "0\n",
            "kondor/cgroup.kill": "",
            "kondor/cgroup.procs": "",
            # Shown where the memory controller is and the kernel accounts swap.
            "kondor/memory.swap.max": "max\n",
        },
    )
    return root


def v1_tree(root: Path) -> Path:
    """A v1 node (RHEL 8 style): `cpu,cpuacct` co-mounted with `cpu` and `cpuacct` links."""
    cg = root / "sys/fs/cgroup"
    _files(
        cg,
        {
            "memory/memory.limit_in_bytes": "9223372036854771712\n",
            "memory/cgroup.procs": "1\n",
            "cpu,cpuacct/cpu.shares": "1024\n",
            "cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
            "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            "cpu,cpuacct/cpuacct.usage": "0\n",
            "freezer/freezer.state": "THAWED\n",
            "pids/tasks": "1\n",
            "devices/devices.list": "a *:* rwm\n",
            "systemd/cgroup.procs": "1\n",
        },
    )
    (cg / "cpu").symlink_to("cpu,cpuacct")
    (cg / "cpuacct").symlink_to("cpu,cpuacct")
    return root


def hybrid_tree(root: Path) -> Path:
    """systemd's hybrid mode: v1 controllers and a controller-less v2 tree at `unified`."""
    v1_tree(root)
    _files(
        root / "sys/fs/cgroup/unified",
        {
            "cgroup.controllers": "",
            "cgroup.procs": "1\n",
            "kondor/cgroup.freeze": "0\n",
            "kondor/cgroup.kill": "",
        },
    )
    return root


class Kills:
    """A fake os.kill that records (pid, signal) instead of signalling recorded pids."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int]] = []
        self.on_kill: Callable[[int], None] | None = None

    def __call__(self, pid: int, sig: int) -> None:
        self.sent.append((pid, sig))
        if self.on_kill is not None:
            self.on_kill(pid)


#: How long to wait for what a supervisor does: a deadline, not an expectation. A supervisor is a
#: Python process of its own, and on a loaded machine (`pytest -n`, beside other suites) its start
#: alone has taken over 4 s; the waits end as soon as the condition holds.
WAIT = 20.0


def wait_result(launcher: ProcessLauncher, handle: JobHandle, timeout: float = WAIT) -> JobResult:
    """Poll every few milliseconds until the job's result is there."""
    deadline = time.monotonic() + timeout
    while True:
        result = launcher.poll(handle)
        if result is not None:
            return result
        if time.monotonic() > deadline:
            log = (handle.directory / "supervisor.log").read_text(errors="replace")
            raise AssertionError(f"no result for {handle.job_id} in {timeout}s; log: {log}")
        time.sleep(0.005)


def wait_for(condition: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)
