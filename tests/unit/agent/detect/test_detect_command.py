"""`kondor-agent detect`: the subcommand prints a machine file `kondor simulate` can read."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from kondor_agent.detect import register
from kondor_core.api import Machine, validate


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kondor-agent")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_detect_prints_the_machine_file(
    fixtures: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(
        [
            "detect",
            "--root",
            str(fixtures / "hosts" / "v1-limited-rocky9"),
            "--execute-dir",
            str(tmp_path),
            "--node-name",
            "worker-7",
            "--label",
            "kondor.io/pool=cpu",
            "--allocatable",
            "cpu=31",
            "--reserve",
            "memory=1Gi",
            "--nvml-recording",
            str(fixtures / "nvml" / "h100x2.json"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    machine = validate(Machine, yaml.safe_load(out), what="stdout")
    assert machine.name == "worker-7"
    assert machine.cpus == 6
    assert machine.memory == "11Gi"
    assert [gpu.id for gpu in machine.gpus] == ["GPU-3f1a6c2e", "GPU-b82d0c47"]
    assert machine.attributes["OpSysAndVer"] == "Rocky9"
    assert machine.attributes["K8sLabel_kondor_io_pool"] == "cpu"
    assert "# cgroups v1, limits of /kubepods" in out


def test_detect_reports_bad_input_on_stderr(
    fixtures: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(
        [
            "detect",
            "--root",
            str(fixtures / "hosts" / "v2-debian12"),
            "--execute-dir",
            str(tmp_path),
            "--node-name",
            "n",
            "--allocatable",
            "cpu",
        ]
    )
    assert code == 2
    assert "kondor-agent detect: --allocatable: 'cpu' is not KEY=VALUE" in capsys.readouterr().err
