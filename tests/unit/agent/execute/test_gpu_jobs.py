"""GPUs handed to process and Apptainer jobs: the starter's GPU environment
from the slot the job was matched to, and the other GPUs' device nodes hidden.

The slots are carved by the core from a 4-GPU node whose first GPU is the real H100's
(UUID as NVML reported it); the jobs are real processes under real supervisors. Device
hiding runs on this machine's real cgroups with stand-in GPU device nodes: character
devices made with mknod on the numbers of /dev/zero, /dev/full, /dev/random and
/dev/urandom (major 1), which open for anyone unless the cgroup denies them (EPERM). It
runs three ways: as the agent opens it (here, a hybrid host: the v1 devices cgroup and the
v2 eBPF device program), with the v2 program alone (as on a pure v2 host) and with the v1
devices cgroup alone.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import classad2
import pytest
from apptainer_runtimes import Apptainer
from execute_fakes import wait_for, wait_result

from kondor_agent.execute import records
from kondor_agent.execute.cgroups import SUPERVISORS, CgroupError, JobCgroups
from kondor_agent.gpu_isolation import GpuDeviceIsolation
from kondor_agent.runtimes.process import ProcessJobs
from kondor_agent.runtimes.process_launcher import ProcessLauncher
from kondor_core.api import ApptainerRuntime, ExecutionJob, ProcessRuntime
from kondor_core.api.machine import Machine
from kondor_core.config.effective import EffectivePolicy
from kondor_core.slots import PartitionableSlot, SlotAd, carve, initial_slots, layout, slot_ads

H100 = "GPU-f2bd270c-c66e-0c7c-504e-e9af63626b3c"
UUIDS = (
    H100,
    "GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0",
    "GPU-1c2d3e4f-5061-7283-94a5-b6c7d8e9f0a1",
    "GPU-2d3e4f50-6172-8394-a5b6-c7d8e9f0a1b2",
)
#: Stand-in minors (major 1): zero, full, random, urandom.
MINORS = (5, 7, 8, 9)
SHOW = (
    'echo "C=$CUDA_VISIBLE_DEVICES G=$GPU_DEVICE_ORDINAL A=$_CONDOR_AssignedGPUs'
    ' N=$NVIDIA_VISIBLE_DEVICES"'
)


def four_gpus() -> Machine:
    return Machine.model_validate(
        {
            "name": "gpu-node",
            "cpus": 8,
            "memory": "32Gi",
            "disk": "100Gi",
            "gpus": [{"id": "GPU-" + u[4:12], "properties": {"DeviceUuid": u}} for u in UUIDS],
        }
    )


def dynamic_slot(request_gpus: int) -> SlotAd:
    """The dynamic slot a job asking `request_gpus` gets on a fresh 4-GPU node."""
    result = layout(four_gpus(), EffectivePolicy())
    (pslot,) = initial_slots(result)
    assert isinstance(pslot, PartitionableSlot)
    request = {"RequestCpus": 1, "RequestMemory": 64, "RequestDisk": 1024}
    if request_gpus:
        request["RequestGPUs"] = request_gpus
    after, _ = carve(pslot, classad2.ClassAd(request))  # type: ignore[misc]
    return next(ad for ad in slot_ads(result, [after]) if "_" in ad.name)


def job(runtime: ProcessRuntime | ApptainerRuntime, name: str = "train") -> ExecutionJob:
    kind = "apptainer" if isinstance(runtime, ApptainerRuntime) else "process"
    return ExecutionJob.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"owner": "alice", kind: runtime.model_dump(by_alias=True, exclude_none=True)},
        }
    )


def run(jobs: ProcessJobs, runtime: ProcessRuntime | ApptainerRuntime, slot: SlotAd) -> str:
    name = f"job{len(jobs.launcher.adopt())}"  # each run its own job directory
    handle = jobs.launch(job(runtime, name), f"default/{name}", slot, 'Owner = "alice"')
    result = wait_result(jobs.launcher, handle)
    assert result.exit_code == 0, result
    return (handle.scratch / "out").read_text().strip()


@pytest.fixture
def jobs(tmp_path: Path) -> ProcessJobs:
    return ProcessJobs(ProcessLauncher(tmp_path / "execute", JobCgroups.disabled(), search_path=""))


def test_a_job_on_a_1_gpu_slot_is_given_exactly_its_gpu(jobs: ProcessJobs) -> None:
    slot = dynamic_slot(1)
    assert slot.attributes["AssignedGPUs"] == "GPU-f2bd270c"
    runtime = ProcessRuntime(executable="/bin/sh", arguments=["-c", SHOW], output="out")
    # HTCondor 25: CUDA_VISIBLE_DEVICES forced to NVIDIA_VISIBLE_DEVICES, the full UUID
    assert run(jobs, runtime, slot) == f"C={H100} G=GPU-f2bd270c A=GPU-f2bd270c N={H100}"
    # with AUTO_SET_NVIDIA_VISIBLE_DEVICES false: exactly the AssignedGPUs ids
    jobs.configure({"AUTO_SET_NVIDIA_VISIBLE_DEVICES": "false"})
    assert run(jobs, runtime, dynamic_slot(1)) == "C=GPU-f2bd270c G=GPU-f2bd270c A=GPU-f2bd270c N="


def test_a_job_on_a_0_gpu_slot_gets_the_unassigned_value(jobs: ProcessJobs) -> None:
    runtime = ProcessRuntime(
        executable="/bin/sh",
        arguments=["-c", SHOW],
        output="out",
        environment={"CUDA_VISIBLE_DEVICES": "0,1,2,3"},  # the starter's value wins
    )
    assert run(jobs, runtime, dynamic_slot(0)) == "C=10000 G=10000 A=10000 N=none"


def test_an_apptainer_job_gets_nv_and_the_same_variables(
    tmp_path: Path, apptainer: Apptainer
) -> None:
    """`--nv` with GPUs assigned (real Apptainer binds the host's NVIDIA libraries where it
    finds them, and warns where it does not), and the starter's GPU variables inside."""
    launcher = ProcessLauncher(
        apptainer.execute_dir(tmp_path),
        JobCgroups.disabled(),
        search_path=str(apptainer.bin_dir),
        pid_namespaces=lambda: False,
    )
    image = apptainer.image(tmp_path / "image")
    runtime = ApptainerRuntime(
        image=str(image), executable="/bin/sh", arguments=["-c", SHOW], output="out"
    )
    jobs = ProcessJobs(launcher)
    jobs.configure(apptainer.macros())
    handle = jobs.launch(job(runtime), "default/train", dynamic_slot(2), 'Owner = "alice"')
    result = wait_result(launcher, handle)
    assert result.exit_code == 0, result
    both = f"{UUIDS[0]},{UUIDS[1]}"
    ids = "GPU-f2bd270c,GPU-0b1c2d3e"
    assert (handle.scratch / "out").read_text().strip() == f"C={both} G={ids} A={ids} N={both}"
    spec = json.loads((handle.directory / records.SPEC).read_text())
    assert "--nv" in spec["argv"]
    assert spec["environment"]["APPTAINERENV_CUDA_VISIBLE_DEVICES"] == both


# -- device isolation on the real cgroups -------------------------------------------------


def stand_in_gpus(root: Path) -> None:
    """/dev/nvidiactl (as /dev/null), four GPUs' nodes and the driver's information files."""
    (root / "dev").mkdir(parents=True)
    os.mknod(root / "dev" / "nvidiactl", 0o666 | 0o020000, os.makedev(1, 3))
    for index, (gpu, minor) in enumerate(zip(UUIDS, MINORS, strict=True)):
        node = root / "dev" / f"nvidia{minor}"
        os.mknod(node, 0o666 | 0o020000, os.makedev(1, minor))
        os.chmod(node, 0o666)
        info = root / "proc" / "driver" / "nvidia" / "gpus" / f"0000:00:0{index + 6}.0"
        info.mkdir(parents=True)
        (info / "information").write_text(f"GPU UUID: \t {gpu}\nDevice Minor: \t {minor}\n")


@pytest.fixture(params=["as-opened", "v2-only", "v1-only"])
def isolated(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[ProcessJobs, Path, str]]:
    if os.geteuid() != 0:
        pytest.skip("mknod and cgroups need root here")
    root = f"kondor-test-{uuid.uuid4().hex[:8]}"
    gpus = tmp_path / "gpu-host"
    stand_in_gpus(gpus)
    isolation = GpuDeviceIsolation.open(root=root, gpu_root=gpus)
    assert [n.minor for n in isolation.nodes] == list(MINORS)
    if request.param == "v2-only":
        if isolation.unified is None:
            pytest.skip(f"no v2 device programs here: {isolation.reason}")
        isolation = GpuDeviceIsolation(None, isolation.nodes, unified=isolation.unified)
    elif request.param == "v1-only":
        if isolation.devices is None:
            pytest.skip(f"no v1 devices cgroup here: {isolation.reason}")
        isolation = GpuDeviceIsolation(isolation.devices, isolation.nodes)
    elif isolation.devices is None and isolation.unified is None:
        pytest.skip(f"no device isolation here: {isolation.reason}")
    try:
        cgroups = JobCgroups.open(root=root)
    except (CgroupError, OSError) as err:
        pytest.skip(f"cgroups are not writable here: {err}")
    launcher = ProcessLauncher(tmp_path / "execute", cgroups, gpu_isolation=isolation)
    yield ProcessJobs(launcher), gpus / "dev", request.param
    for handle in launcher.adopt():
        launcher.remove(handle)
    wait_for(lambda: cgroups.pids(SUPERVISORS) == [])
    cgroups.remove_root()


def test_a_job_cannot_open_another_slots_gpu_device_node(
    isolated: tuple[ProcessJobs, Path, str],
) -> None:
    jobs, dev, mode = isolated
    opens = " ; ".join(
        f"if head -c1 {dev}/nvidia{m} >/dev/null 2>&1; "
        f'then echo "{m}:open"; else echo "{m}:denied"; fi'
        for m in MINORS
    )
    runtime = ProcessRuntime(executable="/bin/sh", arguments=["-c", opens], output="out")
    # the 1-GPU slot holds the first GPU (minor 5): only its node opens
    assert run(jobs, runtime, dynamic_slot(1)).split() == [
        "5:open",
        "7:denied",
        "8:denied",
        "9:denied",
    ]
    # a slot without GPUs opens none of them; with STARTER_HIDE_GPU_DEVICES false, all
    assert run(jobs, runtime, dynamic_slot(0)).split() == [
        "5:denied",
        "7:denied",
        "8:denied",
        "9:denied",
    ]
    jobs.configure({"STARTER_HIDE_GPU_DEVICES": "false"})
    assert run(jobs, runtime, dynamic_slot(0)).split() == ["5:open", "7:open", "8:open", "9:open"]
    if mode == "v2-only":  # the eBPF program alone refused: no job joined a devices cgroup
        for handle in jobs.launcher.adopt():
            spec = json.loads((handle.directory / records.SPEC).read_text())
            assert spec["job_procs"] and not any("/devices/" in p for p in spec["job_procs"])
