"""`kubectl kondor drain` (kondor_cli.drain): condor_drain's options become spec.drain."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

import pytest

from kondor_cli import drain
from kondor_core.api import DrainRequest


def ep(name: str, cpus: list[int]) -> dict[str, Any]:
    slots = [
        {
            "name": f"slot{i + 1}@{name}",
            "type": "Static",
            "state": "Unclaimed",
            "activity": "Idle",
            "ad": {"Name": f"slot{i + 1}@{name}", "Machine": name, "Cpus": c},
        }
        for i, c in enumerate(cpus)
    ]
    return {"metadata": {"name": name}, "spec": {"nodeName": name}, "status": {"slots": slots}}


class FakeApi:
    def __init__(self, *eps: dict[str, Any]) -> None:
        self.eps = {e["metadata"]["name"]: e for e in eps}
        self.patches: list[tuple[str, Mapping[str, Any]]] = []

    def read_execution_point(self, name: str) -> dict[str, Any] | None:
        return self.eps.get(name)

    def patch_execution_point(self, name: str, patch: Mapping[str, Any]) -> None:
        self.patches.append((name, patch))

    def whoami(self) -> str:
        return "admin"


def run(api: FakeApi, *argv: str) -> int:
    parser = argparse.ArgumentParser(prog="kubectl kondor")
    drain.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["drain", *argv])
    return drain.run(args, connect_api=lambda _args: api, clock=lambda: 1_795_000_000.0)


def test_a_drain_request_is_written_to_the_spec(capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeApi(ep("n1", [1]), ep("n2", [1]))
    assert run(api, "-quick", "-reason", "kernel update", "-resume-on-completion", "n1", "n2") == 0
    assert [name for name, _ in api.patches] == ["n1", "n2"]
    request = DrainRequest.model_validate(api.patches[0][1]["spec"]["drain"])
    assert (request.mode, request.reason, request.resume_on_completion) == (
        "quick",
        "kernel update",
        True,
    )
    assert (request.requested_by, request.requested_at) == ("admin", "2026-11-18T11:06:40Z")
    assert capsys.readouterr().out == "Sent request to drain n1\nSent request to drain n2\n"


def test_graceful_is_the_default_and_cancel_clears_the_request() -> None:
    api = FakeApi(ep("n1", [1]))
    assert run(api, "n1") == 0
    assert api.patches[0][1]["spec"]["drain"]["mode"] == "graceful"
    assert run(api, "-cancel", "n1") == 0
    assert api.patches[1] == ("n1", {"spec": {"drain": None}})


def test_check_must_hold_for_every_slot(capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeApi(ep("n1", [1, 4]), ep("n2", [4]))
    assert run(api, "-check", "Cpus >= 2", "n1", "n2") == 1
    assert [name for name, _ in api.patches] == ["n2"]  # n1's slot1 has one cpu
    assert "Draining n1 was refused: -check Cpus >= 2 is not true for slot1@n1" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-check", "Cpus >", "n1"], "-check 'Cpus >'"),
        (["-start", "True", "-quick", "n1"], "-start goes with -graceful only"),
        (["-start", "Cpus >", "n1"], "-start 'Cpus >'"),
    ],
)
def test_what_cannot_be_done_is_refused_with_the_reason(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    api = FakeApi(ep("n1", [1]))
    assert run(api, *argv) == 2
    assert api.patches == []
    assert message in capsys.readouterr().err


def test_an_unknown_node_is_said_and_the_others_drained(
    capsys: pytest.CaptureFixture[str],
) -> None:
    api = FakeApi(ep("n1", [1]))
    assert run(api, "nope", "n1") == 1
    assert [name for name, _ in api.patches] == ["n1"]
    assert "no ExecutionPoint nope" in capsys.readouterr().err


def test_modes_exclude_each_other() -> None:
    with pytest.raises(SystemExit):
        run(FakeApi(), "-fast", "-cancel", "n1")
    with pytest.raises(SystemExit):
        run(FakeApi(), "-resume-on-completion", "-exit-on-completion", "n1")


def test_exit_on_completion_is_asked_in_the_request() -> None:
    api = FakeApi(ep("n1", [1]))
    assert run(api, "-exit-on-completion", "n1") == 0
    ((name, patch),) = api.patches
    assert name == "n1"
    request = patch["spec"]["drain"]
    assert (request["exitOnCompletion"], request["resumeOnCompletion"]) == (True, False)
    assert DrainRequest.model_validate(request).exit_on_completion


def test_start_is_asked_in_the_request() -> None:
    api = FakeApi(ep("n1", [1]))
    assert run(api, "-start", "TARGET.Short =?= true", "n1") == 0
    ((_, patch),) = api.patches
    request = DrainRequest.model_validate(patch["spec"]["drain"])
    assert (request.mode, request.start) == ("graceful", "TARGET.Short =?= true")
