"""e2e: Kondor on a real kind cluster, from the image up. Opt-in, and skipped with the reason
when Docker, kind or helm is missing.

    pytest tests/e2e --e2e          (or KONDOR_E2E=1; `make e2e`)

Builds the image, `kind load`s it into a cluster made from kind-config.yaml, installs the chart
with helm, and leaves the cluster behind only with KONDOR_E2E_KEEP=1 (then re-uses it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # --import-mode=importlib does not put test folders on sys.path
    sys.path.insert(0, _HERE)

from kind_support import (  # noqa: E402
    CLUSTER,
    IMAGE,
    NAMESPACE,
    RELEASE,
    ROOT,
    Kind,
    helm_binary,
    run,
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--e2e",
        action="store_true",
        default=False,
        help="run the e2e tests on a kind cluster (needs Docker, kind, kubectl; fetches helm)",
    )


def _opted_in(config: pytest.Config) -> bool:
    env = os.environ.get("KONDOR_E2E", "") not in ("", "0", "false", "no")
    try:
        return bool(config.getoption("--e2e")) or env
    except ValueError:  # this conftest was not loaded early enough to add the option
        return env


def _docker_problem() -> str | None:
    docker = shutil.which("docker")
    if docker is None:
        return "docker is not installed"
    try:
        info = subprocess.run(
            [docker, "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer in 30s"
    if info.returncode != 0:
        lines = info.stderr.strip().splitlines()
        return f"`docker info` failed: {lines[-1] if lines else info.returncode}"
    return None


def skip_reason(config: pytest.Config) -> str | None:
    if not _opted_in(config):
        return "e2e tests are opt-in: `pytest tests/e2e --e2e` (or KONDOR_E2E=1, `make e2e`)"
    problem = _docker_problem()
    if problem:
        return f"e2e needs a Docker engine: {problem}"
    for tool in ("kind", "kubectl"):
        if shutil.which(tool) is None:
            return f"e2e needs {tool} on PATH"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    mine = [item for item in items if here in Path(str(item.path)).parents]
    if not mine:
        return
    reason = skip_reason(config)
    for item in mine:
        item.add_marker(pytest.mark.e2e)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def kind_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kind]:
    helm_bin = helm_binary()
    kubeconfig = tmp_path_factory.mktemp("kind") / "kubeconfig"
    keep = os.environ.get("KONDOR_E2E_KEEP", "") not in ("", "0", "false", "no")
    existing = run(["kind", "get", "clusters"]).stdout.split()
    if CLUSTER not in existing:
        run(
            [
                "kind", "create", "cluster", "--name", CLUSTER,
                "--config", str(ROOT / "kind-config.yaml"),
                "--kubeconfig", str(kubeconfig), "--wait", "180s",
            ],
            timeout=600,
        )  # fmt: skip
    else:
        kubeconfig.write_text(run(["kind", "get", "kubeconfig", "--name", CLUSTER]).stdout)
    try:
        yield Kind(kubeconfig, helm_bin)
    finally:
        if not keep:
            run(["kind", "delete", "cluster", "--name", CLUSTER], check=False)


@pytest.fixture(scope="session")
def image(kind_cluster: Kind) -> str:
    """The image built from this checkout and loaded into the kind nodes."""
    run(["docker", "build", "-t", IMAGE, str(ROOT)], timeout=1200)
    run(["kind", "load", "docker-image", IMAGE, "--name", CLUSTER], timeout=600)
    return IMAGE


@pytest.fixture(scope="session")
def release(kind_cluster: Kind, image: str) -> Iterator[str]:
    """The chart installed (and waited for); its NOTES are the returned output."""
    repository, tag = image.split(":")
    output = kind_cluster.helm(
        "upgrade", "--install", RELEASE, str(ROOT / "helm" / "kondor"),
        "--namespace", NAMESPACE, "--create-namespace",
        "--set", f"image.repository={repository}",
        "--set", f"image.tag={tag}",
        "--set", "image.pullPolicy=Never",
        "--wait", "--timeout", "5m",
    )  # fmt: skip
    try:
        yield output
    finally:
        kind_cluster.kubectl(
            "delete", "-f", str(ROOT / "examples" / "demo" / "policies"), "--ignore-not-found"
        )
        kind_cluster.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")
