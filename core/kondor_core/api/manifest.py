"""Kubernetes manifests of Kondor's kinds, and readable validation errors."""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kondor_core.api.base import Model
from kondor_core.api.executionpoint import ExecutionPointSpec, ExecutionPointStatus
from kondor_core.api.job import ExecutionJobSpec, ExecutionJobStatus
from kondor_core.api.slotpolicy import SlotPolicySpec, SlotPolicyStatus
from kondor_core.errors import KondorError


class OwnerReference(BaseModel):
    """metav1.OwnerReference: the object whose deletion deletes this one."""

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)

    api_version: str = Field(alias="apiVersion")
    kind: str
    name: str
    uid: str


class ObjectMeta(BaseModel):
    """The part of metadata Kondor reads; the API server's other fields pass through."""

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)

    name: str = Field(min_length=1)
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = Field(default=None, alias="resourceVersion")
    labels: dict[str, str] = Field(default_factory=dict)
    creation_timestamp: str | None = Field(default=None, alias="creationTimestamp")
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_references: list[OwnerReference] = Field(default_factory=list, alias="ownerReferences")
    deletion_timestamp: str | None = Field(default=None, alias="deletionTimestamp")


SpecT = TypeVar("SpecT", bound=Model)


class _Object(Model, Generic[SpecT]):
    api_version: Literal["kondor.io/v1alpha1"] = "kondor.io/v1alpha1"
    metadata: ObjectMeta
    spec: SpecT
    status: dict[str, Any] | None = None


class SlotPolicy(_Object[SlotPolicySpec]):
    kind: Literal["SlotPolicy"] = "SlotPolicy"
    status: SlotPolicyStatus | None = None  # type: ignore[assignment]


class ExecutionJob(_Object[ExecutionJobSpec]):
    kind: Literal["ExecutionJob"] = "ExecutionJob"
    status: ExecutionJobStatus | None = None  # type: ignore[assignment]


class ExecutionPoint(_Object[ExecutionPointSpec]):
    kind: Literal["ExecutionPoint"] = "ExecutionPoint"
    status: ExecutionPointStatus | None = None  # type: ignore[assignment]


class InvalidObjectError(KondorError):
    """A manifest or model that failed validation; `problems` lists `path: message` lines."""

    def __init__(self, what: str, problems: list[str]) -> None:
        super().__init__(f"{what} is invalid:\n  " + "\n  ".join(problems))
        self.what = what
        self.problems = problems


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif out:
            out += f".{part}"
        else:
            out = str(part)
    return out or "(top level)"


def describe_errors(err: ValidationError, *, prefix: str = "") -> list[str]:
    """One line per problem: the field path, the offending value, and pydantic's message."""
    lines = []
    for problem in err.errors(include_url=False):
        loc = tuple(part for part in problem["loc"] if not _is_union_tag(part))
        path = _path(((prefix,) if prefix else ()) + loc)
        message = str(problem["msg"]).removeprefix("Value error, ")
        head, sep, rest = message.partition(": ")
        if sep and " " not in head and head in path:  # our validators name the field too
            message = rest
        if path == "(top level)" and sep and " " not in head:
            path, message = head, rest  # a model validator naming its own field
        value = problem.get("input")
        shown = "" if isinstance(value, dict | list) or value is None else f" (got {value!r})"
        if shown and repr(value) in message:
            shown = ""
        lines.append(f"{path}: {message}{shown}")
    return lines


def _is_union_tag(part: int | str) -> bool:
    # pydantic names the union member it tried ("str", "function-after[...]"); users never wrote it.
    return isinstance(part, str) and (
        part in {"str", "int", "float", "bool"} or "[" in part or part.startswith("dict[")
    )


M = TypeVar("M", bound=BaseModel)


def validate(model: type[M], data: object, *, what: str, prefix: str = "") -> M:
    """Validate `data` as `model`, raising InvalidObjectError with readable lines."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise InvalidObjectError(what, describe_errors(err, prefix=prefix)) from None
