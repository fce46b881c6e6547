"""values.yaml: valid against values.schema.json, and every value documented."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
import yaml
from chart_support import CHART

VALUES = CHART / "values.yaml"
SCHEMA = CHART / "values.schema.json"


def _values() -> dict[str, Any]:
    loaded = yaml.safe_load(VALUES.read_text())
    assert isinstance(loaded, dict)
    return loaded


def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_defaults_validate_against_the_schema() -> None:
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in _validator().iter_errors(_values())]
    assert errors == []


def _with(path: str, value: object) -> dict[str, Any]:
    values = _values()
    *parents, leaf = path.split(".")
    node = values
    for key in parents:
        node = node[key]
    node[leaf] = value
    return values


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("operator.replicas", "2"),
        ("operator.replicas", -1),
        ("operator.metrics.port", 70000),
        ("webhook.failurePolicy", "ignore"),
        ("webhook.timeoutSeconds", 31),
        ("agent.logLevel", "chatty"),
        ("agent.hostPaths.hooksDir", "hooks"),
        ("image.pullPolicy", "Sometimes"),
        ("serviceMonitor.interval", "30 seconds"),
        ("agent.unknownKey", True),
    ],
)
def test_schema_rejects(path: str, value: object) -> None:
    assert list(_validator().iter_errors(_with(path, value))), f"{path}={value!r} was accepted"


def test_every_schema_property_is_described() -> None:
    def walk(node: dict[str, Any], where: str) -> list[str]:
        missing = []
        for name, sub in node.get("properties", {}).items():
            if "description" not in sub and sub.get("type") != "object":
                missing.append(f"{where}{name}")
            missing += walk(sub, f"{where}{name}.")
        return missing

    assert walk(json.loads(SCHEMA.read_text()), "") == []


def test_schema_knows_every_value() -> None:
    """A value in values.yaml the schema does not declare would be refused by helm itself."""
    schema = json.loads(SCHEMA.read_text())

    def walk(values: dict[str, Any], node: dict[str, Any], where: str) -> list[str]:
        unknown: list[str] = []
        properties = node.get("properties")
        if properties is None:
            return unknown
        for key, value in values.items():
            if key not in properties:
                unknown.append(f"{where}{key}")
            elif isinstance(value, dict):
                unknown += walk(value, properties[key], f"{where}{key}.")
        return unknown

    assert walk(_values(), schema, "") == []


KEY = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z][\w.-]*):(?P<rest>.*)$")


def test_every_value_has_a_comment() -> None:
    """Each leaf value is preceded by a `# --` comment, or lies inside a commented block."""
    undocumented = []
    documented_blocks: list[int] = []  # indents of commented keys whose block is documented
    previous = ""
    for number, line in enumerate(VALUES.read_text().splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("- "):
            previous = line if stripped else previous
            continue
        if stripped.startswith("#"):
            previous = line
            continue
        match = KEY.match(line)
        if match is None:
            previous = line
            continue
        indent = len(match["indent"])
        while documented_blocks and documented_blocks[-1] >= indent:
            documented_blocks.pop()
        commented = previous.strip().startswith("#") and (
            len(previous) - len(previous.lstrip()) == indent
        )
        rest = match["rest"].strip()
        if commented and not rest:
            documented_blocks.append(indent)
        elif rest and not commented and not documented_blocks:
            undocumented.append(f"values.yaml:{number}: {match['key']}")
        previous = line
    assert undocumented == []
