"""A dev cluster a user can trust: `up` returns once a pod may be applied, `down` once every
process is gone, and a cluster's `up` process is its supervisor (kondor_devcluster.readiness,
cluster.stop_detached, cluster.running_pids)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kondor_devcluster import cli, cluster, readiness
from kondor_devcluster.components import Layout


def ns(name: str, phase: str = "Active") -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": phase}}


def obj(namespace: str, name: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}}


def everything_for(*namespaces: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    accounts = [obj(n, "default") for n in namespaces]
    maps = [obj(n, "kube-root-ca.crt") for n in namespaces]
    return accounts, maps


SYSTEM = readiness.SYSTEM_NAMESPACES


@pytest.mark.parametrize(
    ("namespaces", "accounts", "maps", "missing"),
    [
        pytest.param(
            [], *everything_for(*SYSTEM), [], id="system namespaces ready before they are listed"
        ),
        pytest.param(
            [ns(n) for n in SYSTEM],
            [],
            [],
            [
                f"{n}: {kind}"
                for n in sorted(SYSTEM)
                for kind in ("ServiceAccount default", "ConfigMap kube-root-ca.crt")
            ],
            id="fresh cluster: the controller manager has made nothing yet",
        ),
        pytest.param(
            [ns(n) for n in SYSTEM],
            everything_for(*SYSTEM)[0],
            everything_for("default", "kube-system", "kube-public")[1],
            ["kube-node-lease: ConfigMap kube-root-ca.crt"],
            id="one namespace still lacks the root CA",
        ),
        pytest.param(
            [*(ns(n) for n in SYSTEM), ns("alice")],
            *everything_for(*SYSTEM),
            ["alice: ServiceAccount default", "alice: ConfigMap kube-root-ca.crt"],
            id="a namespace kept from an earlier run counts too",
        ),
        pytest.param(
            [*(ns(n) for n in SYSTEM), ns("going", "Terminating")],
            *everything_for(*SYSTEM),
            [],
            id="a namespace being deleted needs nothing",
        ),
        pytest.param(
            [ns(n) for n in SYSTEM],
            [obj("kube-system", "default")],
            everything_for(*SYSTEM)[1],
            [f"{n}: ServiceAccount default" for n in ("default", "kube-node-lease", "kube-public")],
            id="service accounts of other namespaces do not count",
        ),
    ],
)
def test_a_pod_needs_its_namespaces_default_service_account_and_root_ca(
    namespaces: list[dict[str, Any]],
    accounts: list[dict[str, Any]],
    maps: list[dict[str, Any]],
    missing: list[str],
) -> None:
    assert readiness.missing_for_pods(namespaces, accounts, maps) == missing


# -- down: the supervisor first, then what outlives it, and only once all are gone ----------

_CHILD = """
import signal, sys, time
name, journal, ignore = sys.argv[1], sys.argv[2], sys.argv[3] == "ignore"
def stop(signum, frame):
    with open(journal, "a") as f:
        f.write(name + "\\n")
    if not ignore:
        sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(journal + "." + name, "w").close()
while True:
    time.sleep(0.05)
"""


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Any]:
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str, *, ignore_term: bool = False) -> subprocess.Popen[bytes]:
        journal = tmp_path / "journal"
        flag = "ignore" if ignore_term else "obey"
        process = subprocess.Popen([sys.executable, "-c", _CHILD, name, str(journal), flag])
        deadline = time.monotonic() + 10
        while not Path(f"{journal}.{name}").exists():  # its SIGTERM handler is in place
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.02)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def alive(pid: int) -> bool:
    return cluster._process_is(pid, sys.executable)


def record(layout: Layout, supervisor: subprocess.Popen[bytes] | None, **pids: int) -> None:
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    if supervisor is not None:
        entry = {"pid": supervisor.pid, "binary": sys.executable}
        layout.supervisor.write_text(json.dumps(entry))
    data = {name: {"pid": pid, "binary": sys.executable} for name, pid in pids.items()}
    layout.pids.write_text(json.dumps(data))


def test_down_stops_the_supervisor_first_then_what_outlives_it_in_reverse_order(
    tmp_path: Path, spawn: Any
) -> None:
    layout = Layout(tmp_path / "state")
    supervisor = spawn("supervisor")
    etcd, apiserver = spawn("etcd"), spawn("kube-apiserver")
    record(layout, supervisor, etcd=etcd.pid, **{"kube-apiserver": apiserver.pid})
    assert [name for name, _pid, _bin in cluster.running_pids(layout)] == [
        cluster.SUPERVISOR,
        "etcd",
        "kube-apiserver",
    ]

    stopped = cluster.stop_detached(layout.state_dir)

    assert stopped == [cluster.SUPERVISOR, "etcd", "kube-apiserver"]
    journal = (tmp_path / "journal").read_text().split()
    assert journal == ["supervisor", "kube-apiserver", "etcd"]
    assert not any(alive(p.pid) for p in (supervisor, etcd, apiserver))
    assert not layout.pids.exists()


def test_a_process_deaf_to_sigterm_is_killed_and_waited_for(tmp_path: Path, spawn: Any) -> None:
    deaf = spawn("kubelet", ignore_term=True)
    started = time.monotonic()
    cluster._terminate([("kubelet", deaf.pid, sys.executable)], timeout=0.5)
    assert not alive(deaf.pid)  # gone when it returns, not merely sent SIGKILL
    assert time.monotonic() - started < 5
    assert (tmp_path / "journal").read_text().split() == ["kubelet"]  # asked first


def test_up_refuses_a_state_dir_whose_supervisor_runs_and_leaves_its_record(
    tmp_path: Path, spawn: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    layout = Layout(tmp_path / "state")
    supervisor = spawn("supervisor")
    record(layout, supervisor)
    argv = ["dev-cluster", "up", "--port", "1", "--kubeconfig", str(tmp_path / "k")]
    code = cli.main([*argv, "--state-dir", str(layout.state_dir)])
    assert code == 1
    assert f"already runs from {layout.state_dir} (process {supervisor.pid})" in (
        capsys.readouterr().err
    )
    assert cluster.read_supervisor(layout) == (cluster.SUPERVISOR, supervisor.pid, sys.executable)


def test_an_up_process_is_not_its_own_running_cluster(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    cluster.write_supervisor(layout)
    assert cluster.read_supervisor(layout) == (
        cluster.SUPERVISOR,
        os.getpid(),
        cluster._argv0(os.getpid()),
    )
    assert cluster.running_pids(layout) == []


def test_a_stale_supervisor_record_is_not_a_running_cluster(tmp_path: Path, spawn: Any) -> None:
    layout = Layout(tmp_path / "state")
    gone = spawn("supervisor")
    record(layout, gone)
    gone.kill()
    gone.wait()
    assert cluster.running_pids(layout) == []
    assert cluster.stop_detached(layout.state_dir) == []


# -- in-cluster clients and webhooks without kube-proxy --------------------------------------


def test_the_api_server_calls_webhooks_at_an_endpoint_of_their_service() -> None:
    from kondor_devcluster import components
    from kondor_devcluster.components import Ports

    ports = Ports(6443, 2379, 2380, 10257, 10259, 10247)
    args = components.apiserver_args(Path("/bin/kube-apiserver"), Layout(Path("/s")), ports)
    assert "--enable-aggregator-routing=true" in args


def test_pods_reach_the_api_server_at_the_kubernetes_service_through_one_dnat() -> None:
    from kondor_devcluster import realnode

    flush, dnat = realnode.apiserver_route_commands("10.0.0.1", 16443)
    assert flush == ["iptables", "-w", "-t", "nat", "-F", realnode.APISERVER_CHAIN]
    rule = " ".join(dnat)
    assert f"-A {realnode.APISERVER_CHAIN} -d 10.0.0.1/32 -p tcp --dport 443" in rule
    assert rule.endswith("-j DNAT --to-destination 127.0.0.1:16443")
    # route_localnet is changed on the host, so it is recorded and put back by cleanup_host.
    assert "net.ipv4.conf.all.route_localnet" in realnode.SYSCTLS
