"""Kondor's own processes in a dev cluster: the operator and one agent per simulated node.

Command lines are pure functions of paths, so tests check them without starting anything.
The operator runs as the cluster's `admin` identity; each agent as the chart's agent
ServiceAccount with a token bound to its Node (`config/agent-<node>.kubeconfig`), so the
chart's agent RBAC and admission policies apply to it as on a real cluster.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kondor_agent.execute.cgroups import CgroupError, JobCgroups
from kondor_devcluster.chart import Release
from kondor_devcluster.components import Layout
from kondor_devcluster.pki import WEBHOOK

#: The kubeconfig the operator uses (admin identity, one context).
KONDOR_IDENTITY = "admin"
OPERATOR = "kondor-operator"
#: The release whose names the dev cluster gives Kondor's ServiceAccounts and policies.
RELEASE = Release()
#: Seconds an agent's Node-bound token lasts; each agent start asks for a new one.
AGENT_TOKEN_SECONDS = 7 * 24 * 3600


def agent_name(node: str) -> str:
    """The component name of the agent for `node` (its log is logs/<name>.log)."""
    return f"kondor-agent-{node}"


def agent_node(component: str) -> str | None:
    """The node of an agent's component name; None for any other component."""
    prefix = agent_name("")
    return component[len(prefix) :] if component.startswith(prefix) else None


def kondor_kubeconfig(layout: Layout) -> Path:
    return layout.component_kubeconfig("kondor")


def agent_kubeconfig(layout: Layout, node: str) -> Path:
    """The agent's own kubeconfig: the agent ServiceAccount, its token bound to `node`."""
    return layout.component_kubeconfig(f"agent-{node}")


def agent_token_request(node: str, node_uid: str) -> dict[str, Any]:
    """The TokenRequest for `node`'s agent: bound to the Node object, so the token carries
    the node-name claim the admission policy reads, and dies with the Node."""
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": AGENT_TOKEN_SECONDS,
            "boundObjectRef": {"kind": "Node", "apiVersion": "v1", "name": node, "uid": node_uid},
        },
    }


def agent_state_dir(layout: Layout, node: str) -> Path:
    return layout.state_dir / "agents" / node


def hooks_dir(layout: Layout) -> Path:
    """`<state>/hooks`: the one hooks directory of every agent of the cluster, and the one
    the operator's SlotPolicy admission checks hook paths in (as the chart mounts the
    agents' directory, the same on every node, into the operator), so a symlink out of it
    is refused at `kubectl apply`, not found when the hook would run."""
    return layout.state_dir / "hooks"


def operator_available() -> str | None:
    """None when `kondor_operator.main` can be run; otherwise why not."""
    try:
        found = importlib.util.find_spec("kondor_operator.main")
    except (ImportError, ValueError) as error:
        return f"kondor_operator cannot be imported ({error})"
    if found is None:
        return "kondor_operator is not installed"
    return None


def operator_args(layout: Layout, python: str = sys.executable) -> list[str]:
    """`python -m kondor_operator.main --kubeconfig ...` (its other settings come from the
    environment: `operator_env`)."""
    return [python, "-m", "kondor_operator.main", "--kubeconfig", str(kondor_kubeconfig(layout))]


def operator_env(layout: Layout, metrics_port: int, webhook_port: int) -> dict[str, str]:
    """The operator's settings as its KONDOR_* variables: ports of this cluster's own, so that
    two dev clusters run side by side; KUBECONFIG for any client that reads only that. Every
    replica serves the webhooks on the one port (as a Service's endpoints would), with the
    certificate the cluster's CA signed (`pki.webhook_credentials`), and writes the
    configurations with the owner policy's matchConditions (the dev cluster applies it)."""
    pki = layout.pki
    return {
        "KUBECONFIG": str(kondor_kubeconfig(layout)),
        "KONDOR_METRICS_PORT": str(metrics_port),
        "KONDOR_METRICS_ADDR": "127.0.0.1",
        "KONDOR_WEBHOOK_PORT": str(webhook_port),
        "KONDOR_WEBHOOK_CERT": str(pki.cert(WEBHOOK)),
        "KONDOR_WEBHOOK_KEY": str(pki.key(WEBHOOK)),
        "KONDOR_WEBHOOK_CA": str(pki.ca_cert),
        "KONDOR_ADMISSION_POLICIES": "true",
        # SlotPolicy admission checks hook programs, symlinks resolved, in the directory
        # every agent runs them from.
        "KONDOR_HOOKS_DIR": str(hooks_dir(layout)),
    }


def agent_env(apptainer_bin: Path | None, path: str | None = None) -> dict[str, str] | None:
    """What an agent's environment adds to the cluster's: Apptainer's directory first on its
    PATH where Apptainer is built, since the agent runs the `apptainer` its PATH finds (as
    on a node where it is installed on the host); None where there is nothing to add."""
    if apptainer_bin is None:
        return None
    rest = os.environ.get("PATH", os.defpath) if path is None else path
    return {"PATH": f"{apptainer_bin}{os.pathsep}{rest}"}


def agent_cgroup_root(layout: Layout, node: str) -> str:
    """The agent's cgroup root, relative to its own cgroup: `kondor-<node>-<cluster>`.

    Every dev cluster on a host may have a node of the same name (and its agents share the
    cgroup of whoever started them), so the root names the cluster too, by its state directory:
    two clusters' jobs never share a cgroup, nor kill each other's processes with it.
    """
    cluster = hashlib.sha1(str(layout.state_dir.resolve()).encode()).hexdigest()[:8]
    return f"kondor-{node}-{cluster}"


def remove_agent_cgroups(layout: Layout, nodes: Iterable[str]) -> list[str]:
    """Remove the cgroup roots the agents of `nodes` made (`agent_cgroup_root`: the
    supervisors', slots' and jobs' cgroups in every hierarchy, devices and freezer too), once
    the agents have stopped, so a dev cluster leaves nothing in the host's cgroup trees.
    Returns what was left and why: a cgroup still holding a process, or no right to write.
    """
    if os.geteuid() != 0:
        return []  # an agent not run as root made no cgroups
    left = []
    for node in nodes:
        try:
            JobCgroups.open(root=agent_cgroup_root(layout, node)).remove_root()
        except (CgroupError, OSError) as err:
            left.append(f"{node}: {err}")
    return left


def agent_args(
    layout: Layout,
    node: str,
    machine: Path | None,
    python: str = sys.executable,
    *,
    nvml: Path | None = None,
    gpu_devices: Path | None = None,
) -> list[str]:
    """One node's agent: a simulated node's reads its machine file, the real node's (None)
    detects this host (its GPUs from the NVML recording `nvml`, when given)."""
    facts = [] if machine is None else ["--machine", str(machine)]
    facts += [] if nvml is None else ["--nvml-recording", str(nvml)]
    facts += [] if gpu_devices is None else ["--gpu-devices-root", str(gpu_devices)]
    return [
        python,
        "-m",
        "kondor_agent.main",
        "--node-name",
        node,
        *facts,
        "--kubeconfig",
        str(agent_kubeconfig(layout, node)),
        "--state-dir",
        str(agent_state_dir(layout, node)),
        # Jobs run as real processes on this machine: each node has its own execute dir, and
        # job cgroups go inside the agent's own cgroup (no write outside what it was given).
        "--execute-dir",
        str(agent_state_dir(layout, node) / "execute"),
        "--cgroup-root",
        agent_cgroup_root(layout, node),
        # Startd cron and job hooks run from the cluster's hooks directory (tests put their
        # scripts there), not the host's /etc/kondor/hooks.
        "--hooks-dir",
        str(hooks_dir(layout)),
    ]
