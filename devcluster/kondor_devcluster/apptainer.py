"""Build Apptainer from its Go module into the version-keyed cache and print its binary (once).

    python -m kondor_devcluster.apptainer   # -> ~/.cache/kondor/apptainer/1.5.3/bin/apptainer

There is no Apptainer package or release download here, but the Go module proxy serves
`github.com/apptainer/apptainer@v1.5.3` (verified against the checksum database), and the
module is the whole source tree: `go mod download` fetches it, it is copied out of the
read-only module cache, the exec bits the module zip drops are restored, a `VERSION` file
stands in for git (mconfig refuses to run outside a git checkout without one), then
`./mconfig --without-suid --without-network`, `make` and `make install` into the cache, the
way the control plane is built from its modules (`make controlplane`). A cold build took
13 min 10 s here (2 cores shared with a CI run); it runs `nice -n 19` with its own GOCACHE
(Apptainer's Makefile runs `go clean -cache`, which would empty the control plane's).

The installed configuration is made to fit a host without systemd and without
CAP_SYS_RESOURCE (containers drop it): `systemd cgroups = no` and `root default capabilities
= file` (without it a root run fails with "Requesting capability set ... while permitted
capability set is ..."). Jobs run unprivileged, as HTCondor runs them: Apptainer then enters
a user namespace and mounts a SIF with squashfuse (needs /dev/fuse) or, without FUSE,
extracts it (`--unsquash`).

The Debian packages the build needs are installed with apt-get when missing (root). A host
that cannot build it (no Go, not Linux, packages missing and no root to install them) is
reported, not failed: the reason is printed and the exit status is 0, and the Apptainer
tests fall back to the stand-in (tests/unit/agent/execute/apptainer_stand_in.py).
A second run finds `bin/apptainer`, checks that `apptainer --version` runs, and prints it.
`$KONDOR_CACHE_DIR` moves the cache (default ~/.cache/kondor); `$KONDOR_APPTAINER` names an
installed `apptainer` to use instead (`built`).

The cache sits under the home directory, which the slot accounts jobs run as cannot reach
(/root is 0700), so the dev cluster and the tests run a copy of it (`relocate`: hard links,
made traversable): an Apptainer built without setuid is relocatable, its paths follow its
binary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from kondor_devcluster import versions
from kondor_devcluster.build import locked

VERSION = versions.APPTAINER
MODULE = "github.com/apptainer/apptainer"
#: Debian packages the build and an unprivileged run need (the issue's measured list).
PACKAGES = (
    "build-essential",
    "pkg-config",
    "libseccomp-dev",
    "libtalloc-dev",
    "libattr1-dev",
    "libprotobuf-c-dev",
    "libsubid-dev",
    "uidmap",
    "fakeroot",
    "cryptsetup",
    "squashfs-tools",
    "squashfuse",
    "fuse2fs",
    "fuse3",
    "libfuse3-dev",
    "fuse-overlayfs",
)
#: Files the module zip stores without their exec bit; mconfig and make run them.
EXECUTABLES = (
    "mconfig",
    "makeit/*",
    "mlocal/checks/basechecks.chk",
    "mlocal/scripts/*",
    "scripts/*",
    "etc/configure_transform.py",
)
#: apptainer.conf settings for this kind of host (see the module docstring).
CONFIG = {"root default capabilities": "file", "systemd cgroups": "no"}


class BuildError(RuntimeError):
    """Apptainer could not be built; the message names the step and its output."""


class HostCannotBuildError(RuntimeError):
    """This host cannot build Apptainer; reported, not failed."""


def prefix(root: Path | None = None, version: str = VERSION) -> Path:
    """Where this version is installed: `<cache>/apptainer/<version>/`."""
    return (root or versions.cache_root()) / "apptainer" / version


def installed_version(binary: Path) -> str | None:
    """`apptainer --version`'s output, or None when the binary is absent or does not run."""
    if not os.access(binary, os.X_OK):
        return None
    try:
        result = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def built(root: Path | None = None) -> Path | None:
    """`$KONDOR_APPTAINER`, else this version's build in the cache, when it runs `--version`;
    None where there is neither (the caller falls back or says so)."""
    configured = os.environ.get("KONDOR_APPTAINER")
    binary = Path(configured) if configured else prefix(root) / "bin" / "apptainer"
    return binary if installed_version(binary) else None


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def reachable(path: Path) -> bool:
    """Whether any account may run `path`: it and every directory above it have the bit."""
    real = path.resolve()
    return all(p.stat().st_mode & stat.S_IXOTH for p in (real, *real.parents))


def relocate(binary: Path, directory: Path) -> Path:
    """`binary` where every account can run it (an installation on the host, /usr/bin), else
    a copy of its installation at `directory` (hard links where the file system allows),
    made traversable; its `apptainer`. Jobs run it as their slot's account, which cannot
    cross the home directory the cache sits in."""
    if reachable(binary):
        return binary
    if not (directory / "bin" / "apptainer").exists():
        shutil.copytree(binary.parent.parent, directory, symlinks=True, copy_function=_link_or_copy)
    for parent in (directory / "bin").parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)  # the search bit only, never read
    return directory / "bin" / "apptainer"


def _say(message: str) -> None:
    print(f"apptainer build: {message}", file=sys.stderr, flush=True)


def _run(command: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str]) -> str:
    result = subprocess.run(
        list(command), cwd=cwd, env=dict(env), capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        output = (result.stdout + result.stderr)[-3000:]
        raise BuildError(f"`{' '.join(command)}` failed ({result.returncode}):\n{output}")
    return result.stdout


def _niced(command: Sequence[str]) -> list[str]:
    # A cold build takes both cores for minutes; CI and others share the machine.
    return ["nice", "-n", "19", *command] if shutil.which("nice") else list(command)


def missing_packages() -> list[str]:
    """The Debian packages of PACKAGES not installed (all of them where dpkg is absent)."""
    if shutil.which("dpkg-query") is None:
        return list(PACKAGES)
    result = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\n", *PACKAGES],
        capture_output=True,
        text=True,
        check=False,
    )
    installed = {
        line.split()[0] for line in result.stdout.splitlines() if line.endswith(" installed")
    }
    return [package for package in PACKAGES if package not in installed]


def ensure_packages(env: Mapping[str, str]) -> None:
    """Install the missing PACKAGES with apt-get, or say why this host cannot."""
    missing = missing_packages()
    if not missing:
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise HostCannotBuildError(
            f"Debian packages {' '.join(missing)} are missing and this is not root with apt-get"
        )
    _say(f"installing {' '.join(missing)} with apt-get")
    apt_env = {**env, "DEBIAN_FRONTEND": "noninteractive"}
    _run(["apt-get", "update", "-q"], env=apt_env)
    _run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], env=apt_env)


def host_problems() -> list[str]:
    """Why this host cannot build Apptainer at all (empty when it can)."""
    problems = []
    if sys.platform != "linux":
        problems.append(f"Apptainer runs on Linux only, not {sys.platform}")
    for tool in ("go", "make", "nice"):
        if shutil.which(tool) is None:
            problems.append(f"`{tool}` is not on PATH")
    return problems


def _download_module(env: Mapping[str, str], version: str) -> Path:
    """The module's directory in Go's module cache (read-only), downloaded if needed."""
    out = _run(["go", "mod", "download", "-json", f"{MODULE}@v{version}"], env=env)
    info = json.loads(out)
    if info.get("Error"):
        raise BuildError(f"go mod download {MODULE}@v{version}: {info['Error']}")
    return Path(info["Dir"])


def _copy_source(module_dir: Path, source: Path, version: str) -> None:
    shutil.copytree(module_dir, source, symlinks=True)
    for path in source.rglob("*"):
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    for pattern in EXECUTABLES:
        for path in source.glob(pattern):
            if path.is_file():
                path.chmod(path.stat().st_mode | 0o111)
    (source / "VERSION").write_text(f"{version}\n")


def _mconfig(source: Path, target: Path, env: Mapping[str, str]) -> None:
    base = ["./mconfig", "--without-suid", "-b", "builddir", f"--prefix={target}"]
    try:
        # --without-network leaves out 131 MB of CNI plugins that jobs never use.
        _run([*base, "--without-network"], cwd=source, env=env)
    except BuildError as error:
        _say(f"mconfig refused --without-network, configuring with it: {error}")
        shutil.rmtree(source / "builddir", ignore_errors=True)
        _run(base, cwd=source, env=env)


def configure(binary: Path, env: Mapping[str, str]) -> None:
    """Write CONFIG into the installed apptainer.conf (the `apptainer config global` way)."""
    for key, value in CONFIG.items():
        _run([str(binary), "config", "global", "--set", key, value], env=env)


def _build(target: Path, version: str, env: dict[str, str]) -> None:
    ensure_packages(env)
    with tempfile.TemporaryDirectory(prefix="apptainer-src-", dir=target.parent) as scratch:
        source = Path(scratch) / "apptainer"
        _say(f"fetching {MODULE}@v{version} from the Go module proxy")
        _copy_source(_download_module(env, version), source, version)
        _mconfig(source, target, env)
        _say(f"compiling (nice -n 19; about 13 minutes on two loaded cores) into {target}")
        _run(_niced(["make", "-C", "builddir"]), cwd=source, env=env)
        _run(_niced(["make", "-C", "builddir", "install"]), cwd=source, env=env)


def ensure_built(root: Path | None = None, *, force: bool = False, version: str = VERSION) -> Path:
    """The installed `apptainer` binary, building it first when absent or broken."""
    target = prefix(root, version)
    binary = target / "bin" / "apptainer"
    if not force and installed_version(binary):
        return binary
    problems = host_problems()
    if problems:
        raise HostCannotBuildError("; ".join(problems))
    with locked(target.parent / "build.lock"):
        if not force and installed_version(binary):
            return binary  # another process built it while we waited for the lock
        shutil.rmtree(target, ignore_errors=True)
        gocache = target.parent / "gocache"  # private: the Makefile runs `go clean -cache`
        env = {**os.environ, "GOCACHE": str(gocache)}
        try:
            _build(target, version, env)
            configure(binary, env)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        shutil.rmtree(gocache, ignore_errors=True)
    if not installed_version(binary):
        raise BuildError(f"{binary} was installed but `--version` does not run")
    return binary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kondor_devcluster.apptainer",
        description=(__doc__ or "").splitlines()[0],
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        help="cache root (default $KONDOR_CACHE_DIR or ~/.cache/kondor); Apptainer goes "
        "under its apptainer/<version>/",
    )
    parser.add_argument("--force", action="store_true", help="build again even when installed")
    args = parser.parse_args(argv)
    root = args.cache_dir.absolute() if args.cache_dir else None
    started = time.monotonic()
    try:
        binary = ensure_built(root, force=args.force)
    except HostCannotBuildError as reason:
        _say(f"not building Apptainer on this host (reported, not failed): {reason}")
        return 0
    except BuildError as error:
        _say(str(error))
        return 1
    _say(f"{installed_version(binary)} ready in {time.monotonic() - started:.1f}s")
    print(binary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
