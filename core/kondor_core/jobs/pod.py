"""The Pod of a `pod` job: bound to the node, owned by its ExecutionJob, sized by its slot.

The agent creates it when the startd starts the job on a slot (docs/jobs.md). Its limits are
the slot's resources: Cpus cores, Memory MiB, and GPUs as `nvidia.com/gpu`. Its requests
follow the SlotPolicy's pod mode (KONDOR_POD_MODE, DESIGN.md):

* `dedicated` (the default): requests = limits, a Guaranteed pod the kubelet never evicts
  for the owner's sake;
* `harvest`: minimal requests (`HARVEST_REQUESTS`; GPUs, which cannot be overcommitted, stay
  requested) and the low PriorityClass `kondor-harvest` (KONDOR_HARVEST_PRIORITY_CLASS), so
  the kubelet admits the owner's pods beside it and node-pressure eviction takes it first:
  cycle scavenging on Kubernetes.

GPUs: the kubelet's device plugin would give a pod asking `nvidia.com/gpu: N` any N
GPUs, not those the slot's AssignedGPUs names. So by default (KONDOR_GPU_POD_DEVICES =
`visible-devices`) a pod on a slot whose GPUs are named by UUID asks the device plugin for
none and gets them through the NVIDIA container runtime's NVIDIA_VISIBLE_DEVICES (the slot's
full UUIDs), beside the starter's variables (`kondor_core.jobs.gpus.gpu_environment`:
CUDA_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL, _CONDOR_AssignedGPUs). `device-plugin` keeps the
`nvidia.com/gpu` request, and so does a slot whose GPUs have no UUID (a machine description
without DeviceUuid): then the plugin chooses, and the agent reports a choice that is not the
slot's (`visible_mismatch`).

Job pods have no probes: the job's exit is its health. The job and machine ads travel in
the Pod itself, as its annotations `kondor.io/job-ad` and `kondor.io/machine-ad`, and a
downwardAPI volume mounts them at /etc/kondor/.job.ad and /etc/kondor/.machine.ad, where
`_CONDOR_JOB_AD` and `_CONDOR_MACHINE_AD` point; `_CONDOR_SLOT` names the slot, as HTCondor's
starter sets them. Its security context is Pod Security `restricted` wherever the template
says nothing (`kondor_core.jobs.podsecurity`). One object per job, so one create. The API
server refuses a Pod whose annotations (keys and values, in bytes) pass 256 KiB, so a job
whose ads would not fit is refused here (`AdsTooLargeError`, naming the sizes), never
truncated.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from typing import Any

from kondor_core.api import EXECUTION_POINT_LABEL, ExecutionJob
from kondor_core.jobs.gpus import (
    GpuSettings,
    SlotGpus,
    gpu_environment,
    nvidia_visible_devices,
    slot_gpus,
)
from kondor_core.jobs.podsecurity import DEFAULT_RUN_AS, harden

#: Labels of a job's pod: the job's name and the claim it runs on.
JOB_LABEL = "kondor.io/job"
CLAIM_LABEL = "kondor.io/claim"
AD_MOUNT = "/etc/kondor"
#: The pod annotations carrying the ads, and the files the downwardAPI volume makes of them.
JOB_AD_ANNOTATION = "kondor.io/job-ad"
MACHINE_AD_ANNOTATION = "kondor.io/machine-ad"
JOB_AD_FILE = ".job.ad"
MACHINE_AD_FILE = ".machine.ad"
ADS_VOLUME = "kondor-ads"
#: The API server's limit on an object's annotations, keys and values counted in bytes
#: (apimachinery's TotalAnnotationSizeLimitB: 256 KiB).
ANNOTATIONS_LIMIT = 256 * 1024
DEDICATED = "dedicated"
HARVEST = "harvest"
#: The PriorityClass of harvest pods (the chart and the dev cluster create it).
HARVEST_PRIORITY_CLASS = "kondor-harvest"
HARVEST_PRIORITY = -100
#: A harvest pod's requests: enough to be Burstable (never BestEffort), nothing to reserve.
HARVEST_REQUESTS = {"cpu": "1m", "memory": "1Mi"}
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
#: How a pod gets its slot's GPUs (KONDOR_GPU_POD_DEVICES).
GPU_POD_DEVICES = "KONDOR_GPU_POD_DEVICES"
VISIBLE_DEVICES = "visible-devices"
DEVICE_PLUGIN = "device-plugin"
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_GPU_SETTINGS = GpuSettings()


def pod_mode(macros: Mapping[str, str]) -> tuple[str, str]:
    """The node's pod mode and harvest PriorityClass from its policy's knobs (the compiler
    has refused a mode that is neither)."""
    mode = macros.get("KONDOR_POD_MODE", DEDICATED).strip().lower() or DEDICATED
    priority_class = macros.get("KONDOR_HARVEST_PRIORITY_CLASS", "").strip()
    return mode, priority_class or HARVEST_PRIORITY_CLASS


def gpu_pod_devices(macros: Mapping[str, str]) -> str:
    """KONDOR_GPU_POD_DEVICES: `visible-devices` (the default) or `device-plugin`; another
    value raises ValueError naming the knob, the value and what is allowed."""
    upper = {name.upper(): value for name, value in macros.items()}
    value = upper.get(GPU_POD_DEVICES, "").strip().lower() or VISIBLE_DEVICES
    if value not in (VISIBLE_DEVICES, DEVICE_PLUGIN):
        raise ValueError(
            f"{GPU_POD_DEVICES} = {value!r}: must be {VISIBLE_DEVICES!r} or {DEVICE_PLUGIN!r}"
        )
    return value


def uses_device_plugin(gpus: SlotGpus, gpu_devices: str) -> bool:
    """Whether the pod asks the device plugin for its GPUs (`nvidia.com/gpu`): in
    `device-plugin` mode, or where the slot's GPUs cannot be named by UUID."""
    return gpu_devices == DEVICE_PLUGIN or not gpus.uuids


def harvest_priority_class(name: str = HARVEST_PRIORITY_CLASS) -> dict[str, Any]:
    """The PriorityClass harvest pods run at: below every default pod (0), never preempting."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": HARVEST_PRIORITY,
        "preemptionPolicy": "Never",
        "globalDefault": False,
        "description": "Kondor's harvest-mode job pods: evicted before anything else",
    }


def pod_name(job: ExecutionJob, claim_id: str) -> str:
    """`<job>-<hash of the claim>`: one pod per claim, so a rematched job gets a new one."""
    digest = hashlib.sha256(claim_id.encode()).hexdigest()[:8]
    return f"{job.metadata.name[:54]}-{digest}"


class AdsTooLargeError(ValueError):
    """A job whose ads do not fit in its Pod's annotations (`ANNOTATIONS_LIMIT`)."""

    def __init__(self, annotations: Mapping[str, str]) -> None:
        self.size = annotations_size(annotations)
        job_ad = _bytes(annotations.get(JOB_AD_ANNOTATION, ""))
        machine_ad = _bytes(annotations.get(MACHINE_AD_ANNOTATION, ""))
        ours = (JOB_AD_ANNOTATION, MACHINE_AD_ANNOTATION)
        others = annotations_size({k: v for k, v in annotations.items() if k not in ours})
        super().__init__(
            f"the job ad ({job_ad} bytes) and the machine ad ({machine_ad} bytes) make the "
            f"pod's annotations {self.size} bytes (the pod template's own: {others} bytes), "
            f"over Kubernetes' limit of {ANNOTATIONS_LIMIT} bytes (256 KiB) on an object's "
            "annotations; the job ad grows with the job's environment, arguments and custom "
            "attributes"
        )


def annotations_size(annotations: Mapping[str, str]) -> int:
    """The size the API server counts against `ANNOTATIONS_LIMIT`: every key and value,
    in bytes."""
    return sum(_bytes(key) + _bytes(value) for key, value in annotations.items())


def job_pod(
    job: ExecutionJob,
    claim_id: str,
    node: str,
    slot: Mapping[str, Any],
    *,
    job_ad_text: str,
    machine_ad_text: str,
    mode: str = DEDICATED,
    priority_class: str = HARVEST_PRIORITY_CLASS,
    run_as: tuple[int, int] = DEFAULT_RUN_AS,
    gpu_devices: str = VISIBLE_DEVICES,
    gpu_settings: GpuSettings = DEFAULT_GPU_SETTINGS,
) -> dict[str, Any]:
    """The Pod for `job` on `node`'s slot whose published ad is `slot`, sized by `mode`,
    carrying the job's ads, hardened to Pod Security `restricted` where its template says
    nothing (`podsecurity.harden`: non-root as `run_as`, the uid and gid, no privilege
    escalation, no capabilities, seccomp RuntimeDefault), given the slot's GPUs as
    `gpu_devices` says. Raises `AdsTooLargeError` when the ads do not fit."""
    assert job.spec.pod is not None
    template = copy.deepcopy(job.spec.pod.template)
    spec: dict[str, Any] = dict(template.get("spec") or {})
    metadata = _metadata(job, claim_id, node)
    given = template.get("metadata") or {}
    metadata["labels"] = {**(given.get("labels") or {}), **metadata["labels"]}
    metadata["annotations"] = {
        **(given.get("annotations") or {}),
        JOB_AD_ANNOTATION: job_ad_text,
        MACHINE_AD_ANNOTATION: machine_ad_text,
    }
    _check_size(metadata["annotations"])
    gpus = slot_gpus(slot)
    limits = _resources(slot)
    if not uses_device_plugin(gpus, gpu_devices):
        limits.pop(GPU_RESOURCE, None)
    requests = dict(limits)
    if mode == HARVEST:
        requests = {**HARVEST_REQUESTS, **{k: v for k, v in limits.items() if "gpu" in k}}
        spec["priorityClassName"] = priority_class
        spec.pop("priority", None)  # the admission plugin sets it from the class
    env = [
        {"name": "_CONDOR_JOB_AD", "value": f"{AD_MOUNT}/{JOB_AD_FILE}"},
        {"name": "_CONDOR_MACHINE_AD", "value": f"{AD_MOUNT}/{MACHINE_AD_FILE}"},
        {"name": "_CONDOR_SLOT", "value": str(slot.get("Name", ""))},
        *({"name": k, "value": v} for k, v in _gpu_variables(gpus, gpu_settings).items()),
    ]
    containers = []
    for given_container in spec.get("containers") or []:
        container = {k: v for k, v in given_container.items() if k not in _PROBES}
        container["resources"] = {"requests": dict(requests), "limits": dict(limits)}
        container["env"] = [*(container.get("env") or []), *env]
        mounts = container.get("volumeMounts") or []
        container["volumeMounts"] = [
            *mounts,
            {"name": ADS_VOLUME, "mountPath": AD_MOUNT, "readOnly": True},
        ]
        containers.append(container)
    spec["containers"] = containers
    spec["nodeName"] = node
    spec.setdefault("restartPolicy", "Never")
    spec["volumes"] = [
        *(spec.get("volumes") or []),
        {"name": ADS_VOLUME, "downwardAPI": {"items": [
            _ad_item(JOB_AD_FILE, JOB_AD_ANNOTATION),
            _ad_item(MACHINE_AD_FILE, MACHINE_AD_ANNOTATION),
        ]}},
    ]  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": harden(spec, run_as)}


def _gpu_variables(gpus: SlotGpus, settings: GpuSettings) -> dict[str, str]:
    """The starter's GPU variables; on a GPU machine NVIDIA_VISIBLE_DEVICES always, since an
    image may carry its own (CUDA images say `all`)."""
    env = gpu_environment(gpus, settings)
    if gpus.has_gpus:
        env["NVIDIA_VISIBLE_DEVICES"] = nvidia_visible_devices(gpus)
    return env


def with_job_ad(pod: Mapping[str, Any], job_ad_text: str) -> dict[str, Any]:
    """`pod` carrying `job_ad_text` as its job ad (PREPARE_JOB edited the ad before the Pod
    is created). Raises `AdsTooLargeError` when it no longer fits."""
    edited: dict[str, Any] = copy.deepcopy(dict(pod))
    annotations = edited["metadata"].setdefault("annotations", {})
    annotations[JOB_AD_ANNOTATION] = job_ad_text
    _check_size(annotations)
    return edited


def _ad_item(path: str, annotation: str) -> dict[str, Any]:
    """A downwardAPI file holding one annotation's value as it is (a subscripted fieldRef)."""
    return {"path": path, "fieldRef": {"fieldPath": f"metadata.annotations['{annotation}']"}}


def _check_size(annotations: Mapping[str, str]) -> None:
    if annotations_size(annotations) > ANNOTATIONS_LIMIT:
        raise AdsTooLargeError(annotations)


def _bytes(text: object) -> int:
    return len(str(text).encode())


def _metadata(job: ExecutionJob, claim_id: str, node: str) -> dict[str, Any]:
    return {
        "name": pod_name(job, claim_id),
        "namespace": job.metadata.namespace or "default",
        "labels": {
            JOB_LABEL: job.metadata.name,
            CLAIM_LABEL: hashlib.sha256(claim_id.encode()).hexdigest()[:16],
            EXECUTION_POINT_LABEL: node,
        },
        "ownerReferences": [
            {
                "apiVersion": "kondor.io/v1alpha1",
                "kind": "ExecutionJob",
                "name": job.metadata.name,
                "uid": job.metadata.uid or "",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }


def _resources(slot: Mapping[str, Any]) -> dict[str, str]:
    """The slot's resources as Kubernetes quantities (Memory is MiB in the ad)."""
    out = {"cpu": str(_whole(slot.get("Cpus", 1))), "memory": f"{_whole(slot.get('Memory', 0))}Mi"}
    gpus = _whole(slot.get("GPUs", 0))
    if gpus:
        out[GPU_RESOURCE] = str(gpus)
    return out


def _whole(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return int(value) if float(value).is_integer() else value
