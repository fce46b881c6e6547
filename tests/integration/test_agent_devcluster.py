"""`kondor dev-cluster up --operator --agents`: a cluster of its own whose simulated node runs
a real agent; the agent publishes once an ExecutionPoint names a policy, and `down` (here
`stop`) ends it with the cluster."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from kondor_devcluster import kondor
from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port, read_pids

from .conftest import MACHINES, skip_reason

GROUP, VERSION = "kondor.io", "v1alpha1"
NODE = "kwok-small-0"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text())


def test_agents_run_per_node_publish_and_stop_with_the_cluster(tmp_path: Path) -> None:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    spec = ClusterSpec(
        port=free_port(),
        kubeconfig=tmp_path / "kubeconfig",
        state_dir=tmp_path / "state",
        nodes=(MACHINES / "kwok-small.yaml",),
        operator=True,
        agents=True,
    )
    cluster = DevCluster(spec, log=sys.stderr)
    cluster.start()
    try:
        pids = {name: pid for name, pid, _binary in read_pids(cluster.layout)}
        agent = kondor.agent_name(NODE)
        assert agent in pids and _alive(pids[agent])
        api = config.new_client_from_config(config_file=str(spec.kubeconfig), context="admin")
        objects = client.CustomObjectsApi(api)
        objects.create_cluster_custom_object(
            GROUP,
            VERSION,
            "slotpolicies",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "SlotPolicy",
                "metadata": {"name": "everything"},
                "spec": {"nodeSelector": {"matchLabels": {"kondor.io/pool": "cpu"}}},
            },
        )
        body: dict[str, Any] = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ExecutionPoint",
            "metadata": {"name": NODE},
            "spec": {"nodeName": NODE, "policy": {"name": "everything"}},
        }
        # The operator may already have made it (if this build has one); else stand in for it.
        try:
            objects.create_cluster_custom_object(GROUP, VERSION, "executionpoints", body)
        except client.ApiException as error:
            if error.status != 409:
                raise
        deadline = time.monotonic() + 15
        slots: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not slots:
            ep = objects.get_cluster_custom_object(GROUP, VERSION, "executionpoints", NODE)
            slots = (ep.get("status") or {}).get("slots") or []
            time.sleep(0.3)
        assert [slot["name"] for slot in slots] == [f"slot1@{NODE}"]
        kubectl_kondor = subprocess.run(
            [sys.executable, "-m", "kondor_cli.main", "status", "--kubeconfig",
             str(spec.kubeconfig), "--context", "admin"],
            capture_output=True,
            text=True,
            check=True,
        )  # fmt: skip
        assert f"slot1@{NODE}" in kubectl_kondor.stdout
        assert (cluster.layout.logs / f"{agent}.log").exists()
    finally:
        cluster.stop()
    assert not _alive(pids[agent])
    assert not cluster.layout.pids.exists()
