"""CRDs are generated from the models, are structural, and the committed copies never drift."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kondor_core.api.crds import all_crds, structural_problems

ROOT = Path(__file__).resolve().parents[3]


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize("crd", all_crds(), ids=lambda crd: crd["metadata"]["name"])
def test_generated_crds_are_structural(crd: dict[str, Any]) -> None:
    assert structural_problems(_schema(crd)) == []


def test_structural_check_catches_what_the_api_server_refuses() -> None:
    bad = {
        "type": "object",
        "properties": {
            "a": {"description": "no type"},
            "b": {"anyOf": [{"type": "string"}, {"type": "object"}]},
            "c": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
            "d": {"$ref": "#/x", "type": "string"},
            "e": {"type": "array"},
        },
    }
    problems = "\n".join(structural_problems(bad))
    for expected in (
        "properties.a: no type",
        "b.anyOf[0]: sets type",
        "both properties",
        "$ref",
        "e: array without items",
    ):
        assert expected in problems


def test_committed_crds_match_the_models() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_crds.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_drift_is_detected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_crds
    finally:
        sys.path.remove(str(ROOT / "tools"))
    for target in gen_crds.TARGETS:
        copy_dir = tmp_path / target.relative_to(ROOT)
        copy_dir.mkdir(parents=True)
        for path in target.glob("*.yaml"):
            (copy_dir / path.name).write_text(path.read_text())
    edited = tmp_path / "crds" / "kondor.io_slotpolicies.yaml"
    edited.write_text(edited.read_text().replace("minimum: 1", "minimum: 2"))
    monkeypatch.setattr(gen_crds, "ROOT", tmp_path)
    monkeypatch.setattr(
        gen_crds, "TARGETS", tuple(tmp_path / t.relative_to(ROOT) for t in gen_crds.TARGETS)
    )
    monkeypatch.setattr(sys, "argv", ["gen_crds.py", "--check"])
    assert gen_crds.main() == 1


def test_chart_copy_equals_crds_dir() -> None:
    for path in (ROOT / "crds").glob("*.yaml"):
        assert (ROOT / "helm" / "kondor" / "crds" / path.name).read_text() == path.read_text()


def test_executionpoints_show_slot_columns_and_short_name() -> None:
    (crd,) = (c for c in all_crds() if c["spec"]["names"]["kind"] == "ExecutionPoint")
    columns = [column["name"] for column in crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns[:9] == [
        "Node",
        "Slots",
        "Claimed",
        "Unclaimed",
        "Owner",
        "Cpus",
        "Memory",
        "GPUs",
        "State",
    ]
    assert crd["spec"]["names"]["shortNames"] == ["xp"]  # `ep` is Endpoints'

    assert crd["spec"]["scope"] == "Cluster"


def test_a_policy_example_fits_the_schema() -> None:
    """The examples would pass the API server's schema (types, required fields)."""
    jsonschema = pytest.importorskip("jsonschema")
    (crd,) = (c for c in all_crds() if c["spec"]["names"]["kind"] == "SlotPolicy")
    schema = copy.deepcopy(_schema(crd))
    for path in (ROOT / "examples" / "policies").glob("*.yaml"):
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
