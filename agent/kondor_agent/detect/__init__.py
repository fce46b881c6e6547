"""Detection and live facts: what the node has (`Machine`) and what it is doing now.

The agent reads the host only through `HostFS(root)`; cgroups v1, v2 and hybrid
through `CgroupFS`; GPUs through an NVML library object (the `pynvml` module, or
`FakeNvml` answering from a recording). Everything HTCondor names is named as
HTCondor names it; see README.md beside this file for each attribute's source.

    machine = detect_machine(
        HostFS(Path("/host")), node_name="node-a", labels=node_labels,
        allocatable=node_allocatable, reserved={}, execute_dir="/var/lib/kondor",
    )
    sampler = Sampler(HostFS(Path("/host")))
    facts = sampler.poll(datetime.now().astimezone(), job_cgroups=kondor_job_cgroups)
"""

from kondor_agent.detect._apptainer import Runner, RunResult, apptainer_attributes, run_on_path
from kondor_agent.detect._cgroups import CgroupFS, CgroupVersion, pod_cgroup
from kondor_agent.detect._cli import detect_command, register, render_machine
from kondor_agent.detect._gpudevices import gpu_device_nodes
from kondor_agent.detect._gpumonitor import GpuMonitor, GpuUsageBook
from kondor_agent.detect._gpus import NvmlLibrary, discover_gpus, gpu_id
from kondor_agent.detect._hostfs import DetectionError, HostFS
from kondor_agent.detect._labels import label_attribute, label_attributes
from kondor_agent.detect._live import CgroupReading, Sample, Sampler, facts, sample
from kondor_agent.detect._machine import Detected, detect, detect_machine
from kondor_agent.detect._osinfo import os_attributes
from kondor_agent.detect.nvml_fake import FakeNvml

__all__ = [
    "CgroupFS",
    "CgroupReading",
    "CgroupVersion",
    "Detected",
    "DetectionError",
    "FakeNvml",
    "GpuMonitor",
    "GpuUsageBook",
    "HostFS",
    "NvmlLibrary",
    "RunResult",
    "Runner",
    "Sample",
    "Sampler",
    "apptainer_attributes",
    "detect",
    "detect_command",
    "detect_machine",
    "discover_gpus",
    "facts",
    "gpu_device_nodes",
    "gpu_id",
    "label_attribute",
    "label_attributes",
    "os_attributes",
    "pod_cgroup",
    "register",
    "render_machine",
    "run_on_path",
    "sample",
]
