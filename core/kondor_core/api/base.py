"""Shared model configuration: frozen, strict about unknown fields, camelCase in YAML."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo
from pydantic.alias_generators import to_camel

from kondor_core.api.meta import API_VERSION, GROUP, VERSION
from kondor_core.classads import check_expr

__all__ = ["API_VERSION", "GROUP", "VERSION", "ClassAdExpr", "Condition", "Model", "Quantity"]


class Model(BaseModel):
    """Base of every API model: immutable, unknown fields rejected, camelCase aliases."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        use_enum_values=True,
    )

    def dump(self) -> dict[str, Any]:
        """The model as its YAML/JSON form: camelCase keys, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def _check_classad(value: str, info: ValidationInfo) -> str:
    return check_expr(value, field=info.field_name or "expression")


#: A string holding a ClassAd expression, parsed by classad2 at validation.
ClassAdExpr = Annotated[
    str,
    AfterValidator(_check_classad),
    Field(json_schema_extra={"x-kondor-classad": True}),
]

#: A Kubernetes quantity (`16Gi`) or a bare number in the field's HTCondor unit.
Quantity = Annotated[
    int | float | str,
    Field(json_schema_extra={"x-kubernetes-int-or-string": True}),
]


# Built and updated by type with kondor_core.api.conditions.
class Condition(Model):
    """A Kubernetes status condition (metav1.Condition)."""

    type: str
    status: str = Field(description="True, False or Unknown")
    reason: str = ""
    message: str = ""
    observed_generation: int | None = None
    last_transition_time: str | None = Field(
        default=None, description="When status last changed (RFC 3339)"
    )
