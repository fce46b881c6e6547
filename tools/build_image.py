"""Build the image kondor:0.1.0 from the Dockerfile without Docker, as an OCI archive (cached).

    python tools/build_image.py     # -> ~/.cache/kondor/image/kondor-0.1.0.oci.tar

No container registry is reachable here, so `python:3.11-slim-bookworm` is stood in for by a
Debian bookworm base written by `mmdebstrap` (python3, python3-venv, libstdc++6, zlib1g, CA
certificates) and committed as `localhost/kondor-base:bookworm-<key>`; `buildah bud` then
builds the one Dockerfile on it (`--build-arg PYTHON_IMAGE=...`), exactly the file a Docker or
kind user builds on the real base. The Dockerfile's builder stage imports every runtime module
(tools/check_imports.py), so a module that does not import fails the build with its name;
after the build the same check runs once more in the runtime image, as its non-root user.

The archive holds `docker.io/library/kondor:0.1.0`, the reference a Pod's `image: kondor:0.1.0`
resolves to in containerd (`kondor dev-cluster up --real-node --image ARCHIVE` imports it).

Cached under `$KONDOR_CACHE_DIR` (default ~/.cache/kondor) in `image/`: buildah's storage, the
base (rebuilt only when its inputs change: suite, packages, apt sources) and the archive with
the key of its inputs (the base, the build context as .dockerignore filters it, this script):
a second run with nothing changed prints the archive in about a second. buildah and mmdebstrap
are installed with apt-get when missing; buildah's overlay storage needs root.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE_SUITE = "bookworm"
#: What `python:3.11-slim-bookworm` offers the Dockerfile: Python 3.11 with venv (Debian's
#: bookworm Python is 3.11), the C++ runtime and zlib htcondor's wheel links, CA certificates.
BASE_PACKAGES = (
    "python3",
    "python3-venv",
    "python-is-python3",
    "libstdc++6",
    "zlib1g",
    "ca-certificates",
)
#: Documentation is left out of the base, as the slim images do.
BASE_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}
#: The host's Debian apt sources, the base's packages come from the same mirror.
APT_SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))
DEFAULT_MIRROR = "http://deb.debian.org/debian"
#: The host's CA bundle, bind-mounted into RUN steps only (this machine's HTTPS to the package
#: index is re-signed by a local CA); it is not part of any layer.
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
#: Tools this script runs, and the Debian package of each.
TOOLS: Mapping[str, str] = {"buildah": "buildah", "mmdebstrap": "mmdebstrap"}
#: The runtime packages the image must import entirely (the dev cluster is not in the image).
RUNTIME_PACKAGES = (
    "kondor_core",
    "kondor_kube",
    "kondor_operator",
    "kondor_agent",
    "kondor_cli",
)
#: A fixed time for the image's layers and the .pyc pip compiles: same inputs, same image.
SOURCE_DATE_EPOCH = "0"


class BuildError(RuntimeError):
    """The image could not be built; the message names the step and its output."""


@dataclass(frozen=True)
class ImageName:
    """The image's local tag (`kondor:0.1.0`) and its full reference in containerd."""

    name: str
    version: str

    @property
    def tag(self) -> str:
        return f"{self.name}:{self.version}"

    @property
    def reference(self) -> str:
        # Kubernetes' `image: kondor:0.1.0` is Docker Hub's library namespace to containerd.
        return f"docker.io/library/{self.tag}"

    @property
    def archive_name(self) -> str:
        return f"{self.name}-{self.version}.oci.tar"


def project_image(pyproject: Path = ROOT / "pyproject.toml") -> ImageName:
    project = tomllib.loads(pyproject.read_text())["project"]
    return ImageName(str(project["name"]), str(project["version"]))


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """`$KONDOR_CACHE_DIR`, else `~/.cache/kondor` (as the dev cluster's binaries)."""
    env = os.environ if environ is None else environ
    configured = env.get("KONDOR_CACHE_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path(env.get("HOME", str(Path.home()))) / ".cache" / "kondor"


@dataclass(frozen=True)
class ImageCache:
    """Everything the image build keeps, under `<cache>/image/`."""

    root: Path

    @property
    def storage(self) -> Path:
        return self.root / "storage"

    @property
    def runroot(self) -> Path:
        return self.root / "run"

    def archive(self, image: ImageName) -> Path:
        return self.root / image.archive_name

    def key_file(self, image: ImageName) -> Path:
        return self.root / f"{image.archive_name}.key"


# -- the build context, as .dockerignore filters it ---------------------------------------


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go's filepath.Match plus `**`), matching a path or its parents."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + "(?:/.*)?")


@dataclass(frozen=True)
class IgnoreRule:
    pattern: str
    negated: bool
    regex: re.Pattern[str]


def ignore_rules(text: str) -> list[IgnoreRule]:
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        rules.append(IgnoreRule(pattern, negated, _glob_regex(pattern)))
    return rules


def is_ignored(path: str, rules: Sequence[IgnoreRule]) -> bool:
    """Whether Docker leaves `path` (relative, `/`-separated) out: the last match decides."""
    ignored = False
    for rule in rules:
        if rule.regex.fullmatch(path):
            ignored = not rule.negated
    return ignored


def context_files(context: Path, rules: Sequence[IgnoreRule]) -> Iterator[str]:
    """The files (and symlinks) of the build context, sorted, relative to `context`."""
    for directory, dirs, files in os.walk(context):
        relative = os.path.relpath(directory, context)
        prefix = "" if relative == "." else relative + "/"
        # An ignored directory is walked only when an exception could let something in.
        dirs[:] = sorted(
            name
            for name in dirs
            if not is_ignored(prefix + name, rules)
            or any(r.negated and r.pattern.startswith(prefix + name + "/") for r in rules)
        )
        for name in sorted(files):
            if not is_ignored(prefix + name, rules):
                yield prefix + name


def build_inputs(context: Path) -> list[str]:
    """The files that decide the image: the context the Dockerfile may copy from, the
    Dockerfile and the .dockerignore (which the builder reads even when they are ignored)."""
    ignore = context / ".dockerignore"
    rules = ignore_rules(ignore.read_text()) if ignore.exists() else []
    files = set(context_files(context, rules))
    files |= {name for name in ("Dockerfile", ".dockerignore") if (context / name).is_file()}
    return sorted(files)


def context_digest(context: Path) -> str:
    """sha256 of every file the build sees: path, executable bit, content (a symlink's target)."""
    digest = hashlib.sha256()
    for relative in build_inputs(context):
        path = context / relative
        if path.is_symlink():
            content = b"symlink:" + os.readlink(path).encode()
        else:
            content = path.read_bytes()
        executable = os.access(path, os.X_OK)
        digest.update(f"{relative}\0{int(executable)}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


# -- the cache keys --------------------------------------------------------------------------


def base_key(sources: str, suite: str = BASE_SUITE, packages: Sequence[str] = BASE_PACKAGES) -> str:
    """What decides the base: the suite, its packages, what is left out, the apt sources."""
    inputs = {
        "suite": suite,
        "packages": sorted(packages),
        "excludes": list(BASE_EXCLUDES),
        "env": dict(BASE_ENV),
        "sources": sources,
        "epoch": SOURCE_DATE_EPOCH,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def base_tag(key: str) -> str:
    return f"localhost/kondor-base:{BASE_SUITE}-{key[:12]}"


def image_key(base: str, context: str, recipe: str, image: ImageName) -> str:
    """What decides the image: its base's key, the build context's digest, this script."""
    inputs = {"base": base, "context": context, "recipe": recipe, "image": image.reference}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


# -- the command lines -----------------------------------------------------------------------


def buildah(cache: ImageCache, *args: str) -> list[str]:
    """buildah with its storage under the cache (overlay: layers shared, not copied)."""
    return [
        "buildah",
        f"--root={cache.storage}",
        f"--runroot={cache.runroot}",
        "--storage-driver=overlay",
        *args,
    ]


def mmdebstrap_command(target: Path, sources: Path | None, suite: str = BASE_SUITE) -> list[str]:
    excludes = [f"--dpkgopt=path-exclude={pattern}" for pattern in BASE_EXCLUDES]
    return [
        "mmdebstrap",
        "--variant=minbase",
        f"--include={','.join(BASE_PACKAGES)}",
        *excludes,
        suite,
        str(target),
        str(sources) if sources is not None else DEFAULT_MIRROR,
    ]


def bud_command(
    cache: ImageCache, image: ImageName, base: str, context: Path, ca_bundle: Path | None
) -> list[str]:
    mounts = [] if ca_bundle is None else ["-v", f"{ca_bundle}:{HOST_CA_BUNDLE}:ro"]
    return buildah(
        cache,
        "bud",
        "--isolation=chroot",
        "--network=host",
        "--pull-never",
        "--layers",
        f"--timestamp={SOURCE_DATE_EPOCH}",
        f"--build-arg=PYTHON_IMAGE={base}",
        f"--build-arg=SOURCE_DATE_EPOCH={SOURCE_DATE_EPOCH}",
        *mounts,
        f"--tag={image.tag}",
        f"--file={context / 'Dockerfile'}",
        str(context),
    )


def push_command(cache: ImageCache, image: ImageName, target: Path) -> list[str]:
    return buildah(cache, "push", image.tag, f"oci-archive:{target}:{image.reference}")


# -- running them ----------------------------------------------------------------------------


def _say(message: str) -> None:
    print(f"build_image: {message}", file=sys.stderr, flush=True)


def _run(command: Sequence[str], what: str, *, env: Mapping[str, str] | None = None) -> str:
    """Run `command`, its output streamed to stderr; on failure say `what` failed and how."""
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=None if env is None else {**os.environ, **env},
    )
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        sys.stderr.write(f"  {line}")
    code = process.wait()
    output = "".join(lines)
    if code != 0:
        raise BuildError(f"{what} failed ({code}): {' '.join(command)}\n{output[-4000:]}")
    _say(f"{what}: {time.monotonic() - started:.0f}s")
    return output


def _quiet(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=False)


def ensure_tools(log: bool = True) -> None:
    """buildah and mmdebstrap, installed with apt-get when missing; root for the storage."""
    if os.geteuid() != 0:
        raise BuildError(
            "buildah's overlay storage needs root here; run `make image` as root, or build "
            "with Docker: docker build -t kondor:0.1.0 ."
        )
    missing = sorted({package for tool, package in TOOLS.items() if shutil.which(tool) is None})
    if not missing:
        return
    if shutil.which("apt-get") is None:
        raise BuildError(f"{' '.join(missing)} missing and no apt-get to install them")
    if log:
        _say(f"installing {' '.join(missing)} with apt-get")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    _run(["apt-get", "update", "-q"], "apt-get update", env=env)
    _run(
        ["apt-get", "install", "-y", "-q", *missing],
        f"apt-get install {' '.join(missing)}",
        env=env,
    )


def apt_sources() -> Path | None:
    """The host's Debian sources (what mmdebstrap reads), or None for the default mirror."""
    for path in APT_SOURCES:
        if path.is_file() and path.read_text().strip():
            return path
    return None


def image_exists(cache: ImageCache, tag: str) -> bool:
    return _quiet(buildah(cache, "inspect", "--type=image", tag)).returncode == 0


def _image_id(cache: ImageCache, tag: str) -> str | None:
    result = _quiet(buildah(cache, "inspect", "--type=image", "--format={{.FromImageID}}", tag))
    return result.stdout.strip() or None if result.returncode == 0 else None


def ensure_base(cache: ImageCache) -> str:
    """The base image's tag, written by mmdebstrap and committed unless already stored."""
    sources = apt_sources()
    key = base_key(sources.read_text() if sources else DEFAULT_MIRROR)
    tag = base_tag(key)
    if image_exists(cache, tag):
        return tag
    _say(f"base {tag}: mmdebstrap {BASE_SUITE} (~2 min)")
    cache.root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache.root, prefix="base-") as scratch:
        rootfs = Path(scratch) / "rootfs.tar"
        _run(
            mmdebstrap_command(rootfs, sources),
            "mmdebstrap",
            env={"SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH},
        )
        container = _run(buildah(cache, "from", "scratch"), "buildah from").strip().splitlines()[-1]
        try:
            _run(buildah(cache, "add", container, str(rootfs), "/"), "buildah add")
            config = [f"--env={name}={value}" for name, value in BASE_ENV.items()]
            _run(
                buildah(cache, "config", *config, '--cmd=["python3"]', container), "buildah config"
            )
            _run(
                buildah(cache, "commit", f"--timestamp={SOURCE_DATE_EPOCH}", container, tag),
                "buildah commit",
            )
        finally:
            _quiet(buildah(cache, "rm", container))
    return tag


def smoke_test(cache: ImageCache, image: ImageName, context: Path) -> None:
    """The runtime image as the pods run it (its own user): every module imports, and the
    entry points start."""
    container = _run(buildah(cache, "from", "--pull-never", image.tag), "buildah from").strip()
    container = container.splitlines()[-1]
    try:
        checker = "/tmp/check_imports.py"
        _run(
            buildah(
                cache,
                "copy",
                "--chmod=0644",
                container,
                str(context / "tools" / "check_imports.py"),
                checker,
            ),
            "buildah copy",
        )
        run = buildah(cache, "run", "--isolation=chroot", container, "--")
        _run([*run, "python", "-I", checker, *RUNTIME_PACKAGES], "imports in the runtime image")
        for command in ("kondor-operator", "kondor-agent", "kondor"):
            _run([*run, command, "--help"], f"{command} --help in the runtime image")
    finally:
        _quiet(buildah(cache, "rm", container))


def build(cache: ImageCache, context: Path = ROOT, *, force: bool = False) -> Path:
    """The image's OCI archive: reused when its key is unchanged, else built and written."""
    image = project_image(context / "pyproject.toml")
    ensure_tools()
    base = ensure_base(cache)
    recipe = Path(__file__).read_text()
    key = image_key(base, context_digest(context), recipe, image)
    archive = cache.archive(image)
    key_file = cache.key_file(image)
    if not force and archive.is_file() and key_file.is_file() and key_file.read_text() == key:
        _say(f"{image.reference} is up to date ({key[:12]})")
        return archive
    ca_bundle = HOST_CA_BUNDLE if HOST_CA_BUNDLE.is_file() else None
    previous = _image_id(cache, image.tag)
    _run(bud_command(cache, image, base, context, ca_bundle), f"buildah bud {image.tag}")
    if previous and previous != _image_id(cache, image.tag):
        # The image this one replaces (untagged now); the builder's layers stay as the cache.
        _quiet(buildah(cache, "rmi", previous))
    smoke_test(cache, image, context)
    # Written beside and renamed, so a reader never sees half an archive.
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    _run(push_command(cache, image, partial), f"buildah push {image.reference}")
    partial.replace(archive)
    key_file.write_text(key)
    _say(f"{image.reference} written ({archive.stat().st_size / 1e6:.0f} MB, key {key[:12]})")
    return archive


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--cache-dir",
        type=Path,
        help="cache root (default $KONDOR_CACHE_DIR or ~/.cache/kondor); the image's "
        "files go under its image/",
    )
    parser.add_argument(
        "--force", action="store_true", help="build the image again even if its key is unchanged"
    )
    args = parser.parse_args(argv)
    root = (args.cache_dir or cache_root()).absolute()
    started = time.monotonic()
    try:
        archive = build(ImageCache(root / "image"), force=args.force)
    except BuildError as error:
        print(f"build_image: {error}", file=sys.stderr)
        return 1
    _say(f"done in {time.monotonic() - started:.1f}s")
    print(archive)
    return 0


if __name__ == "__main__":
    sys.exit(main())
