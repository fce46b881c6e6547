"""`kondor simulate` and `kondor policy compile`, driven as a user drives them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import classad2
import pytest
import yaml

from kondor_cli.main import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"


def _write(tmp_path: Path, name: str, data: Any) -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def _policy(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "SlotPolicy",
        "metadata": {"name": "p"},
        "spec": spec,
    }


def _run_json(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> dict[str, Any]:
    assert main(["simulate", *map(str, argv), "--output", "json"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def test_reference_dynamic_provisioning_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The manual's 10-cpu, 10240 MB partitionable slot carved by JobA (3 cpus, 1024 MB)."""
    machine = _write(
        tmp_path, "m.yaml", {"name": "big", "cpus": 10, "memory": 10240, "disk": 1048576}
    )
    policy = _write(tmp_path, "p.yaml", _policy())
    out = _run_json(
        capsys,
        "--machine",
        machine,
        "--policy",
        policy,
        "--request",
        EXAMPLES / "jobs" / "reference-job-a.ad",
    )
    slots = {ad["Name"]: ad for ad in out["slots"]}
    assert out["placements"] == [{"request": "reference-job-a", "slot": "slot1_1@big"}]
    assert (
        slots["slot1@big"]["Cpus"],
        slots["slot1@big"]["Memory"],
        slots["slot1@big"]["Disk"],
    ) == (
        7,
        9216,
        1048576 - 10240,
    )
    dynamic = slots["slot1_1@big"]
    assert (dynamic["Cpus"], dynamic["Memory"], dynamic["Disk"]) == (3, 1024, 10240)
    assert dynamic["SlotType"] == "Dynamic" and dynamic["DynamicSlot"] is True
    assert slots["slot1@big"]["PartitionableSlot"] is True


def test_gpu_demo_places_jobs_where_the_reference_layout_allows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _run_json(
        capsys,
        "--machine", EXAMPLES / "machines" / "gpu-mixed.yaml",
        "--policy", EXAMPLES / "policies" / "gpu-split.yaml",
        "--request", EXAMPLES / "jobs" / "train.yaml",
        "--request", EXAMPLES / "jobs" / "small.yaml",
    )  # fmt: skip
    slots = {ad["Name"]: ad for ad in out["slots"]}
    train, small = out["placements"]
    assert train == {"request": "train", "slot": "slot1_1@gpu-mixed"}
    assert slots["slot1_1@gpu-mixed"]["AssignedGPUs"] in {"GPU-a1b2c3d4", "GPU-e5f6a7b8"}
    assert slots["slot2@gpu-mixed"]["AssignedGPUs"] == "GPU-6a96bd13"
    # START keeps non-GPU jobs off slot type 1; slot2 has only 10 MiB, so small lands on slot3.
    assert small == {"request": "small", "slot": "slot3@gpu-mixed"}


def test_a_request_that_fits_nowhere_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    machine = _write(tmp_path, "m.yaml", {"name": "n", "cpus": 2, "memory": "4Gi", "disk": "10Gi"})
    policy = _write(tmp_path, "p.yaml", _policy())
    job = _write(tmp_path, "huge.ad", "RequestCpus = 4\nRequestMemory = 1024\nRequestDisk = 1024\n")
    out = _run_json(capsys, "--machine", machine, "--policy", policy, "--request", job)
    (placement,) = out["placements"]
    assert placement["slot"] is None
    assert "Cpus" in placement["reason"] or "cpus" in placement["reason"]


def test_table_and_classad_outputs(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "simulate",
        "--machine",
        str(EXAMPLES / "machines" / "node-a.yaml"),
        "--policy",
        str(EXAMPLES / "policies" / "cogs.yaml"),
    ]
    assert main(args) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:4] == ["Name", "Type", "State", "Activity"]
    assert "slot1@node-a" in table and "slot3@node-a" in table
    assert main([*args, "--output", "classad"]) == 0
    ads = [
        classad2.parseOne(text, classad2.ParserType.Old)
        for text in capsys.readouterr().out.split("\n\n")
    ]
    assert [ad["Name"] for ad in ads] == ["slot1@node-a", "slot2@node-a", "slot3@node-a"]
    assert ads[1]["favorite_color"] == "green" and ads[0]["GenomeDBPath"] == "/data/genome"


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {"policy": _policy(start="Cpus >")},
            "spec.start: 'Cpus >' is not a valid ClassAd expression",
        ),
        ({"policy": {**_policy(), "kind": "Pod"}}, "kind is 'Pod'; expected a SlotPolicy manifest"),
        (
            {"policy": _policy(condorConfig="SLOT_TYPE_1 = cpus=150%\nNUM_SLOTS_TYPE_1 = 1\n")},
            "150%",
        ),
        ({"policy": _policy(slotTypes=[{"id": 1, "count": 3, "resources": "cpus=1"}])}, "more"),
        ({"machine": {"name": "n", "cpus": 2}}, "memory: Field required"),
        ({"machine": "cpus: [unclosed"}, "not valid YAML"),
        ({"request": "RequestCpus = = 2"}, "neither an ExecutionJob manifest nor ClassAd text"),
        (
            {
                "request": {
                    "apiVersion": "kondor.io/v1alpha1",
                    "kind": "ExecutionJob",
                    "metadata": {"name": "j"},
                    "spec": {"requestCpus": -1},
                }
            },
            "spec.requestCpus: Input should be greater than or equal to 0",
        ),
    ],
)
def test_bad_input_exits_2_naming_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], files: dict[str, Any], expected: str
) -> None:
    machine = _write(
        tmp_path, "m.yaml", files.get("machine", {"name": "n", "cpus": 2, "memory": "4Gi"})
    )
    policy = _write(tmp_path, "p.yaml", files.get("policy", _policy()))
    argv = ["simulate", "--machine", str(machine), "--policy", str(policy)]
    if "request" in files:
        argv += ["--request", str(_write(tmp_path, "job.ad", files["request"]))]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("kondor simulate: ")
    assert expected in err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "simulate",
                "--machine",
                str(tmp_path / "nope.yaml"),
                "--policy",
                str(tmp_path / "p.yaml"),
            ]
        )
        == 2
    )
    assert "nope.yaml: cannot read it" in capsys.readouterr().err


def test_policy_compile_prints_the_effective_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["policy", "compile", str(EXAMPLES / "policies" / "gpu-split.yaml"), "-o", "json"])
        == 0
    )
    rendered = json.loads(capsys.readouterr().out)
    assert "TARGET.RequestGPUs > 0" in json.dumps(rendered)
    assert "Capability >= 8.0" in json.dumps(rendered)
