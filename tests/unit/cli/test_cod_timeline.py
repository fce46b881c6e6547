"""`kondor simulate --timeline examples/cod/timeline.yaml`: the reference's COD cycle offline,
with the COD claim's states and the batch claim's beside them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kondor_cli.files import load_scenario_file
from kondor_cli.main import main
from kondor_core.sim import replay
from kondor_core.sim.scenario import ScenarioError, load_scenario

SCENARIO = Path(__file__).resolve().parents[3] / "examples" / "cod" / "timeline.yaml"


def test_the_cod_timeline_shows_both_claims_states() -> None:
    rows = replay(load_scenario_file(SCENARIO)).as_dict()["cod"]
    seen = [(r["time"], r["claim"], r["from"], r["state"], r["batch"]) for r in rows]
    assert seen == [
        (30, "fractgen", "-", "Idle", "batch Claimed/Busy"),
        (35, "bobs", "-", "Refused", "none"),
        (60, "fractgen", "Idle", "Running", "batch Claimed/Suspended by COD"),
        (120, "fractgen", "Running", "Suspended", "batch Claimed/Busy"),
        (180, "fractgen", "Suspended", "Running", "batch Claimed/Suspended by COD"),
        (240, "fractgen", "Running", "Vacating", "batch Claimed/Suspended by COD"),
        (245, "fractgen", "Vacating", "Idle", "batch Claimed/Busy"),  # KillSig taken next tick
        (300, "leased", "-", "Idle", "batch Claimed/Busy"),
        (360, "leased", "Idle", "Released", "batch Claimed/Busy"),  # a 60 s lease never renewed
        (450, "fractgen", "Idle", "Released", "none"),
    ]
    assert "user 'bob' is not authorized" in rows[1]["reason"]
    assert {r["id"] for r in rows if r["claim"] == "fractgen"} == {"COD1"}


def test_the_batch_claim_is_suspended_for_cod_by_the_engine() -> None:
    """The slot's own transitions: Claimed/Suspended while FractGen runs (the startd's
    suspendForCOD), Busy when it is suspended and once it has exited after deactivate, and
    the batch job's suspended time counted (60-120 and 180-245: 125 s)."""
    result = replay(load_scenario_file(SCENARIO))
    moves = [
        (t.time, f"{t.from_state}/{t.from_activity}", f"{t.state}/{t.activity}", t.reason)
        for t in result.transitions
        if 5 < t.time < 400
    ]
    assert moves == [
        (60, "Claimed/Busy", "Claimed/Suspended", "a COD job is now running"),
        (120, "Claimed/Suspended", "Claimed/Busy", "no COD job active"),
        (180, "Claimed/Busy", "Claimed/Suspended", "a COD job is now running"),
        (245, "Claimed/Suspended", "Claimed/Busy", "no COD job active"),
    ]
    kinds = [(when, a.kind.value) for when, a in result.actions if 5 < when < 400]
    assert kinds == [
        (60, "suspend-job"),
        (120, "continue-job"),
        (180, "suspend-job"),
        (245, "continue-job"),
    ]
    scenario = load_scenario_file(SCENARIO)
    short = dataclasses.replace(scenario, until=395)
    slot = replay(short).machine.slots[0]
    assert slot.claim is not None and slot.claim.suspended_total == 125


def test_the_table_lists_the_cod_claims(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--timeline", str(SCENARIO)]) == 0
    out = capsys.readouterr().out
    assert "COD claims:" in out
    assert (
        "fractgen  COD1  slot1@desk  alice  Idle       Running    batch Claimed/Suspended by COD"
        in out
    )


def test_a_refused_cod_command_is_a_row_saying_why() -> None:
    scenario = {
        "machine": {"name": "desk", "cpus": 1, "memory": "1Gi", "disk": "1Gi"},
        "policy": {
            "apiVersion": "kondor.io/v1alpha1",
            "kind": "SlotPolicy",
            "metadata": {"name": "p"},
            "spec": {"condorConfig": "VALID_COD_USERS = alice\n"},
        },
        "until": 20,
        "steps": [
            {"at": 0, "cod": {"claim": "c", "verb": "request", "requirements": "Cpus > 8"}},
            {"at": 5, "cod": {"claim": "d", "verb": "request"}},
            {"at": 10, "cod": {"claim": "d", "verb": "suspend"}},
            {"at": 10, "cod": {"claim": "d", "verb": "activate", "keyword": "Nope"}},
            {"at": 15, "cod": {"claim": "d", "verb": "resume", "user": "bob"}},
        ],
    }
    rows = replay(load_scenario(scenario, read=lambda *_: None)).as_dict()["cod"]
    reasons = [(r["claim"], r["state"], r["reason"]) for r in rows]
    assert reasons == [
        ("c", "Refused", "requirements: no slot here satisfies 'Cpus > 8'"),
        ("d", "Idle", "condor_cod request"),
        ("d", "Idle", "the claim is Idle: only a Running COD job can be suspended"),
        ("d", "Idle", "activate refused: keyword: no Nope_Cmd (or any Nope_<attribute>) is "
         "defined in the execution point's configuration"),
        ("d", "Idle", "bob may not act on alice's claim"),
    ]  # fmt: skip


def test_a_cod_step_is_validated_naming_the_field() -> None:
    bad = {
        "machine": {"name": "desk", "cpus": 1, "memory": "1Gi", "disk": "1Gi"},
        "policy": {
            "apiVersion": "kondor.io/v1alpha1",
            "kind": "SlotPolicy",
            "metadata": {"name": "p"},
            "spec": {},
        },
        "until": 20,
        "steps": [{"at": 0, "cod": {"claim": "c", "verb": "borrow"}}],
    }
    with pytest.raises(ScenarioError, match=r"steps\[0\]\.cod\.verb: Input should be .request."):
        load_scenario(bad, read=lambda *_: None)
