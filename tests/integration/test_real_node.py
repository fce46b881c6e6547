"""The dev cluster's real node: a kubelet on containerd and runc runs pods as real processes.

One cluster for the module (a kwok node and the real node); the last tests stop it, cleanly and
after a crash, and check that the host is as it was. Skipped, with the reason, where the host
cannot run a real node (not root, no cgroups, no apt-get for the packages).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from kondor_agent.runtimes import pod_cgroup
from kondor_devcluster import realnode
from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port, stop_detached
from kondor_devcluster.images import BUSYBOX_IMAGE

from .conftest import SESSION_MACHINE, real_node_skip_reason

pytestmark = pytest.mark.timeout(240)

NODE = "kondor-real-0"
LABELS_MACHINE = Path(__file__).resolve().parents[2] / "examples" / "machines" / "real-node.yaml"


def eventually(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


@pytest.fixture(scope="module")
def host_before() -> dict[str, str | None]:
    return {name: realnode.read_sysctl(name) for name in realnode.SYSCTLS}


@pytest.fixture(scope="module")
def real_cluster(
    tmp_path_factory: pytest.TempPathFactory, host_before: dict[str, str | None]
) -> Iterator[DevCluster]:
    reason = real_node_skip_reason()
    if reason:
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("real")
    spec = ClusterSpec(
        port=free_port(),
        kubeconfig=state / "kubeconfig",
        state_dir=state / "state",
        nodes=(SESSION_MACHINE,),
        real_node=NODE,
        real_node_machine=LABELS_MACHINE,
    )
    cluster = DevCluster(spec, log=sys.stderr)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def core(real_cluster: DevCluster) -> client.CoreV1Api:
    api = client.CoreV1Api(
        config.new_client_from_config(config_file=str(real_cluster.spec.kubeconfig))
    )
    eventually(
        lambda: api.list_namespaced_service_account("default").items, 30, "the default account"
    )
    return api


def busybox_pod(
    name: str, script: str, restart: str = "Never", **resources: dict[str, str]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", script],
                    "resources": resources,
                }
            ],
        },
    }


def run_pod(core: client.CoreV1Api, body: dict[str, Any]) -> client.V1Pod:
    core.create_namespaced_pod("default", body)
    name = body["metadata"]["name"]

    def running() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(name, "default")
        return pod if pod.status.phase in ("Running", "Succeeded", "Failed") else None

    return eventually(running, 60, f"pod {name} started")


def finished(core: client.CoreV1Api, name: str, timeout: float = 60) -> client.V1Pod:
    def done() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(name, "default")
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    return eventually(done, timeout, f"pod {name} finished")


def pod_pids(pod: client.V1Pod) -> list[int]:
    return pod_cgroup.pod_processes(pod.metadata.uid, pod.status.qos_class)


def cpu_ticks(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total


def test_the_real_node_is_ready_and_labelled(
    real_cluster: DevCluster, core: client.CoreV1Api
) -> None:
    node = core.read_node(NODE)
    labels = node.metadata.labels
    assert labels[realnode.REAL_NODE_LABEL] == "true"
    assert labels["kondor.io/pool"] == "real"  # from the machine file
    assert node.status.node_info.container_runtime_version.startswith("containerd://")
    addresses = {a.type: a.address for a in node.status.addresses}
    assert not addresses["InternalIP"].startswith("127.")


def test_a_pod_runs_to_succeeded_with_its_logs(core: client.CoreV1Api) -> None:
    run_pod(core, busybox_pod("hello", "echo hello from $(hostname); echo to stderr >&2"))
    pod = finished(core, "hello")
    assert pod.status.phase == "Succeeded"
    logs = core.read_namespaced_pod_log("hello", "default")
    assert "hello from hello" in logs and "to stderr" in logs


def test_requests_and_limits_become_the_pods_cgroup_limits(core: client.CoreV1Api) -> None:
    limits = {"cpu": "500m", "memory": "64Mi"}
    pod = run_pod(core, busybox_pod("limited", "sleep 600", limits=limits, requests=limits))
    pod = eventually(
        lambda: (p := core.read_namespaced_pod("limited", "default")).status.qos_class and p,
        10,
        "a QoS class",
    )
    assert pod.status.qos_class == "Guaranteed"
    found = pod_cgroup.find_pod_cgroups(pod.metadata.uid, "Guaranteed")
    memory = [
        d for d in found if (d / "memory.max").exists() or (d / "memory.limit_in_bytes").exists()
    ]
    cpu = [d for d in found if (d / "cpu.max").exists() or (d / "cpu.cfs_quota_us").exists()]
    assert memory and cpu, found
    if (memory[0] / "memory.max").exists():
        assert memory[0].joinpath("memory.max").read_text().strip() == str(64 << 20)
        assert cpu[0].joinpath("cpu.max").read_text().split()[0] == "50000"
    else:
        assert memory[0].joinpath("memory.limit_in_bytes").read_text().strip() == str(64 << 20)
        assert cpu[0].joinpath("cpu.cfs_quota_us").read_text().strip() == "50000"
        assert cpu[0].joinpath("cpu.shares").read_text().strip() == "512"
    core.delete_namespaced_pod("limited", "default", grace_period_seconds=0)


def test_freezing_the_pods_cgroup_stops_it_and_thawing_resumes_it(core: client.CoreV1Api) -> None:
    limits = {"cpu": "200m", "memory": "32Mi"}
    pod = run_pod(core, busybox_pod("spinner", "while :; do :; done", limits=limits))
    eventually(lambda: cpu_ticks(pod_pids(pod)) > 0, 10, "the spinner using CPU")
    directory = pod_cgroup.freezer(pod.metadata.uid, pod.status.qos_class)
    assert directory is not None
    try:
        assert pod_cgroup.freeze(directory)
        pids = pod_pids(pod)
        before = cpu_ticks(pids)
        time.sleep(1.0)
        assert cpu_ticks(pids) == before, "a frozen pod's processes used CPU"
        assert core.read_namespaced_pod("spinner", "default").status.phase == "Running"
    finally:
        pod_cgroup.set_frozen(directory, False)
    before = cpu_ticks(pod_pids(pod))
    eventually(lambda: cpu_ticks(pod_pids(pod)) > before, 10, "the thawed spinner using CPU")
    core.delete_namespaced_pod("spinner", "default", grace_period_seconds=0)


def test_a_pod_past_its_memory_limit_is_oom_killed(core: client.CoreV1Api) -> None:
    limits = {"memory": "32Mi"}
    script = "dd if=/dev/zero of=/dev/null bs=128M count=1"  # dd's 128 MiB buffer
    run_pod(core, busybox_pod("hungry", script, limits=limits))
    pod = finished(core, "hungry")
    assert pod.status.phase == "Failed"
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.reason == "OOMKilled" and terminated.exit_code == 137


def test_down_leaves_the_host_as_it_was(
    real_cluster: DevCluster, core: client.CoreV1Api, host_before: dict[str, str | None]
) -> None:
    run_pod(core, busybox_pod("left-running", "sleep 600", restart="Always"))
    real_cluster.stop()
    layout = realnode.RealNodeLayout(real_cluster.spec.state_dir)
    assert realnode.leftovers(layout) == []
    assert_host_clean(layout, host_before)


def test_down_after_a_crash_cleans_what_the_dead_cluster_left(
    real_cluster: DevCluster, core: client.CoreV1Api, host_before: dict[str, str | None]
) -> None:
    real_cluster.start()  # the same state directory: the Node and its pods are still there
    pod = core.read_namespaced_pod("left-running", "default")
    eventually(lambda: pod_pids(pod), 60, "the pod's container started again after the restart")
    pids = json.loads(real_cluster.layout.pids.read_text())
    for entry in pids.values():
        os.kill(int(entry["pid"]), signal.SIGKILL)
    layout = realnode.RealNodeLayout(real_cluster.spec.state_dir)
    assert realnode.leftovers(layout), "a crashed real node leaves its pods behind"
    stop_detached(real_cluster.spec.state_dir)
    assert realnode.leftovers(layout) == []
    assert_host_clean(layout, host_before)


def assert_host_clean(layout: realnode.RealNodeLayout, before: dict[str, str | None]) -> None:
    processes = [
        f"{pid} {realnode.Path(f'/proc/{pid}/comm').read_text().strip()}"
        for pid, _ in realnode.node_processes(layout)
    ]
    assert processes == []
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(layout.root) not in mounts
    assert (
        not list(Path("/sys/fs/cgroup").glob("*/kubepods"))
        and not Path("/sys/fs/cgroup/kubepods").exists()
    )
    assert not Path("/sys/class/net", realnode.BRIDGE).exists()
    assert {name: realnode.read_sysctl(name) for name in realnode.SYSCTLS} == before
