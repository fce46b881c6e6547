"""The pinned versions of the control plane and where its binaries are cached.

These must equal the versions required by the Go modules in `devcluster/controlplane/`
(a unit test checks it); the cache directory is keyed by them, so a version bump rebuilds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# v1.32.5 is the newest v1.32 patch whose every staging module the module proxy serves here
# (for v0.32.6 to v0.32.13 some answer 403 or lack a checksum database entry; see the README).
KUBERNETES = "v1.32.5"
ETCD = "v3.5.35"
KWOK = "v0.7.0"
#: The peer batch queue bench/bench_scale.py runs (its own module and cache:
#: kondor_devcluster.kueue; v0.10 is the release on Kubernetes v1.31 libraries).
KUEUE = "v0.10.1"
#: Apptainer, which jobs run in (kondor_devcluster.apptainer builds it from its Go module,
#: `github.com/apptainer/apptainer`: the newest version the module proxy serves verified).
APPTAINER = "1.5.3"

#: The binaries the development cluster runs, all built into one `bin/` directory.
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def cache_key() -> str:
    """The cache directory's name: one per combination of pinned versions."""
    return f"{KUBERNETES}-{ETCD}-{KWOK}"


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """`$KONDOR_CACHE_DIR`, else `~/.cache/kondor` (CI reuses `$HOME/.cache` between runs)."""
    env = os.environ if environ is None else environ
    configured = env.get("KONDOR_CACHE_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path(env.get("HOME", str(Path.home()))) / ".cache" / "kondor"


def bin_dir(root: Path | None = None) -> Path:
    """Where the control plane binaries of the pinned versions live."""
    base = cache_root() if root is None else root
    return base / "controlplane" / cache_key() / "bin"
