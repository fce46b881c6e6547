"""The Pod Security Standards checks of pod jobs: one row per control of the Kubernetes page
("Pod Security Standards", baseline and restricted), each naming the field, the value and the
least level that allows it; the hardened defaults every job pod gets."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kondor_core.config import compile_policy
from kondor_core.jobs.podsecurity import (
    BASELINE,
    DEFAULT_RUN_AS,
    PRIVILEGED,
    RESTRICTED,
    cluster_ceiling,
    harden,
    least_level,
    level_index,
    pod_security_level,
    spec_level,
    violations,
)

C0 = "spec.pod.template.spec.containers[0]"
SC = f"{C0}.securityContext"
POD = "spec.pod.template.spec"


def template(container: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    main = {"name": "main", "image": "busybox", **(container or {})}
    return {"spec": {"containers": [main], **spec}}


def context(**fields: Any) -> dict[str, Any]:
    return {"securityContext": fields}


# (id, template, the field named, its value as shown, the least level that allows it)
RULES: list[tuple[str, dict[str, Any], str, str, str]] = [
    # Baseline: Host Namespaces.
    ("hostNetwork", template(hostNetwork=True), f"{POD}.hostNetwork", "true", PRIVILEGED),
    ("hostPID", template(hostPID=True), f"{POD}.hostPID", "true", PRIVILEGED),
    ("hostIPC", template(hostIPC=True), f"{POD}.hostIPC", "true", PRIVILEGED),
    # Baseline: Privileged Containers.
    ("privileged", template(context(privileged=True)), f"{SC}.privileged", "true", PRIVILEGED),
    (
        "privileged init container",
        {
            "spec": {
                "containers": [{"name": "m", "image": "b"}],
                "initContainers": [{"name": "i", "image": "b", **context(privileged=True)}],
            }
        },
        f"{POD}.initContainers[0].securityContext.privileged",
        "true",
        PRIVILEGED,
    ),
    # Baseline: Capabilities (beyond the default set); restricted: NET_BIND_SERVICE only.
    (
        "add SYS_ADMIN",
        template(context(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]})),
        f"{SC}.capabilities.add[0]",
        "'SYS_ADMIN'",
        PRIVILEGED,
    ),
    (
        "add CHOWN",
        template(context(capabilities={"drop": ["ALL"], "add": ["CHOWN"]})),
        f"{SC}.capabilities.add[0]",
        "'CHOWN'",
        BASELINE,
    ),
    (
        "drop without ALL",
        template(context(capabilities={"drop": ["NET_RAW"]})),
        f"{SC}.capabilities.drop",
        "['NET_RAW']",
        BASELINE,
    ),
    # Baseline: HostPath Volumes; restricted: Volume Types.
    (
        "hostPath",
        template(volumes=[{"name": "h", "hostPath": {"path": "/"}}]),
        f"{POD}.volumes[0].hostPath",
        "{'path': '/'}",
        PRIVILEGED,
    ),
    (
        "nfs",
        template(volumes=[{"name": "n", "nfs": {"server": "s", "path": "/x"}}]),
        f"{POD}.volumes[0].nfs",
        "{'server': 's', 'path': '/x'}",
        BASELINE,
    ),
    # Baseline: Host Ports.
    (
        "hostPort",
        template({"ports": [{"containerPort": 80, "hostPort": 8080}]}),
        f"{C0}.ports[0].hostPort",
        "8080",
        PRIVILEGED,
    ),
    # Baseline: AppArmor (the field and the annotation).
    (
        "appArmor Unconfined",
        template(context(appArmorProfile={"type": "Unconfined"})),
        f"{SC}.appArmorProfile.type",
        "'Unconfined'",
        PRIVILEGED,
    ),
    (
        "appArmor annotation",
        {
            "metadata": {
                "annotations": {"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}
            },
            **template(),
        },
        "spec.pod.template.metadata.annotations"
        "['container.apparmor.security.beta.kubernetes.io/main']",
        "'unconfined'",
        PRIVILEGED,
    ),
    # Baseline: SELinux.
    (
        "seLinux type",
        template(context(seLinuxOptions={"type": "spc_t"})),
        f"{SC}.seLinuxOptions.type",
        "'spc_t'",
        PRIVILEGED,
    ),
    (
        "seLinux user",
        template(securityContext={"seLinuxOptions": {"user": "system_u"}}),
        f"{POD}.securityContext.seLinuxOptions.user",
        "'system_u'",
        PRIVILEGED,
    ),
    # Baseline: /proc Mount Type.
    (
        "procMount",
        template(context(procMount="Unmasked")),
        f"{SC}.procMount",
        "'Unmasked'",
        PRIVILEGED,
    ),
    # Baseline: Seccomp (Unconfined); restricted: RuntimeDefault or Localhost.
    (
        "seccomp Unconfined",
        template(securityContext={"seccompProfile": {"type": "Unconfined"}}),
        f"{POD}.securityContext.seccompProfile.type",
        "'Unconfined'",
        PRIVILEGED,
    ),
    # Baseline: Sysctls.
    (
        "unsafe sysctl",
        template(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}),
        f"{POD}.securityContext.sysctls[0].name",
        "'kernel.msgmax'",
        PRIVILEGED,
    ),
    # Baseline: HostProcess.
    (
        "hostProcess",
        template(context(windowsOptions={"hostProcess": True})),
        f"{SC}.windowsOptions.hostProcess",
        "true",
        PRIVILEGED,
    ),
    # Restricted: Privilege Escalation.
    (
        "allowPrivilegeEscalation",
        template(context(allowPrivilegeEscalation=True)),
        f"{SC}.allowPrivilegeEscalation",
        "true",
        BASELINE,
    ),
    # Restricted: Running as Non-root, and as a non-root user.
    (
        "runAsNonRoot false",
        template(securityContext={"runAsNonRoot": False}),
        f"{POD}.securityContext.runAsNonRoot",
        "false",
        BASELINE,
    ),
    ("runAsUser 0", template(context(runAsUser=0)), f"{SC}.runAsUser", "0", BASELINE),
    (
        "pod runAsUser 0",
        template(securityContext={"runAsUser": 0}),
        f"{POD}.securityContext.runAsUser",
        "0",
        BASELINE,
    ),
]


@pytest.mark.parametrize(
    ("given", "path", "shown", "needs"),
    [row[1:] for row in RULES],
    ids=[row[0] for row in RULES],
)
def test_each_control_names_its_field_value_and_level(
    given: dict[str, Any], path: str, shown: str, needs: str
) -> None:
    assert least_level(given) == needs
    found = violations(given, RESTRICTED)
    assert path in [v.path for v in found], found
    (named,) = [v for v in found if v.path == path]
    assert named.needs == needs
    message = named.message(RESTRICTED)
    assert message.startswith(f"{path}: {shown} is not allowed by Pod Security 'restricted'")
    assert f"podSecurity: {needs}" in message and "allowed: " in message
    # The level it needs allows it; the one below does not.
    assert not [v for v in violations(given, needs) if v.path == path]
    if needs == PRIVILEGED:
        assert [v for v in violations(given, BASELINE) if v.path == path]


ALLOWED: list[tuple[str, dict[str, Any]]] = [
    ("nothing said", template()),
    ("add NET_BIND_SERVICE", template(context(capabilities={"add": ["NET_BIND_SERVICE"]}))),
    ("a uid of its own", template(context(runAsUser=1000, runAsNonRoot=True))),
    ("Localhost seccomp", template(context(seccompProfile={"type": "Localhost"}))),
    ("core volumes", template(volumes=[{"name": "e", "emptyDir": {}}, {"name": "c", "configMap": {"name": "x"}}, {"name": "p", "persistentVolumeClaim": {"claimName": "d"}}])),  # noqa: E501
    ("safe sysctl", template(securityContext={"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]})),  # noqa: E501
    ("container_t", template(context(seLinuxOptions={"type": "container_t"}))),
    ("hostPort 0", template({"ports": [{"containerPort": 80, "hostPort": 0}]})),
    ("privileged false", template(context(privileged=False, allowPrivilegeEscalation=False))),
]  # fmt: skip


@pytest.mark.parametrize("given", [row[1] for row in ALLOWED], ids=[row[0] for row in ALLOWED])
def test_what_restricted_allows(given: dict[str, Any]) -> None:
    assert violations(given, RESTRICTED) == []
    assert least_level(given) == RESTRICTED


def test_a_template_that_says_nothing_is_hardened_to_restricted() -> None:
    spec = template()["spec"]
    spec["initContainers"] = [{"name": "init", "image": "busybox"}]
    hardened = harden(spec, (101000, 101000))
    assert hardened["securityContext"] == {
        "seccompProfile": {"type": "RuntimeDefault"},
        "runAsNonRoot": True,
        "runAsUser": 101000,
        "runAsGroup": 101000,
    }
    for container in (*hardened["containers"], *hardened["initContainers"]):
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }
    assert "securityContext" not in spec  # the template itself is left as it was
    assert harden(template()["spec"])["securityContext"]["runAsUser"] == DEFAULT_RUN_AS[0]


def test_harden_keeps_what_the_template_gives() -> None:
    spec = template(
        context(capabilities={"add": ["NET_BIND_SERVICE"]}, runAsUser=2000),
        securityContext={"runAsGroup": 3000, "seccompProfile": {"type": "Localhost"}},
    )["spec"]
    hardened = harden(spec, (7, 7))
    assert hardened["securityContext"] == {
        "runAsGroup": 3000,
        "seccompProfile": {"type": "Localhost"},
        "runAsNonRoot": True,
        "runAsUser": 7,
    }
    assert hardened["containers"][0]["securityContext"] == {
        "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
        "runAsUser": 2000,
        "allowPrivilegeEscalation": False,
    }


def test_a_template_asking_for_root_or_privilege_is_not_contradicted() -> None:
    # The API server refuses allowPrivilegeEscalation false beside privileged or SYS_ADMIN,
    # and the kubelet refuses runAsNonRoot beside uid 0: harden adds neither there.
    root = harden(template(context(runAsUser=0))["spec"])
    assert "runAsNonRoot" not in root["securityContext"]
    assert "runAsUser" not in root["securityContext"]
    privileged = harden(template(context(privileged=True))["spec"])
    assert "allowPrivilegeEscalation" not in privileged["containers"][0]["securityContext"]
    admin = harden(template(context(capabilities={"add": ["SYS_ADMIN"]}))["spec"])
    assert "allowPrivilegeEscalation" not in admin["containers"][0]["securityContext"]
    asks = template(securityContext={"runAsNonRoot": False})["spec"]
    assert harden(asks)["securityContext"]["runAsNonRoot"] is False


def test_every_violation_is_listed_and_each_level_allows_its_own() -> None:
    given = template(context(privileged=True, capabilities={"add": ["CHOWN"]}), hostPID=True)
    before = copy.deepcopy(given)
    assert [v.path for v in violations(given, RESTRICTED)] == [
        f"{POD}.hostPID",
        f"{SC}.privileged",
        f"{SC}.capabilities.add[0]",
        f"{SC}.allowPrivilegeEscalation",  # not set false beside privileged
    ]
    assert [v.path for v in violations(given, BASELINE)] == [f"{POD}.hostPID", f"{SC}.privileged"]
    assert violations(given, PRIVILEGED) == []
    assert given == before


def test_levels_from_the_policy_and_the_cluster_ceiling() -> None:
    assert pod_security_level({}) == RESTRICTED
    assert pod_security_level({"KONDOR_POD_SECURITY": " Baseline "}) == BASELINE
    assert cluster_ceiling([]) == RESTRICTED
    assert cluster_ceiling([RESTRICTED, PRIVILEGED, BASELINE]) == PRIVILEGED
    assert cluster_ceiling(["restricted", "baseline"]) == BASELINE
    assert [level_index(level) for level in (RESTRICTED, BASELINE, PRIVILEGED)] == [0, 1, 2]
    with pytest.raises(ValueError, match="expected one of restricted, baseline, privileged"):
        level_index("open")
    assert spec_level({}) == RESTRICTED
    assert spec_level({"podSecurity": "baseline"}) == BASELINE
    assert spec_level({"condorConfig": "START = True\nKONDOR_POD_SECURITY = privileged\n"}) == (
        PRIVILEGED
    )


@pytest.mark.parametrize(
    ("spec", "level"),
    [
        ({}, None),
        ({"podSecurity": "baseline"}, "baseline"),
        ({"condorConfig": "KONDOR_POD_SECURITY = privileged"}, "privileged"),
        ({"podSecurity": "restricted", "condorConfig": "KONDOR_POD_SECURITY = privileged"},
         "restricted"),
    ],
)  # fmt: skip
def test_the_policy_field_and_knob_compile_to_the_agents_macro(
    spec: dict[str, Any], level: str | None
) -> None:
    from kondor_core.api import SlotPolicySpec

    compiled = compile_policy(SlotPolicySpec.model_validate(spec))
    assert compiled.macros.get("KONDOR_POD_SECURITY") == level
    assert spec_level(spec) == (level or RESTRICTED)
