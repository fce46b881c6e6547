"""`kubectl kondor cod` (kondor_cli.cod) against a fake API: what each verb writes, what it
refuses before writing (condor_cod's messages), and what it prints."""

from __future__ import annotations

import argparse
import io
from collections.abc import Mapping
from typing import Any

import pytest

from kondor_cli.cod import parse_name, run
from kondor_cli.files import UserError
from kondor_cli.main import build_parser


class FakeCod:
    namespace = "default"

    def __init__(self, state: str | None = "Idle", **status: Any) -> None:
        self.claim: dict[str, Any] = {
            "metadata": {"name": "cod-1", "namespace": "default"},
            "spec": {"executionPoint": "n1", "owner": "alice"},
            "status": {"state": state, "claimId": "<n1>#5#1", "executionPoint": "n1", **status},
        }
        self.patches: list[dict[str, Any]] = []
        self.deleted = False
        #: What the agent does once a patch is written: the status it then shows.
        self.answer: dict[str, Any] = {}

    def create(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.claim["spec"] = dict(body["spec"])
        self.claim["status"] = {"state": "Idle", "claimId": "<n1>#5#1", "slot": "slot1@n1"}
        return self.claim

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.claim if name == "cod-1" else None

    def list(self, namespace: str) -> list[dict[str, Any]]:
        return [self.claim]

    def patch(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self.patches.append(dict(patch))
        self.claim["spec"].update(patch["spec"])
        self.claim["status"].update(self.answer)

    def delete(self, namespace: str, name: str) -> None:
        self.deleted = True

    def execution_point(self, name: str) -> dict[str, Any] | None:
        ad = {"Name": "slot1@n1", "Cpus": 2, "State": "Unclaimed"}
        return {"metadata": {"name": name}, "status": {"slots": [{"name": "slot1@n1", "ad": ad}]}}


def _run(api: FakeCod, *argv: str, stdin: str = "") -> int:
    args = build_parser().parse_args(["cod", *argv])
    assert isinstance(args, argparse.Namespace)
    return run(
        args,
        connect_api=lambda _: api,
        sleep=lambda _: None,
        clock=iter(range(1000)).__next__,
        stdin=io.StringIO(stdin),
    )


def test_request_creates_the_claim_and_prints_its_id(capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeCod()
    assert (
        _run(api, "request", "-name", "slot1@n1", "-requirements", "Cpus > 1", "-lease", "60") == 0
    )
    assert api.claim["spec"] == {
        "executionPoint": "n1",
        "slot": "slot1",
        "requirements": "Cpus > 1",
        "lease": 60,
    }
    out = capsys.readouterr().out
    assert 'ID of new claim is: "<n1>#5#1"' in out and "CodClaim: default/cod-1" in out
    assert 'Name = "slot1@n1"' in out  # the claimed slot's ad, as condor_cod_request prints it


def test_request_writes_the_slot_ad_to_the_classad_file(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    api = FakeCod()
    where = tmp_path / "slot.ad"
    assert _run(api, "request", "-name", "n1", "-classad", str(where)) == 0
    assert 'State = "Unclaimed"' in where.read_text()
    assert "State =" not in capsys.readouterr().out


def test_activate_by_keyword_or_jobad_counts_an_activation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    api = FakeCod()
    api.answer = {"state": "Running", "activation": 1}
    assert (
        _run(api, "activate", "-id", "cod-1", "-key", "FractGen", "-clu", "23", "-proc", "5") == 0
    )
    assert api.patches == [
        {
            "spec": {
                "state": "Running",
                "activation": 1,
                "keyword": "FractGen",
                "jobAd": None,
                "clusterId": 23,
                "procId": 5,
                "fast": False,
            }
        }
    ]
    assert "the claim is Running" in capsys.readouterr().out
    api = FakeCod()
    api.answer = {"state": "Running", "activation": 1}
    assert _run(api, "activate", "-id", '"<n1>#5#1"', "-jobad", "-", stdin='Cmd = "/x"') == 0
    assert api.patches[0]["spec"]["jobAd"] == 'Cmd = "/x"'


@pytest.mark.parametrize(
    ("state", "argv", "message"),
    [
        ("Running", ["activate", "-id", "cod-1", "-keyword", "K"], "is Running: activate needs"),
        ("Idle", ["suspend", "-id", "cod-1"], "is Idle: suspend needs a claim that is Running"),
        ("Running", ["resume", "-id", "cod-1"], "resume needs a claim that is Suspended"),
        ("Idle", ["deactivate", "-id", "cod-1"], "needs a claim that is Running or Suspended"),
        ("Released", ["renew", "-id", "cod-1"], "claim cod-1 is Released"),
        ("Refused", ["release", "-id", "cod-1"], "claim cod-1 is Refused"),
        ("Idle", ["suspend", "-id", "nope"], "-id 'nope': no COD claim by that name"),
        ("Idle", ["activate", "-id", "cod-1"], "activate needs -keyword KEYWORD or -jobad FILE"),
    ],
)
def test_a_verb_the_claim_s_state_does_not_allow_writes_nothing(
    state: str, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    api = FakeCod(state)
    assert _run(api, *argv) == 1
    assert message in capsys.readouterr().err
    assert api.patches == [] and not api.deleted


def test_release_prints_the_state_and_deletes_fast_after_asking_for_a_hard_kill(
    capsys: pytest.CaptureFixture[str],
) -> None:
    api = FakeCod("Suspended")
    assert _run(api, "release", "-id", "cod-1", "-fast") == 0
    assert api.patches == [{"spec": {"fast": True}}] and api.deleted
    assert "State of claim when it was released: Suspended" in capsys.readouterr().out


def test_a_refused_request_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeCod()
    refused = {"state": "Refused", "reason": "user 'bob' is not authorized"}
    api.create = lambda namespace, body: {**api.claim, "status": refused}  # type: ignore[method-assign]
    api.get = lambda namespace, name: {**api.claim, "status": refused}  # type: ignore[method-assign]
    assert _run(api, "request", "-name", "n1") == 1
    assert "request refused by n1: user 'bob' is not authorized" in capsys.readouterr().err


def test_an_agent_that_does_not_answer_times_out(capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeCod("Running")
    assert _run(api, "suspend", "-id", "cod-1", "-timeout", "3") == 1
    assert "suspend: not done within 3s (the claim is Running)" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["@n1", "slot1@", ""])
def test_a_bad_name_is_refused(text: str) -> None:
    with pytest.raises(UserError, match="give NODE or SLOT@NODE"):
        parse_name(text)


def test_status_cod_lists_the_claims_of_the_slots_that_have_any(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kondor_cli import status

    ad = {
        "Name": "slot1@n1",
        "NumCODClaims": 2,
        "CODClaims": "COD1, COD2",
        "COD1_ClaimState": "Running",
        "COD1_EnteredCurrentState": 900,
        "COD1_RemoteUser": "alice",
        "COD1_JobId": "1.0",
        "COD1_JobKeyword": "FractGen",
        "COD2_ClaimState": "Idle",
        "COD2_EnteredCurrentState": 0,
        "COD2_RemoteUser": "alice",
    }
    eps = [
        {
            "metadata": {"name": "n1"},
            "status": {"slots": [{"name": "slot1@n1", "ad": ad}, {"name": "slot2@n1", "ad": {}}]},
        }
    ]
    args = build_parser().parse_args(["status", "-cod"])
    assert status.run(args, fetch=lambda _: eps, clock=lambda: 1000.0) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "Name", "ID", "ClaimState", "TimeInState", "RemoteUser", "JobId", "Keyword"
    ]  # fmt: skip
    assert lines[1].split() == [
        "slot1@n1",
        "COD1",
        "Running",
        "0+00:01:40",
        "alice",
        "1.0",
        "FractGen",
    ]
    assert lines[2].split() == ["slot1@n1", "COD2", "Idle", "0+00:16:40", "alice"]
    assert "slot2@n1" not in "\n".join(lines)
    assert lines[-1].split() == ["Total", "2", "1", "1", "0", "0", "0"]
