"""`kondor dev-cluster up|down`: detach, stop, restart with the same state, two side by side."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port

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
