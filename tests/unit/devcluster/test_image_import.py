"""`kondor dev-cluster up --real-node --image ARCHIVE`: the archive's reference, the import."""

from __future__ import annotations

import argparse
import io
import json
import tarfile
from pathlib import Path

import pytest

from kondor_devcluster import cli, realnode
from kondor_devcluster.cluster import ClusterSpec, DevCluster, DevClusterError

LAYOUT = realnode.RealNodeLayout(Path("/state"))


def oci_archive(path: Path, annotations: dict[str, str] | None) -> Path:
    """An archive with only an index.json, as `buildah push ... oci-archive:` writes it."""
    manifest: dict[str, object] = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": "sha256:" + "0" * 64,
        "size": 1,
    }
    if annotations is not None:
        manifest["annotations"] = annotations
    data = json.dumps({"schemaVersion": 2, "manifests": [manifest]}).encode()
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("index.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_the_reference_buildah_wrote_is_read_from_the_index(tmp_path: Path) -> None:
    archive = oci_archive(
        tmp_path / "k.tar",
        {"org.opencontainers.image.ref.name": "docker.io/library/kondor:0.1.0"},
    )
    assert realnode.archive_references(archive) == ["docker.io/library/kondor:0.1.0"]
    # containerd's own annotation wins, as `ctr images import` reads it first.
    both = oci_archive(
        tmp_path / "b.tar",
        {
            "io.containerd.image.name": "kondor.local/busybox:1",
            "org.opencontainers.image.ref.name": "1",
        },
    )
    assert realnode.archive_references(both) == ["kondor.local/busybox:1"]


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({"org.opencontainers.image.ref.name": "0.1.0"}, "no image with a full reference"),
        (None, "no image with a full reference"),
    ],
)
def test_an_archive_naming_no_full_reference_is_refused(
    tmp_path: Path, annotations: dict[str, str] | None, message: str
) -> None:
    archive = oci_archive(tmp_path / "k.tar", annotations)
    with pytest.raises(realnode.RealNodeError, match=message) as caught:
        realnode.archive_references(archive)
    assert str(archive) in str(caught.value)


def test_a_file_that_is_no_oci_archive_is_refused_naming_it(tmp_path: Path) -> None:
    not_tar = tmp_path / "image.txt"
    not_tar.write_text("hello")
    with pytest.raises(realnode.RealNodeError, match=r"--image .*image.txt: not a readable"):
        realnode.archive_references(not_tar)
    with pytest.raises(realnode.RealNodeError, match="not a readable"):
        realnode.archive_references(tmp_path / "missing.oci.tar")
    empty = tmp_path / "empty.tar"
    with tarfile.open(empty, "w"):
        pass
    with pytest.raises(realnode.RealNodeError, match=r"no index\.json"):
        realnode.archive_references(empty)


def test_the_import_goes_to_the_kubelets_namespace_keeping_the_reference() -> None:
    command = realnode.import_image_command(LAYOUT, Path("/c/kondor-0.1.0.oci.tar"))
    assert command == [
        "ctr",
        "--address=/state/realnode/containerd.sock",
        "--namespace=k8s.io",
        "images",
        "import",
        "/c/kondor-0.1.0.oci.tar",
    ]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kondor")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_image_is_repeatable_and_reaches_the_cluster_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    common = ["dev-cluster", "up", "--port", "1", "--kubeconfig", "k", "--state-dir", "s"]
    args = parse(*common, "--real-node", "--image", "a.oci.tar", "--image", "b.oci.tar")
    assert args.images == [Path("a.oci.tar"), Path("b.oci.tar")]
    assert parse(*common).images == []

    seen: list[ClusterSpec] = []

    def fake_start(self: DevCluster) -> None:
        seen.append(self.spec)
        raise DevClusterError("stop here")

    monkeypatch.setattr(cli.DevCluster, "start", fake_start)
    monkeypatch.chdir(tmp_path)
    cli.main([*common, "--real-node", "n", "--image", "a.oci.tar"])
    assert [spec.images for spec in seen] == [(tmp_path / "a.oci.tar",)]


def test_an_image_without_a_real_node_is_refused_before_anything_starts(tmp_path: Path) -> None:
    spec = ClusterSpec(
        port=1,
        kubeconfig=tmp_path / "k",
        state_dir=tmp_path / "s",
        images=(tmp_path / "k.oci.tar",),
    )
    with pytest.raises(DevClusterError, match=r"--image .*k.oci.tar: .* add --real-node"):
        DevCluster(spec).start()
    assert not (tmp_path / "s").exists()
