"""Pydantic models of Kondor's custom resources: the single source of truth for the CRDs."""

from kondor_core.api.base import API_VERSION, GROUP, VERSION, ClassAdExpr, Model
from kondor_core.api.executionpoint import (
    ExecutionPointSpec,
    ExecutionPointStatus,
    ResolvedPolicy,
    SlotStatus,
)
from kondor_core.api.job import ExecutionJobSpec
from kondor_core.api.machine import Gpu, Machine
from kondor_core.api.manifest import (
    ExecutionJob,
    ExecutionPoint,
    InvalidObjectError,
    ObjectMeta,
    SlotPolicy,
    describe_errors,
    validate,
)
from kondor_core.api.quantity import Unit, format_quantity, parse_quantity, to_unit
from kondor_core.api.slotpolicy import (
    POLICY_EXPRESSIONS,
    CronJobSpec,
    LabelSelector,
    Reserved,
    SlotPolicySpec,
    SlotTypeSpec,
)

__all__ = [
    "API_VERSION",
    "GROUP",
    "POLICY_EXPRESSIONS",
    "VERSION",
    "ClassAdExpr",
    "CronJobSpec",
    "ExecutionJob",
    "ExecutionJobSpec",
    "ExecutionPoint",
    "ExecutionPointSpec",
    "ExecutionPointStatus",
    "Gpu",
    "InvalidObjectError",
    "LabelSelector",
    "Machine",
    "Model",
    "ObjectMeta",
    "Reserved",
    "ResolvedPolicy",
    "SlotPolicy",
    "SlotPolicySpec",
    "SlotStatus",
    "SlotTypeSpec",
    "Unit",
    "describe_errors",
    "format_quantity",
    "parse_quantity",
    "to_unit",
    "validate",
]
