"""A JSON-able view of an EffectivePolicy (`kondor policy compile`) and its stable hash."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kondor_core.config.effective import EffectivePolicy, SlotTypeDef
from kondor_core.config.shares import AUTO, ShareSpec
from kondor_core.cron.jobs import CronJob


def shares_text(shares: ShareSpec) -> str:
    """The shares in SLOT_TYPE_<N> syntax, one canonical spelling (`cpus=2, memory=50%, 1/4`).

    Reading the text back with parse_shares gives the same shares.
    """
    parts = [f"{name}={share.text}" for name, share in shares.shares.items()]
    if shares.default != AUTO or not parts:
        parts.append(shares.default.text)
    return ", ".join(parts)


def _slot_type(slot_type: SlotTypeDef) -> dict[str, Any]:
    rendered: dict[str, Any] = {
        "id": slot_type.id,
        "count": slot_type.count,
        "partitionable": slot_type.partitionable,
        "resources": shares_text(slot_type.shares),
        "consumptionPolicy": slot_type.consumption_policy,
    }
    if slot_type.consumption:
        rendered["consumption"] = dict(slot_type.consumption)
    return rendered


def _cron_job(job: CronJob) -> dict[str, Any]:
    rendered: dict[str, Any] = {
        "name": job.name,
        "executable": job.executable,
        "args": list(job.args),
        "mode": str(job.mode),
        "period": job.period,
        "prefix": job.prefix,
        "slots": list(job.slots),
        "kill": job.kill,
        "reconfigRerun": job.reconfig_rerun,
        "reconfig": job.reconfig,
        "jobLoad": job.job_load,
        "env": dict(job.env),
    }
    if job.cwd is not None:
        rendered["cwd"] = job.cwd
    if job.condition is not None:
        rendered["condition"] = job.condition
    return rendered


def render_policy(policy: EffectivePolicy) -> dict[str, Any]:
    """The effective policy as plain data: camelCase keys, expressions as strings."""
    rendered: dict[str, Any] = {
        "slotTypes": [_slot_type(slot_type) for slot_type in policy.slot_types],
        "numCpus": policy.num_cpus,
        "memory": policy.memory_mib,
        "reserved": {"cpus": policy.reserved_cpus, "memory": policy.reserved_memory_mib},
        "machineResources": dict(policy.machine_resources),
        "machineResourceIds": {k: list(v) for k, v in policy.machine_resource_ids.items()},
        "machineResourceNames": (
            None if policy.machine_resource_names is None else list(policy.machine_resource_names)
        ),
        "inventoryResources": list(policy.inventory_resources),
        "consumptionPolicy": policy.consumption_policy,
        "expressions": dict(policy.expressions),
        "attributes": dict(policy.startd_attrs),
        "slotAttributes": {str(slot): dict(a) for slot, a in sorted(policy.slot_attrs.items())},
        "modifyRequest": dict(policy.modify_request),
        "macros": dict(policy.macros),
        "templates": list(policy.templates),
        **_cron_rendered(policy),
        "warnings": list(policy.warnings),
    }
    return rendered


def _cron_rendered(policy: EffectivePolicy) -> dict[str, Any]:
    """The cron part, only when the policy has one: policies without cron keep their hash."""
    if not policy.cron_jobs:
        return {}
    settings = policy.cron
    return {
        "cron": [_cron_job(job) for job in policy.cron_jobs],
        "cronSettings": {
            "maxJobLoad": settings.max_job_load,
            "logNonZeroExit": settings.log_non_zero_exit,
            "autopublish": str(settings.autopublish),
        },
    }


def policy_hash(policy: EffectivePolicy) -> str:
    """A stable sha256 of what the policy does, for the operator to pin.

    Warnings are left out: they name snippet lines, and moving a comment does not
    change what a node does.
    """
    rendered = render_policy(policy)
    del rendered["warnings"]
    canonical = json.dumps(rendered, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()
