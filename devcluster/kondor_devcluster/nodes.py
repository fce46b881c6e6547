"""Simulated nodes: a machine file becomes a kwok-managed Node; kwok stages play the kubelet.

A machine file (the format of `kondor simulate --machine`, model `kondor_core.api.Machine`)
gives the Node its capacity and labels. kwok keeps the Node Ready as a kubelet does (a Lease
renewed every 10 s, the status written every 5 minutes), and the pod stages below move pods
bound to it through their phases:

* a pod bound to a simulated node goes `Running` at once (with a pod IP);
* a running pod with the annotation `kondor.io/sim-duration` (a Go duration, `"30s"`) ends that
  long after it went Running: `Succeeded` when `kondor.io/sim-exit-code` is absent or `"0"`,
  else `Failed`, each container terminated with that exit code;
* a pod being deleted is removed once its finalizers are gone (no grace period is simulated).

Nothing runs: this is a simulation of the kubelet, for the control plane's and Kondor's sake.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from kondor_core.api import InvalidObjectError, Machine, parse_machine_file
from kondor_devcluster.components import KWOK_NODE_ANNOTATION, KWOK_NODE_ANNOTATION_VALUE

SIM_DURATION_ANNOTATION = "kondor.io/sim-duration"
SIM_EXIT_CODE_ANNOTATION = "kondor.io/sim-exit-code"
#: Extended resources of a machine file's `resources:` are advertised under this prefix.
EXTENDED_RESOURCE_PREFIX = "kondor.io/"
GPU_RESOURCE = "nvidia.com/gpu"
PODS_PER_NODE = 110

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def load_machine(path: Path) -> Machine:
    """Parse a machine file (`kondor_core.api.parse_machine_file`); errors name the file, and
    each problem its field and value."""
    try:
        content = path.read_bytes()
    except OSError as error:
        raise ValueError(f"{path}: cannot read the machine file: {error}") from error
    try:
        return parse_machine_file(content, str(path))
    except InvalidObjectError as error:
        problems = "; ".join(error.problems)
        raise ValueError(f"{path}: not a machine description: {problems}") from None


def _quantity(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def node_capacity(machine: Machine) -> dict[str, str]:
    """Capacity (= allocatable: nothing is reserved) of the Node for `machine`."""
    capacity = {
        "cpu": str(machine.cpus),
        "memory": f"{machine.memory_mib}Mi",
        "pods": str(PODS_PER_NODE),
    }
    if machine.disk_kib:
        capacity["ephemeral-storage"] = f"{machine.disk_kib}Ki"
    if machine.gpus:
        capacity[GPU_RESOURCE] = str(len(machine.gpus))
    for name, amount in sorted(machine.resources.items()):
        capacity[EXTENDED_RESOURCE_PREFIX + name.lower()] = _quantity(amount)
    return capacity


def node_manifest(machine: Machine) -> dict[str, Any]:
    """The Node object for `machine`: labels from the file, annotated so that kwok manages it."""
    name = machine.name
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise ValueError(
            f"name: {name!r} cannot name a Node; use lower-case letters, digits, '-' and '.'"
        )
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        # The node lifecycle controller copies these two to their beta labels, one patch per
        # Node at its client's 20 a second: a fleet created at once would wait minutes.
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "type": "kwok",
        **machine.labels,
    }
    capacity = node_capacity(machine)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE,
                "node.alpha.kubernetes.io/ttl": "0",
            },
        },
        "spec": {},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


_RUNNING_TEMPLATE = """\
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
{{ range .spec.readinessGates }}
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: {{ .conditionType | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}
phase: Running
startTime: {{ $now | Quote }}
"""

_FINISHED_TEMPLATE = """\
{{ $now := Now }}
{{ $code := or ( index .metadata.annotations "kondor.io/sim-exit-code" ) "0" }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  reason: PodCompleted
  status: "False"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  reason: PodCompleted
  status: "False"
  type: ContainersReady
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {{ $code }}
      startedAt: {{ or .status.startTime $now | Quote }}
      finishedAt: {{ $now | Quote }}
      reason: {{ if eq $code "0" }}Completed{{ else }}Error{{ end }}
{{ end }}
phase: {{ if eq $code "0" }}Succeeded{{ else }}Failed{{ end }}
"""


#: The Node's conditions as kwok reports them, each with this heartbeat's time.
_NODE_CONDITIONS_TEMPLATE = """\
{{ $now := Now }}
{{ $since := or .metadata.creationTimestamp $now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $since | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
"""

#: A new Node goes Ready: its conditions, addresses, kubelet port and node info. kwok patches
#: the status, so the capacity the machine file gave it stays.
_NODE_READY_TEMPLATE = (
    _NODE_CONDITIONS_TEMPLATE
    + """\
addresses:
{{ with .status.addresses }}
{{ YAML . 1 }}
{{ else }}
- address: {{ NodeIP | Quote }}
  type: InternalIP
- address: {{ NodeName | Quote }}
  type: Hostname
{{ end }}
{{ with NodePort }}
daemonEndpoints:
  kubeletEndpoint:
    Port: {{ . }}
{{ end }}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  kubeletVersion: {{ printf "kwok-%s" Version | Quote }}
  kubeProxyVersion: {{ printf "kwok-%s" Version | Quote }}
  containerRuntimeVersion: {{ printf "kwok-%s" Version | Quote }}
  kernelVersion: {{ printf "kwok-%s" Version | Quote }}
  bootID: ""
  machineID: ""
  osImage: ""
  systemUUID: ""
phase: Running
"""
)

#: How often a Node's status is written while nothing in it changes: the kubelet's
#: nodeStatusReportFrequency, 5 minutes, on average. kwok draws each delay between the two
#: bounds; drawn this widely, a fleet created at once stops reporting in step after its
#: first report, as a real fleet's nodes (booted at different times) never did. Liveness is
#: the Lease kwok renews every 10 s (--node-lease-duration-seconds=40), as the kubelet's.
#: kwok v0.7.0 picks its lease-less heartbeat (every 20 to 45 s) when the lease is on, 7 to
#: 15 times the kubelet's write rate, hence these stages of our own.
NODE_STATUS_REPORT_MS = (60_000, 540_000)


def _stage(
    name: str, selector: list[dict[str, Any]], spec: dict[str, Any], kind: str = "Pod"
) -> dict[str, Any]:
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": kind},
            "selector": {"matchExpressions": selector},
            **spec,
        },
    }


def _annotation(name: str) -> str:
    return f'.metadata.annotations["{name}"]'


def pod_stages() -> list[dict[str, Any]]:
    """kwok Stages for pods on simulated nodes."""
    not_deleted = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
    return [
        _stage(
            "kondor-pod-running",
            [not_deleted, {"key": ".status.podIP", "operator": "DoesNotExist"}],
            {"next": {"statusTemplate": _RUNNING_TEMPLATE}},
        ),
        _stage(
            "kondor-pod-finished",
            [
                not_deleted,
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": _annotation(SIM_DURATION_ANNOTATION), "operator": "Exists"},
            ],
            {
                "delay": {
                    "durationMilliseconds": 0,
                    "durationFrom": {"expressionFrom": _annotation(SIM_DURATION_ANNOTATION)},
                },
                "next": {"statusTemplate": _FINISHED_TEMPLATE},
            },
        ),
        _stage(
            "kondor-pod-delete",
            [
                {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
                {"key": ".metadata.finalizers", "operator": "DoesNotExist"},
            ],
            {"next": {"delete": True}},
        ),
    ]


def node_stages() -> list[dict[str, Any]]:
    """kwok Stages for simulated Nodes: Ready once created, then a status heartbeat at the
    kubelet's report frequency."""
    ready = '.status.conditions.[] | select( .type == "Ready" ) | .status'
    return [
        _stage(
            "kondor-node-ready",
            [{"key": ready, "operator": "NotIn", "values": ["True"]}],
            {"next": {"statusTemplate": _NODE_READY_TEMPLATE}},
            kind="Node",
        ),
        _stage(
            "kondor-node-heartbeat",
            [
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": ready, "operator": "In", "values": ["True"]},
            ],
            {
                "delay": {
                    "durationMilliseconds": NODE_STATUS_REPORT_MS[0],
                    "jitterDurationMilliseconds": NODE_STATUS_REPORT_MS[1],
                },
                "next": {"statusTemplate": _NODE_CONDITIONS_TEMPLATE},
            },
            kind="Node",
        ),
    ]


def kwok_config_yaml() -> str:
    """The file kwok reads with `--config`: our node and pod stages."""
    return yaml.safe_dump_all([*node_stages(), *pod_stages()], sort_keys=False)
