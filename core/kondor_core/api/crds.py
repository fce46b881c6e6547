"""CustomResourceDefinitions generated from the pydantic models (the single source of truth).

pydantic's JSON schema is turned into a Kubernetes *structural* schema: `$ref`s
inlined, `Optional` unions folded away, quantities made int-or-string, other
unions (a share given as text or as a map) left to admission with
`x-kubernetes-preserve-unknown-fields`, and pydantic-only keys (titles,
defaults, `additionalProperties: false`) dropped: the API server prunes
unknown fields, and the webhook validates with the same models.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from kondor_core.api.codclaim import COD_CLAIMS, CodClaimSpec, CodClaimStatus
from kondor_core.api.executionpoint import ExecutionPointSpec, ExecutionPointStatus
from kondor_core.api.job import ExecutionJobSpec, ExecutionJobStatus
from kondor_core.api.meta import EXECUTION_JOBS, EXECUTION_POINTS, GROUP, SLOT_POLICIES, VERSION
from kondor_core.api.pool import POOLS, PoolSpec, PoolStatus
from kondor_core.api.slotpolicy import SlotPolicySpec, SlotPolicyStatus

_DROP = {"title", "default", "additionalProperties", "$defs", "x-kondor-classad"}


@dataclass(frozen=True)
class Kind:
    kind: str
    plural: str
    scope: str
    spec: type[BaseModel]
    status: type[BaseModel] | None
    short_names: tuple[str, ...] = ()
    columns: tuple[dict[str, Any], ...] = ()
    description: str = ""
    extra_root: dict[str, Any] = field(default_factory=dict)
    #: Fields usable in field selectors (`kubectl get --field-selector`, watches).
    selectable: tuple[str, ...] = ()


def _column(
    name: str, path: str, kind: str = "string", priority: int = 0, **extra: Any
) -> dict[str, Any]:
    column = {"name": name, "type": kind, "jsonPath": path, **extra}
    if priority:
        column["priority"] = priority
    return column


_AGE = _column("Age", ".metadata.creationTimestamp", "date")

KINDS: tuple[Kind, ...] = (
    Kind(
        "SlotPolicy",
        SLOT_POLICIES,
        "Cluster",
        SlotPolicySpec,
        SlotPolicyStatus,
        ("sp",),
        (
            _column("Priority", ".spec.priority", "integer"),
            _column("Nodes", ".status.selectedNodes", "integer"),
            _column("Valid", ".status.conditions[?(@.type=='Valid')].status"),
            _AGE,
        ),
        "Startd configuration (slot layout and policy) for the nodes its nodeSelector picks.",
    ),
    Kind(
        "ExecutionPoint",
        EXECUTION_POINTS,
        "Cluster",
        ExecutionPointSpec,
        ExecutionPointStatus,
        # Not `ep`: that is core Endpoints' short name, which wins, and kubectl would warn
        # on every `kubectl get ep` in the cluster.
        ("xp",),
        (
            _column("Node", ".spec.nodeName"),
            _column("Slots", ".status.summary.slots", "integer"),
            _column("Claimed", ".status.summary.claimed", "integer"),
            _column("Unclaimed", ".status.summary.unclaimed", "integer"),
            _column("Owner", ".status.summary.owner", "integer"),
            _column("Cpus", ".status.summary.cpus", "number"),
            _column("Memory", ".status.summary.memory"),
            _column("GPUs", ".status.summary.gpus", "integer"),
            _column("State", ".status.summary.state"),
            _column("Drain", ".status.drain.state"),
            # The low power state every slot agrees on (power management), empty otherwise.
            _column("Sleep", ".status.power.sleepState"),
            _column("Policy", ".spec.policy.name", priority=1),
            _column("Heartbeat", ".status.lastHeartbeat", "date", priority=1),
            _AGE,
        ),
        "A node as an HTCondor-style execution point; status.slots are its slot ads.",
    ),
    Kind(
        "ExecutionJob",
        EXECUTION_JOBS,
        "Namespaced",
        ExecutionJobSpec,
        ExecutionJobStatus,
        ("ej",),
        (
            _column("Owner", ".spec.owner"),
            _column("Status", ".status.jobStatus"),
            _column("Priority", ".spec.priority", "integer"),
            _column("ExecutionPoint", ".status.executionPoint"),
            _column("Slot", ".status.execution.slot"),
            _column("Cpus", ".spec.requestCpus", "integer", priority=1),
            _column("Memory", ".spec.requestMemory", priority=1),
            _column("Exit", ".status.exitCode", "integer", priority=1),
            _AGE,
        ),
        "A job: requests, requirements, rank, priority and a runtime (process, apptainer or pod).",
        # The agent watches its node's jobs by status.executionPoint: the match needs no
        # label write of its own (issue 16). Kubernetes 1.31 or later.
        selectable=(".status.executionPoint", ".status.jobStatus", ".spec.owner"),
    ),
    Kind(
        "CodClaim",
        COD_CLAIMS,
        "Namespaced",
        CodClaimSpec,
        CodClaimStatus,
        ("cod",),
        (
            _column("Owner", ".spec.owner"),
            _column("ExecutionPoint", ".spec.executionPoint"),
            _column("Slot", ".status.slot"),
            _column("ID", ".status.codId"),
            _column("ClaimState", ".status.state"),
            _column("Want", ".spec.state"),
            _column("Keyword", ".status.keyword"),
            _column("LeaseExpiry", ".status.leaseExpiry", "date"),
            _column("ClaimID", ".status.claimId", priority=1),
            _column("Exit", ".status.exitCode", "integer", priority=1),
            _column("Reason", ".status.reason", priority=1),
            _AGE,
        ),
        "A Computing On Demand claim on one slot and the application it runs "
        "(condor_cod); deleting it releases the claim.",
    ),
    Kind(
        "Pool",
        POOLS,
        "Cluster",
        PoolSpec,
        PoolStatus,
        (),
        (
            _column("Interval", ".spec.negotiatorInterval", "integer"),
            _column("MatchTimeout", ".spec.matchTimeout", "integer"),
            _column("Halflife", ".spec.priorityHalflife", "number", priority=1),
            _column("LastCycle", ".status.lastCycle.time", "date", priority=1),
            _AGE,
        ),
        "The negotiator's settings and accountant; the operator reads only the Pool default.",
    ),
)


def structural(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Turn one pydantic JSON-schema node into a structural OpenAPI v3 node."""
    defs = defs if defs is not None else schema.get("$defs", {})
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return structural(merged, defs)
    out: dict[str, Any] = {}
    if "anyOf" in schema:
        options = [option for option in schema["anyOf"] if option.get("type") != "null"]
        if len(options) == 1:
            return structural(
                {**{k: v for k, v in schema.items() if k != "anyOf"}, **options[0]}, defs
            )
        if schema.get("x-kubernetes-int-or-string"):
            out["x-kubernetes-int-or-string"] = True
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        else:
            # Unions such as `text or map` are validated by the admission webhook.
            out["x-kubernetes-preserve-unknown-fields"] = True
        if "description" in schema:
            out["description"] = schema["description"]
        return out
    for key, value in schema.items():
        if key in _DROP or key == "anyOf":
            continue
        if key == "properties":
            out[key] = {name: structural(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out[key] = structural(value, defs)
        else:
            # A copy: a model used twice would share this value, and YAML would alias it.
            out[key] = copy.deepcopy(value)
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict) and "properties" not in schema:
        out["additionalProperties"] = structural(additional, defs)
    elif additional is True or (
        schema.get("type") == "object" and "properties" not in schema and additional is None
    ):
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def crd(kind: Kind) -> dict[str, Any]:
    """The CustomResourceDefinition of `kind`, as a manifest."""
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": structural(kind.spec.model_json_schema(by_alias=True)),
    }
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": {
                "type": "object",
                "description": kind.description,
                "required": ["spec"],
                "properties": properties,
            }
        },
        "additionalPrinterColumns": list(kind.columns),
    }
    if kind.selectable:
        version["selectableFields"] = [{"jsonPath": path} for path in kind.selectable]
    if kind.status is not None:
        properties["status"] = structural(kind.status.model_json_schema(by_alias=True))
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{kind.plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "kondor"},
        },
        "spec": {
            "group": GROUP,
            "scope": kind.scope,
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.kind.lower(),
                "shortNames": list(kind.short_names),
                "categories": ["kondor"],
            },
            "versions": [version],
        },
    }


def structural_problems(schema: Any, path: str = "openAPIV3Schema") -> list[str]:
    """Where `schema` breaks the rules of a Kubernetes structural schema (empty when it is one).

    The rules (Kubernetes docs, "Specifying a structural schema"): every node has a
    type unless it is int-or-string or preserves unknown fields; junctors (anyOf,
    allOf, oneOf, not) carry no type, description, default, additionalProperties or
    nullable, except the int-or-string pattern; properties and additionalProperties
    are exclusive; no `$ref`; metadata only restricts name and generateName.
    """
    problems: list[str] = []
    if not isinstance(schema, dict):
        return [f"{path}: not an object"]
    if "$ref" in schema:
        problems.append(f"{path}: $ref is not allowed")
    exempt = schema.get("x-kubernetes-int-or-string") or schema.get(
        "x-kubernetes-preserve-unknown-fields"
    )
    if not schema.get("type") and not exempt:
        problems.append(f"{path}: no type")
    if "properties" in schema and "additionalProperties" in schema:
        problems.append(f"{path}: both properties and additionalProperties")
    if schema.get("additionalProperties") is False:
        problems.append(f"{path}: additionalProperties: false is not allowed")
    for junctor in ("anyOf", "allOf", "oneOf", "not"):
        branches = schema.get(junctor)
        if branches is None:
            continue
        for index, branch in enumerate(branches if isinstance(branches, list) else [branches]):
            int_or_string = schema.get("x-kubernetes-int-or-string") and set(branch) == {"type"}
            for key in ("type", "description", "default", "additionalProperties", "nullable"):
                if key in branch and not int_or_string:
                    problems.append(f"{path}.{junctor}[{index}]: sets {key}")
    for name, sub in schema.get("properties", {}).items():
        problems += structural_problems(sub, f"{path}.properties.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        problems += structural_problems(
            schema["additionalProperties"], f"{path}.additionalProperties"
        )
    if "items" in schema:
        problems += structural_problems(schema["items"], f"{path}.items")
    elif schema.get("type") == "array":
        problems.append(f"{path}: array without items")
    metadata = schema.get("properties", {}).get("metadata") if path == "openAPIV3Schema" else None
    if metadata and set(metadata.get("properties", {})) - {"name", "generateName"}:
        problems.append(f"{path}.properties.metadata: restricts more than name and generateName")
    for key in schema:
        if key.startswith("x-") and not key.startswith("x-kubernetes-"):
            problems.append(f"{path}: unknown extension {key}")
    return problems


def all_crds() -> list[dict[str, Any]]:
    return [crd(kind) for kind in KINDS]
