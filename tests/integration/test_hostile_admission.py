"""Issue 18's hostile input at `kubectl apply` on the dev cluster: the operator's webhooks refuse
a sample of each family with the message the core gives offline (`admit_job`, `check_policy`),
and nothing is stored.

Where the API server's own schema (generated from the models) refuses first, the test pins what
the user reads instead: the API server names the field but not the value ("must be of type
integer: \"number\"" for 2^70), and kubectl itself refuses NaN and infinity, which JSON cannot
carry. Manifests go to kubectl as JSON, so that `1e30` stays the string the test means
(PyYAML writes it bare, and YAML 1.2 reads a bare 1e30 as a number).

The operator is test_job_admission's: both webhooks (ExecutionJob and SlotPolicy), failing
closed, so an unreachable webhook fails a test instead of admitting a hostile object.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from kondor_core.fleet import admission_message, check_policy
from kondor_core.jobs import Requester, admit_job

from .test_job_admission import PROCESS, Kubectl
from .test_job_admission import kubectl as kubectl  # noqa: PLC0414  (the module's fixtures)
from .test_job_admission import operator as operator  # noqa: PLC0414

pytestmark = pytest.mark.timeout(120)

BIG = 2**70
API = "kondor.io/v1alpha1"


def _nested(depth: int) -> str:
    """JSON nested `depth` objects deep (written out: json.dumps recurses)."""
    return '{"a": ' * depth + "1" + "}" * depth


def _manifest(kind: str, name: str, spec: dict[str, Any], *, deep: int = 0) -> str:
    text = json.dumps({"apiVersion": API, "kind": kind, "metadata": {"name": name}, "spec": spec})
    return text.replace('"DEEP"', _nested(deep)) if deep else text


def _apply(kubectl: Kubectl, user: str, manifest: str) -> str:
    """kubectl apply's stderr; fails the test if the object was admitted."""
    return kubectl.refused(user, "apply", "-f", "-", stdin=manifest)


# Refused by Kondor's webhook: the message is admit_job's, word for word.
WEBHOOK_JOBS = [
    pytest.param({"process": PROCESS, "requestMemory": "1e30Ei"}, 0, id="memory 1e30Ei"),
    pytest.param({"process": PROCESS, "requestMemory": "NaN"}, 0, id="memory 'NaN'"),
    pytest.param({"process": PROCESS, "requestMemory": "1e30"}, 0, id="memory '1e30'"),
    pytest.param({"process": PROCESS, "requestResources": {"cogs": 1e30}}, 0, id="resource 1e30"),
    pytest.param({"process": PROCESS, "attributes": {"": "1"}}, 0, id="empty attribute name"),
    pytest.param(
        {"process": PROCESS, "attributes": {"A\x1b[31m": "1"}}, 0, id="attribute name escape"
    ),
    pytest.param({"pod": {"template": "DEEP"}}, 80, id="nested 80"),
    # Deeper than Python's JSON parser goes: refused by the webhook server before kopf.
    pytest.param({"pod": {"template": "DEEP"}}, 5000, id="nested 5000"),
]


@pytest.mark.parametrize(("spec", "deep"), WEBHOOK_JOBS)
def test_the_webhook_refuses_a_hostile_job_as_admission_does_offline(
    kubectl: Kubectl, spec: dict[str, Any], deep: int
) -> None:
    error = _apply(kubectl, "alice", _manifest("ExecutionJob", "bad", spec, deep=deep))

    offline = json.loads(_manifest("ExecutionJob", "bad", spec, deep=min(deep, 100)))
    offline["metadata"]["namespace"] = kubectl.namespace
    refusal = admit_job("CREATE", Requester("alice"), offline, None).refusal
    assert refusal is not None
    assert "denied the request" in error
    assert refusal in error, error
    assert kubectl.run("alice", "get", "executionjob", "bad").returncode != 0  # not stored


# Refused by Kondor's mutating webhook (which checks a new job: one call per submission)
# or by the CRD's schema, by kubectl or by the API server's own rules: what the user reads
# names the field and what is wrong (the API server does not quote a number).
SCHEMA_JOBS = [
    pytest.param(
        f'{{"process": {json.dumps(PROCESS)}, "requestCpus": {BIG}}}',
        "spec.requestCpus",
        ("must be of type integer", "exceeded maximum size", "beyond a ClassAd integer"),
        id="cpus 2^70",
    ),
    pytest.param(
        f'{{"process": {json.dumps(PROCESS)}, "requestMemory": {BIG}}}',
        "spec.requestMemory",
        ("must be of type integer", "is too large", "exceeded maximum size"),
        id="memory 2^70",
    ),
    pytest.param(
        f'{{"process": {json.dumps(PROCESS)}, "priority": 1e30}}',
        "spec.priority",
        ("must be of type integer", "exceeded maximum size"),
        id="priority 1e30",
    ),
    pytest.param(
        f'{{"process": {json.dumps(PROCESS)}, "requestResources": {{"cogs": -1}}}}',
        "spec.requestResources.cogs",
        ("should be greater than or equal to 0", "greater than or equal to 0 (got -1)"),
        id="negative resource",
    ),
]


@pytest.mark.parametrize(("spec", "field", "why"), SCHEMA_JOBS)
def test_a_job_out_of_range_is_refused_naming_the_field(
    kubectl: Kubectl, spec: str, field: str, why: tuple[str, ...]
) -> None:
    manifest = f'{{"apiVersion": "{API}", "kind": "ExecutionJob", "metadata": {{"name": "bad"}}, '
    error = _apply(kubectl, "alice", manifest + f'"spec": {spec}}}')

    assert field in error, error
    assert any(words in error for words in why), error
    assert kubectl.run("alice", "get", "executionjob", "bad").returncode != 0


@pytest.mark.parametrize("value", [".nan", ".inf"])
def test_kubectl_refuses_nan_and_infinity_before_sending(kubectl: Kubectl, value: str) -> None:
    manifest = (
        f"apiVersion: {API}\nkind: ExecutionJob\nmetadata: {{name: bad}}\n"
        f"spec:\n  process: {{executable: /bin/true}}\n  requestResources: {{cogs: {value}}}\n"
    )
    error = _apply(kubectl, "alice", manifest)

    assert "json: unsupported value" in error, error
    assert kubectl.run("alice", "get", "executionjob", "bad").returncode != 0


def test_the_api_server_refuses_a_bad_object_name(kubectl: Kubectl) -> None:
    error = _apply(kubectl, "alice", _manifest("ExecutionJob", "Bad_Name", {"process": PROCESS}))

    assert 'metadata.name: Invalid value: "Bad_Name"' in error, error


def _doubling(levels: int) -> str:
    lines = ["A0 = x"] + [f"A{n} = $(A{n - 1})$(A{n - 1})" for n in range(1, levels + 1)]
    return "\n".join([*lines, f"START = $(A{levels}) == 1"]) + "\n"


def _chain(length: int) -> str:
    lines = [f"M{n} = $(M{n + 1})" for n in range(length)]
    return "\n".join([*lines, f"M{length} = 1", "START = $(M0)"]) + "\n"


# Refused by the SlotPolicy webhook: the message is check_policy's, word for word.
WEBHOOK_POLICIES = [
    pytest.param({"slotTypes": [{"id": 1, "count": 10**7}]}, 0, id="slot count 10^7"),
    pytest.param({"reserved": {"memory": "1e30"}}, 0, id="reserved memory '1e30'"),
    pytest.param({"machineResources": {"cogs": 1e30}}, 0, id="machine resource 1e30"),
    pytest.param({"attributes": {"a b": "1"}}, 0, id="attribute name with a space"),
    pytest.param({"slotAttributes": {"1": {"": "1"}}}, 0, id="empty slot attribute name"),
    pytest.param({"slotTypes": [{"id": 1, "resources": "DEEP"}]}, 80, id="nested resources"),
    pytest.param(
        {"condorConfig": "MACHINE_RESOURCE_GPUs = g0, g0\n"}, 0, id="condorConfig duplicate GPU"
    ),
    pytest.param(
        {"condorConfig": "MACHINE_RESOURCE_cogs = 1e30\n"}, 0, id="condorConfig resource 1e30"
    ),
    pytest.param(
        {"condorConfig": f"SLOT_TYPE_1 = cpus=1\nNUM_SLOTS_TYPE_1 = {BIG}\n"},
        0,
        id="condorConfig slot count 2^70",
    ),
    pytest.param(
        {"condorConfig": "SLOT_TYPE_1 = gpus=1 : (((\nNUM_SLOTS_TYPE_1 = 1\n"},
        0,
        id="condorConfig GPU constraint",
    ),
    pytest.param({"condorConfig": _doubling(40)}, 0, id="condorConfig doubling macro"),
    pytest.param({"condorConfig": _chain(200)}, 0, id="condorConfig macro chain"),
    pytest.param(
        {"condorConfig": "HIBERNATE_CHECK_INTERVAL = soon\n"}, 0, id="check interval 'soon'"
    ),
    pytest.param({"condorConfig": "HIBERNATE_CHECK_INTERVAL = -20\n"}, 0, id="check interval -20"),
    pytest.param({"hibernate": 'ifThenElse(State == "Unclaimed", "RAM"'}, 0, id="HIBERNATE parse"),
]


@pytest.mark.parametrize(("spec", "deep"), WEBHOOK_POLICIES)
def test_the_webhook_refuses_a_hostile_policy_as_check_policy_does_offline(
    kubectl: Kubectl, spec: dict[str, Any], deep: int
) -> None:
    name = f"hostile-{uuid.uuid4().hex[:6]}"
    error = _apply(kubectl, "admin", _manifest("SlotPolicy", name, spec, deep=deep))

    offline = json.loads(_manifest("SlotPolicy", name, spec, deep=deep))["spec"]
    checked = check_policy(offline)
    assert not checked.valid
    assert "denied the request" in error
    assert admission_message(name, checked) in error, error
    assert kubectl.run("admin", "get", "slotpolicy", name).returncode != 0


def test_the_schema_refuses_a_policy_number_beyond_an_integer(kubectl: Kubectl) -> None:
    manifest = _manifest("SlotPolicy", "hostile-count", {"slotTypes": [{"id": 1, "count": 0}]})
    error = _apply(kubectl, "admin", manifest.replace('"count": 0', f'"count": {BIG}'))

    assert 'spec.slotTypes[0].count: Invalid value: "number"' in error, error
    assert "must be of type integer" in error
