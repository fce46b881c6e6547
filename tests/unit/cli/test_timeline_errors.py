"""`kondor simulate --timeline` rejects bad scenarios with a message naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kondor_cli.main import main

MACHINE = {"name": "n", "cpus": 1, "memory": "1Gi", "disk": "10Gi"}
IDLE = {"LoadAvg": 0.0, "CondorLoadAvg": 0.0, "KeyboardIdle": 3600}


def _policy(config: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "SlotPolicy",
        "metadata": {"name": "p"},
        "spec": {"condorConfig": config},
    }


def _job(name: str = "sleep") -> dict[str, Any]:
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionJob",
        "metadata": {"name": name},
        "spec": {"owner": "alice"},
    }


def _scenario(steps: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"machine": MACHINE, "policy": _policy(), "until": 1000, "steps": steps, **fields}


def _fails(tmp_path: Path, capsys: pytest.CaptureFixture[str], document: dict[str, Any]) -> str:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(document))
    assert main(["simulate", "--timeline", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


def test_an_exit_for_a_job_never_submitted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = [{"at": 0, "facts": IDLE}, {"at": 900, "exit": {"job": "sleep", "exitCode": 0}}]
    err = _fails(tmp_path, capsys, _scenario(steps))
    assert "steps[1].exit.job: no job named 'sleep' was submitted before t=900" in err


def test_an_exit_before_the_submit_is_also_rejected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = [{"at": 10, "exit": {"job": "sleep"}}, {"at": 20, "submit": _job()}]
    err = _fails(tmp_path, capsys, _scenario(steps))
    assert "steps[0].exit.job: no job named 'sleep' was submitted before t=10" in err


def test_time_going_backwards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = [{"at": 0, "facts": IDLE}, {"at": 500, "facts": IDLE}, {"at": 100, "facts": IDLE}]
    err = _fails(tmp_path, capsys, _scenario(steps))
    assert "steps[2].at: time goes backwards: 100 comes after steps[1] at 500" in err


def test_an_unknown_command_lists_the_allowed_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _fails(tmp_path, capsys, _scenario([{"at": 0, "command": "reboot"}]))
    assert "steps[0].command:" in err and "'reboot'" in err
    for command in ("'vacate'", "'drain-graceful'", "'drain-cancel'", "'shutdown-fast'"):
        assert command in err


def test_a_step_does_one_thing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _fails(tmp_path, capsys, _scenario([{"at": 0, "facts": IDLE, "command": "vacate"}]))
    assert "steps[0]" in err and "exactly one of facts, submit, exit or command" in err


def test_an_unparsable_expression_names_the_knob_and_quotes_the_parser(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = _scenario([{"at": 0, "facts": IDLE}], policy=_policy("START = KeyboardIdle >"))
    err = _fails(tmp_path, capsys, document)
    assert "condorConfig line 1 (START)" in err
    assert "is not a valid ClassAd expression (classad2:" in err


def test_an_unknown_macro_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = _scenario([{"at": 0, "facts": IDLE}], policy=_policy("START = $(KeybordBusy)"))
    err = _fails(tmp_path, capsys, document)
    assert "$(KeybordBusy) is not defined" in err


def test_an_exit_for_a_job_that_is_not_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = [
        {"at": 0, "facts": IDLE},
        {"at": 10, "submit": _job()},
        {"at": 50, "exit": {"job": "sleep"}},
    ]
    document = _scenario(steps, policy=_policy("START = False"))
    err = _fails(tmp_path, capsys, document)
    assert "steps[2].exit.job: job 'sleep' is not running at t=50 (it is Idle)" in err


def test_a_missing_file_says_where_it_looked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = _scenario([], machine={"file": "machines/none.yaml"})
    err = _fails(tmp_path, capsys, document)
    assert "machine.file: machines/none.yaml: no such file" in err
    assert str(tmp_path / "machines" / "none.yaml") in err


def test_a_submitted_manifest_of_the_wrong_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _fails(tmp_path, capsys, _scenario([{"at": 0, "submit": _policy()}]))
    assert "steps[0].submit: kind is 'SlotPolicy'; expected a ExecutionJob manifest" in err


def test_files_are_read_from_the_scenario_directory_then_the_current_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "scenarios"
    here.mkdir()
    (here / "machine.yaml").write_text(yaml.safe_dump(MACHINE))
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text(yaml.safe_dump(_policy()))
    scenario = here / "s.yaml"
    scenario.write_text(
        yaml.safe_dump(
            {
                "machine": {"file": "machine.yaml"},  # beside the scenario
                "policy": {"file": "policies/p.yaml"},  # from the current directory
                "until": 20,
                "steps": [{"at": 0, "facts": IDLE}, {"at": 5, "submit": _job()}],
            }
        )
    )
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--timeline", str(scenario), "-o", "json"]) == 0
    assert '"job": "sleep"' in capsys.readouterr().out


def test_plain_simulate_still_needs_machine_and_policy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate"]) == 2
    assert "--machine and --policy are required" in capsys.readouterr().err


def test_timeline_has_no_classad_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_scenario([])))
    assert main(["simulate", "--timeline", str(path), "-o", "classad"]) == 2
    assert "table or json" in capsys.readouterr().err


def test_a_job_no_slot_takes_is_reported_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    machine = {**MACHINE, "disk": 0}
    path.write_text(yaml.safe_dump(_scenario([{"at": 0, "submit": _job()}], machine=machine)))
    assert main(["simulate", "--timeline", str(path), "-o", "json"]) == 0
    (job,) = json.loads(capsys.readouterr().out)["jobs"]
    assert job["name"] == "sleep" and job["status"] == "Idle"
    assert "not enough Disk" in job["reason"]
