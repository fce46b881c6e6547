"""`kondor dev-cluster up|down`: detach, stop, restart with the same state, two side by side; a
detached cluster usable when `up` returns, restarting dead agents, and gone when `down` returns."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port

from .conftest import ROOT
from .waiting import eventually

pytestmark = pytest.mark.timeout(240)


def dev_cluster_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kondor_devcluster", "dev-cluster", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def core_api(kubeconfig: Path) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))


def test_restart_with_the_same_state_dir_finds_every_object(
    tmp_path: Path, dev_cluster: DevCluster
) -> None:
    state = tmp_path / "state"
    kubeconfig = tmp_path / "kubeconfig"
    port = free_port()
    up = ("up", "--port", str(port), "--kubeconfig", str(kubeconfig), "--state-dir", str(state))
    try:
        started = dev_cluster_cli(*up, "--detach")
        assert started.returncode == 0, started.stderr
        assert (state / "pids.json").exists()
        core_api(kubeconfig).create_namespaced_config_map(
            "default",
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name="keep-me"), data={"a": "b"}),
        )

        again = dev_cluster_cli(*up, "--detach")
        assert again.returncode == 1
        assert "already runs" in again.stderr

        stopped = dev_cluster_cli("down", "--state-dir", str(state))
        assert stopped.returncode == 0, stopped.stderr
        assert not (state / "pids.json").exists()
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"https://127.0.0.1:{port}/readyz", verify=False, timeout=2)

        restarted = dev_cluster_cli(*up, "--detach")
        assert restarted.returncode == 0, restarted.stderr
        kept = core_api(kubeconfig).read_namespaced_config_map("keep-me", "default")
        assert kept.data == {"a": "b"}
    finally:
        dev_cluster_cli("down", "--state-dir", str(state))


def test_two_clusters_run_side_by_side(tmp_path: Path, dev_cluster: DevCluster) -> None:
    spec = ClusterSpec(
        port=free_port(), kubeconfig=tmp_path / "kubeconfig", state_dir=tmp_path / "state"
    )
    with DevCluster(spec) as second:
        assert set(second.ports.as_dict().values()).isdisjoint(dev_cluster.ports.as_dict().values())
        core_api(spec.kubeconfig).create_namespaced_config_map(
            "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="only-in-second"))
        )
        with pytest.raises(ApiException) as missing:
            core_api(dev_cluster.spec.kubeconfig).read_namespaced_config_map(
                "only-in-second", "default"
            )
        assert missing.value.status == 404


def _ps(state: Path) -> dict[str, int]:
    listed = dev_cluster_cli("ps", "--state-dir", str(state), "-o", "json")
    assert listed.returncode == 0, listed.stderr
    return {row["component"]: row["pid"] for row in json.loads(listed.stdout)}


def _alive(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return bool(cmdline)  # a zombie has none: it runs nothing any more


def test_a_detached_cluster_is_usable_at_once_restarts_a_dead_agent_and_down_waits(
    tmp_path: Path, dev_cluster: DevCluster
) -> None:
    state = tmp_path / "state"
    kubeconfig = tmp_path / "kubeconfig"
    machine = ROOT / "examples" / "machines" / "kwok-small.yaml"
    up = ("up", "--port", str(free_port()), "--kubeconfig", str(kubeconfig))
    agent = "kondor-agent-kwok-small-0"
    seen: set[int] = set()
    try:
        started = dev_cluster_cli(
            *up, "--state-dir", str(state), "--nodes", str(machine), "--agents", "--detach"
        )
        assert started.returncode == 0, started.stderr
        assert f"export KUBECONFIG={kubeconfig}" in started.stdout
        # Usable the moment `up` returns: a pod in any namespace the cluster made is admitted
        # (its `default` ServiceAccount exists) and may start (`kube-root-ca.crt` exists).
        core = core_api(kubeconfig)
        for namespace in ("default", "kube-system", "kube-public", "kube-node-lease"):
            pod = client.V1Pod(
                metadata=client.V1ObjectMeta(name="right-after-up"),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="x")]),
            )
            core.create_namespaced_pod(namespace, pod)
            core.read_namespaced_config_map("kube-root-ca.crt", namespace)

        running = _ps(state)
        assert {"dev-cluster", "etcd", "kube-apiserver", agent} <= set(running)
        seen |= set(running.values())
        # As a DaemonSet would: the detached cluster's `up` starts a killed agent again.
        os.kill(running[agent], signal.SIGKILL)
        restarted = eventually(
            lambda: (pid := _ps(state).get(agent)) not in (None, running[agent]) and pid,
            20,
            "a new agent",
        )
        seen.add(restarted)
        assert _alive(restarted)

        stopped = dev_cluster_cli("down", "--state-dir", str(state))
        assert stopped.returncode == 0, stopped.stderr
        # `down` returns once every process the cluster started is gone, not merely signalled.
        assert [pid for pid in seen if _alive(pid)] == []
        assert _ps(state) == {}
    finally:
        dev_cluster_cli("down", "--state-dir", str(state))
