"""Container images for the real node, written without a registry or a container engine.

Each image is a one-layer OCI image archive (the layout `ctr images import` reads: `oci-layout`,
`index.json`, `blobs/sha256/...`) built with the standard library from files on this machine:

* `kondor.local/busybox:1`: Debian's static busybox and a symlink for each of its applets;
* `kondor.local/pause:3.10`: Kubernetes' own pause container (`build/pause/linux/pause.c` in
  the `k8s.io/kubernetes` module), compiled statically with the host's C compiler.

Pods use them with `imagePullPolicy: Never`. The archives are cached beside the binaries.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

BUSYBOX_IMAGE = "kondor.local/busybox:1"
PAUSE_IMAGE = "kondor.local/pause:3.10"
_PAUSE_VERSION = "3.10"
_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_PASSWD = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
_GROUP = "root:x:0:\nnogroup:x:65534:\n"


class ImageError(RuntimeError):
    """An image could not be built; the message names the missing file or the failing step."""


@dataclass(frozen=True)
class Entry:
    """One file of an image layer: contents (a file), a link target (a symlink) or a directory."""

    path: str
    data: bytes | None = None
    link: str | None = None
    mode: int = 0o755


def layer_tar(entries: Sequence[Entry]) -> bytes:
    """An uncompressed, reproducible layer (fixed times and owners) holding `entries`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry.path.lstrip("/"))
            info.mode = entry.mode
            info.mtime = 0
            if entry.link is not None:
                info.type = tarfile.SYMTYPE
                info.linkname = entry.link
                tar.addfile(info)
            elif entry.data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))
    return buffer.getvalue()


def _blob(blobs: dict[str, bytes], data: bytes) -> dict[str, object]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"digest": digest, "size": len(data)}


def oci_archive(
    name: str,
    entries: Sequence[Entry],
    *,
    entrypoint: Sequence[str] = (),
    cmd: Sequence[str] = (),
    arch: str = "amd64",
) -> bytes:
    """An OCI image archive of one layer, named `name` for `ctr images import`."""
    blobs: dict[str, bytes] = {}
    layer = layer_tar(entries)
    layer_ref = _blob(blobs, layer) | {"mediaType": "application/vnd.oci.image.layer.v1.tar"}
    config: dict[str, object] = {
        "architecture": arch,
        "os": "linux",
        "config": {"Env": [_PATH], "Entrypoint": list(entrypoint) or None, "Cmd": list(cmd)},
        "rootfs": {"type": "layers", "diff_ids": [layer_ref["digest"]]},
    }
    config_ref = _blob(blobs, json.dumps(config, sort_keys=True).encode()) | {
        "mediaType": "application/vnd.oci.image.config.v1+json"
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_ref,
        "layers": [layer_ref],
    }
    manifest_ref = _blob(blobs, json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [
            manifest_ref
            | {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "platform": {"architecture": arch, "os": "linux"},
                "annotations": {
                    # ctr reads the full name from the first; the second is the OCI tag.
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                },
            }
        ],
    }
    files: dict[str, bytes] = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index, sort_keys=True).encode(),
    }
    files |= {f"blobs/sha256/{digest.split(':', 1)[1]}": data for digest, data in blobs.items()}
    return layer_tar(
        [Entry("blobs", mode=0o755), Entry("blobs/sha256", mode=0o755)]
        + [Entry(path, data, mode=0o644) for path, data in files.items()]
    )


def _base_entries() -> list[Entry]:
    dirs = ["bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "proc", "sys", "dev", "root"]
    entries = [Entry(path) for path in dirs]
    entries.append(Entry("tmp", mode=0o1777))
    entries.append(Entry("etc/passwd", _PASSWD.encode(), mode=0o644))
    entries.append(Entry("etc/group", _GROUP.encode(), mode=0o644))
    return entries


def busybox_entries(busybox: Path, applets: Sequence[str]) -> list[Entry]:
    """The busybox image's files: the binary at /bin/busybox, each applet a symlink to it."""
    entries = _base_entries()
    entries.append(Entry("bin/busybox", busybox.read_bytes()))
    for applet in applets:
        path = applet.strip().lstrip("/")
        if path and path != "bin/busybox":
            entries.append(Entry(path, link="/bin/busybox", mode=0o777))
    return entries


def busybox_applets(busybox: Path) -> list[str]:
    """What `busybox --list-full` names (paths like `bin/sh`, `usr/bin/awk`)."""
    result = subprocess.run(
        [str(busybox), "--list-full"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0 or not result.stdout.strip():
        raise ImageError(f"{busybox} --list-full failed: {result.stderr.strip()}")
    return result.stdout.split()


def compile_pause(source: Path, output: Path, cc: str = "gcc") -> None:
    """Kubernetes' pause container, statically linked (the image has no libc)."""
    if not source.is_file():
        raise ImageError(f"the pause container's source {source} is missing (go mod download?)")
    command = [cc, "-Os", "-static", "-Wall", f'-DVERSION="{_PAUSE_VERSION}"', "-o", str(output)]
    result = subprocess.run([*command, str(source)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ImageError(f"compiling {source} failed: {result.stderr.strip()[-2000:]}")


def write_images(
    out_dir: Path, busybox: Path, pause_source: Path, cc: str = "gcc"
) -> Mapping[str, Path]:
    """Write both archives into `out_dir` (when missing); returns image name -> archive."""
    out_dir.mkdir(parents=True, exist_ok=True)
    archives = {BUSYBOX_IMAGE: out_dir / "busybox.tar", PAUSE_IMAGE: out_dir / "pause.tar"}
    if not archives[BUSYBOX_IMAGE].exists():
        entries = busybox_entries(busybox, busybox_applets(busybox))
        data = oci_archive(BUSYBOX_IMAGE, entries, cmd=["sh"])
        _write_atomically(archives[BUSYBOX_IMAGE], data)
    if not archives[PAUSE_IMAGE].exists():
        binary = out_dir / "pause"
        compile_pause(pause_source, binary, cc)
        entries = [Entry("pause", binary.read_bytes())]
        data = oci_archive(PAUSE_IMAGE, entries, entrypoint=["/pause"])
        _write_atomically(archives[PAUSE_IMAGE], data)
        binary.unlink()
    return archives


def _write_atomically(path: Path, data: bytes) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    partial.replace(path)
