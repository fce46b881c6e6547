"""The machine description: what a node has, as detected or as written in a machine file.

The same YAML is the input of `kondor simulate --machine`, the output of
`kondor-agent detect`, and the description of a simulated node in the
development cluster.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from kondor_core.api.base import (
    IN_CLASSAD_RANGE,
    AdValue,
    AttributeName,
    Model,
    Quantity,
    ResourceAmount,
)
from kondor_core.api.manifest import InvalidObjectError, validate
from kondor_core.api.quantity import Unit, to_unit
from kondor_core.inputs import InputError, check_host_name, check_label, load_yaml

GpuProperty = AdValue


class Gpu(Model):
    """One GPU as `condor_gpu_discovery -nested` describes it: its id and its property ad."""

    id: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")]
    properties: dict[AttributeName, GpuProperty] = Field(default_factory=dict)


class Machine(Model):
    """A node's detected resources and facts (HTCondor's Detected*/Total* inputs)."""

    name: Annotated[str, Field(min_length=1, description="Machine name; slots are slotN@name")]
    cpus: Annotated[
        int, Field(ge=1, description="Detected CPU cores (DetectedCpus)"), IN_CLASSAD_RANGE
    ]
    memory: Annotated[Quantity, Field(description="Physical memory; a bare number means MiB")]
    disk: Annotated[
        Quantity, Field(description="Execute partition size; a bare number means KiB")
    ] = 0
    swap: Annotated[Quantity, Field(description="Swap; a bare number means MiB")] = 0
    gpus: list[Gpu] = Field(default_factory=list)
    resources: dict[str, ResourceAmount] = Field(
        default_factory=dict, description="Detected custom machine resources by name"
    )
    labels: dict[str, str] = Field(default_factory=dict)
    attributes: dict[AttributeName, GpuProperty] = Field(
        default_factory=dict, description="Machine facts advertised as they are (OpSys, Arch...)"
    )

    @field_validator("name")
    @classmethod
    def _host_name(cls, name: str) -> str:
        return check_host_name(name, field="name")

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            check_label(key, value, field="labels")
        return labels

    @field_validator("memory", "swap")
    @classmethod
    def _mib(cls, value: int | float | str, info: object) -> int | float | str:
        to_unit(value, Unit.MIB, field=getattr(info, "field_name", "memory"))
        return value

    @field_validator("disk")
    @classmethod
    def _kib(cls, value: int | float | str) -> int | float | str:
        to_unit(value, Unit.KIB, field="disk")
        return value

    @field_validator("gpus")
    @classmethod
    def _unique_gpu_ids(cls, gpus: list[Gpu]) -> list[Gpu]:
        seen: set[str] = set()
        for gpu in gpus:
            if gpu.id in seen:
                raise ValueError(f"gpus: the id {gpu.id!r} appears twice; GPU ids are unique")
            seen.add(gpu.id)
        return gpus

    @field_validator("resources")
    @classmethod
    def _custom_names(cls, resources: dict[str, float]) -> dict[str, float]:
        for name in resources:
            if not (name.isascii() and name.isidentifier()):
                raise ValueError(
                    f"resources: {name!r} is not a resource name; use letters, digits and _"
                )
            if name.lower() in _RESERVED_NAMES:
                raise ValueError(
                    f"resources: {name!r} is a standard resource; set it with the field "
                    f"{_RESERVED_NAMES[name.lower()]!r} instead"
                )
        return resources

    @property
    def memory_mib(self) -> int:
        return to_unit(self.memory, Unit.MIB, field="memory")

    @property
    def disk_kib(self) -> int:
        return to_unit(self.disk, Unit.KIB, field="disk")

    @property
    def swap_mib(self) -> int:
        return to_unit(self.swap, Unit.MIB, field="swap")


_RESERVED_NAMES = {
    "cpus": "cpus",
    "memory": "memory",
    "disk": "disk",
    "swap": "swap",
    "gpus": "gpus",
}


def parse_machine_file(text: str | bytes, source: str) -> Machine:
    """The Machine a machine file's YAML `text` describes; `source` names the file in errors.
    Bytes are read as UTF-8 within `kondor_core.inputs.load_yaml`'s bounds.

    Raises InvalidObjectError (a ValueError) whose message starts with `source` and has one
    line per problem: the field, the value and what is allowed (`cpus: Input should be
    greater than or equal to 1 (got 0)`), or why the text is not a machine description.
    Reading the file is the caller's: this takes its text.
    """
    try:
        data = load_yaml(text, source=source)
    except InputError as err:
        raise InvalidObjectError(source, [str(err).removeprefix(f"{source}: ")]) from None
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a YAML {type(data).__name__}"
        raise InvalidObjectError(
            source,
            [f"expected a machine description (a YAML mapping with name, cpus, memory), got {got}"],
        )
    return validate(Machine, data, what=source)
