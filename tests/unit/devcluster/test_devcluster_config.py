"""Component flags, kubeconfigs, RBAC and pinned versions of the dev cluster."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from kondor_devcluster import build, components, kubeconfig, rbac, versions
from kondor_devcluster.cluster import (
    ClusterSpec,
    DevCluster,
    _Process,
    choose_ports,
    free_port,
)
from kondor_devcluster.pki import KeyPair

PORTS = components.Ports(6443, 2379, 2380, 10257, 10259, 10247)
LAYOUT = components.Layout(Path("/state"))
CONTROLPLANE = Path(__file__).resolve().parents[3] / "devcluster" / "controlplane"


def _flags(args: list[str]) -> dict[str, str]:
    return dict(arg[2:].split("=", 1) for arg in args[1:])


def test_apiserver_listens_on_loopback_with_tls_node_and_rbac() -> None:
    flags = _flags(components.apiserver_args(Path("/bin/kube-apiserver"), LAYOUT, PORTS))

    assert flags["bind-address"] == "127.0.0.1"
    assert flags["secure-port"] == "6443"
    assert flags["authorization-mode"] == "Node,RBAC"
    assert flags["etcd-servers"] == "http://127.0.0.1:2379"
    assert flags["client-ca-file"] == "/state/pki/ca.crt"
    assert flags["service-account-signing-key-file"] == "/state/pki/sa.key"
    assert "ValidatingAdmissionWebhook" not in flags.get("disable-admission-plugins", "")


def test_every_component_listens_only_on_its_own_loopback_port() -> None:
    for make in (components.controller_manager_args, components.scheduler_args):
        flags = _flags(make(Path("/bin/x"), LAYOUT, PORTS))
        assert flags["bind-address"] == "127.0.0.1"
        assert flags["secure-port"] in {"10257", "10259"}
    etcd = _flags(components.etcd_args(Path("/bin/etcd"), LAYOUT, PORTS))
    assert etcd["listen-client-urls"] == "http://127.0.0.1:2379"
    assert etcd["data-dir"] == "/state/etcd"
    kwok = _flags(components.kwok_args(Path("/bin/kwok"), LAYOUT, PORTS))
    assert kwok["manage-all-nodes"] == "false"
    assert kwok["manage-nodes-with-annotation-selector"] == "kwok.x-k8s.io/node=fake"


def test_kubeconfig_has_a_context_per_user_admin_first() -> None:
    pair = KeyPair(b"cert", b"key")
    config = kubeconfig.kubeconfig(
        "https://127.0.0.1:6443", b"ca", {"admin": pair, "alice": pair, "bob": pair}, "admin"
    )

    assert config["current-context"] == "admin"
    assert [c["name"] for c in config["contexts"]] == ["admin", "alice", "bob"]
    assert config["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6443"


def test_kubeconfig_we_did_not_write_is_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("apiVersion: v1\nkind: Config\n")
    config = kubeconfig.kubeconfig("https://x", b"ca", {"admin": KeyPair(b"c", b"k")}, "admin")

    with pytest.raises(FileExistsError, match="not written by kondor dev-cluster"):
        kubeconfig.write_kubeconfig(path, config)
    kubeconfig.write_kubeconfig(tmp_path / "ours", config)
    kubeconfig.write_kubeconfig(tmp_path / "ours", config)  # ours: rewritten freely
    assert yaml.safe_load((tmp_path / "ours").read_text())["current-context"] == "admin"
    assert (tmp_path / "ours").stat().st_mode & 0o077 == 0


def test_user_role_allows_kondor_user_kinds_and_nothing_else() -> None:
    rules = rbac.user_cluster_role()["rules"]

    assert {group for rule in rules for group in rule["apiGroups"]} == {"kondor.io"}
    writable = next(rule for rule in rules if "create" in rule["verbs"])
    assert set(writable["resources"]) == {"executionjobs", "codclaims"}
    readonly = next(rule for rule in rules if "create" not in rule["verbs"])
    assert set(readonly["resources"]) == {"executionpoints", "slotpolicies", "pools"}
    assert set(readonly["verbs"]) == {"get", "list", "watch"}
    subjects = rbac.user_cluster_role_binding()["subjects"]
    assert subjects == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "kondor:users"}
    ]


def test_pinned_versions_match_the_go_modules() -> None:
    root = (CONTROLPLANE / "go.mod").read_text()
    assert f"k8s.io/kubernetes {versions.KUBERNETES}" in root
    staging = re.findall(r"=> (k8s\.io/\S+) (v\S+)", root)
    assert staging and {version for _module, version in staging} == {"v0" + versions.KUBERNETES[2:]}
    assert (
        f"go.etcd.io/etcd/server/v3 {versions.ETCD}" in (CONTROLPLANE / "etcd/go.mod").read_text()
    )
    assert f"sigs.k8s.io/kwok {versions.KWOK}" in (CONTROLPLANE / "kwok/go.mod").read_text()


def test_cache_directory_is_keyed_by_versions() -> None:
    root = versions.cache_root({"KONDOR_CACHE_DIR": "/c", "HOME": "/h"})
    assert versions.bin_dir(root) == Path(
        f"/c/controlplane/{versions.KUBERNETES}-{versions.ETCD}-{versions.KWOK}/bin"
    )
    assert versions.cache_root({"HOME": "/h"}) == Path("/h/.cache/kondor")


def test_build_covers_every_binary_and_sets_the_kubernetes_version() -> None:
    steps = build.build_steps("v1.32.5")

    assert sorted(out for step in steps for out in step.outputs) == sorted(versions.BINARIES)
    k8s = next(step for step in steps if "kube-apiserver" in step.outputs)
    assert "k8s.io/component-base/version.gitVersion=v1.32.5" in k8s.ldflags
    assert "k8s.io/component-base/version.gitMinor=32" in k8s.ldflags
    command = build.go_build_command(k8s, Path("/out"))
    assert command[-4:-3] == ["/out/"]


def test_ports_are_remembered_and_never_collide_with_the_api_port() -> None:
    api = free_port()
    first = choose_ports(api)
    values = list(first.as_dict().values())
    assert len(set(values)) == len(values)
    assert first.apiserver == api

    again = choose_ports(api, first.as_dict())
    assert again == first
    clash = choose_ports(first.etcd_client, first.as_dict())
    assert clash.apiserver == first.etcd_client
    assert clash.etcd_client != first.etcd_client


def test_stop_process_stops_only_a_running_non_essential_process(tmp_path: Path) -> None:
    cluster = DevCluster(ClusterSpec(port=1, kubeconfig=tmp_path / "k", state_dir=tmp_path))
    started = {name: subprocess.Popen(["sleep", "60"]) for name in ("kondor-operator", "etcd")}
    for name, popen in started.items():
        cluster._processes.append(
            _Process(name, Path("/bin/sleep"), popen, tmp_path / name, essential=name == "etcd")
        )
    try:
        assert cluster.stop_process("kondor-operator", timeout=5)
        assert started["kondor-operator"].returncode == -signal.SIGTERM
        assert not cluster.stop_process("kondor-operator")  # already stopped
        assert not cluster.stop_process("etcd")  # the control plane's: the cluster's own
        assert started["etcd"].poll() is None
        assert not cluster.stop_process("kondor-agent-nowhere")
    finally:
        for popen in started.values():
            popen.kill()
            popen.wait()
