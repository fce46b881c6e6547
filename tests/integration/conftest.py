"""Integration fixtures: one dev cluster per test session, one namespace per test.

The cluster is real (kube-apiserver, etcd, controller manager, scheduler, kwok) and needs the
control plane binaries. When they are not built, the tests skip unless
`KONDOR_BUILD_CONTROLPLANE=1`, which builds them first (tens of minutes cold; `make controlplane`
does the same ahead of time), so that a unit test run stays fast.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from kondor_core.api.crds import all_crds
from kondor_devcluster import build, realnode, versions
from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port

ROOT = Path(__file__).resolve().parents[2]
MACHINES = ROOT / "examples" / "machines"
#: The simulated node of the session cluster.
SESSION_MACHINE = MACHINES / "kwok-small.yaml"
SESSION_NODE = "kwok-small-0"

ClientFactory = Callable[[str], client.ApiClient]


def _want_build() -> bool:
    return os.environ.get("KONDOR_BUILD_CONTROLPLANE", "") not in ("", "0", "false", "no")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.integration)


def pytest_collection_finish(session: pytest.Session) -> None:
    # Build here, outside any test's timeout, and only when integration tests were collected.
    here = Path(__file__).parent
    wanted = any(here in Path(str(item.path)).parents for item in session.items)
    if wanted and _want_build() and build.missing_binaries(versions.bin_dir()):
        capture = session.config.pluginmanager.getplugin("capturemanager")
        # Show the build's progress: it takes minutes, and pytest would hold the output back.
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            try:
                build.ensure_built(log=sys.stderr)
            except build.BuildError as error:
                pytest.exit(f"KONDOR_BUILD_CONTROLPLANE is set but the build failed: {error}", 3)


def skip_reason() -> str | None:
    missing = build.missing_binaries(versions.bin_dir())
    if not missing:
        return None
    return (
        f"control plane binaries not built ({', '.join(missing)} missing in "
        f"{versions.bin_dir()}); run `make controlplane` or set KONDOR_BUILD_CONTROLPLANE=1"
    )


def real_node_skip_reason() -> str | None:
    """Why `--real-node` cannot run here (None when it can): what the host lacks."""
    reason = skip_reason()
    if reason:
        return reason
    problems = realnode.host_problems()
    if problems:
        return f"the real node cannot run here: {'; '.join(problems)}"
    missing = realnode.missing_packages()
    if missing and shutil.which("apt-get") is None:
        return f"the real node needs {', '.join(sorted(missing))} and there is no apt-get"
    if not build.kubelet_binary().exists() and shutil.which("go") is None:
        return "the kubelet is not built and there is no Go to build it"
    return None


def start_cluster(state: Path, nodes: tuple[Path, ...] = ()) -> DevCluster:
    spec = ClusterSpec(
        port=free_port(), kubeconfig=state / "kubeconfig", state_dir=state / "state", nodes=nodes
    )
    cluster = DevCluster(spec, log=sys.stderr)
    cluster.start()
    return cluster


@pytest.fixture(scope="session")
def dev_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """The session's dev cluster, with one simulated node from `examples/machines/`."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    cluster = start_cluster(tmp_path_factory.mktemp("devcluster"), (SESSION_MACHINE,))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kubeconfig(dev_cluster: DevCluster) -> Path:
    return dev_cluster.spec.kubeconfig


@pytest.fixture(scope="session")
def api_client_for(kubeconfig: Path) -> ClientFactory:
    """A `kubernetes` client for one of the kubeconfig's contexts: admin, alice or bob."""

    def make(context: str) -> client.ApiClient:
        return config.new_client_from_config(config_file=str(kubeconfig), context=context)

    return make


@pytest.fixture(scope="session")
def admin(api_client_for: ClientFactory) -> client.ApiClient:
    return api_client_for("admin")


@pytest.fixture(scope="session")
def kubectl_bin() -> str:
    path = shutil.which("kubectl") or (
        "/usr/local/bin/kubectl" if Path("/usr/local/bin/kubectl").exists() else None
    )
    if path is None:
        pytest.skip("kubectl is not installed")
    return path


@pytest.fixture
def namespace(request: pytest.FixtureRequest, admin: client.ApiClient) -> Iterator[str]:
    """A fresh namespace for the test, with its `default` ServiceAccount (pods need it)."""
    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:8]
    name = f"t-{request.node.name[:40].lower().replace('_', '-').strip('-')}-{digest}"
    name = "".join(c for c in name if c.isalnum() or c == "-")
    core = client.CoreV1Api(admin)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    deadline = time.monotonic() + 30
    while True:
        accounts = core.list_namespaced_service_account(name).items
        if any(account.metadata.name == "default" for account in accounts):
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"no default ServiceAccount in {name} after 30s")
        time.sleep(0.2)
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def kondor_crds(admin: client.ApiClient) -> list[str]:
    """Kondor's CRDs as generated from the models (the API server refuses non-structural ones)."""
    extensions = client.ApiextensionsV1Api(admin)
    names = []
    for body in all_crds():
        extensions.create_custom_resource_definition(body)
        names.append(str(body["metadata"]["name"]))
    deadline = time.monotonic() + 30
    for name in names:
        while True:
            crd = extensions.read_custom_resource_definition(name)
            conditions = crd.status.conditions or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"CRD {name} not Established after 30s")
            time.sleep(0.2)
    return names
