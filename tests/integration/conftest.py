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
from typing import Any

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


#: Modules whose cluster has the host's one real node (`realnode.claim_host`): under xdist they
#: are one work unit, so one worker runs them one after the other.
REAL_NODE_MODULES = frozenset({"test_real_node", "test_jobs_real_node", "test_helm", "test_image"})
REAL_NODE_GROUP = "real-node"
#: Pod jobs under Pod Security on the real node (issue 29) share it too.
REAL_NODE_MODULES |= {"test_pod_security_real_node"}
INTEGRATION = Path(__file__).resolve().parent.relative_to(ROOT).as_posix() + "/"


def xdist_scope(nodeid: str) -> str:
    """The work unit of a test under `pytest -n N --dist loadgroup`: an integration test's
    module (its module-scoped cluster starts once, on one worker; the real-node modules are
    one unit between them); any other test alone, so unit tests spread freely."""
    path = nodeid.split("::", 1)[0]
    if not path.startswith(INTEGRATION):
        return nodeid
    return REAL_NODE_GROUP if Path(path).stem in REAL_NODE_MODULES else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` with `xdist_scope` as the groups.

    xdist's own loadgroup reads `xdist_group` marks by renaming the test ids, which pytest 9.2
    no longer lets it do (the mark is silently ignored), so the grouping is done here instead.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class ModuleScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the integration tests; under xdist, run them first.

    The real node's unit first, then modules with more tests first, so that the long ones
    start at once and the unit tests, spread one by one, fill the workers' gaps at the end
    (the Makefile passes `--no-loadscope-reorder` so that xdist keeps this order).
    """
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.integration)
    if not hasattr(config, "workerinput"):
        return  # not an xdist worker: collection order, as ever
    counts: dict[str, int] = {}
    for item in items:
        scope = xdist_scope(item.nodeid)
        counts[scope] = counts.get(scope, 0) + 1

    def order(item: pytest.Item) -> tuple[int, int]:
        scope = xdist_scope(item.nodeid)
        if scope == item.nodeid:
            return (2, 0)
        return (0 if scope == REAL_NODE_GROUP else 1, -counts[scope])

    items.sort(key=order)  # stable: a module's tests keep their order, and stay together


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
