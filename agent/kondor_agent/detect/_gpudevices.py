"""The node's NVIDIA GPU device nodes, as HTCondor's starter finds them to hide them.

`/dev/nvidiactl`'s major number is every NVIDIA device's; each GPU's
`/proc/driver/nvidia/gpus/<bus id>/information` names its UUID and device minor
(`/dev/nvidia<minor>`). No /dev/nvidiactl: no NVIDIA GPU to hide (nvidia_utils.cpp
make_nvidia_uuid_to_dev_map). What to hide is `kondor_core.jobs.gpus.devices_to_hide`.
"""

from __future__ import annotations

from kondor_agent.detect._hostfs import HostFS
from kondor_core.jobs.gpus import GpuDeviceNode, parse_nvidia_information

NVIDIACTL = "/dev/nvidiactl"
GPUS_DIR = "/proc/driver/nvidia/gpus"


def gpu_device_nodes(host: HostFS) -> list[GpuDeviceNode]:
    """Each GPU's UUID and device numbers; empty where the node has no NVIDIA driver."""
    major = host.device_major(NVIDIACTL)
    if major is None:
        return []
    nodes = []
    for bus in host.listdir(GPUS_DIR):
        parsed = parse_nvidia_information(host.read_optional(f"{GPUS_DIR}/{bus}/information") or "")
        if parsed is not None:
            nodes.append(GpuDeviceNode(parsed[0], major, parsed[1]))
    return sorted(nodes, key=lambda node: node.minor)
