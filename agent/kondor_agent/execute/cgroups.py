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
import errno
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kondor_agent.detect._cgroups import CgroupFS, CgroupVersion, parse_keyed
from kondor_agent.detect._hostfs import DetectionError, HostFS
from kondor_agent.execute.limits import (
    CPU_PERIOD_US,
    SHARES_PER_CPU,
    CgroupLimits,
    cpu_quota_us,
    cpu_shares,
    cpu_weight,
)

#: The cgroup (under the root) that supervisors sit in: outside the agent's, without limits.
SUPERVISORS = "supervisors"

#: v1 hierarchies Kondor limits nothing in, which a supervisor still leaves the agent's cgroup
#: in: runc (1.1, without v2's cgroup.kill) finds a dead container's processes to kill in its
#: `devices` cgroup and freezes them in its `freezer` one, so a supervisor left there would
#: die with the agent's container and take its job along.
_ESCAPED_V1 = ("devices", "freezer")

#: A v1 memory limit at or above this reads as "unlimited".
_V1_UNLIMITED = 1 << 62


class CgroupError(Exception):
    """A cgroup cannot be created, written or removed; the message names the file."""


@dataclass(frozen=True)
class CgroupUsage:
    """What the kernel accounted to a job's cgroup; None where nothing accounts it."""

    user_cpu_seconds: float | None
    sys_cpu_seconds: float | None
    peak_memory_bytes: int | None
    memory_bytes: int | None
    #: The processes in the cgroup now (HTCondor's NumPids).
    num_pids: int = 0


@dataclass(frozen=True)
class _Hierarchy:
    """One mounted hierarchy: its local directory and where Kondor's root is inside it."""

    base: Path
    root: str
    v2: bool

    def dir(self, cgroup: str) -> Path:
        inner = "/".join(part for part in (self.root.strip("/"), cgroup.strip("/")) if part)
        return self.base / inner if inner else self.base

    def file(self, cgroup: str, name: str) -> Path:
        return self.dir(cgroup) / name


def _write(path: Path, value: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError as err:
        reason = os.strerror(err.errno or 0)
        raise CgroupError(f"{path}: cannot write {value!r} ({reason})") from None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        raise CgroupError(f"{path}: cannot read it ({os.strerror(err.errno or 0)})") from None


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
        memory: _Hierarchy | None,
        cpu: _Hierarchy | None,
        cpuacct: _Hierarchy | None,
        freezer: _Hierarchy | None,
        killer: _Hierarchy | None,
        pids: _Hierarchy | None = None,
        escaped: Sequence[_Hierarchy] = (),
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
        self._all: list[_Hierarchy] = []
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

        def place(host_path: str, v2: bool, controller: str) -> _Hierarchy:
            inside = root
            if not root.startswith("/"):
                inside = own.get("" if v2 else controller, "/").rstrip("/") + "/" + root
            return _Hierarchy(base=HostFS(host_root).path(host_path), root=inside, v2=v2)

        def controller(name: str) -> _Hierarchy | None:
            where = fs.hierarchy(name)
            return None if where is None else place(where[0], where[1], name)

        unified = None if fs.unified is None else place(fs.unified, True, "")
        freezer = controller("freezer")
        killer = None
        if unified is not None:
            _mkdir(unified.dir(""))
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

        def where(h: _Hierarchy | None) -> str:
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
        return _has(memory, "memory.swap.max" if memory.v2 else "memory.memsw.limit_in_bytes")

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

    def _hierarchies(self, cgroup: str) -> list[_Hierarchy]:
        """Where `cgroup` exists: every hierarchy, and the escaped ones for the supervisors'."""
        return [*self._all, *self._escaped] if cgroup == SUPERVISORS else self._all

    def peak_memory_file(self, cgroup: str) -> Path | None:
        """The file holding the cgroup's peak memory in bytes, None when nothing records it."""
        if self._memory is None:
            return None
        name = "memory.peak" if self._memory.v2 else "memory.max_usage_in_bytes"
        return self._memory.file(cgroup, name)

    def kill_file(self, cgroup: str) -> Path | None:
        """v2's `cgroup.kill` of `cgroup` where the kernel has it (5.14), else None."""
        return None if self._killer is None else self._killer.file(cgroup, "cgroup.kill")

    def oom_kills_file(self, cgroup: str) -> Path | None:
        """The file whose `oom_kill N` line counts the kernel's OOM kills in the cgroup:
        memory.events on v2, memory.oom_control on v1; None without a memory controller."""
        if self._memory is None:
            return None
        name = "memory.events" if self._memory.v2 else "memory.oom_control"
        return self._memory.file(cgroup, name)

    # -- life cycle --------------------------------------------------------------------

    def create(self, cgroup: str, limits: CgroupLimits | None = None) -> None:
        """Create `cgroup` in every hierarchy (parents too), then apply `limits`."""
        for hierarchy in self._hierarchies(cgroup):
            if hierarchy.v2:
                self._enable_controllers(hierarchy, cgroup)
            _mkdir(hierarchy.dir(cgroup))
        if limits is not None:
            self.set_limits(cgroup, limits)

    def _enable_controllers(self, hierarchy: _Hierarchy, cgroup: str) -> None:
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
            _mkdir(parent)
            control = parent / "cgroup.subtree_control"
            enabled = (_read(control) or "").split()
            missing = [name for name in wanted if name not in enabled]
            if missing:
                _write(control, " ".join(f"+{name}" for name in missing))

    def set_limits(self, cgroup: str, limits: CgroupLimits) -> None:
        """Write `limits` where the controller exists; a missing controller limits nothing.

        The soft limit is v1's memory.soft_limit_in_bytes and v2's memory.low (what the
        kernel reclaims last under pressure: below it the job is protected, above it its
        memory goes first). No swap (swap_bytes 0) is v1's memsw limit equal to the hard
        limit, v2's memory.swap.max 0; where the kernel accounts no swap it is not written.
        """
        memory = self._memory
        if memory is not None:
            if limits.memory_bytes is not None:
                name = "memory.max" if memory.v2 else "memory.limit_in_bytes"
                _write(memory.file(cgroup, name), str(limits.memory_bytes))
            if limits.memory_soft_bytes is not None:
                name = "memory.low" if memory.v2 else "memory.soft_limit_in_bytes"
                _write(memory.file(cgroup, name), str(limits.memory_soft_bytes))
            if limits.swap_bytes is not None and self.can_limit_swap:
                if memory.v2:
                    _write(memory.file(cgroup, "memory.swap.max"), str(limits.swap_bytes))
                elif limits.memory_bytes is not None:
                    total = limits.memory_bytes + limits.swap_bytes
                    _write(memory.file(cgroup, "memory.memsw.limit_in_bytes"), str(total))
        if self._pids is not None and limits.pids_max is not None:
            _write(self._pids.file(cgroup, "pids.max"), str(limits.pids_max))
        cpu = self._cpu
        if cpu is None:
            return
        if limits.cpu_weight_cpus is not None:
            if cpu.v2:
                _write(cpu.file(cgroup, "cpu.weight"), str(cpu_weight(limits.cpu_weight_cpus)))
            else:
                _write(cpu.file(cgroup, "cpu.shares"), str(cpu_shares(limits.cpu_weight_cpus)))
        quota = None if limits.cpu_quota_cpus is None else cpu_quota_us(limits.cpu_quota_cpus)
        if cpu.v2:
            _write(cpu.file(cgroup, "cpu.max"), f"{quota or 'max'} {CPU_PERIOD_US}")
        else:
            _write(cpu.file(cgroup, "cpu.cfs_period_us"), str(CPU_PERIOD_US))
            _write(cpu.file(cgroup, "cpu.cfs_quota_us"), str(quota or -1))

    def limits(self, cgroup: str) -> CgroupLimits:
        """The limits written on `cgroup` (what the kernel reports back)."""
        memory_bytes = soft = swap = pids_max = None
        memory = self._memory
        if memory is not None:
            memory_bytes = _bytes(
                memory.file(cgroup, "memory.max" if memory.v2 else "memory.limit_in_bytes")
            )
            # v2's memory.low is 0 when unset; v1's soft limit reads as "unlimited".
            soft = (
                _bytes(
                    memory.file(cgroup, "memory.low" if memory.v2 else "memory.soft_limit_in_bytes")
                )
                or None
            )
            if memory.v2:
                swap = _bytes(memory.file(cgroup, "memory.swap.max"))
            else:
                memsw = _bytes(memory.file(cgroup, "memory.memsw.limit_in_bytes"))
                if memsw is not None and memory_bytes is not None:
                    swap = memsw - memory_bytes
        if self._pids is not None:
            text = (_read(self._pids.file(cgroup, "pids.max")) or "max").strip()
            pids_max = None if text == "max" else int(text)
        weight = quota = None
        if self._cpu is not None:
            if self._cpu.v2:
                w = _read(self._cpu.file(cgroup, "cpu.weight"))
                weight = None if w is None else int(w) / 100
                fields = (_read(self._cpu.file(cgroup, "cpu.max")) or "max").split()
                if fields[0] != "max":
                    period = int(fields[1]) if len(fields) > 1 else CPU_PERIOD_US
                    quota = int(fields[0]) / period
            else:
                s = _read(self._cpu.file(cgroup, "cpu.shares"))
                weight = None if s is None else int(s) / SHARES_PER_CPU
                q = int((_read(self._cpu.file(cgroup, "cpu.cfs_quota_us")) or "-1").strip())
                if q > 0:
                    period_text = _read(self._cpu.file(cgroup, "cpu.cfs_period_us"))
                    period = int(period_text or CPU_PERIOD_US)
                    quota = q / period
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
            _write(path, str(pid))

    def pids(self, cgroup: str) -> list[int]:
        """The processes in `cgroup` (the union over hierarchies; empty when it does not exist)."""
        found: set[int] = set()
        for path in self.procs_files(cgroup):
            text = _read(path) or ""
            found.update(int(word) for word in text.split())
        return sorted(found)

    def exists(self, cgroup: str) -> bool:
        return any(h.dir(cgroup).is_dir() for h in self._all)

    def remove(self, cgroup: str) -> None:
        """Remove `cgroup` (empty of processes) from every hierarchy; absent is fine."""
        for hierarchy in self._hierarchies(cgroup):
            try:
                _rmdir(hierarchy.dir(cgroup))
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
                _rmdir(path)

    # -- control -----------------------------------------------------------------------

    def freeze(self, cgroup: str) -> None:
        """Stop every process in `cgroup` (condor_suspend); CgroupError without a freezer."""
        hierarchy = self._need_freezer()
        if hierarchy.v2:
            _write(hierarchy.file(cgroup, "cgroup.freeze"), "1")
        else:
            _write(hierarchy.file(cgroup, "freezer.state"), "FROZEN")

    def thaw(self, cgroup: str) -> None:
        """Let `cgroup`'s processes run again (condor_continue)."""
        hierarchy = self._need_freezer()
        if hierarchy.v2:
            _write(hierarchy.file(cgroup, "cgroup.freeze"), "0")
        else:
            _write(hierarchy.file(cgroup, "freezer.state"), "THAWED")

    def frozen(self, cgroup: str) -> bool:
        """Whether the kernel has finished freezing `cgroup` (not merely asked to)."""
        hierarchy = self._need_freezer()
        if hierarchy.v2:
            path = hierarchy.file(cgroup, "cgroup.events")
            events = _keyed(_read(path) or "", path)
            return events.get("frozen") == 1
        return (_read(hierarchy.file(cgroup, "freezer.state")) or "").strip() == "FROZEN"

    def freeze_file(self, cgroup: str) -> Path:
        """The kernel's own control file that freezes `cgroup`: v2 `cgroup.freeze` ("1"/"0"),
        else v1 `freezer.state` ("FROZEN"/"THAWED"); for benchmarks beside `freeze`."""
        hierarchy = self._need_freezer()
        return hierarchy.file(cgroup, "cgroup.freeze" if hierarchy.v2 else "freezer.state")

    def _need_freezer(self) -> _Hierarchy:
        if self._freezer is None:
            raise CgroupError("no freezer: neither cgroup v2 cgroup.freeze nor the v1 freezer")
        return self._freezer

    def kill(self, cgroup: str) -> None:
        """SIGKILL every process in `cgroup`, however it forked (HTCondor's hard kill)."""
        if self._killer is not None:
            _write(self._killer.file(cgroup, "cgroup.kill"), "1")
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
        acct = self._cpuacct
        if acct is not None:
            if acct.v2:
                text = _read(acct.file(cgroup, "cpu.stat"))
                if text is not None:
                    stat = _keyed(text, acct.file(cgroup, "cpu.stat"))
                    if "user_usec" in stat:
                        user = stat["user_usec"] / 1e6
                    if "system_usec" in stat:
                        system = stat["system_usec"] / 1e6
            else:
                u = _read(acct.file(cgroup, "cpuacct.usage_user"))
                s = _read(acct.file(cgroup, "cpuacct.usage_sys"))
                user = None if u is None else int(u) / 1e9
                system = None if s is None else int(s) / 1e9
        peak = current = None
        if self._memory is not None:
            peak_file = self.peak_memory_file(cgroup)
            text = None if peak_file is None else _read(peak_file)
            peak = None if text is None else int(text)
            name = "memory.current" if self._memory.v2 else "memory.usage_in_bytes"
            text = _read(self._memory.file(cgroup, name))
            current = None if text is None else int(text)
        return CgroupUsage(
            user_cpu_seconds=user,
            sys_cpu_seconds=system,
            peak_memory_bytes=peak,
            memory_bytes=current,
            num_pids=len(self.pids(cgroup)),
        )


def _has(hierarchy: _Hierarchy, name: str) -> bool:
    """Whether the kernel shows control file `name` in this hierarchy (in Kondor's root, or at
    the hierarchy's top, where v1 shows every file its children get)."""
    return hierarchy.file("", name).exists() or (hierarchy.base / name).exists()


def _bytes(path: Path) -> int | None:
    """A memory limit file's value; None for "max", unset, or v1's "unlimited"."""
    text = (_read(path) or "max").strip()
    if text == "max" or int(text) >= _V1_UNLIMITED:
        return None
    return int(text)


def _keyed(text: str, path: Path) -> dict[str, int]:
    try:
        return parse_keyed(text, what=str(path))
    except DetectionError as err:
        raise CgroupError(str(err)) from None


def _mkdir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CgroupError(f"{path}: cannot create it ({os.strerror(err.errno or 0)})") from None


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except FileNotFoundError:
        return
    except OSError as err:
        # The kernel's control files vanish with rmdir (a busy cgroup is EBUSY), so
        # ENOTEMPTY means an ordinary directory of recorded files: a test's tree.
        if err.errno == errno.ENOTEMPTY:
            _remove_tree(path)
            return
        raise CgroupError(f"{path}: cannot remove it ({os.strerror(err.errno or 0)})") from None


def _remove_tree(path: Path) -> None:
    for child in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if child.is_dir():
            child.rmdir()
        else:
            child.unlink()
    path.rmdir()
