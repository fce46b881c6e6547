"""GPU device isolation (HTCondor's STARTER_HIDE_GPU_DEVICES): a job opens only its GPUs.

What to hide is the core's (`kondor_core.jobs.gpus.devices_to_hide`); this module applies
it as HTCondor's starter does on cgroup v1 (proc_family_direct_cgroup_v1.cpp): the job
joins a cgroup of its own in the `devices` hierarchy, `<root>/<slot>/<job>`, whose
`devices.deny` gets `c <major>:<minor> rwm` for each GPU of the node that is not the
slot's. The device node may still be listed in /dev; opening it fails with EPERM.
/dev/nvidiactl and /dev/nvidia-uvm stay open: CUDA needs them.

Cgroup v2 has no devices controller: the kernel asks an eBPF program
(BPF_PROG_TYPE_CGROUP_DEVICE) attached to the cgroup. Kondor does not load one yet: on v2
nothing is refused, and the agent says so in its log once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from kondor_agent.detect import CgroupFS, HostFS, gpu_device_nodes
from kondor_agent.execute.cgroups import parse_self_cgroup
from kondor_core.jobs.gpus import GpuDeviceNode

log = logging.getLogger("kondor_agent.gpu_isolation")

NO_V2 = (
    "GPU device isolation needs the v1 devices cgroup; on cgroup v2 it needs an eBPF device "
    "program, which Kondor does not load yet: jobs can open every GPU device node"
)


class GpuDeviceIsolation:
    """The node's GPU device nodes and the `devices` hierarchy jobs are hidden in."""

    def __init__(
        self, devices: Path | None, nodes: Sequence[GpuDeviceNode], *, reason: str = ""
    ) -> None:
        self.devices = devices
        self.nodes = tuple(nodes)
        self.reason = reason
        self._said = False

    def __repr__(self) -> str:
        where = self.devices if self.devices is not None else self.reason or "none"
        return f"GpuDeviceIsolation({len(self.nodes)} GPUs, {where})"

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
    ) -> GpuDeviceIsolation:
        """The node's GPUs (its /dev/nvidiactl and /proc/driver/nvidia, under `gpu_root`,
        by default `host_root`: a test's stand-in device nodes), and Kondor's `root` in
        the v1 devices hierarchy (relative: inside this process's own devices cgroup, as
        JobCgroups places it)."""
        host = HostFS(host_root)
        nodes = gpu_device_nodes(HostFS(gpu_root) if gpu_root is not None else host)
        where = CgroupFS(host, mount).hierarchy("devices")
        if where is None or where[1]:
            return cls(None, nodes, reason=NO_V2)
        inside = root
        if not root.startswith("/"):
            text = self_cgroup if self_cgroup is not None else Path("/proc/self/cgroup").read_text()
            own = parse_self_cgroup(text).get("devices", "/")
            inside = own.rstrip("/") + "/" + root
        return cls(host.path(where[0]) / inside.strip("/"), nodes)

    def cgroup_dir(self, cgroup: str) -> Path | None:
        return None if self.devices is None else self.devices / cgroup.strip("/")

    def hide(self, cgroup: str, hidden: Sequence[GpuDeviceNode]) -> list[Path]:
        """Create the job's devices cgroup denying `hidden`; the `cgroup.procs` the job must
        join (none when there is nothing to hide or no v1 devices hierarchy). A rule the
        kernel refuses is logged, as the starter logs it, and the others still apply."""
        if not hidden:
            return []
        where = self.cgroup_dir(cgroup)
        if where is None:
            if not self._said:
                log.warning("%s (%s)", NO_V2, self.reason)
                self._said = True
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
        """Remove the job's devices cgroup once its processes are gone (none: nothing)."""
        where = self.cgroup_dir(cgroup)
        if where is None or not where.is_dir():
            return
        try:
            where.rmdir()
        except OSError as err:
            log.warning("%s: cannot remove it (%s)", where, os.strerror(err.errno or 0))
