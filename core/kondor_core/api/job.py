"""ExecutionJob: a job with its requests, requirements, rank and runtime."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from kondor_core.api.base import ClassAdExpr, Condition, Model, Quantity
from kondor_core.api.quantity import Unit, to_unit


class ExecutionJobSpec(Model):
    """spec of an ExecutionJob (kondor.io/v1alpha1). Requests follow condor_submit's request_*."""

    owner: str | None = Field(default=None, description="Set by admission to the submitting user")
    request_cpus: Annotated[int, Field(ge=0)] = 1
    request_memory: Annotated[Quantity, Field(description="a bare number means MiB")] = 128
    request_disk: Annotated[Quantity, Field(description="a bare number means KiB")] = 1024
    request_gpus: Annotated[int, Field(ge=0)] = 0
    request_resources: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict, description="Custom resources: name -> amount (Request<Name>)"
    )
    require_gpus: ClassAdExpr | None = Field(
        default=None, description="RequireGPUs: constraint on each assigned GPU's property ad"
    )
    requirements: ClassAdExpr | None = None
    rank: ClassAdExpr | None = None
    priority: int = 0
    runtime: Literal["pod", "apptainer"] = "pod"
    attributes: dict[str, ClassAdExpr] = Field(
        default_factory=dict, description="Extra job ClassAd attributes (name -> expression)"
    )

    @field_validator("request_memory")
    @classmethod
    def _mib(cls, value: int | float | str) -> int | float | str:
        to_unit(value, Unit.MIB, field="requestMemory")
        return value

    @field_validator("request_disk")
    @classmethod
    def _kib(cls, value: int | float | str) -> int | float | str:
        to_unit(value, Unit.KIB, field="requestDisk")
        return value

    @property
    def request_memory_mib(self) -> int:
        return to_unit(self.request_memory, Unit.MIB, field="requestMemory")

    @property
    def request_disk_kib(self) -> int:
        return to_unit(self.request_disk, Unit.KIB, field="requestDisk")


class ExecutionJobStatus(Model):
    """status of an ExecutionJob: the operator writes the match, the agent `execution`."""

    job_status: Literal["Idle", "Running", "Suspended", "Held", "Completed", "Removed"] = "Idle"
    execution_point: str | None = None
    slot: str | None = None
    hold_reason: str | None = None
    conditions: list[Condition] = Field(default_factory=list)
    execution: dict[str, Any] = Field(default_factory=dict)
