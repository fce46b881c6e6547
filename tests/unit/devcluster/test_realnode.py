"""The real node's configuration, host checks and images (kondor_devcluster.realnode, images)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tomllib
from pathlib import Path

import pytest

from kondor_devcluster import build, cli, images, kondor, pki, realnode
from kondor_devcluster.components import Layout

LAYOUT = realnode.RealNodeLayout(Path("/state"))


def test_containerd_keeps_everything_under_the_state_dir_and_restricts_oom_score_adj() -> None:
    config = tomllib.loads(realnode.containerd_config(LAYOUT))
    assert config["version"] == 2
    assert config["root"] == "/state/realnode/containerd"
    assert config["state"] == "/state/realnode/containerd-state"
    assert config["grpc"]["address"] == "/state/realnode/containerd.sock"
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    # This host drops CAP_SYS_RESOURCE: without it runc fails every sandbox.
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == images.PAUSE_IMAGE
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["options"] == {"SystemdCgroup": False, "Root": "/state/realnode/runc"}
    assert cri["cni"]["conf_dir"] == "/state/realnode/cni"


def test_pods_get_a_bridge_without_nat_and_addresses_kept_under_the_state() -> None:
    (bridge,) = realnode.cni_config(LAYOUT)["plugins"]
    assert (bridge["type"], bridge["bridge"], bridge["ipMasq"]) == ("bridge", "kondor0", False)
    assert bridge["ipam"]["dataDir"] == "/state/realnode/ipam"
    assert bridge["ipam"]["ranges"] == [[{"subnet": realnode.POD_SUBNET}]]


def test_the_kubelet_authenticates_by_webhook_and_runs_on_cgroupfs() -> None:
    config = realnode.kubelet_config(LAYOUT, Path("/state/pki/ca.crt"), "192.0.2.2", 10, 11)
    assert config["authentication"] == {
        "anonymous": {"enabled": False},
        "webhook": {"enabled": True},
        "x509": {"clientCAFile": "/state/pki/ca.crt"},
    }
    assert config["authorization"] == {"mode": "Webhook"}
    assert (config["cgroupDriver"], config["failCgroupV1"], config["failSwapOn"]) == (
        "cgroupfs",
        False,
        False,
    )
    assert (config["address"], config["port"], config["readOnlyPort"]) == ("192.0.2.2", 10, 0)
    assert config["containerRuntimeEndpoint"] == "unix:///state/realnode/containerd.sock"
    for key in ("staticPodPath", "podLogsDir"):
        assert config[key].startswith("/state/realnode/")
    assert config["imageGCHighThresholdPercent"] == 100  # the local images are never pulled
    args = realnode.kubelet_args(Path("/bin/kubelet"), LAYOUT, "n0", "192.0.2.2")
    assert "--hostname-override=n0" in args and "--node-ip=192.0.2.2" in args
    assert f"--node-labels={realnode.REAL_NODE_LABEL}=true" in args
    assert "--root-dir=/state/realnode/kubelet" in args


def test_a_state_dir_too_deep_for_a_socket_is_refused_naming_it(tmp_path: Path) -> None:
    deep = realnode.RealNodeLayout(tmp_path / ("d" * 120))
    with pytest.raises(realnode.RealNodeError, match="too deep for containerd's socket"):
        realnode.write_configs(deep, Path("/ca"), "192.0.2.2", 1, 2)


def test_configs_are_written_where_the_components_read_them(tmp_path: Path) -> None:
    layout = realnode.RealNodeLayout(tmp_path)
    realnode.write_configs(layout, tmp_path / "ca.crt", "192.0.2.2", 1, 2)
    assert layout.containerd_config.read_text() == realnode.containerd_config(layout)
    conflist = json.loads((layout.cni_conf_dir / "10-kondor.conflist").read_text())
    assert conflist == realnode.cni_config(layout)
    assert layout.kubelet_config.exists() and layout.static_pods.is_dir()


def test_missing_packages_name_the_debian_package_for_each() -> None:
    missing = realnode.missing_packages(which=lambda name: None)
    assert missing["containerd"] == "containerd"
    assert missing["runc"] == "runc"
    assert missing["busybox"] == "busybox-static"
    assert realnode.missing_packages(which=lambda name: f"/usr/bin/{name}").keys() <= {
        "/usr/lib/cni/bridge"
    }


def test_a_host_that_cannot_run_a_node_is_told_why(tmp_path: Path) -> None:
    problems = realnode.host_problems(euid=1000, cgroup_root=tmp_path)
    assert any("root" in problem for problem in problems)
    assert any(str(tmp_path) in problem for problem in problems)
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    assert realnode.host_problems(euid=0, cgroup_root=tmp_path) == []


def test_a_second_real_node_on_one_host_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(realnode, "HOST_CLAIM", tmp_path / "claim.json")
    first = realnode.RealNodeLayout(tmp_path / "a")
    second = realnode.RealNodeLayout(tmp_path / "b")
    realnode.claim_host(first, alive=lambda state: True)
    with pytest.raises(realnode.RealNodeError, match=str(tmp_path / "a")):
        realnode.claim_host(second, alive=lambda state: True)
    realnode.claim_host(second, alive=lambda state: False)  # the holder is gone: taken over
    assert json.loads((tmp_path / "claim.json").read_text())["state_dir"] == str(second.state_dir)


def test_cleanup_without_a_record_does_nothing(tmp_path: Path) -> None:
    assert realnode.cleanup_host(realnode.RealNodeLayout(tmp_path), io.StringIO()) == []


def _archive_files(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {
            member.name: tar.extractfile(member).read()  # type: ignore[union-attr]
            for member in tar.getmembers()
            if member.isfile()
        }


def test_an_image_archive_is_an_oci_layout_ctr_imports_by_name(tmp_path: Path) -> None:
    busybox = tmp_path / "busybox"
    busybox.write_bytes(b"\x7fELF fake")
    entries = images.busybox_entries(busybox, ["bin/sh", "usr/bin/awk", "bin/busybox"])
    files = _archive_files(images.oci_archive(images.BUSYBOX_IMAGE, entries, cmd=["sh"]))
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    (manifest_ref,) = json.loads(files["index.json"])["manifests"]
    assert manifest_ref["annotations"]["io.containerd.image.name"] == "kondor.local/busybox:1"
    assert manifest_ref["platform"] == {"architecture": "amd64", "os": "linux"}
    for name, data in files.items():  # every blob is named by its digest
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    manifest = json.loads(files["blobs/sha256/" + manifest_ref["digest"].split(":")[1]])
    config = json.loads(files["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    (layer_ref,) = manifest["layers"]
    assert config["rootfs"]["diff_ids"] == [layer_ref["digest"]]  # uncompressed: diff = blob
    layer = files["blobs/sha256/" + layer_ref["digest"].split(":")[1]]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = {member.name: member for member in tar.getmembers()}
    assert members["bin/busybox"].isfile()
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "/bin/busybox"
    assert members["usr/bin/awk"].linkname == "/bin/busybox"
    assert members["tmp"].mode == 0o1777
    # Reproducible: the same inputs give the same bytes (the same image digest).
    assert images.oci_archive(images.BUSYBOX_IMAGE, entries, cmd=["sh"]) == images.oci_archive(
        images.BUSYBOX_IMAGE, entries, cmd=["sh"]
    )


def test_a_missing_pause_source_is_an_image_error(tmp_path: Path) -> None:
    with pytest.raises(images.ImageError, match="pause container's source"):
        images.compile_pause(tmp_path / "pause.c", tmp_path / "pause")


def test_the_kubelet_builds_from_the_control_planes_module() -> None:
    step = build.kubelet_step("v1.32.5")
    assert (step.module, step.packages, step.outputs) == (
        ".",
        ("k8s.io/kubernetes/cmd/kubelet",),
        ("kubelet",),
    )
    assert "gitVersion=v1.32.5" in step.ldflags
    tools = (Path(build.controlplane_source()) / "tools.go").read_text()
    assert '_ "k8s.io/kubernetes/cmd/kubelet"' in tools


def test_the_kubelet_gets_a_node_identity(tmp_path: Path) -> None:
    files = pki.ensure_pki(tmp_path, "10.0.0.1")
    name = pki.node_credentials(tmp_path, "n0")
    assert pki.certificate_identity(files.cert(name).read_bytes()) == (
        "system:node:n0",
        ("system:nodes",),
    )
    user, groups = pki.certificate_identity(files.cert("apiserver-kubelet-client").read_bytes())
    assert (user, groups) == ("kube-apiserver-kubelet-client", ("system:masters",))


def test_the_real_nodes_agent_detects_the_host() -> None:
    args = kondor.agent_args(Layout(Path("/s")), "n0", None, python="py")
    assert "--machine" not in args
    assert kondor.agent_node(kondor.agent_name("n0")) == "n0"
    assert kondor.agent_node("kubelet") is None


def test_up_takes_real_node_with_or_without_a_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli.socket, "gethostname", lambda: "this-host")
    base = ["--port", "1", "--kubeconfig", "k", "--state-dir", "s"]
    parser = __import__("argparse").ArgumentParser(prog="kondor")
    cli.register(parser.add_subparsers(dest="command", required=True))
    named = parser.parse_args(["dev-cluster", "up", *base, "--real-node", "n0"])
    assert named.real_node == "n0"
    absent = parser.parse_args(["dev-cluster", "up", *base])
    assert absent.real_node is None


def test_ps_lists_nothing_for_a_stopped_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["dev-cluster", "ps", "--state-dir", str(tmp_path), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
