"""STARTER_HIDE_GPU_DEVICES on the dev cluster: a 4-GPU kwok node whose agent
finds its GPUs' device nodes in a stand-in tree (`--gpu-devices-root`): /dev/nvidiactl and
four /dev/nvidia<N> made with mknod on the numbers of /dev/null, /dev/zero, /dev/full,
/dev/random and /dev/urandom (major 1, which open for anyone), and the driver's
/proc/driver/nvidia/gpus/*/information naming the machine's GPUs' UUIDs. A process job on
the 1-GPU slot opens its GPU's node and no other (EPERM from its v1 devices cgroup and its
v2 cgroup's eBPF device program, whichever the host has; both on this hybrid host); a job on
a 0-GPU slot opens none. Needs root, and the v1 devices cgroup or cgroup v2 device programs.
(`tests/unit/agent/execute/test_gpu_jobs.py` runs each of the two alone.)"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kondor_agent.execute import bpf_devices
from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port

from .conftest import skip_reason
from .test_gpu_jobs import UUIDS, four_gpu_machine
from .test_jobs_end_to_end import Cluster, eventually, process_job, slot_policy

MINORS = (5, 7, 8, 9)


def stand_in_gpus() -> Path:
    """The stand-in tree, under a directory every slot user may cross."""
    root = Path(tempfile.mkdtemp(prefix="kondor-gpus-", dir="/tmp"))
    root.chmod(0o755)
    (root / "dev").mkdir(mode=0o755)
    os.mknod(root / "dev" / "nvidiactl", 0o666 | 0o020000, os.makedev(1, 3))
    for index, (uuid, minor) in enumerate(zip(UUIDS, MINORS, strict=True)):
        node = root / "dev" / f"nvidia{minor}"
        os.mknod(node, 0o666 | 0o020000, os.makedev(1, minor))
        node.chmod(0o666)
        info = root / "proc" / "driver" / "nvidia" / "gpus" / f"0000:00:0{index + 6}.0"
        info.mkdir(parents=True)
        (info / "information").write_text(f"GPU UUID: \t {uuid}\nDevice Minor: \t {minor}\n")
    return root


@contextlib.contextmanager
def gpu_cluster(tmp: Path, gpus: Path) -> Iterator[Cluster]:
    spec = ClusterSpec(
        port=free_port(),
        kubeconfig=tmp / "kubeconfig",
        state_dir=tmp / "state",
        nodes=(four_gpu_machine(tmp),),
        operator=True,
        agents=True,
        gpu_devices_root=gpus,
    )
    dev = DevCluster(spec, log=sys.stderr)
    dev.start()
    try:
        made = Cluster(spec.kubeconfig)
        made.apply(slot_policy("gpus", {"kondor.io/pool": "gpu4"}, "use feature : GPUs"))
        made.apply(
            {
                "apiVersion": "kondor.io/v1alpha1",
                "kind": "Pool",
                "metadata": {"name": "default"},
                "spec": {"negotiatorInterval": 2},
            }
        )
        yield made
    finally:
        dev.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path]]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    if os.geteuid() != 0:
        pytest.skip("needs root")
    refused = bpf_devices.probe()
    if refused is not None and not Path("/sys/fs/cgroup/devices/devices.deny").exists():
        pytest.skip(f"no v1 devices cgroup, and {refused}")
    gpus = stand_in_gpus()
    try:
        with gpu_cluster(tmp_path_factory.mktemp("gpuiso"), gpus) as made:
            yield made, gpus
    finally:
        shutil.rmtree(gpus, ignore_errors=True)


def opens(cluster: Cluster, dev: Path, name: str, **spec: object) -> list[str]:
    script = " ; ".join(
        f"if head -c1 {dev}/nvidia{m} >/dev/null 2>&1; "
        f'then echo "{m}:open"; else echo "{m}:denied"; fi'
        for m in MINORS
    )
    cluster.apply(process_job(name, script, **spec), user="alice")
    done = eventually(
        lambda: (job := cluster.job(name))["status"]["jobStatus"] == "Completed" and job,
        60,
        f"{name} Completed",
    )
    scratch = Path(done["status"]["execution"]["directory"]) / "scratch"
    return (scratch / "out.txt").read_text().split()


def test_a_job_cannot_open_another_slots_gpu_device_node(cluster: tuple[Cluster, Path]) -> None:
    made, gpus = cluster
    assert opens(made, gpus / "dev", "one-gpu", requestGpus=1) == [
        "5:open",
        "7:denied",
        "8:denied",
        "9:denied",
    ]
    assert opens(made, gpus / "dev", "no-gpu") == ["5:denied", "7:denied", "8:denied", "9:denied"]
