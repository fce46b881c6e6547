"""Pydantic models of Kondor's custom resources: the single source of truth for the CRDs.

With them, the Kubernetes conventions every edge shares (`kondor_core.api.meta`: group,
version, plurals, times, merge patches, where the kubeconfig is; `kondor_core.api.conditions`)
and the one parser of machine files (`parse_machine_file`).
"""

from kondor_core.api.base import ClassAdExpr, Condition, Model
from kondor_core.api.conditions import (
    condition,
    condition_status,
    merge_conditions,
    set_condition,
)
from kondor_core.api.executionpoint import (
    ExecutionPointSpec,
    ExecutionPointStatus,
    OperatorStatus,
    ResolvedPolicy,
    SlotStatus,
)
from kondor_core.api.job import ExecutionJobSpec
from kondor_core.api.machine import Gpu, Machine, parse_machine_file
from kondor_core.api.manifest import (
    ExecutionJob,
    ExecutionPoint,
    InvalidObjectError,
    ObjectMeta,
    OwnerReference,
    SlotPolicy,
    describe_errors,
    validate,
)
from kondor_core.api.meta import (
    API_VERSION,
    EXECUTION_JOBS,
    EXECUTION_POINTS,
    GROUP,
    MERGE_PATCH,
    SLOT_POLICIES,
    VERSION,
    KubeConfigSource,
    apply_merge_patch,
    format_micro_time,
    format_time,
    kube_config_source,
    merge_patch,
    model_patch,
    parse_time,
)
from kondor_core.api.quantity import Unit, format_quantity, parse_quantity, to_unit
from kondor_core.api.slotpolicy import (
    POLICY_EXPRESSIONS,
    CronJobSpec,
    LabelSelector,
    Reserved,
    SlotPolicySpec,
    SlotPolicyStatus,
    SlotTypeSpec,
)

__all__ = [
    "API_VERSION",
    "EXECUTION_JOBS",
    "EXECUTION_POINTS",
    "GROUP",
    "MERGE_PATCH",
    "POLICY_EXPRESSIONS",
    "SLOT_POLICIES",
    "VERSION",
    "ClassAdExpr",
    "Condition",
    "CronJobSpec",
    "ExecutionJob",
    "ExecutionJobSpec",
    "ExecutionPoint",
    "ExecutionPointSpec",
    "ExecutionPointStatus",
    "Gpu",
    "InvalidObjectError",
    "KubeConfigSource",
    "LabelSelector",
    "Machine",
    "Model",
    "ObjectMeta",
    "OperatorStatus",
    "OwnerReference",
    "Reserved",
    "ResolvedPolicy",
    "SlotPolicy",
    "SlotPolicySpec",
    "SlotPolicyStatus",
    "SlotStatus",
    "SlotTypeSpec",
    "Unit",
    "apply_merge_patch",
    "condition",
    "condition_status",
    "describe_errors",
    "format_micro_time",
    "format_quantity",
    "format_time",
    "kube_config_source",
    "merge_conditions",
    "merge_patch",
    "model_patch",
    "parse_machine_file",
    "parse_quantity",
    "parse_time",
    "set_condition",
    "to_unit",
    "validate",
]
