"""Build the control plane binaries from `devcluster/controlplane/` into the version-keyed cache.

Run ahead of time with `python -m kondor_devcluster.build` (`make controlplane`); `kondor
dev-cluster up` calls `ensure_built` and builds on first use. Builds run `nice`d, one Go module
at a time, with a progress line per module; a file lock lets concurrent callers wait for one build.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from kondor_devcluster import realnode, versions


class BuildError(RuntimeError):
    """A control plane binary could not be built; the message says which and how to retry."""


@dataclass(frozen=True)
class BuildStep:
    """One `go build` in one Go module: the packages it builds and the binaries they become."""

    module: str  # directory relative to devcluster/controlplane
    packages: tuple[str, ...]
    outputs: tuple[str, ...]
    ldflags: str


def _version_ldflags(k8s_version: str) -> str:
    # Without these the API server reports v0.0.0-master and kubectl warns about version skew.
    major, minor = k8s_version.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {package}.gitVersion={k8s_version}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
        ]
    return " ".join(flags)


def build_steps(k8s_version: str = versions.KUBERNETES) -> list[BuildStep]:
    """The builds, smallest first, so a broken toolchain shows up in seconds, not minutes."""
    return [
        BuildStep("etcd", ("go.etcd.io/etcd/server/v3",), ("etcd",), "-s -w"),
        BuildStep("kwok", ("sigs.k8s.io/kwok/cmd/kwok",), ("kwok",), "-s -w"),
        BuildStep(
            ".",
            (
                "k8s.io/kubernetes/cmd/kube-apiserver",
                "k8s.io/kubernetes/cmd/kube-controller-manager",
                "k8s.io/kubernetes/cmd/kube-scheduler",
            ),
            ("kube-apiserver", "kube-controller-manager", "kube-scheduler"),
            _version_ldflags(k8s_version),
        ),
    ]


def kubelet_step(k8s_version: str = versions.KUBERNETES) -> BuildStep:
    """The kubelet, for the real node only: built on demand (`ensure_kubelet`), not by default."""
    return BuildStep(
        ".", ("k8s.io/kubernetes/cmd/kubelet",), ("kubelet",), _version_ldflags(k8s_version)
    )


def go_build_command(step: BuildStep, out_dir: Path) -> list[str]:
    """The `go build` command line of a step; `-o dir/` names each binary after its package."""
    target = out_dir / step.outputs[0] if len(step.packages) == 1 else out_dir
    output = str(target) if len(step.packages) == 1 else f"{target}{os.sep}"
    return [
        "go",
        "build",
        "-v",
        "-trimpath",
        f"-ldflags={step.ldflags}",
        "-o",
        output,
        *step.packages,
    ]


def controlplane_source() -> Path:
    """The Go modules' directory: `$KONDOR_CONTROLPLANE_SRC`, else beside this package."""
    configured = os.environ.get("KONDOR_CONTROLPLANE_SRC")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parent.parent / "controlplane"


def missing_binaries(bin_dir: Path) -> list[str]:
    """The binaries not (yet) in `bin_dir`."""
    return [name for name in versions.BINARIES if not os.access(bin_dir / name, os.X_OK)]


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created): one build of a cache at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _count_packages(step: BuildStep, module_dir: Path) -> int:
    result = subprocess.run(
        ["go", "list", "-deps", *step.packages],
        cwd=module_dir,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise BuildError(
            f"go list in {module_dir} failed (is Go installed and the module proxy reachable?):\n"
            f"{result.stderr.strip()}"
        )
    return len(result.stdout.split())


def _format_duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _run_step(step: BuildStep, source: Path, out_dir: Path, log: TextIO) -> None:
    module_dir = (source / step.module).resolve()
    total = _count_packages(step, module_dir)
    names = ", ".join(step.outputs)
    command = go_build_command(step, out_dir)
    # nice: a cold Kubernetes build takes every core for many minutes; others share the machine.
    niced = ["nice", "-n", "10", *command] if shutil.which("nice") else command
    started = time.monotonic()
    process = subprocess.Popen(
        niced,
        cwd=module_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    compiled = 0
    errors: list[str] = []
    last_report = 0.0
    for line in process.stdout:
        text = line.rstrip()
        # `go build -v` prints each package it compiles; anything else is a diagnostic.
        if text and " " not in text and not text.startswith("#"):
            compiled += 1
        elif text:
            errors.append(text)
        now = time.monotonic()
        if now - last_report >= 5.0:
            last_report = now
            log.write(
                f"  {names}: compiled {compiled} of {total} packages in the graph "
                f"({_format_duration(now - started)})\n"
            )
            log.flush()
    code = process.wait()
    if code != 0:
        details = "\n".join(errors[-40:])
        raise BuildError(f"building {names} failed (go build exit {code}):\n{details}")
    log.write(
        f"  {names}: done, {compiled} packages compiled "
        f"in {_format_duration(time.monotonic() - started)}\n"
    )
    log.flush()


def ensure_built(
    root: Path | None = None,
    *,
    force: bool = False,
    log: TextIO | None = None,
    source: Path | None = None,
) -> Path:
    """The directory holding every control plane binary, building what is missing first."""
    out = sys.stderr if log is None else log
    target = versions.bin_dir(root)
    if not force and not missing_binaries(target):
        return target
    if shutil.which("go") is None:
        raise BuildError(
            "the control plane binaries are not built and `go` is not on PATH; install Go "
            f"(1.26 or newer: etcd {versions.ETCD} requires it) "
            f"or put prebuilt binaries in {target}"
        )
    src = controlplane_source() if source is None else source
    with locked(target.parent / "build.lock"):
        if not force and not missing_binaries(target):
            return target  # another process built them while we waited for the lock
        partial = target.parent / "bin.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        out.write(
            f"Building the control plane (Kubernetes {versions.KUBERNETES}, etcd {versions.ETCD}, "
            f"kwok {versions.KWOK}) into {target}; a cold build takes tens of minutes.\n"
        )
        started = time.monotonic()
        for step in build_steps():
            _run_step(step, src, partial, out)
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
        out.write(f"Control plane built in {_format_duration(time.monotonic() - started)}.\n")
    return target


def kubelet_binary(root: Path | None = None) -> Path:
    return versions.bin_dir(root) / "kubelet"


def ensure_kubelet(root: Path | None = None, *, log: TextIO | None = None) -> Path:
    """The kubelet binary (beside the control plane's), built from the same module if missing."""
    out = sys.stderr if log is None else log
    target = versions.bin_dir(root)
    binary = kubelet_binary(root)
    if os.access(binary, os.X_OK):
        return binary
    if shutil.which("go") is None:
        raise BuildError(f"the kubelet is not built and `go` is not on PATH; put one at {binary}")
    with locked(target.parent / "build.lock"):
        if os.access(binary, os.X_OK):
            return binary
        partial = target.parent / "kubelet.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        out.write(f"Building the kubelet ({versions.KUBERNETES}) into {target}\n")
        _run_step(kubelet_step(), controlplane_source(), partial, out)
        target.mkdir(parents=True, exist_ok=True)
        (partial / "kubelet").rename(binary)
        partial.rmdir()
    return binary


def _prepare_real_node(cache_dir: Path | None) -> None:
    problems = realnode.host_problems()
    if problems:
        print(f"not preparing the real node: {'; '.join(problems)}", file=sys.stderr)
        return
    ensure_kubelet(cache_dir)
    try:
        realnode.ensure_packages(sys.stderr)
    except realnode.RealNodeError as error:
        print(f"not preparing the real node: {error}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kondor_devcluster.build",
        description="Build kube-apiserver, etcd, kube-controller-manager, kube-scheduler and "
        "kwok for the development cluster into the version-keyed cache.",
    )
    parser.add_argument(
        "--cache-dir", type=Path, help="default: $KONDOR_CACHE_DIR or ~/.cache/kondor"
    )
    parser.add_argument("--force", action="store_true", help="rebuild even when present")
    parser.add_argument(
        "--real-node",
        action="store_true",
        help="also prepare `dev-cluster up --real-node`: build the kubelet and install "
        "containerd, runc, the CNI plugins and busybox (as root, with apt-get); a host that "
        "cannot run a real node is reported, not an error",
    )
    parser.add_argument(
        "--print-bin-dir", action="store_true", help="print the binaries' directory and exit"
    )
    args = parser.parse_args(argv)
    if args.print_bin_dir:
        print(versions.bin_dir(args.cache_dir))
        return 0
    try:
        path = ensure_built(args.cache_dir, force=args.force)
        if args.real_node:
            _prepare_real_node(args.cache_dir)
    except BuildError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
