"""Admission of ExecutionJobs: the owner, what a valid job is, and what may change after.

Tables of requests as the API server sends them (operation, user, new and old object), good
and bad alike; every refusal must name the field and the value a user would fix.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kondor_core.jobs import Admission, Delegates, Requester, admit_job, job_problems
from kondor_core.jobs.admission import NO_RUNTIME

ALICE = Requester("alice", frozenset({"kondor:users", "system:authenticated"}))
BOB = Requester("bob", frozenset({"kondor:users", "system:authenticated"}))
ADMIN = Requester("admin", frozenset({"system:masters", "system:authenticated"}))
OPERATOR = Requester(
    "system:serviceaccount:kondor-system:kondor-operator",
    frozenset({"system:serviceaccounts", "system:serviceaccounts:kondor-system"}),
)
AGENT = Requester(
    "system:serviceaccount:kondor-system:kondor-agent",
    frozenset({"system:serviceaccounts", "system:serviceaccounts:kondor-system"}),
)
NAMESPACE_CONTROLLER = Requester(
    "system:serviceaccount:kube-system:namespace-controller",
    frozenset({"system:serviceaccounts", "system:serviceaccounts:kube-system"}),
)
DELEGATES = Delegates().with_users(OPERATOR.name)

PROCESS = {"executable": "/bin/sleep", "arguments": ["60"]}
POD = {"template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}}


def job(name: str = "hello", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def stored(**spec: Any) -> dict[str, Any]:
    """A job as admission stored it: alice's, one process."""
    return job(**{"owner": "alice", "process": PROCESS, **spec})


def changed(old: dict[str, Any], **spec: Any) -> dict[str, Any]:
    new = copy.deepcopy(old)
    for key, value in spec.items():
        if value is None:
            new["spec"].pop(key, None)
        else:
            new["spec"][key] = value
    return new


def admit(
    operation: str,
    requester: Requester,
    new: dict[str, Any] | None,
    old: dict[str, Any] | None = None,
) -> Admission:
    return admit_job(operation, requester, new, old, delegates=DELEGATES)


# --- CREATE: the owner -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requester", "spec_owner", "stored_owner"),
    [
        (ALICE, None, "alice"),  # no owner given: the submitter
        (ALICE, "alice", "alice"),  # her own name: nothing to change
        (ALICE, "bob", "alice"),  # someone else's: replaced, whatever it says
        (ALICE, "", "alice"),
        (BOB, "alice", "bob"),
        (ADMIN, "bob", "bob"),  # a cluster admin submits for someone else
        (ADMIN, None, "admin"),
        (OPERATOR, "alice", "alice"),  # the operator acts for others
        (AGENT, "alice", AGENT.name),  # the agent does not
    ],
)
def test_the_owner_is_the_submitter_unless_an_admin_names_one(
    requester: Requester, spec_owner: str | None, stored_owner: str
) -> None:
    spec: dict[str, Any] = {"process": PROCESS}
    if spec_owner is not None:
        spec["owner"] = spec_owner
    admission = admit("CREATE", requester, job(**spec))

    assert admission.allowed, admission.refusal
    if stored_owner == spec_owner:
        assert admission.patch == {}
    else:
        assert admission.patch == {"spec": {"owner": stored_owner}}


def test_only_the_named_delegates_act_for_others() -> None:
    # Without the operator among the delegates, its service account is a user like any other.
    admission = admit_job("CREATE", OPERATOR, job(owner="alice", process=PROCESS), None)
    assert admission.patch == {"spec": {"owner": OPERATOR.name}}
    assert Delegates().include(ADMIN)
    assert Delegates().include(NAMESPACE_CONTROLLER)
    assert not Delegates().include(ALICE)


def test_the_requester_comes_from_userinfo() -> None:
    userinfo = {"username": "alice", "uid": "", "groups": ["kondor:users"]}
    assert Requester.of(userinfo) == Requester("alice", frozenset({"kondor:users"}))
    assert Requester.of({}) == Requester("")


# --- CREATE: valid jobs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        {"process": PROCESS},
        {"process": {"executable": "/bin/true"}, "requestCpus": 0},
        {"apptainer": {"image": "/images/alpine.sif", "executable": "/bin/echo"}},
        {"pod": POD},
        {
            "pod": {
                "template": {
                    "metadata": {"labels": {"app": "x"}},
                    "spec": {
                        "initContainers": [{"name": "init", "image": "busybox"}],
                        "containers": [{"name": "a", "image": "busybox", "command": ["true"]}],
                        "restartPolicy": "Never",
                    },
                }
            }
        },
        {
            "process": PROCESS,
            "requestCpus": 4,
            "requestMemory": "8Gi",
            "requestDisk": 1048576,
            "requestGpus": 1,
            "requestResources": {"cogs": 2},
            "requireGpus": "Capability >= 7.0",
            "requirements": 'OpSys == "LINUX" && Memory >= 1024',
            "rank": "Mips",
            "priority": -5,
            "attributes": {"IsBigJob": "true", "JobUniverse": "5", "Project": '"physics"'},
            "killSig": "SIGINT",
            "maxJobRetirementTime": "3600",
            "jobMaxVacateTime": "60",
            "hold": True,
        },
    ],
    ids=["process", "zero-cpus", "apptainer", "pod", "pod-with-more", "everything"],
)
def test_valid_jobs_are_admitted(spec: dict[str, Any]) -> None:
    admission = admit("CREATE", ALICE, job(**spec))
    assert admission.allowed, admission.refusal
    assert job_problems(job(**spec)) == []


# --- CREATE: invalid jobs, each refused naming the field and the value -------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, [NO_RUNTIME]),
        ({"requestCpus": 2}, [NO_RUNTIME]),
        (
            {"process": PROCESS, "pod": POD},
            ["spec:", "exactly one runtime", "process and pod"],
        ),
        (
            {"process": PROCESS, "apptainer": {"image": "x.sif", "executable": "y"}},
            ["process and apptainer"],
        ),
        (
            {"docker": {"image": "busybox"}},
            ["spec.docker: unknown field", "busybox", "process, apptainer or pod"],
        ),
        ({"process": {}}, ["spec.process.executable: required"]),
        ({"process": {"executable": ""}}, ["spec.process.executable", "''"]),
        ({"apptainer": {"executable": "/bin/true"}}, ["spec.apptainer.image: required"]),
        (
            {"process": PROCESS, "requirements": "Memory >"},
            ["spec.requirements:", "'Memory >'", "not a valid ClassAd expression"],
        ),
        ({"process": PROCESS, "rank": "(Mips"}, ["spec.rank:", "'(Mips'"]),
        ({"process": PROCESS, "requireGpus": "&&"}, ["spec.requireGpus:", "'&&'"]),
        (
            {"process": PROCESS, "attributes": {"Project": "physics +"}},
            ["spec.attributes.Project:", "'physics +'"],
        ),
        (
            {"process": PROCESS, "maxJobRetirementTime": "3600 *"},
            ["spec.maxJobRetirementTime:", "'3600 *'"],
        ),
        (
            {"process": PROCESS, "jobMaxVacateTime": ""},
            ["spec.jobMaxVacateTime: '' is not a valid ClassAd expression (the expression"],
        ),
        ({"process": PROCESS, "requestCpus": -1}, ["spec.requestCpus:", "-1"]),
        ({"process": PROCESS, "requestCpus": "two"}, ["spec.requestCpus:", "'two'"]),
        ({"process": PROCESS, "requestGpus": -2}, ["spec.requestGpus:", "-2"]),
        ({"process": PROCESS, "requestMemory": "lots"}, ["spec.requestMemory:", "'lots'"]),
        ({"process": PROCESS, "requestMemory": "-1Gi"}, ["spec.requestMemory:", "'-1Gi'"]),
        ({"process": PROCESS, "requestDisk": "1Zi"}, ["spec.requestDisk:", "'1Zi'"]),
        (
            {"process": PROCESS, "requestResources": {"cogs": -1}},
            ["spec.requestResources.cogs:", "-1"],
        ),
        (
            {"process": PROCESS, "requestResources": {"my cogs": 1}},
            ["spec.requestResources.my cogs:", "'my cogs' is not a resource name"],
        ),
        ({"process": PROCESS, "killSig": "SIGFOO"}, ["spec.killSig:", "'SIGFOO'"]),
        # An Owner attribute would charge the job to someone else in the job ad.
        (
            {"process": PROCESS, "attributes": {"owner": '"bob"'}},
            ["spec.attributes.owner:", "Owner is set by Kondor", "'\"bob\"'"],
        ),
        (
            {"process": PROCESS, "attributes": {"ClusterId": "7"}},
            ["spec.attributes.ClusterId:", "set by Kondor"],
        ),
        # The schedd's attributes come from the job's status (one job ad).
        (
            {"process": PROCESS, "attributes": {"NumJobStarts": "0"}},
            ["spec.attributes.NumJobStarts:", "set by Kondor"],
        ),
        (
            {"process": PROCESS, "attributes": {"enteredcurrentstatus": "0"}},
            ["spec.attributes.enteredcurrentstatus:", "EnteredCurrentStatus is set by Kondor"],
        ),
        (
            {"process": PROCESS, "attributes": {"RequestCpus": "64"}},
            ["spec.attributes.RequestCpus:", "spec.requestCpus", "'64'"],
        ),
        (
            {
                "process": PROCESS,
                "requestResources": {"cogs": 1},
                "attributes": {"RequestCogs": "9"},
            },
            ["spec.attributes.RequestCogs:", "spec.requestResources"],
        ),
        (
            {"process": PROCESS, "attributes": {"Foo Bar": "1"}},
            ["spec.attributes.Foo Bar:", "'Foo Bar' is not a ClassAd attribute name"],
        ),
        ({"process": PROCESS, "attributes": {"": "1"}}, ["spec.attributes.:", "''"]),
        (
            {"pod": {"template": "busybox"}},
            ["spec.pod.template:", "'busybox'"],
        ),
        (
            {"pod": {"template": {"image": "busybox", "command": ["sleep"]}}},
            [
                "spec.pod.template.image: not a field of a pod template",
                "'busybox'",
                "spec.pod.template.spec: a pod template needs a pod spec (got unset)",
            ],
        ),
        ({"pod": {"template": {"spec": {}}}}, ["spec.pod.template.spec.containers:", "unset"]),
        (
            {"pod": {"template": {"spec": {"containers": []}}}},
            ["spec.pod.template.spec.containers: a pod spec needs a non-empty list", "[]"],
        ),
        (
            {"pod": {"template": {"spec": {"containers": [{"name": "main"}]}}}},
            ["spec.pod.template.spec.containers[0].image: a container needs an image", "unset"],
        ),
        (
            {"pod": {"template": {"spec": {"containers": [{"image": "busybox", "name": ""}]}}}},
            ["spec.pod.template.spec.containers[0].name:", "''"],
        ),
        (
            {"pod": {"template": {"spec": {"containers": ["busybox"]}}}},
            ["spec.pod.template.spec.containers[0]: a container is an object", "'busybox'"],
        ),
        (
            {"pod": {"template": {"spec": {"containers": "busybox"}}}},
            ["spec.pod.template.spec.containers:", "'busybox'"],
        ),
        (
            {
                "pod": {
                    "template": {
                        "spec": {
                            "containers": [{"name": "a", "image": "b"}],
                            "initContainers": [{"name": "i"}],
                        }
                    }
                }
            },
            ["spec.pod.template.spec.initContainers[0].image:"],
        ),
        ({"pod": {}}, ["spec.pod.template: required"]),
    ],
)
def test_invalid_jobs_are_refused_naming_field_and_value(
    spec: dict[str, Any], expected: list[str]
) -> None:
    admission = admit("CREATE", ALICE, job(**spec))

    assert admission.refusal is not None
    assert admission.refusal.startswith("ExecutionJob default/hello has ")
    for part in expected:
        assert part in admission.refusal
    assert not admission.forbidden
    # Even refused, the owner would have been alice's: the patch does not depend on validity.
    assert admission.patch == {"spec": {"owner": "alice"}}


def test_every_problem_is_listed() -> None:
    admission = admit("CREATE", ALICE, job(process=PROCESS, rank="(", requirements=")"))
    assert admission.refusal is not None
    assert "has 2 problems: spec.requirements: ')'" in admission.refusal
    assert "; spec.rank: '('" in admission.refusal
    admission = admit("CREATE", ALICE, job(process=PROCESS, attributes={"Owner": "1", "A B": "1"}))
    assert admission.refusal is not None
    assert "has 2 problems" in admission.refusal


def test_a_job_without_a_spec_is_refused() -> None:
    bare = {"metadata": {"generateName": "job-", "namespace": "default"}}
    admission = admit("CREATE", ALICE, bare)
    assert admission.refusal is not None
    assert "ExecutionJob default/job-*" in admission.refusal
    assert NO_RUNTIME in admission.refusal


# --- UPDATE -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requester", "change"),
    [
        (ALICE, {"hold": True}),  # condor_hold
        (ALICE, {"remove": True}),  # condor_rm
        (ALICE, {"priority": 10}),  # condor_prio
        (ALICE, {"rank": "Memory"}),
        (ALICE, {"requirements": "Cpus >= 1"}),
        (ALICE, {"attributes": {"Project": '"chemistry"'}}),
        (ALICE, {"killSig": "SIGKILL"}),
        (ALICE, {"requestMemory": 128}),  # the default, now written: not a change
        (ALICE, {"requestMemory": "128Mi"}),  # the same amount in another unit
        (ALICE, {"requestCpus": 1}),
        (ADMIN, {"hold": True}),
        (OPERATOR, {}),  # the operator labels a matched job: only metadata changes
        (NAMESPACE_CONTROLLER, {}),
    ],
)
def test_allowed_updates(requester: Requester, change: dict[str, Any]) -> None:
    old = stored()
    new = changed(old, **change)
    new["metadata"]["labels"] = {"kondor.io/execution-point": "node-1"}
    admission = admit("UPDATE", requester, new, old)
    assert admission.allowed, admission.refusal
    assert admission.patch == {}


@pytest.mark.parametrize(
    ("requester", "change", "expected"),
    [
        (ALICE, {"owner": "bob"}, "spec.owner may not change after submission (was 'alice', "),
        (ALICE, {"owner": None}, "spec.owner may not change after submission (was 'alice', now"),
        (ADMIN, {"owner": "bob"}, "spec.owner may not change"),
        (ALICE, {"requestCpus": 4}, "spec.requestCpus may not change after submission (was unset"),
        (
            ALICE,
            {"requestMemory": "2Gi"},
            "spec.requestMemory may not change after submission (was unset, now '2Gi')",
        ),
        (ALICE, {"requestDisk": 10}, "spec.requestDisk may not change"),
        (ALICE, {"requestGpus": 1}, "spec.requestGpus may not change"),
        (ALICE, {"requestResources": {"cogs": 1}}, "spec.requestResources may not change"),
        (ALICE, {"requireGpus": "Capability > 8"}, "spec.requireGpus may not change"),
        (
            ALICE,
            {"process": {"executable": "/bin/rm"}},
            'spec.process may not change after submission (was {"arguments": ["60"], '
            '"executable": "/bin/sleep"}, now {"executable": "/bin/rm"})',
        ),
        (
            ALICE,
            {"process": None, "pod": POD},
            "the runtime may not change after submission (was process, now pod)",
        ),
        (ALICE, {"requirements": "Memory >"}, "spec.requirements: 'Memory >'"),
        (ALICE, {"attributes": {"Owner": '"bob"'}}, "spec.attributes.Owner:"),
    ],
)
def test_refused_updates_name_field_old_and_new(
    requester: Requester, change: dict[str, Any], expected: str
) -> None:
    old = stored()
    admission = admit("UPDATE", requester, changed(old, **change), old)

    assert admission.refusal is not None
    assert expected in admission.refusal
    assert not admission.forbidden


def test_request_changes_are_compared_by_amount() -> None:
    old = stored(requestMemory="1Gi", requestCpus=2)
    assert admit("UPDATE", ALICE, changed(old, requestMemory=1024), old).allowed
    refused = admit("UPDATE", ALICE, changed(old, requestMemory="1G"), old)
    assert refused.refusal is not None
    assert "spec.requestMemory may not change after submission (was '1Gi', now '1G')" in (
        refused.refusal
    )
    refused = admit("UPDATE", ALICE, changed(old, requestCpus=3), old)
    assert refused.refusal is not None
    assert "(was 2, now 3)" in refused.refusal


@pytest.mark.parametrize("requester", [BOB, AGENT])
def test_only_the_owner_or_an_admin_may_update(requester: Requester) -> None:
    old = stored()
    admission = admit("UPDATE", requester, changed(old, hold=True), old)
    assert admission.refusal == (
        f"{requester.name} may not update alice's job default/hello: "
        "only its owner or a cluster admin may"
    )
    assert admission.forbidden


def test_an_unchanged_spec_is_not_checked_again() -> None:
    # A job stored while the webhook was down can still be labelled and finalised.
    old = job(owner="alice", rank="(")
    new = changed(old)
    new["metadata"]["finalizers"] = []
    assert admit("UPDATE", ALICE, new, old).allowed
    assert admit("UPDATE", OPERATOR, new, old).allowed
    refused = admit("UPDATE", ALICE, changed(old, hold=True), old)
    assert refused.refusal is not None
    assert "spec.rank" in refused.refusal


def test_a_job_without_an_owner_belongs_to_the_admins() -> None:
    old = job(process=PROCESS)
    refused = admit("UPDATE", ALICE, changed(old, hold=True), old)
    assert refused.refusal == (
        "alice may not update the job default/hello: only its owner or a cluster admin may "
        "(it has no spec.owner)"
    )
    assert admit("UPDATE", ADMIN, changed(old, hold=True), old).allowed


# --- DELETE -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requester", "allowed"),
    [
        (ALICE, True),
        (BOB, False),
        (AGENT, False),
        (ADMIN, True),
        (OPERATOR, True),
        (NAMESPACE_CONTROLLER, True),  # deleting the namespace deletes its jobs
    ],
)
def test_only_the_owner_or_an_admin_may_delete(requester: Requester, allowed: bool) -> None:
    admission = admit("DELETE", requester, None, stored())
    assert admission.allowed is allowed
    if not allowed:
        assert admission.refusal == (
            f"{requester.name} may not delete alice's job default/hello: "
            "only its owner or a cluster admin may"
        )
        assert admission.forbidden


def test_deleting_an_invalid_job_is_allowed_to_its_owner() -> None:
    assert admit("DELETE", ALICE, None, job(owner="alice", rank="(")).allowed


def test_connect_is_not_judged() -> None:
    assert admit("CONNECT", BOB, None, stored()) == Admission()


# --- CREATE: Pod Security ----------------------------------------------------------------------


def pod_asking(**security: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "securityContext": security}
    return {"template": {"spec": {"containers": [container]}}}


@pytest.mark.parametrize(
    ("security", "ceiling", "refused_field"),
    [
        ({}, "restricted", None),  # nothing asked: hardened to restricted, admitted
        ({"runAsUser": 1000}, "restricted", None),
        ({"privileged": True}, "restricted", "securityContext.privileged"),
        ({"privileged": True}, "baseline", "securityContext.privileged"),
        ({"privileged": True}, "privileged", None),  # some SlotPolicy allows it
        ({"runAsUser": 0}, "restricted", "securityContext.runAsUser"),
        ({"runAsUser": 0}, "baseline", None),
        (
            {"capabilities": {"add": ["NET_ADMIN"]}},
            "baseline",
            "securityContext.capabilities.add[0]",
        ),
    ],
)
def test_a_pod_asking_for_more_than_any_slot_policy_allows_is_refused(
    security: dict[str, Any], ceiling: str, refused_field: str | None
) -> None:
    submitted = job(pod=pod_asking(**security))
    admission = admit_job("CREATE", ALICE, submitted, None, pod_security=ceiling)
    if refused_field is None:
        assert admission.allowed, admission.refusal
        return
    assert admission.refusal is not None and not admission.forbidden
    field = f"spec.pod.template.spec.containers[0].{refused_field}"
    assert admission.refusal.startswith("ExecutionJob default/hello has ")
    assert f"problem: {field}: " in admission.refusal or f"problems: {field}: " in admission.refusal
    assert f"not allowed by Pod Security {ceiling!r}" in admission.refusal


def test_pod_security_is_restricted_unless_told_and_checked_at_creation_only() -> None:
    submitted = job(owner="alice", pod=pod_asking(privileged=True))
    refused = admit("CREATE", ALICE, submitted, None)
    assert refused.refusal is not None
    assert "securityContext.privileged: true is not allowed by Pod Security 'restricted'" in (
        refused.refusal
    )
    assert "it needs a SlotPolicy with podSecurity: privileged" in refused.refusal
    # Queued when a SlotPolicy allowed it: later edits are not refused for it.
    assert admit("UPDATE", ALICE, changed(submitted, hold=True), submitted).allowed
    # A process job has no pod to check.
    assert admit_job("CREATE", ALICE, job(process=PROCESS), None, pod_security="restricted").allowed
