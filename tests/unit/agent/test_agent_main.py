"""`kondor-agent` from the command line: the offline cycle, and what it refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kondor_agent.machinefile import MachineFile
from kondor_agent.main import main
from kondor_cli.main import main as kondor
from kondor_core.api import InvalidObjectError

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
_SHAPE = ("Name", "SlotType", "Cpus", "Memory", "Disk", "GPUs", "AssignedGPUs", "Requirements")


def _json(capsys: pytest.CaptureFixture[str], run: Any, *argv: str) -> dict[str, Any]:
    assert run(list(argv)) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


@pytest.mark.parametrize(
    ("machine", "policy"),
    [("gpu-mixed.yaml", "gpu-split.yaml"), ("kwok-small.yaml", "default.yaml")],
)
def test_oneshot_prints_what_simulate_prints_after_one_evaluation(
    machine: str, policy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = ("--machine", str(EXAMPLES / "machines" / machine))
    paths += ("--policy", str(EXAMPLES / "policies" / policy))
    agent = _json(capsys, main, *paths, "--oneshot", "--no-publish")
    simulated = _json(capsys, kondor, "simulate", *paths, "--output", "json")
    assert agent.keys() == simulated.keys() == {"slots", "placements"}

    def shape(ads: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [tuple(ad.get(k) for k in _SHAPE) for ad in ads]

    assert shape(agent["slots"]) == shape(simulated["slots"])
    # One evaluation ran: the slots left Owner (IS_OWNER is FALSE) and carry their times.
    for ad in agent["slots"]:
        assert ad["State"] == "Unclaimed"
        assert isinstance(ad["EnteredCurrentState"], int)


def test_no_publish_needs_oneshot_and_policy(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--machine", str(EXAMPLES / "machines" / "desk.yaml"), "--no-publish"])
    assert "--oneshot" in capsys.readouterr().err


def test_a_bad_machine_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "m.yaml"
    bad.write_text(yaml.safe_dump({"name": "x", "cpus": 0, "memory": "1Gi"}))
    policy = str(EXAMPLES / "policies" / "default.yaml")
    assert main(["--machine", str(bad), "--policy", policy, "--oneshot", "--no-publish"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err
    assert "cpus" in err


def test_publishing_agent_needs_a_node_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    with pytest.raises(SystemExit):
        main(["--machine", str(EXAMPLES / "machines" / "desk.yaml")])
    assert "--node-name" in capsys.readouterr().err


def test_machine_file_is_reread_when_it_changes_and_a_bad_edit_keeps_the_last(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"name": "n", "cpus": 2, "memory": "1Gi"}))
    source = MachineFile(path)
    assert source.read().cpus == 2
    path.write_text(yaml.safe_dump({"name": "n", "cpus": 4, "memory": "1Gi", "disk": 10}))
    assert source.read().cpus == 4
    path.write_text("name: [unclosed")
    assert source.read().cpus == 4
    assert source.error is not None and str(path) in source.error
    with pytest.raises(InvalidObjectError):
        MachineFile(tmp_path / "missing.yaml").read()
