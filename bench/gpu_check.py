"""Real-GPU check: what a slot assigned, beside what CUDA sees from inside its job.

Run on a machine with NVIDIA GPUs (the device tool's H100, say):

    .venv/bin/python bench/gpu_check.py [--cgroups]

1. Detection: the agent's `discover_gpus` through pynvml (libnvidia-ml). No library, no
   driver or no GPU: it prints `no NVIDIA GPU here` and exits 0.
2. Carving: a machine holding the detected GPUs, its one partitionable slot (the core's
   layout), and the dynamic slots of a job asking RequestGPUs = 1 and one asking none.
3. The job: a real process job through the agent's ProcessJobs and ProcessLauncher (real
   supervisor; as root, the job runs as its slot's user), whose environment is the
   starter's GPU environment, once with HTCondor 25's AUTO_SET_NVIDIA_VISIBLE_DEVICES
   (CUDA_VISIBLE_DEVICES = the full UUIDs) and once without (CUDA_VISIBLE_DEVICES =
   AssignedGPUs, the short ids). Inside, the job asks libcuda itself (ctypes: cuInit,
   cuDeviceGetCount, cuDeviceGetUuid) and prints what it sees.
4. With --cgroups (root; the v1 devices cgroup and/or a v2 eBPF device program): the job's
   other GPUs are hidden; the job also tries to open every /dev/nvidia<minor> and prints
   which it could.

It prints one line per job: the slot, AssignedGPUs, the job's CUDA_VISIBLE_DEVICES and
what CUDA saw, and exits 1 when CUDA saw anything but the slot's GPUs (a 1-GPU slot: exactly
its GPU; a 0-GPU slot: none). `--fake RECORDING` runs steps 1-3 from an NVML recording
(tests/unit/agent/detect/fixtures/nvml/*.json): CUDA sees nothing then, and no verdict is
given. Not a timed benchmark.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import classad2

from kondor_agent.detect import FakeNvml, discover_gpus
from kondor_agent.execute.cgroups import CgroupError, JobCgroups
from kondor_agent.gpu_isolation import GpuDeviceIsolation
from kondor_agent.runtimes.process import ProcessJobs
from kondor_agent.runtimes.process_launcher import ProcessLauncher
from kondor_core.api import ExecutionJob, ProcessRuntime
from kondor_core.api.machine import Machine
from kondor_core.config.effective import EffectivePolicy
from kondor_core.slots import PartitionableSlot, SlotAd, carve, initial_slots, layout, slot_ads

#: What runs inside the job: libcuda's own view, as JSON on one line.
PROBE = r"""
import ctypes, json, os, glob
seen = {"env": os.environ.get("CUDA_VISIBLE_DEVICES"), "uuids": [], "opens": {}}
for node in sorted(glob.glob("/dev/nvidia[0-9]*")):
    try:
        open(node, "rb").close()
        seen["opens"][node] = "open"
    except OSError as err:
        seen["opens"][node] = err.strerror
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as err:
    seen["error"] = str(err)
else:
    rc = cuda.cuInit(0)
    count = ctypes.c_int(0)
    if rc == 0:
        cuda.cuDeviceGetCount(ctypes.byref(count))
    else:
        seen["cuInit"] = rc  # 100: CUDA_ERROR_NO_DEVICE
    for i in range(count.value):
        dev = ctypes.c_int()
        cuda.cuDeviceGet(ctypes.byref(dev), i)
        raw = (ctypes.c_ubyte * 16)()
        cuda.cuDeviceGetUuid(raw, dev)
        h = bytes(raw).hex()
        seen["uuids"].append(f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
print(json.dumps(seen))
"""


def detect(fake: Path | None) -> list[Any]:
    """The node's GPUs as the agent detects them (pynvml, or a recording)."""
    if fake is not None:
        return discover_gpus(FakeNvml.load(fake))
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError:
        return []
    return discover_gpus(nvml)


def slots_for(gpus: list[Any]) -> dict[str, SlotAd]:
    """The dynamic slots of a 1-GPU job and a 0-GPU job, carved by the core."""
    machine = Machine.model_validate(
        {
            "name": os.uname().nodename,
            "cpus": 2,
            "memory": "4Gi",
            "disk": "10Gi",
            "gpus": [{"id": gpu.id, "properties": dict(gpu.properties)} for gpu in gpus],
        }
    )
    result = layout(machine, EffectivePolicy())
    (pslot,) = initial_slots(result)
    assert isinstance(pslot, PartitionableSlot)
    out: dict[str, SlotAd] = {}
    for wanted in (1, 0):
        request = {"RequestCpus": 1, "RequestMemory": 256, "RequestDisk": 1024}
        if wanted:
            request["RequestGPUs"] = wanted
        carved = carve(pslot, classad2.ClassAd(request))
        if not isinstance(carved, tuple):
            raise SystemExit(f"cannot carve a {wanted}-GPU slot: {carved}")
        pslot = carved[0]
    for ad in slot_ads(result, [pslot]):
        if "_" in ad.name:  # the dynamic slots, in carving order
            out[f"{int(ad.attributes.get('GPUs', 0))}-gpu"] = ad
    return out


def run_job(jobs: ProcessJobs, slot: SlotAd, name: str) -> dict[str, Any]:
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    runtime = ProcessRuntime(executable=python, arguments=["-S", "-c", PROBE], output="out")
    job = ExecutionJob.model_validate(
        {
            "metadata": {"name": name, "namespace": "gpu-check"},
            "spec": {"owner": "gpu-check", "process": runtime.model_dump(exclude_none=True)},
        }
    )
    handle = jobs.launch(job, f"gpu-check/{name}", slot, 'Owner = "gpu-check"')
    deadline = time.monotonic() + 60
    while (result := jobs.launcher.poll(handle)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    out = handle.scratch / "out"
    text = out.read_text().strip() if out.exists() else ""
    jobs.launcher.remove(handle)
    if not text:
        return {"error": f"the job printed nothing ({result})"}
    return dict(json.loads(text.splitlines()[-1]))


def verdict(slot: SlotAd, seen: dict[str, Any]) -> bool:
    wanted = [
        str(props.get("DeviceUuid"))
        for name, props in slot.attributes.items()
        if name.startswith("GPUs_") and isinstance(props, dict)
    ]
    # CUDA formats every UUID as GPU-...; NVML names a MIG device MIG-...: compare the hex
    return sorted(u[4:] for u in seen.get("uuids", [])) == sorted(u[4:] for u in wanted)


def launcher(work: Path, with_cgroups: bool) -> tuple[ProcessLauncher, JobCgroups | None]:
    if not with_cgroups:
        return ProcessLauncher(work / "execute", JobCgroups.disabled()), None
    root = f"kondor-gpu-check-{uuid.uuid4().hex[:8]}"
    try:
        cgroups = JobCgroups.open(root=root)
    except (CgroupError, OSError) as err:
        raise SystemExit(f"--cgroups: {err}") from None
    isolation = GpuDeviceIsolation.open(root=root)
    print(f"device isolation: {isolation}")
    return ProcessLauncher(work / "execute", cgroups, gpu_isolation=isolation), cgroups


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fake", type=Path, help="an NVML recording instead of the GPUs")
    parser.add_argument(
        "--cgroups", action="store_true", help="hide the other GPUs (root, v1 or v2)"
    )
    args = parser.parse_args(argv)
    gpus = detect(args.fake)
    if not gpus:
        print("no NVIDIA GPU here (no libnvidia-ml, no driver or no device): nothing to check")
        return 0
    for gpu in gpus:
        props = gpu.properties
        print(f"detected {gpu.id}: {props.get('DeviceName')} {props.get('DeviceUuid')}")
    slots = slots_for(gpus)
    ok = True
    with tempfile.TemporaryDirectory(prefix="kondor-gpu-check-") as tmp:
        process_launcher, cgroups = launcher(Path(tmp), args.cgroups)
        jobs = ProcessJobs(process_launcher)
        for auto in ("true", "false"):
            jobs.configure({"AUTO_SET_NVIDIA_VISIBLE_DEVICES": auto})
            for label, slot in slots.items():
                seen = run_job(jobs, slot, f"{label}-auto-{auto}")
                good = args.fake is not None or verdict(slot, seen)
                ok = ok and good
                assigned = slot.attributes.get("AssignedGPUs")
                print(
                    f"{label} slot {slot.name}: AssignedGPUs={assigned!r}"
                    f" AUTO_SET_NVIDIA_VISIBLE_DEVICES={auto}"
                    f" job CUDA_VISIBLE_DEVICES={seen.get('env')!r}"
                    f" CUDA sees {seen.get('uuids')} {seen.get('error') or ''}"
                    f" device nodes {seen.get('opens')}"
                    f" -> {'ok' if good else 'NOT the slot GPUs'}"
                )
        if cgroups is not None:
            cgroups.remove_root()
    if args.fake is not None:
        print("(from a recording: CUDA cannot see recorded GPUs; no verdict)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
