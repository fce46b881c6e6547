"""Jobs' cgroups on v1, v2 and hybrid hosts behind one interface, chosen once at start.

As HTCondor's starter does (the manual's "Cgroup-Based Process Tracking"), each
job runs in a leaf cgroup of its own, `<root>/<slot>/<job>`, under a root that
Kondor owns (`/kondor` in every hierarchy, or a delegated subtree): the kernel
then limits its memory and CPU, accounts its usage, freezes it for suspension
and kills every process in it, however the job forked or detached.

Which hierarchy does what is decided once, in `JobCgroups.open`, from the
layout `CgroupFS` detects (the same detection the agent reads limits with):

- memory, cpu and pids: where the controller is attached (v2 when the unified
  hierarchy lists it, else its v1 directory);
- CPU accounting: the unified hierarchy's `cpu.stat` when there is one (v2
  accounts CPU time without the cpu controller), else v1 `cpuacct`;
- freezing: v2 `cgroup.freeze` when the kernel has it (5.2), else the v1
  `freezer`;
- killing: v2 `cgroup.kill` when the kernel has it (5.14), else SIGKILL to
  every process in the cgroup, frozen first when it can be so none forks away.

So on a hybrid host the job joins the v1 memory and cpu hierarchies for its
limits and the unified one for freeze and kill. A relative `root` is taken
inside the agent's own cgroup of each hierarchy (a delegated subtree, as
systemd's `Delegate=yes` gives a service), which is how tests run on a real
host without touching anyone else's cgroups.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kondor_agent.detect._cgroups import CgroupFS, CgroupVersion
from kondor_agent.detect._hostfs import HostFS
from kondor_agent.execute.cgroup_files import (
    CgroupError,
    Hierarchy,
    VersionFiles,
    mkdir,
    read,
    rmdir,
    write,
)
from kondor_agent.execute.cgroup_v1 import CgroupV1
from kondor_agent.execute.cgroup_v2 import CgroupV2
from kondor_agent.execute.limits import CgroupLimits

__all__ = ["SUPERVISORS", "CgroupError", "CgroupUsage", "JobCgroups", "parse_self_cgroup"]

#: The cgroup (under the root) that supervisors sit in: outside the agent's, without limits.
SUPERVISORS = "supervisors"

#: v1 hierarchies Kondor limits nothing in, which a supervisor still leaves the agent's cgroup
#: in: runc (1.1, without v2's cgroup.kill) finds a dead container's processes to kill in its
#: `devices` cgroup and freezes them in its `freezer` one, so a supervisor left there would
#: die with the agent's container and take its job along.
_ESCAPED_V1 = ("devices", "freezer")

_V1 = CgroupV1()
_V2 = CgroupV2()


def _files(hierarchy: Hierarchy) -> VersionFiles:
    """The control files of the hierarchy's cgroup version."""
    return _V2 if hierarchy.v2 else _V1


@dataclass(frozen=True)
class CgroupUsage:
    """What the kernel accounted to a job's cgroup; None where nothing accounts it."""

    user_cpu_seconds: float | None
    sys_cpu_seconds: float | None
    peak_memory_bytes: int | None
    memory_bytes: int | None
    #: The processes in the cgroup now (HTCondor's NumPids).
    num_pids: int = 0


def parse_self_cgroup(text: str) -> dict[str, str]:
    """`/proc/self/cgroup` as {controller: path}; the v2 line (`0::/path`) under the key ``""``."""
    own: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        if not controllers:
            own[""] = path
        for controller in controllers.split(","):
            if controller:
                own[controller.removeprefix("name=")] = path
    return own


class JobCgroups:
    """Create, limit, freeze, kill, measure and remove jobs' cgroups; the layout is fixed at open.

    Cgroups are named relative to the Kondor root: `job_cgroup(slot, job)` and `SUPERVISORS`.
    """

    def __init__(
        self,
        *,
        version: CgroupVersion,
        memory: Hierarchy | None,
        cpu: Hierarchy | None,
        cpuacct: Hierarchy | None,
        freezer: Hierarchy | None,
        killer: Hierarchy | None,
        pids: Hierarchy | None = None,
        escaped: Sequence[Hierarchy] = (),
        kill: Callable[[int, int], None] = os.kill,
    ) -> None:
        self.version = version
        self._memory = memory
        self._cpu = cpu
        self._cpuacct = cpuacct
        self._freezer = freezer
        self._killer = killer
        self._pids = pids
        self._kill = kill
        found = [memory, cpu, cpuacct, freezer, killer, pids]
        self._all: list[Hierarchy] = []
        for hierarchy in found:
            if hierarchy is not None and all(h.base != hierarchy.base for h in self._all):
                self._all.append(hierarchy)
        # Only the supervisors' cgroup exists there; a job inherits its supervisor's place.
        self._escaped = [h for h in escaped if all(h.base != o.base for o in self._all)]

    @classmethod
    def disabled(cls) -> JobCgroups:
        """No cgroups (none mounted, or not writable): jobs are tracked by process group only."""
        return cls(
            version=CgroupVersion.NONE,
            memory=None,
            cpu=None,
            cpuacct=None,
            freezer=None,
            killer=None,
        )

    @classmethod
    def open(
        cls,
        host_root: Path = Path("/"),
        *,
        mount: str = "/sys/fs/cgroup",
        root: str = "/kondor",
        self_cgroup: str | None = None,
        kill: Callable[[int, int], None] = os.kill,
    ) -> JobCgroups:
        """Detect the layout under `host_root`, create the root and the supervisors' cgroup.

        `root` absolute is a path in every hierarchy; relative, it is inside this
        process's own cgroup of each (read from `self_cgroup`, the text of
        `/proc/self/cgroup`, by default this process's). Raises CgroupError when the
        root cannot be created (not root, read-only cgroup fs).
        """
        fs = CgroupFS(HostFS(host_root), mount)
        if fs.version is CgroupVersion.NONE:
            return cls.disabled()
        own: dict[str, str] = {}
        if not root.startswith("/"):
            text = self_cgroup
            if text is None:
                text = Path("/proc/self/cgroup").read_text()
            own = parse_self_cgroup(text)

        def place(host_path: str, v2: bool, controller: str) -> Hierarchy:
            inside = root
            if not root.startswith("/"):
                inside = own.get("" if v2 else controller, "/").rstrip("/") + "/" + root
            return Hierarchy(base=HostFS(host_root).path(host_path), root=inside, v2=v2)

        def controller(name: str) -> Hierarchy | None:
            where = fs.hierarchy(name)
            return None if where is None else place(where[0], where[1], name)

        unified = None if fs.unified is None else place(fs.unified, True, "")
        freezer = controller("freezer")
        killer = None
        if unified is not None:
            mkdir(unified.dir(""))
            # The kernel shows cgroup.freeze (5.2) and cgroup.kill (5.14) in non-root v2 cgroups.
            if unified.file("", "cgroup.freeze").exists():
                freezer = unified
            if unified.file("", "cgroup.kill").exists():
                killer = unified
        escaped = [controller(name) for name in _ESCAPED_V1]
        cgroups = cls(
            version=fs.version,
            memory=controller("memory"),
            cpu=controller("cpu"),
            cpuacct=unified if unified is not None else controller("cpuacct"),
            freezer=freezer,
            killer=killer,
            pids=controller("pids"),
            escaped=[h for h in escaped if h is not None and not h.v2],
            kill=kill,
        )
        cgroups.create(SUPERVISORS)
        return cgroups

    def __repr__(self) -> str:
        return f"JobCgroups(version={self.version.value}, {self.describe()})"

    def describe(self) -> str:
        """Which mechanism does what, for the agent's startup log."""

        def where(h: Hierarchy | None) -> str:
            if h is None:
                return "none"
            return f"{'v2' if h.v2 else 'v1'}:{h.dir('')}"

        kill = "cgroup.kill" if self._killer is not None else "SIGKILL each pid"
        return (
            f"memory={where(self._memory)} cpu={where(self._cpu)} pids={where(self._pids)} "
            f"accounting={where(self._cpuacct)} freezer={where(self._freezer)} kill={kill}"
        )

    # -- what this host can do ---------------------------------------------------------

    @property
    def enabled(self) -> bool:
        return bool(self._all)

    @property
    def can_limit_memory(self) -> bool:
        return self._memory is not None

    @property
    def can_limit_cpu(self) -> bool:
        return self._cpu is not None

    @property
    def can_freeze(self) -> bool:
        return self._freezer is not None

    @property
    def can_limit_pids(self) -> bool:
        return self._pids is not None

    @property
    def can_limit_swap(self) -> bool:
        """Whether the kernel accounts swap per cgroup (v2, or v1 booted with swapaccount)."""
        memory = self._memory
        if memory is None:
            return False
        return memory.has(_files(memory).swap_limit)

    # -- names -------------------------------------------------------------------------

    @staticmethod
    def job_cgroup(slot: str, job: str) -> str:
        """`<slot>/<job>`: the job's leaf under its slot, relative to the Kondor root."""
        for what, name in (("slot", slot), ("job", job)):
            if not name or "/" in name or name in (".", "..") or "\n" in name:
                raise ValueError(f"{what}: {name!r} cannot name a cgroup (no '/', not empty)")
        if slot == SUPERVISORS:
            raise ValueError(f"slot: {slot!r} is the supervisors' cgroup")
        return f"{slot}/{job}"

    def procs_files(self, cgroup: str) -> list[Path]:
        """The `cgroup.procs` of `cgroup` in every hierarchy a member must join."""
        return [h.file(cgroup, "cgroup.procs") for h in self._hierarchies(cgroup)]

    def _hierarchies(self, cgroup: str) -> list[Hierarchy]:
        """Where `cgroup` exists: every hierarchy, and the escaped ones for the supervisors'."""
        return [*self._all, *self._escaped] if cgroup == SUPERVISORS else self._all

    def peak_memory_file(self, cgroup: str) -> Path | None:
        """The file holding the cgroup's peak memory in bytes, None when nothing records it."""
        if self._memory is None:
            return None
        return self._memory.file(cgroup, _files(self._memory).peak_memory)

    def kill_file(self, cgroup: str) -> Path | None:
        """v2's `cgroup.kill` of `cgroup` where the kernel has it (5.14), else None."""
        return None if self._killer is None else self._killer.file(cgroup, "cgroup.kill")

    def oom_kills_file(self, cgroup: str) -> Path | None:
        """The file whose `oom_kill N` line counts the kernel's OOM kills in the cgroup:
        memory.events on v2, memory.oom_control on v1; None without a memory controller."""
        if self._memory is None:
            return None
        return self._memory.file(cgroup, _files(self._memory).oom_kills)

    # -- life cycle --------------------------------------------------------------------

    def create(self, cgroup: str, limits: CgroupLimits | None = None) -> None:
        """Create `cgroup` in every hierarchy (parents too), then apply `limits`."""
        for hierarchy in self._hierarchies(cgroup):
            if hierarchy.v2:
                self._enable_controllers(hierarchy, cgroup)
            mkdir(hierarchy.dir(cgroup))
        if limits is not None:
            self.set_limits(cgroup, limits)

    def _enable_controllers(self, hierarchy: Hierarchy, cgroup: str) -> None:
        """v2 gives a cgroup a controller only when every ancestor enables it for its children."""
        wanted = [
            name
            for name, h in (("memory", self._memory), ("cpu", self._cpu), ("pids", self._pids))
            if h is not None and h.base == hierarchy.base
        ]
        if not wanted:
            return
        leaf = hierarchy.dir(cgroup)
        parents = [leaf.parent]
        while parents[-1] != hierarchy.base and hierarchy.base in parents[-1].parents:
            parents.append(parents[-1].parent)
        for parent in reversed(parents):
            mkdir(parent)
            control = parent / "cgroup.subtree_control"
            enabled = (read(control) or "").split()
            missing = [name for name in wanted if name not in enabled]
            if missing:
                write(control, " ".join(f"+{name}" for name in missing))

    def set_limits(self, cgroup: str, limits: CgroupLimits) -> None:
        """Write `limits` where the controller exists; a missing controller limits nothing.

        The soft limit is v1's memory.soft_limit_in_bytes and v2's memory.low (what the
        kernel reclaims last under pressure: below it the job is protected, above it its
        memory goes first). No swap (swap_bytes 0) is v1's memsw limit equal to the hard
        limit, v2's memory.swap.max 0; where the kernel accounts no swap it is not written.
        """
        if self._memory is not None:
            _files(self._memory).write_memory(
                self._memory, cgroup, limits, swap=self.can_limit_swap
            )
        if self._pids is not None and limits.pids_max is not None:
            write(self._pids.file(cgroup, "pids.max"), str(limits.pids_max))
        if self._cpu is not None:
            _files(self._cpu).write_cpu(self._cpu, cgroup, limits)

    def limits(self, cgroup: str) -> CgroupLimits:
        """The limits written on `cgroup` (what the kernel reports back)."""
        memory_bytes = soft = swap = pids_max = None
        if self._memory is not None:
            memory = _files(self._memory).read_memory(self._memory, cgroup)
            memory_bytes, soft, swap = memory.memory_bytes, memory.soft_bytes, memory.swap_bytes
        if self._pids is not None:
            text = (read(self._pids.file(cgroup, "pids.max")) or "max").strip()
            pids_max = None if text == "max" else int(text)
        weight = quota = None
        if self._cpu is not None:
            weight, quota = _files(self._cpu).read_cpu(self._cpu, cgroup)
        return CgroupLimits(
            memory_bytes=memory_bytes,
            memory_soft_bytes=soft,
            swap_bytes=swap,
            cpu_weight_cpus=weight,
            cpu_quota_cpus=quota,
            pids_max=pids_max,
        )

    def add(self, cgroup: str, pid: int) -> None:
        """Move process `pid` into `cgroup` in every hierarchy."""
        for path in self.procs_files(cgroup):
            write(path, str(pid))

    def pids(self, cgroup: str) -> list[int]:
        """The processes in `cgroup` (the union over hierarchies; empty when it does not exist)."""
        found: set[int] = set()
        for path in self.procs_files(cgroup):
            text = read(path) or ""
            found.update(int(word) for word in text.split())
        return sorted(found)

    def exists(self, cgroup: str) -> bool:
        return any(h.dir(cgroup).is_dir() for h in self._all)

    def remove(self, cgroup: str) -> None:
        """Remove `cgroup` (empty of processes) from every hierarchy; absent is fine."""
        for hierarchy in self._hierarchies(cgroup):
            try:
                rmdir(hierarchy.dir(cgroup))
            except CgroupError as err:
                raise CgroupError(f"{err}; processes left: {self.pids(cgroup)}") from None

    def remove_root(self) -> None:
        """Remove the supervisors' cgroup, the slots' and the root (all empty of processes)."""
        for hierarchy in [*self._all, *self._escaped]:
            top = hierarchy.dir("")
            if not top.is_dir():
                continue
            inner = [p for p in top.rglob("*") if p.is_dir()]
            for path in [*sorted(inner, key=lambda p: len(p.parts), reverse=True), top]:
                rmdir(path)

    # -- control -----------------------------------------------------------------------

    def freeze(self, cgroup: str) -> None:
        """Stop every process in `cgroup` (condor_suspend); CgroupError without a freezer."""
        hierarchy = self._need_freezer()
        _files(hierarchy).set_frozen(hierarchy, cgroup, True)

    def thaw(self, cgroup: str) -> None:
        """Let `cgroup`'s processes run again (condor_continue)."""
        hierarchy = self._need_freezer()
        _files(hierarchy).set_frozen(hierarchy, cgroup, False)

    def frozen(self, cgroup: str) -> bool:
        """Whether the kernel has finished freezing `cgroup` (not merely asked to)."""
        hierarchy = self._need_freezer()
        return _files(hierarchy).frozen(hierarchy, cgroup)

    def freeze_file(self, cgroup: str) -> Path:
        """The kernel's own control file that freezes `cgroup`: v2 `cgroup.freeze` ("1"/"0"),
        else v1 `freezer.state` ("FROZEN"/"THAWED"); for benchmarks beside `freeze`."""
        hierarchy = self._need_freezer()
        return _files(hierarchy).freeze_file(hierarchy, cgroup)

    def _need_freezer(self) -> Hierarchy:
        if self._freezer is None:
            raise CgroupError("no freezer: neither cgroup v2 cgroup.freeze nor the v1 freezer")
        return self._freezer

    def kill(self, cgroup: str) -> None:
        """SIGKILL every process in `cgroup`, however it forked (HTCondor's hard kill)."""
        if self._killer is not None:
            write(self._killer.file(cgroup, "cgroup.kill"), "1")
            return
        # Frozen, nothing can fork between reading the list and the signals.
        frozen = self._freezer is not None and self.exists(cgroup)
        if frozen:
            self.freeze(cgroup)
        try:
            for _ in range(5):
                pids = self.pids(cgroup)
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        self._kill(pid, signal.SIGKILL)
                if not frozen:
                    time.sleep(0.001)
                else:
                    break
        finally:
            if frozen:
                self.thaw(cgroup)

    def usage(self, cgroup: str) -> CgroupUsage:
        """CPU time and memory accounted to `cgroup` (and its descendants)."""
        user = system = None
        if self._cpuacct is not None:
            user, system = _files(self._cpuacct).cpu_seconds(self._cpuacct, cgroup)
        peak = current = None
        if self._memory is not None:
            peak_file = self.peak_memory_file(cgroup)
            text = None if peak_file is None else read(peak_file)
            peak = None if text is None else int(text)
            current = _files(self._memory).memory_bytes(self._memory, cgroup)
        return CgroupUsage(
            user_cpu_seconds=user,
            sys_cpu_seconds=system,
            peak_memory_bytes=peak,
            memory_bytes=current,
            num_pids=len(self.pids(cgroup)),
        )
