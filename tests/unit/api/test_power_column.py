"""`kubectl get xp` shows the sleep state every slot agrees on (power management): a Sleep
printer column whose jsonPath leads, through the CRD's own schema, to status.power.sleepState
as the agent writes it."""

from __future__ import annotations

from typing import Any

from kondor_core.api.crds import all_crds
from kondor_core.api.executionpoint import ExecutionPointStatus, PowerStatus


def _execution_points() -> dict[str, Any]:
    (crd,) = (c for c in all_crds() if c["spec"]["names"]["kind"] == "ExecutionPoint")
    version: dict[str, Any] = crd["spec"]["versions"][0]
    return version


def _sleep_column() -> dict[str, Any]:
    columns = _execution_points()["additionalPrinterColumns"]
    (column,) = (c for c in columns if c["name"] == "Sleep")
    return dict(column)


def _walk(document: Any, path: str) -> Any:
    """A simple jsonPath (`.a.b.c`) into `document`; None where something on the way is absent."""
    for key in path.lstrip(".").split("."):
        if not isinstance(document, dict):
            return None
        document = document.get(key)
    return document


def test_the_sleep_column_is_shown_by_default_after_drain() -> None:
    column = _sleep_column()
    assert column == {"name": "Sleep", "type": "string", "jsonPath": ".status.power.sleepState"}
    names = [c["name"] for c in _execution_points()["additionalPrinterColumns"]]
    assert names.index("Sleep") == names.index("Drain") + 1


def test_the_column_path_is_in_the_schema_as_a_string() -> None:
    schema = _execution_points()["schema"]["openAPIV3Schema"]
    for key in _sleep_column()["jsonPath"].lstrip(".").split("."):
        schema = schema["properties"][key]
    assert schema.get("type") == "string"


def test_the_column_reads_what_the_agent_writes() -> None:
    path = _sleep_column()["jsonPath"]
    asleep = ExecutionPointStatus(power=PowerStatus(sleep_state="S3", since="t"))
    assert _walk({"status": asleep.dump()}, path) == "S3"
    awake = ExecutionPointStatus(power=PowerStatus(sleep_state=None, since="t"))
    assert _walk({"status": awake.dump()}, path) is None
    assert _walk({"status": ExecutionPointStatus().dump()}, path) is None  # power management off
