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

Job pods have no probes: the job's exit is its health. The job and machine ads are
mounted from a ConfigMap at /etc/kondor, where `_CONDOR_JOB_AD` and `_CONDOR_MACHINE_AD`
point, and `_CONDOR_SLOT` names the slot, as HTCondor's starter sets them.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from typing import Any

from kondor_core.api import EXECUTION_POINT_LABEL, ExecutionJob

#: Labels of a job's pod and ConfigMap: the job's name and the claim it runs on.
JOB_LABEL = "kondor.io/job"
CLAIM_LABEL = "kondor.io/claim"
AD_MOUNT = "/etc/kondor"
DEDICATED = "dedicated"
HARVEST = "harvest"
#: The PriorityClass of harvest pods (the chart and the dev cluster create it).
HARVEST_PRIORITY_CLASS = "kondor-harvest"
HARVEST_PRIORITY = -100
#: A harvest pod's requests: enough to be Burstable (never BestEffort), nothing to reserve.
HARVEST_REQUESTS = {"cpu": "1m", "memory": "1Mi"}
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def pod_mode(macros: Mapping[str, str]) -> tuple[str, str]:
    """The node's pod mode and harvest PriorityClass from its policy's knobs (the compiler
    has refused a mode that is neither)."""
    mode = macros.get("KONDOR_POD_MODE", DEDICATED).strip().lower() or DEDICATED
    priority_class = macros.get("KONDOR_HARVEST_PRIORITY_CLASS", "").strip()
    return mode, priority_class or HARVEST_PRIORITY_CLASS


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


def ads_config_map(
    job: ExecutionJob, claim_id: str, node: str, job_ad_text: str, machine_ad_text: str
) -> dict[str, Any]:
    """The ConfigMap holding `.job.ad` and `.machine.ad` for the job's pod."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(job, claim_id, node),
        "data": {".job.ad": job_ad_text, ".machine.ad": machine_ad_text},
    }


def job_pod(
    job: ExecutionJob,
    claim_id: str,
    node: str,
    slot: Mapping[str, Any],
    *,
    mode: str = DEDICATED,
    priority_class: str = HARVEST_PRIORITY_CLASS,
) -> dict[str, Any]:
    """The Pod for `job` on `node`'s slot whose published ad is `slot`, sized by `mode`."""
    assert job.spec.pod is not None
    template = copy.deepcopy(job.spec.pod.template)
    spec: dict[str, Any] = dict(template.get("spec") or {})
    metadata = _metadata(job, claim_id, node)
    given = template.get("metadata") or {}
    metadata["labels"] = {**(given.get("labels") or {}), **metadata["labels"]}
    if given.get("annotations"):
        metadata["annotations"] = dict(given["annotations"])
    limits = _resources(slot)
    requests = dict(limits)
    if mode == HARVEST:
        requests = {**HARVEST_REQUESTS, **{k: v for k, v in limits.items() if "gpu" in k}}
        spec["priorityClassName"] = priority_class
        spec.pop("priority", None)  # the admission plugin sets it from the class
    env = [
        {"name": "_CONDOR_JOB_AD", "value": f"{AD_MOUNT}/.job.ad"},
        {"name": "_CONDOR_MACHINE_AD", "value": f"{AD_MOUNT}/.machine.ad"},
        {"name": "_CONDOR_SLOT", "value": str(slot.get("Name", ""))},
    ]
    containers = []
    for given_container in spec.get("containers") or []:
        container = {k: v for k, v in given_container.items() if k not in _PROBES}
        container["resources"] = {"requests": dict(requests), "limits": dict(limits)}
        container["env"] = [*(container.get("env") or []), *env]
        mounts = container.get("volumeMounts") or []
        container["volumeMounts"] = [
            *mounts,
            {"name": "kondor-ads", "mountPath": AD_MOUNT, "readOnly": True},
        ]
        containers.append(container)
    spec["containers"] = containers
    spec["nodeName"] = node
    spec.setdefault("restartPolicy", "Never")
    spec["volumes"] = [
        *(spec.get("volumes") or []),
        {"name": "kondor-ads", "configMap": {"name": pod_name(job, claim_id)}},
    ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


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
        out["nvidia.com/gpu"] = str(gpus)
    return out


def _whole(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return int(value) if float(value).is_integer() else value
