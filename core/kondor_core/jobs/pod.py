"""The Pod of a `pod` job: bound to the node, owned by its ExecutionJob, sized by its slot.

The agent creates it when the startd starts the job on a slot (docs/jobs.md). Requests and
limits are the slot's resources (DESIGN.md's `dedicated` mode: requests = limits = the
slot): Cpus cores, Memory MiB, and GPUs as `nvidia.com/gpu`. The job and machine ads are
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


def job_pod(job: ExecutionJob, claim_id: str, node: str, slot: Mapping[str, Any]) -> dict[str, Any]:
    """The Pod for `job` on `node`'s slot whose published ad is `slot`."""
    assert job.spec.pod is not None
    template = copy.deepcopy(job.spec.pod.template)
    spec: dict[str, Any] = dict(template.get("spec") or {})
    metadata = _metadata(job, claim_id, node)
    given = template.get("metadata") or {}
    metadata["labels"] = {**(given.get("labels") or {}), **metadata["labels"]}
    if given.get("annotations"):
        metadata["annotations"] = dict(given["annotations"])
    resources = _resources(slot)
    env = [
        {"name": "_CONDOR_JOB_AD", "value": f"{AD_MOUNT}/.job.ad"},
        {"name": "_CONDOR_MACHINE_AD", "value": f"{AD_MOUNT}/.machine.ad"},
        {"name": "_CONDOR_SLOT", "value": str(slot.get("Name", ""))},
    ]
    containers = []
    for given_container in spec.get("containers") or []:
        container = dict(given_container)
        container["resources"] = {"requests": dict(resources), "limits": dict(resources)}
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
