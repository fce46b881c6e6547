"""The agent's COD claims (kondor_agent.cod.CodRunner) with a fake API and the real process
launcher (no cgroups: processes are stopped with SIGSTOP): requests answered or refused,
the application started, frozen, thawed and ended, the claim released leaving no process, a
lease expiring, and a restarted agent's claims released."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kondor_agent.cod import CodRunner
from kondor_agent.execute.cgroups import JobCgroups
from kondor_agent.runtimes.process_launcher import ProcessLauncher
from kondor_core import startd
from kondor_core.api import Machine, SlotPolicySpec
from kondor_core.config import compile_policy

pytestmark = pytest.mark.timeout(60)


class FakeClaims:
    synced = True

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}

    def add(self, name: str, owner: str = "alice", **spec: Any) -> None:
        self.objects[name] = {
            "apiVersion": "kondor.io/v1alpha1",
            "kind": "CodClaim",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"executionPoint": "n1", "owner": owner, **spec},
        }

    def spec(self, name: str, **spec: Any) -> None:
        self.objects[name]["spec"].update(spec)

    def status(self, name: str) -> dict[str, Any]:
        status: dict[str, Any] = self.objects[name].get("status") or {}
        return status

    def claims(self) -> list[dict[str, Any]]:
        return list(self.objects.values())

    def patch_claim_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        found = self.objects[name]
        status = dict(found.get("status") or {})
        for key, value in patch["status"].items():
            if value is None:
                status.pop(key, None)
            else:
                status[key] = value
        found["status"] = status


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def node() -> startd.Startd:
    machine = Machine.model_validate({"name": "n1", "cpus": 2, "memory": "2Gi", "disk": "1Gi"})
    config = (
        "VALID_COD_USERS = alice\n"
        'Spin_Cmd = "/bin/sh"\n'
        'Spin_Args = "-c while:;do:;done"\n'
        'Sleep_Cmd = "/bin/sleep"\n'
        'Sleep_Args = "300"\n'
    )
    return startd.start(machine, compile_policy(SlotPolicySpec(condor_config=config)), 0)


@pytest.fixture
def runner(tmp_path: Path) -> tuple[CodRunner, FakeClaims, Clock]:
    api, clock = FakeClaims(), Clock()
    launcher = ProcessLauncher(tmp_path / "execute", JobCgroups.disabled())
    return CodRunner(api, launcher, "n1", clock=clock), api, clock


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _until(check: Any, what: str, runner: CodRunner, node: startd.Startd) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
        runner.tick(node, runner.clock())


def test_a_claim_runs_freezes_thaws_and_is_released_leaving_no_process(
    runner: tuple[CodRunner, FakeClaims, Clock], node: startd.Startd
) -> None:
    cod, api, clock = runner
    api.add("c1", slot="slot1")
    cod.tick(node, clock())
    status = api.status("c1")
    assert status["state"] == "Idle" and status["claimId"] == "<n1>#1000#1"
    assert status["codId"] == "COD1" and status["slot"] == "slot1@n1"
    assert cod.slot_attributes()["slot1@n1"]["COD1_ClaimState"] == "Idle"

    api.spec("c1", state="Running", activation=1, keyword="Sleep")
    cod.tick(node, clock())
    assert api.status("c1")["state"] == "Running"
    assert cod.suspended_slots() == {"slot1@n1"}
    _until(lambda: api.status("c1").get("pid"), "the application's pid", cod, node)
    pid = int(api.status("c1")["pid"])
    assert _alive(pid)

    api.spec("c1", state="Suspended")
    cod.tick(node, clock())
    assert api.status("c1")["state"] == "Suspended"
    _until(lambda: _state(pid) == "T", "the application stopped", cod, node)
    assert cod.suspended_slots() == set()  # the batch job may run meanwhile
    api.spec("c1", state="Running")
    cod.tick(node, clock())
    _until(lambda: _state(pid) != "T", "the application going on", cod, node)

    del api.objects["c1"]  # condor_cod release: the CodClaim is deleted
    cod.tick(node, clock())
    _until(lambda: not cod.held, "the claim released", cod, node)
    assert not _alive(pid)
    assert cod.slot_attributes() == {}


def test_a_user_not_in_valid_cod_users_and_a_slot_that_does_not_fit_are_refused(
    runner: tuple[CodRunner, FakeClaims, Clock], node: startd.Startd
) -> None:
    cod, api, clock = runner
    api.add("bobs", owner="bob")
    api.add("big", requirements="Cpus > 64")
    cod.tick(node, clock())
    assert api.status("bobs") == {
        "executionPoint": "n1",
        "state": "Refused",
        "enteredCurrentState": 1000,
        "reason": "user 'bob' is not authorized to create COD claims here "
        "(VALID_COD_USERS is 'alice')",
        "activation": 0,
        "renewal": 0,
    }
    assert api.status("big")["reason"] == "requirements: no slot here satisfies 'Cpus > 64'"
    assert not cod.held


def test_an_activation_that_cannot_build_its_application_leaves_the_claim_idle(
    runner: tuple[CodRunner, FakeClaims, Clock], node: startd.Startd
) -> None:
    cod, api, clock = runner
    api.add("c1")
    cod.tick(node, clock())
    api.spec("c1", state="Running", activation=1, keyword="Missing")
    cod.tick(node, clock())
    status = api.status("c1")
    assert status["state"] == "Idle" and status["activation"] == 1
    assert "keyword: no Missing_Cmd" in status["reason"]
    cod.tick(node, clock())  # not tried again: the activation was answered
    assert api.status("c1")["activation"] == 1


def test_an_unrenewed_lease_releases_the_claim_and_kills_its_application(
    runner: tuple[CodRunner, FakeClaims, Clock], node: startd.Startd
) -> None:
    cod, api, clock = runner
    api.add("c1", lease=30)
    cod.tick(node, clock())
    assert api.status("c1")["leaseExpiry"] == "1970-01-01T00:17:10Z"
    api.spec("c1", state="Running", activation=1, keyword="Sleep")
    cod.tick(node, clock())
    _until(lambda: api.status("c1").get("pid"), "the application's pid", cod, node)
    pid = int(api.status("c1")["pid"])
    clock.now += 20
    api.spec("c1", renewal=1)
    cod.tick(node, clock())
    assert api.status("c1")["leaseExpiry"] == "1970-01-01T00:17:30Z"
    clock.now += 30
    cod.tick(node, clock())
    _until(lambda: api.status("c1")["state"] == "Released", "Released", cod, node)
    assert "lease expired" in api.status("c1")["reason"]
    assert not _alive(pid)


def test_a_restarted_agent_releases_the_claims_an_earlier_one_held(
    runner: tuple[CodRunner, FakeClaims, Clock], node: startd.Startd
) -> None:
    cod, api, clock = runner
    api.add("old")
    api.objects["old"]["status"] = {"claimId": "<n1>#1#1", "state": "Running", "slot": "slot1@n1"}
    api.add("refused")
    api.objects["refused"]["status"] = {"state": "Refused", "reason": "no"}
    cod.tick(node, clock())
    assert api.status("old")["state"] == "Released"
    assert "agent restarted" in api.status("old")["reason"]
    assert api.status("refused") == {"state": "Refused", "reason": "no"}
    assert not cod.held


def test_an_application_that_cannot_start_leaves_the_claim_idle_saying_why(
    runner: tuple[CodRunner, FakeClaims, Clock], node: startd.Startd
) -> None:
    cod, api, clock = runner
    api.add("c1")
    cod.tick(node, clock())
    api.spec("c1", state="Running", activation=1, jobAd='Cmd = "/nonexistent/fractgen"')
    cod.tick(node, clock())
    _until(lambda: api.status("c1")["state"] == "Idle", "Idle again", cod, node)
    status = api.status("c1")
    assert "/nonexistent/fractgen" in status["reason"]
    assert cod.suspended_slots() == set()
