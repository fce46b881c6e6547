"""Shared model configuration: frozen, strict about unknown fields, camelCase in YAML."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo
from pydantic.alias_generators import to_camel

from kondor_core.api.meta import API_VERSION, GROUP, VERSION
from kondor_core.classads import check_expr
from kondor_core.inputs import (
    CLASSAD_INT_MAX,
    InputError,
    check_attribute_name,
    check_classad_int,
    check_number,
)

__all__ = [
    "API_VERSION",
    "GROUP",
    "IN_CLASSAD_RANGE",
    "VERSION",
    "AdValue",
    "AttributeName",
    "ClassAdExpr",
    "ClassAdInt",
    "Condition",
    "Model",
    "Quantity",
    "ResourceAmount",
]


class Model(BaseModel):
    """Base of every API model: immutable, unknown fields rejected, camelCase aliases; NaN
    and infinity refused where a number is expected (JSON and ClassAds have neither)."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        use_enum_values=True,
        allow_inf_nan=False,
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


def _field(info: ValidationInfo, default: str) -> str:
    """The field as the YAML names it (camelCase)."""
    return to_camel(info.field_name) if info.field_name else default


def _classad_int(value: int, info: ValidationInfo) -> int:
    return check_classad_int(value, field=_field(info, "value"))


def _finite(value: object, info: ValidationInfo) -> object:
    # Before a union's members, so NaN is refused once, not by every member in turn.
    if isinstance(value, float) and not math.isfinite(value):
        check_number(value, field=_field(info, "value"))
    return value


def _attribute_name(name: str, info: ValidationInfo) -> str:
    return check_attribute_name(name, field=_field(info, "name"))


def _ad_value(value: bool | int | float | str, info: ValidationInfo) -> bool | int | float | str:
    check_number(value, field=_field(info, "value"))
    return value


def _resource_amount(value: float, info: ValidationInfo) -> float:
    if value > CLASSAD_INT_MAX:
        raise InputError(
            f"{_field(info, 'amount')}: {value!r} is too large; a resource amount is at "
            f"most {CLASSAD_INT_MAX} (2^63 - 1), as a ClassAd integer holds it"
        )
    return value


#: An amount of a custom resource (counted in whole units in slot ads): 0 to 2^63 - 1.
ResourceAmount = Annotated[float, Field(ge=0), AfterValidator(_resource_amount)]

#: Holds an integer to what a ClassAd integer is: 64-bit, as HTCondor holds it. Put it
#: after any Field(ge=...) so the CRD schema keeps its minimum.
IN_CLASSAD_RANGE = AfterValidator(_classad_int)

#: An integer that becomes a ClassAd integer.
ClassAdInt = Annotated[int, IN_CLASSAD_RANGE]

#: A ClassAd attribute name (a map key that becomes an attribute of an ad).
AttributeName = Annotated[str, AfterValidator(_attribute_name)]

#: A literal value of an ad attribute: a finite number, a 64-bit integer, a string or a bool.
AdValue = Annotated[bool | int | float | str, BeforeValidator(_finite), AfterValidator(_ad_value)]

#: A Kubernetes quantity (`16Gi`) or a bare number in the field's HTCondor unit.
Quantity = Annotated[
    int | float | str,
    BeforeValidator(_finite),
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
