"""GPU device isolation (HTCondor's STARTER_HIDE_GPU_DEVICES): a job opens only its GPUs.

What to hide is the core's (`kondor_core.jobs.gpus.devices_to_hide`); this module applies
it as HTCondor's starter does, on each cgroup version the job has a cgroup in:

- v1 (proc_family_direct_cgroup_v1.cpp): the job joins a cgroup of its own in the
  `devices` hierarchy, `<root>/<slot>/<job>`, whose `devices.deny` gets
  `c <major>:<minor> rwm` for each GPU of the node that is not the slot's;
- v2, which has no devices controller (proc_family_direct_cgroup_v2.cpp): an eBPF device
  program refusing the same devices is attached to the job's cgroup of the unified
  hierarchy (`kondor_agent.execute.bpf_devices`), the one `JobCgroups` made for it.

On a hybrid host both apply. The device node may still be listed in /dev; opening it fails
with EPERM. /dev/nvidiactl and /dev/nvidia-uvm stay open: CUDA needs them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from kondor_agent.detect import CgroupFS, HostFS, gpu_device_nodes
from kondor_agent.execute import bpf_devices
from kondor_agent.execute.cgroups import parse_self_cgroup
from kondor_core.jobs.gpus import GpuDeviceNode

log = logging.getLogger("kondor_agent.gpu_isolation")

NOTHING_HIDDEN = "GPU device isolation is off: jobs can open every GPU device node"


class GpuDeviceIsolation:
    """The node's GPU device nodes and where jobs are hidden from them: the v1 `devices`
    hierarchy (`devices`) and the v2 unified one (`unified`), each None where not used."""

    def __init__(
        self,
        devices: Path | None,
        nodes: Sequence[GpuDeviceNode],
        *,
        unified: Path | None = None,
        reason: str = "",
    ) -> None:
        self.devices = devices
        self.unified = unified
        self.nodes = tuple(nodes)
        #: Why one or both are not used (logged once, on the first job with something to
        #: hide, when neither is).
        self.reason = reason
        self._said = False

    def __repr__(self) -> str:
        where = [f"v1 devices.deny in {self.devices}"] if self.devices is not None else []
        if self.unified is not None:
            where.append(f"v2 eBPF device program in {self.unified}")
        if self.reason:
            where.append(self.reason)
        return f"GpuDeviceIsolation({len(self.nodes)} GPUs, {'; '.join(where)})"

    @classmethod
    def disabled(cls, reason: str = "no job cgroups") -> GpuDeviceIsolation:
        return cls(None, (), reason=reason)

    @classmethod
    def open(
        cls,
        host_root: Path = Path("/"),
        *,
        mount: str = "/sys/fs/cgroup",
        root: str = "/kondor",
        self_cgroup: str | None = None,
        gpu_root: Path | None = None,
        bpf_probe: Callable[[], str | None] = bpf_devices.probe,
    ) -> GpuDeviceIsolation:
        """The node's GPUs (its /dev/nvidiactl and /proc/driver/nvidia, under `gpu_root`,
        by default `host_root`: a test's stand-in device nodes), and Kondor's `root` in
        the v1 devices hierarchy and in the unified one where `bpf_probe` finds that this
        process may load device programs (relative: inside this process's own cgroup of
        each, as JobCgroups places it)."""
        host = HostFS(host_root)
        nodes = gpu_device_nodes(HostFS(gpu_root) if gpu_root is not None else host)
        fs = CgroupFS(host, mount)
        own: dict[str, str] = {}
        if not root.startswith("/"):
            text = self_cgroup if self_cgroup is not None else Path("/proc/self/cgroup").read_text()
            own = parse_self_cgroup(text)

        def place(hierarchy: str, key: str) -> Path:
            inside = root if root.startswith("/") else own.get(key, "/").rstrip("/") + "/" + root
            return host.path(hierarchy) / inside.strip("/")

        v1 = fs.hierarchy("devices")
        devices = place(v1[0], "devices") if v1 is not None and not v1[1] else None
        unified = None
        why = [] if devices is not None else ["no v1 devices cgroup"]
        if fs.unified is None:
            why.append("no cgroup v2 hierarchy")
        elif (refused := bpf_probe()) is not None:
            why.append(refused)
        else:
            unified = place(fs.unified, "")
        return cls(devices, nodes, unified=unified, reason="; ".join(why))

    def cgroup_dir(self, cgroup: str) -> Path | None:
        """The job's cgroup in the v1 devices hierarchy (None: not used)."""
        return None if self.devices is None else self.devices / cgroup.strip("/")

    def v2_cgroup_dir(self, cgroup: str) -> Path | None:
        """The job's cgroup in the unified hierarchy (None: not used), made by JobCgroups."""
        return None if self.unified is None else self.unified / cgroup.strip("/")

    def hide(self, cgroup: str, hidden: Sequence[GpuDeviceNode]) -> list[Path]:
        """Refuse the job `hidden`: a device program on its v2 cgroup, and a devices cgroup
        of its own on v1; the v1 `cgroup.procs` the job must join (none when there is nothing
        to hide or no v1 devices hierarchy; the v2 cgroup is JobCgroups', joined already).
        What the kernel refuses is logged, as the starter logs it, and the rest still
        applies."""
        if not hidden:
            return []
        if self.devices is None and self.unified is None:
            if not self._said:
                log.warning("%s (%s)", NOTHING_HIDDEN, self.reason)
                self._said = True
            return []
        v2 = self.v2_cgroup_dir(cgroup)
        if v2 is not None:
            try:
                bpf_devices.attach_deny_program(v2, [(n.major, n.minor) for n in hidden])
            except bpf_devices.BpfError as err:
                log.error("cannot hide %d GPUs from the job: %s", len(hidden), err)
        where = self.cgroup_dir(cgroup)
        if where is None:
            return []
        where.mkdir(parents=True, exist_ok=True)
        for node in hidden:
            rule = f"c {node.major}:{node.minor} rwm"
            try:
                with open(where / "devices.deny", "w") as deny:
                    deny.write(rule)
            except OSError as err:
                log.error("%s: cannot deny %s (%s)", where, rule, os.strerror(err.errno or 0))
        return [where / "cgroup.procs"]

    def remove(self, cgroup: str) -> None:
        """Remove the job's v1 devices cgroup once its processes are gone (none: nothing).
        The v2 device program needs nothing: the kernel frees it with the job's cgroup,
        which JobCgroups removes."""
        where = self.cgroup_dir(cgroup)
        if where is None or not where.is_dir():
            return
        try:
            where.rmdir()
        except OSError as err:
            log.warning("%s: cannot remove it (%s)", where, os.strerror(err.errno or 0))
