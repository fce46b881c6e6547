"""Pod jobs under the Pod Security Standards: what a pod template may ask for, and the
hardened security context every job pod gets.

The Pod Security Standards (kubernetes.io, "Pod Security Standards") define three cumulative
levels: `privileged` (no restriction), `baseline` (no known privilege escalation) and
`restricted` (current hardening practice). A SlotPolicy names the most a pod job's template
may ask for on its nodes (`podSecurity`, the KONDOR_POD_SECURITY knob; default
`restricted`), as HTCondor's startd decides what its jobs may do on its machine:

* at submission the job cannot know its node, so admission refuses a template that no
  SlotPolicy of the cluster allows (`violations` at `cluster_ceiling` of their levels);
* the node's agent checks again against its own SlotPolicy's level before it creates the
  Pod, and holds the job with HoldReasonCode 21 (StartdHeldJob: the machine's policy held
  it) and a reason naming the field;
* every job pod is hardened where its template says nothing (`harden`): non-root with a
  non-root uid and gid, no privilege escalation, all capabilities dropped, seccomp
  RuntimeDefault. A level above `restricted` lets a template ask for more; it never removes
  the defaults from a template that does not.

`violations` implements each control of both levels as the Kubernetes page lists it (the
`latest` version, as the API server's PodSecurity admission plugin checks it), each one
naming the field path, the value and what the level allows.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kondor_core.api.slotpolicy import POD_SECURITY_LEVELS

RESTRICTED, BASELINE, PRIVILEGED = POD_SECURITY_LEVELS
#: HTCondor's HoldReasonCode StartdHeldJob: the machine's policy held the job.
STARTD_HELD_JOB = 21
#: The uid and gid a job pod runs as when its template names none: HTCondor's last resort
#: slot user, `nobody` (NOBODY_SLOT_USER), on most Linux distributions 65534.
DEFAULT_RUN_AS = (65534, 65534)

#: Capabilities baseline allows a container to add (Docker's default set, less NET_RAW).
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
#: The one capability restricted allows a container to add.
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
#: Sysctls baseline allows (the "safe" set, namespaced and isolated between pods).
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
#: SELinux types baseline allows (empty counts as unset).
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
#: Volume types restricted allows: the core types and those an admin's PersistentVolumes
#: back (every other type reaches storage the pod's user chose, or the node).
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
_SECURE_PROFILES = ("RuntimeDefault", "Localhost")


@dataclass(frozen=True)
class Violation:
    """One field asking for more than a level allows: where, what it says, what the level
    allows, and the least level that would allow it."""

    path: str
    value: object
    allowed: str
    needs: str

    def message(self, level: str) -> str:
        return (
            f"{self.path}: {_show(self.value)} is not allowed by Pod Security {level!r} "
            f"(allowed: {self.allowed}); it needs a SlotPolicy with podSecurity: {self.needs}"
        )


def level_index(level: str) -> int:
    """The level's rank: 0 restricted, 1 baseline, 2 privileged. Raises ValueError."""
    name = level.strip().lower()
    if name not in POD_SECURITY_LEVELS:
        raise ValueError(
            f"{level!r} is not a Pod Security level: expected one of "
            f"{', '.join(POD_SECURITY_LEVELS)}"
        )
    return POD_SECURITY_LEVELS.index(name)


def pod_security_level(macros: Mapping[str, str]) -> str:
    """A node's level from its policy's knobs (KONDOR_POD_SECURITY; the compiler has refused
    a value that is not a level): restricted unless the SlotPolicy says more."""
    level = macros.get("KONDOR_POD_SECURITY", "").strip().lower()
    return level if level in POD_SECURITY_LEVELS else RESTRICTED


def cluster_ceiling(levels: Iterable[str]) -> str:
    """The most any of these SlotPolicies' levels allows (restricted when there are none):
    what a job may ask for at submission, before it has a node."""
    ranks = [level_index(level) for level in levels if level.strip().lower() in POD_SECURITY_LEVELS]
    return POD_SECURITY_LEVELS[max(ranks, default=0)]


def spec_level(spec: Mapping[str, Any]) -> str:
    """A SlotPolicy spec's level as written: `podSecurity`, else KONDOR_POD_SECURITY in its
    condorConfig (the last plain `NAME = value` line), else restricted."""
    field = spec.get("podSecurity")
    if isinstance(field, str) and field.strip().lower() in POD_SECURITY_LEVELS:
        return field.strip().lower()
    level = RESTRICTED
    config = spec.get("condorConfig")
    for line in config.splitlines() if isinstance(config, str) else ():
        name, equals, value = line.partition("=")
        named = equals and name.strip().upper() == "KONDOR_POD_SECURITY"
        if named and value.strip().lower() in POD_SECURITY_LEVELS:
            level = value.strip().lower()
    return level


def violations(
    template: Mapping[str, Any], level: str, path: str = "spec.pod.template"
) -> list[Violation]:
    """What the Pod made of a PodTemplateSpec (`metadata`, `spec`; hardened: `harden`) asks
    for beyond `level`, each with its field path under `path`; [] when the level allows all
    of it. A template that says nothing about security meets `restricted`."""
    allowed = level_index(level)
    return [found for found in _all_findings(template, path) if level_index(found.needs) > allowed]


def least_level(template: Mapping[str, Any]) -> str:
    """The least Pod Security level that allows the Pod made of the template."""
    return cluster_ceiling(found.needs for found in _all_findings(template, "spec"))


def harden(spec: Mapping[str, Any], run_as: tuple[int, int] = DEFAULT_RUN_AS) -> dict[str, Any]:
    """The pod spec with the restricted security context filled in where it says nothing:

    * each container: `allowPrivilegeEscalation: false` (unless privileged or adding
      SYS_ADMIN, which the API server refuses beside it) and `capabilities.drop: [ALL]`;
    * the pod: `seccompProfile: RuntimeDefault`, and, unless something asks for root
      (`runAsNonRoot: false`, `runAsUser: 0`), `runAsNonRoot: true` with `runAsUser` and
      `runAsGroup` from `run_as` (an image's own user may be root: the kubelet would refuse
      to start it under runAsNonRoot without a uid).

    A field the template gives is kept as given (checking it is `violations`' part)."""
    hardened: dict[str, Any] = copy.deepcopy(dict(spec))
    containers = [
        c for name in _CONTAINER_LISTS for c in hardened.get(name) or [] if isinstance(c, dict)
    ]
    for container in containers:
        context = container.setdefault("securityContext", {})
        if not isinstance(context, dict):
            continue
        capabilities = context.get("capabilities")
        adds = _names(
            (capabilities or {}).get("add") if isinstance(capabilities, Mapping) else None
        )
        # The API server refuses allowPrivilegeEscalation false beside either of these.
        escalates = context.get("privileged") or {"SYS_ADMIN", "CAP_SYS_ADMIN"} & set(adds)
        if "allowPrivilegeEscalation" not in context and not escalates:
            context["allowPrivilegeEscalation"] = False
        if capabilities is None:
            context["capabilities"] = {"drop": ["ALL"]}
        elif isinstance(capabilities, dict) and "drop" not in capabilities:
            capabilities["drop"] = ["ALL"]
    pod_context = hardened.setdefault("securityContext", {})
    if not isinstance(pod_context, dict):
        return hardened
    pod_context.setdefault("seccompProfile", {"type": "RuntimeDefault"})
    contexts = [pod_context, *(c.get("securityContext") or {} for c in containers)]
    asks_for_root = any(
        isinstance(context, Mapping)
        and (context.get("runAsNonRoot") is False or context.get("runAsUser") == 0)
        for context in contexts
    )
    if not asks_for_root:
        pod_context.setdefault("runAsNonRoot", True)
        pod_context.setdefault("runAsUser", run_as[0])
        pod_context.setdefault("runAsGroup", run_as[1])
    return hardened


def _all_findings(template: Mapping[str, Any], path: str) -> list[Violation]:
    spec = template.get("spec")
    metadata = template.get("metadata")
    spec = harden(spec) if isinstance(spec, Mapping) else {}
    metadata = metadata if isinstance(metadata, Mapping) else {}
    return [
        *_pod_findings(spec, f"{path}.spec"),
        *_annotation_findings(metadata, f"{path}.metadata"),
        *(
            finding
            for where, container in _containers(spec, f"{path}.spec")
            for finding in _container_findings(container, where)
        ),
        *_run_as_non_root(spec, f"{path}.spec"),
        *_seccomp_restricted(spec, f"{path}.spec"),
    ]


def _pod_findings(spec: Mapping[str, Any], at: str) -> Iterator[Violation]:
    for name in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(name):
            yield Violation(f"{at}.{name}", spec[name], "false or unset", PRIVILEGED)
    for index, volume in enumerate(_list(spec.get("volumes"))):
        kinds = [key for key in volume if key != "name"] if isinstance(volume, Mapping) else []
        for kind in kinds:
            where = f"{at}.volumes[{index}].{kind}"
            if kind == "hostPath":
                yield Violation(where, volume[kind], "no hostPath volume", PRIVILEGED)
            elif kind not in RESTRICTED_VOLUMES:
                yield Violation(
                    where,
                    volume[kind],
                    f"volumes of the types {', '.join(sorted(RESTRICTED_VOLUMES))}",
                    BASELINE,
                )
    context = spec.get("securityContext")
    if isinstance(context, Mapping):
        yield from _context_findings(context, f"{at}.securityContext")
        for index, sysctl in enumerate(_list(context.get("sysctls"))):
            sysctl_name = sysctl.get("name") if isinstance(sysctl, Mapping) else sysctl
            if sysctl_name not in SAFE_SYSCTLS:
                yield Violation(
                    f"{at}.securityContext.sysctls[{index}].name",
                    sysctl_name,
                    f"the safe sysctls {', '.join(sorted(SAFE_SYSCTLS))}",
                    PRIVILEGED,
                )
        if context.get("runAsUser") == 0:
            yield Violation(
                f"{at}.securityContext.runAsUser", 0, "a non-zero uid or unset", BASELINE
            )


def _annotation_findings(metadata: Mapping[str, Any], at: str) -> Iterator[Violation]:
    annotations = metadata.get("annotations")
    for key, value in annotations.items() if isinstance(annotations, Mapping) else ():
        secure = value == "runtime/default" or str(value).startswith("localhost/")
        if str(key).startswith(_APPARMOR_ANNOTATION) and not secure:
            yield Violation(
                f"{at}.annotations['{key}']",
                value,
                "runtime/default, localhost/<profile> or unset",
                PRIVILEGED,
            )


def _containers(spec: Mapping[str, Any], at: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for name in _CONTAINER_LISTS:
        for index, container in enumerate(_list(spec.get(name))):
            if isinstance(container, Mapping):
                yield f"{at}.{name}[{index}]", container


def _container_findings(container: Mapping[str, Any], at: str) -> Iterator[Violation]:
    for index, port in enumerate(_list(container.get("ports"))):
        host_port = port.get("hostPort") if isinstance(port, Mapping) else None
        if host_port:
            yield Violation(f"{at}.ports[{index}].hostPort", host_port, "0 or unset", PRIVILEGED)
    context = container.get("securityContext")
    if not isinstance(context, Mapping):
        context = {}
    where = f"{at}.securityContext"
    if context.get("privileged"):
        yield Violation(f"{where}.privileged", context["privileged"], "false or unset", PRIVILEGED)
    proc_mount = context.get("procMount")
    if proc_mount not in (None, "Default"):
        yield Violation(f"{where}.procMount", proc_mount, "Default or unset", PRIVILEGED)
    capabilities = context.get("capabilities")
    capabilities = capabilities if isinstance(capabilities, Mapping) else {}
    for index, name in enumerate(_names(capabilities.get("add"))):
        if name not in BASELINE_CAPABILITIES:
            yield Violation(
                f"{where}.capabilities.add[{index}]",
                name,
                f"the capabilities {', '.join(sorted(BASELINE_CAPABILITIES))}",
                PRIVILEGED,
            )
        elif name not in RESTRICTED_CAPABILITIES:
            yield Violation(
                f"{where}.capabilities.add[{index}]", name, "NET_BIND_SERVICE only", BASELINE
            )
    if "ALL" not in _names(capabilities.get("drop")):
        yield Violation(
            f"{where}.capabilities.drop",
            capabilities.get("drop"),
            "a list that includes ALL",
            BASELINE,
        )
    if context.get("allowPrivilegeEscalation") is not False:
        yield Violation(
            f"{where}.allowPrivilegeEscalation",
            context.get("allowPrivilegeEscalation"),
            "false",
            BASELINE,
        )
    yield from _context_findings(context, where)
    if context.get("runAsUser") == 0:
        yield Violation(f"{where}.runAsUser", 0, "a non-zero uid or unset", BASELINE)


def _context_findings(context: Mapping[str, Any], where: str) -> Iterator[Violation]:
    """The controls a pod's and a container's securityContext share at baseline."""
    windows = context.get("windowsOptions")
    if isinstance(windows, Mapping) and windows.get("hostProcess"):
        yield Violation(
            f"{where}.windowsOptions.hostProcess", windows["hostProcess"], "false or unset",
            PRIVILEGED,
        )  # fmt: skip
    selinux = context.get("seLinuxOptions")
    if isinstance(selinux, Mapping):
        if selinux.get("type") is not None and selinux.get("type") not in SELINUX_TYPES:
            yield Violation(
                f"{where}.seLinuxOptions.type",
                selinux["type"],
                f"one of {', '.join(sorted(t for t in SELINUX_TYPES if t))} or unset",
                PRIVILEGED,
            )
        for key in ("user", "role"):
            if selinux.get(key):
                yield Violation(f"{where}.seLinuxOptions.{key}", selinux[key], "unset", PRIVILEGED)
    for key in ("seccompProfile", "appArmorProfile"):
        profile = context.get(key)
        kind = profile.get("type") if isinstance(profile, Mapping) else None
        if kind is not None and kind not in _SECURE_PROFILES:
            yield Violation(
                f"{where}.{key}.type", kind, "RuntimeDefault, Localhost or unset", PRIVILEGED
            )


def _run_as_non_root(spec: Mapping[str, Any], at: str) -> Iterator[Violation]:
    """restricted: every container runs with runAsNonRoot true, its own or the pod's."""
    context = spec.get("securityContext")
    pod = context.get("runAsNonRoot") if isinstance(context, Mapping) else None
    if pod is False:
        yield Violation(f"{at}.securityContext.runAsNonRoot", False, "true", BASELINE)
    for where, container in _containers(spec, at):
        own = container.get("securityContext")
        value = own.get("runAsNonRoot") if isinstance(own, Mapping) else None
        if value is False or (value is None and pod is not True):
            yield Violation(
                f"{where}.securityContext.runAsNonRoot",
                value,
                "true, here or in the pod's securityContext",
                BASELINE,
            )


def _seccomp_restricted(spec: Mapping[str, Any], at: str) -> Iterator[Violation]:
    """restricted: every container's seccomp profile, its own or the pod's, is RuntimeDefault
    or Localhost (baseline has refused Unconfined already)."""
    context = spec.get("securityContext")
    profile = context.get("seccompProfile") if isinstance(context, Mapping) else None
    pod = profile.get("type") if isinstance(profile, Mapping) else None
    for where, container in _containers(spec, at):
        own = container.get("securityContext")
        mine = own.get("seccompProfile") if isinstance(own, Mapping) else None
        kind = mine.get("type") if isinstance(mine, Mapping) else None
        if kind is None and pod is None:
            yield Violation(
                f"{where}.securityContext.seccompProfile.type",
                None,
                "RuntimeDefault or Localhost, here or in the pod's securityContext",
                BASELINE,
            )


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _names(value: object) -> list[str]:
    return [str(item) for item in _list(value)]


def _show(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    return str(value)
