"""Admission of CodClaims (kondor_core.startd.codadmission): the owner is who asks, only the
owner (or a cluster admin) acts on a claim, and an inline job ad names no other Owner."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kondor_core.jobs import Delegates, Requester
from kondor_core.startd.codadmission import admit_cod_claim

ALICE = Requester("alice", frozenset({"kondor:users"}))
CAROL = Requester("carol", frozenset({"kondor:users"}))
ADMIN = Requester("admin", frozenset({"system:masters"}))


def body(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "CodClaim",
        "metadata": {"name": "c1", "namespace": "default"},
        "spec": {"executionPoint": "node-1", **spec},
    }


def test_create_stamps_the_owner_and_the_execution_point_label() -> None:
    admission = admit_cod_claim("CREATE", ALICE, body(owner="bob"), None)
    assert admission.allowed
    assert admission.patch == {
        "spec": {"owner": "alice"},
        "metadata": {"labels": {"kondor.io/execution-point": "node-1"}},
    }
    stamped = body(owner="alice")
    stamped["metadata"]["labels"] = {"kondor.io/execution-point": "node-1"}
    assert admit_cod_claim("CREATE", ALICE, stamped, None).patch == {}


def test_a_cluster_admin_may_request_for_someone_else() -> None:
    admission = admit_cod_claim("CREATE", ADMIN, body(owner="carol"), None, delegates=Delegates())
    assert "spec" not in admission.patch


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"jobAd": 'Cmd = "/bin/true"\nOwner = "bob"'}, "spec.jobAd: Owner 'bob' does not match"),
        ({"jobAd": "Cmd = "}, "spec.jobAd: .* is not a valid ClassAd expression"),
        ({"requirements": "State =="}, "requirements"),
        ({"lease": 0}, "lease"),
        ({"state": "Busy"}, "state"),
        ({"keyword": "no spaces"}, "keyword"),
        ({"slot": " "}, "slot: an empty slot name"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_an_invalid_claim_is_refused_naming_the_field(spec: dict[str, Any], message: str) -> None:
    admission = admit_cod_claim("CREATE", ALICE, body(**spec), None)
    assert admission.refusal is not None
    assert admission.refusal.startswith("CodClaim default/c1 is not valid: ")
    assert re.search(message, admission.refusal), admission.refusal


def test_an_inline_ad_with_the_owner_s_own_name_is_fine() -> None:
    jobad = 'Cmd = "/bin/true"\nOwner = "alice"'
    assert admit_cod_claim("CREATE", ALICE, body(jobAd=jobad), None).allowed


def test_only_the_owner_or_an_admin_updates_or_releases_a_claim() -> None:
    carols = body(owner="carol")
    changed = body(owner="carol", state="Running", activation=1, keyword="FractGen")
    for operation, new in (("UPDATE", changed), ("DELETE", None)):
        refused = admit_cod_claim(operation, ALICE, new, carols)
        assert refused.forbidden
        assert refused.refusal is not None and "belongs to 'carol'" in refused.refusal
        assert admit_cod_claim(operation, CAROL, new, carols).allowed
        assert admit_cod_claim(operation, ADMIN, new, carols).allowed


@pytest.mark.parametrize("key", ["owner", "executionPoint", "slot", "requirements", "lease"])
def test_what_a_claim_was_requested_on_is_fixed(key: str) -> None:
    old = body(owner="alice", slot="slot1", requirements="true", lease=10)
    new = {**old, "spec": {**old["spec"], key: {"owner": "bob", "lease": 20}.get(key, "x")}}
    refused = admit_cod_claim("UPDATE", ALICE, new, old)
    assert refused.refusal is not None
    assert f"spec.{key} may not change after the request" in refused.refusal


def test_an_update_adding_another_owner_s_job_ad_is_refused() -> None:
    old = body(owner="alice")
    new = body(owner="alice", state="Running", activation=1, jobAd='Cmd="/x"; Owner="bob"')
    new["spec"]["jobAd"] = '[Cmd = "/x"; Owner = "bob"]'
    refused = admit_cod_claim("UPDATE", ALICE, new, old)
    assert refused.refusal is not None and "Owner 'bob' does not match" in refused.refusal
