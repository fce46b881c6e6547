"""A pod job on a GPU slot of the real node (`--real-node`, host-exclusive): the
host has no GPU, so its agent answers NVML from the real H100's recording (driver 580, with
its usage under load); the Pod the agent creates names the slot's GPU by UUID in
NVIDIA_VISIBLE_DEVICES (checked on the Pod object) and asks the device plugin for none. The
container runtime is runc, which ignores the variable: the pod runs and prints it."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kondor_agent.detect import FakeNvml
from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port
from kondor_devcluster.images import BUSYBOX_IMAGE

from .conftest import real_node_skip_reason
from .test_jobs_end_to_end import Cluster, eventually

pytestmark = pytest.mark.timeout(300)

NODE = "kondor-real-gpu"
NVML = Path(__file__).resolve().parents[1] / "unit" / "agent" / "detect" / "fixtures" / "nvml"
H100 = "GPU-f2bd270c-c66e-0c7c-504e-e9af63626b3c"


def recorded_h100(tmp: Path) -> Path:
    """The H100's detection answers with its usage under load, as one recording."""
    fake = FakeNvml.under_load(
        NVML / "h100-80gb-hbm3-driver580.json", NVML / "h100-usage-under-load.json", "busy"
    )
    path = tmp / "h100.json"
    path.write_text(json.dumps(fake.recording))
    return path


@contextlib.contextmanager
def gpu_real_node(tmp: Path) -> Iterator[Cluster]:
    spec = ClusterSpec(
        port=free_port(),
        kubeconfig=tmp / "kubeconfig",
        state_dir=tmp / "state",
        operator=True,
        agents=True,
        real_node=NODE,
        real_node_nvml=recorded_h100(tmp),
    )
    dev = DevCluster(spec, log=sys.stderr)
    dev.start()
    try:
        made = Cluster(spec.kubeconfig)
        made.apply(
            {
                "apiVersion": "kondor.io/v1alpha1",
                "kind": "SlotPolicy",
                "metadata": {"name": "real-gpu"},
                "spec": {
                    "nodeSelector": {"matchLabels": {"kondor.io/real-node": "true"}},
                    "condorConfig": "use feature : GPUs\nPOLLING_INTERVAL = 1\n",
                },
            }
        )
        made.apply(
            {
                "apiVersion": "kondor.io/v1alpha1",
                "kind": "Pool",
                "metadata": {"name": "default"},
                "spec": {"negotiatorInterval": 2},
            }
        )

        def one_gpu_unclaimed() -> bool:
            slots = made.get("executionpoints", NODE, None)["status"]["slots"]
            return bool(slots) and all(s["state"] == "Unclaimed" for s in slots)

        eventually(one_gpu_unclaimed, 90, "the real node's slots Unclaimed")
        yield made
    finally:
        dev.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = real_node_skip_reason()
    if reason:
        pytest.skip(reason)
    with gpu_real_node(tmp_path_factory.mktemp("realgpu")) as made:
        yield made


def gpu_pod_job(name: str) -> dict[str, Any]:
    script = 'echo "N=$NVIDIA_VISIBLE_DEVICES C=$CUDA_VISIBLE_DEVICES A=$_CONDOR_AssignedGPUs"'
    container = {
        "name": "main",
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
    }
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "requestCpus": 1,
            "requestMemory": "64Mi",
            "requestGpus": 1,
            "pod": {"template": {"spec": {"containers": [container]}}},
        },
    }


def test_a_pod_job_on_a_gpu_slot_names_its_gpu_in_the_pod(cluster: Cluster) -> None:
    cluster.apply(gpu_pod_job("cuda"))

    def the_pod() -> dict[str, Any] | None:
        listed = cluster.kubectl(
            "get", "pods", "-n", "default", "-l", "kondor.io/job=cuda", "-o", "json"
        )
        items: list[dict[str, Any]] = json.loads(listed)["items"]
        return items[0] if items else None

    pod = eventually(the_pod, 90, "the job's pod")
    assert pod["spec"]["nodeName"] == NODE
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    # the slot's ad travels in the Pod itself: its AssignedGPUs is the recorded H100's id
    machine_ad = pod["metadata"]["annotations"]["kondor.io/machine-ad"]
    assert 'AssignedGPUs = "GPU-f2bd270c"' in machine_ad.splitlines()
    assigned = "GPU-f2bd270c"
    assert env["NVIDIA_VISIBLE_DEVICES"] == H100 == env["CUDA_VISIBLE_DEVICES"]
    assert env["_CONDOR_AssignedGPUs"] == assigned
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    done = eventually(
        lambda: (job := cluster.job("cuda"))["status"]["jobStatus"] == "Completed" and job,
        120,
        "the job Completed",
    )
    assert done["status"]["exitCode"] == 0
    log = cluster.kubectl("logs", "-n", "default", pod["metadata"]["name"])
    assert log.strip() == f"N={H100} C={H100} A=GPU-f2bd270c"
