"""GPUs handed to process jobs on the dev cluster: a 4-GPU kwok node whose GPUs
are the recorded H100 (driver 580; its NVML UUID) and three more of the same kind; a job on a
1-GPU slot gets CUDA_VISIBLE_DEVICES naming exactly its AssignedGPUs, a job on a 0-GPU slot
the unassigned value. Device hiding is tested on this host's v1 devices cgroup with
stand-in device nodes by tests/unit/agent/execute/test_gpu_jobs.py (a dev cluster agent
reads the host's own /dev/nvidiactl, which this host has not)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import skip_reason
from .test_jobs_end_to_end import Cluster, eventually, job_cluster, process_job, slot_policy

NODE = "kwok-gpu4-0"
REFERENCE = Path(__file__).resolve().parents[1] / "unit" / "agent" / "detect" / "fixtures"
H100 = json.loads((REFERENCE / "nvml" / "h100-80gb-hbm3-driver580.json").read_text())
UUIDS = (
    H100["devices"][0]["nvmlDeviceGetUUID"],  # GPU-f2bd270c-c66e-0c7c-504e-e9af63626b3c
    "GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0",
    "GPU-1c2d3e4f-5061-7283-94a5-b6c7d8e9f0a1",
    "GPU-2d3e4f50-6172-8394-a5b6-c7d8e9f0a1b2",
)
SHOW = (
    'echo "C=$CUDA_VISIBLE_DEVICES A=$_CONDOR_AssignedGPUs N=$NVIDIA_VISIBLE_DEVICES"; '
    'grep "^AssignedGPUs" "$_CONDOR_MACHINE_AD" || echo "AssignedGPUs = none"'
)


def four_gpu_machine(tmp: Path) -> Path:
    props = {"DeviceName": H100["devices"][0]["nvmlDeviceGetName"], "GlobalMemoryMb": 81559,
             "Capability": 9.0}  # fmt: skip
    machine = {
        "name": NODE,
        "cpus": 8,
        "memory": 32768,
        "disk": 104857600,
        "gpus": [{"id": "GPU-" + u[4:12], "properties": {**props, "DeviceUuid": u}} for u in UUIDS],
        "labels": {"kondor.io/pool": "gpu4"},
    }
    path = tmp / f"{NODE}.yaml"
    path.write_text(yaml.safe_dump(machine))
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("gpus")
    policy = slot_policy("gpus", {"kondor.io/pool": "gpu4"}, "use feature : GPUs")
    with job_cluster(tmp, [four_gpu_machine(tmp)], [policy]) as made:
        yield made


def run(cluster: Cluster, name: str, **spec: Any) -> tuple[str, str]:
    """The job's output and the AssignedGPUs line of its machine ad, once it completed."""
    cluster.apply(process_job(name, SHOW, **spec), user="alice")
    done = eventually(
        lambda: (job := cluster.job(name))["status"]["jobStatus"] == "Completed" and job,
        60,
        f"{name} Completed",
    )
    scratch = Path(done["status"]["execution"]["directory"]) / "scratch"
    said, assigned = (scratch / "out.txt").read_text().splitlines()
    return said, assigned


def test_a_job_on_a_1_gpu_slot_of_a_4_gpu_node_gets_exactly_its_gpu(cluster: Cluster) -> None:
    said, assigned = run(cluster, "one-gpu", requestGpus=1)
    gpu = assigned.split("=", 1)[1].strip().strip('"')
    assert gpu.startswith("GPU-") and len(gpu) == len("GPU-f2bd270c")
    (uuid,) = [u for u in UUIDS if u.startswith(gpu)]
    # HTCondor 25: CUDA_VISIBLE_DEVICES is the assigned GPU's full UUID (the same device)
    assert said == f"C={uuid} A={gpu} N={uuid}"


def test_a_job_on_a_0_gpu_slot_gets_the_unassigned_value(cluster: Cluster) -> None:
    said, assigned = run(cluster, "no-gpu")
    assert assigned == "AssignedGPUs = none"
    assert said == "C=10000 A=10000 N=none"


def test_without_auto_set_cuda_visible_devices_is_assigned_gpus_exactly(cluster: Cluster) -> None:
    policy = slot_policy(
        "gpus",
        {"kondor.io/pool": "gpu4"},
        "use feature : GPUs\nAUTO_SET_NVIDIA_VISIBLE_DEVICES = false",
    )
    cluster.apply(policy)

    def configured() -> bool:
        said, _ = run(cluster, f"probe-{configured.runs}", requestGpus=1)  # type: ignore[attr-defined]
        configured.runs += 1  # type: ignore[attr-defined]
        return " N= " in f"{said} " or said.endswith("N=")

    configured.runs = 0  # type: ignore[attr-defined]
    eventually(configured, 60, "the policy's AUTO_SET_NVIDIA_VISIBLE_DEVICES = false applied")
    said, assigned = run(cluster, "exact", requestGpus=1)
    gpu = assigned.split("=", 1)[1].strip().strip('"')
    assert said == f"C={gpu} A={gpu} N="
