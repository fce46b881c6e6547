"""The image `make image` builds, run by the dev cluster's real node as a user's cluster runs it.

`kondor dev-cluster up --real-node --image ARCHIVE` imports the OCI archive into the node's
containerd; a Pod asking for `image: kondor:0.1.0` with `imagePullPolicy: IfNotPresent` then
runs it without a registry. The pod runs the agent's real start path (`kondor-agent`, which
imports the fetch-work hooks and so httpx) and imports every runtime module, as its non-root
user. Skipped, with the reason, when the image is not built (`make image`; `make test` builds it
first) or the host cannot run a real node.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from kubernetes import client, config

from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port

from .conftest import ROOT, real_node_skip_reason

pytestmark = pytest.mark.timeout(300)

NODE = "kondor-real-0"


def build_image_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_image", ROOT / "tools" / "build_image.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def image_archive() -> tuple[Path, str]:
    """The archive `make image` writes (or $KONDOR_IMAGE_ARCHIVE), and the image's tag."""
    tool = build_image_tool()
    image = tool.project_image()
    named = os.environ.get("KONDOR_IMAGE_ARCHIVE")
    archive = Path(named) if named else tool.ImageCache(tool.cache_root() / "image").archive(image)
    return archive, image.tag


def eventually(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


@pytest.fixture(scope="module")
def image() -> tuple[Path, str]:
    archive, tag = image_archive()
    if not archive.is_file():
        pytest.skip(f"the image is not built ({archive} missing): run `make image`")
    return archive, tag


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, image: tuple[Path, str]
) -> Iterator[DevCluster]:
    reason = real_node_skip_reason()
    if reason:
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("image")
    spec = ClusterSpec(
        port=free_port(),
        kubeconfig=state / "kubeconfig",
        state_dir=state / "state",
        real_node=NODE,
        images=(image[0],),
    )
    started = DevCluster(spec, log=sys.stderr)
    started.start()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def core(cluster: DevCluster) -> client.CoreV1Api:
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(cluster.spec.kubeconfig)))
    eventually(
        lambda: api.list_namespaced_service_account("default").items, 30, "the default account"
    )
    return api


#: The agent's start path (its --help imports kondor_agent.main, hence the fetch-work hooks and
#: httpx), then every module of the five runtime packages.
SCRIPT = (
    "kondor-agent --help > /dev/null && kondor-operator --help > /dev/null && "
    "python -I -c 'import kondor_agent.fetchwork, httpx; print(\"fetchwork imports\")' && "
    "python -I -c '"
    "import importlib, pkgutil\n"
    "names = []\n"
    'for top in ("kondor_core", "kondor_kube", "kondor_operator", "kondor_agent", "kondor_cli"):\n'
    "    package = importlib.import_module(top)\n"
    '    for info in pkgutil.walk_packages(package.__path__, top + "."):\n'
    '        if not info.name.endswith("__main__"):\n'
    "            importlib.import_module(info.name)\n"
    "            names.append(info.name)\n"
    'print(len(names), "modules import")\' && id -u'
)


def test_a_pod_runs_the_image_from_the_archive_on_the_real_node(
    core: client.CoreV1Api, image: tuple[Path, str]
) -> None:
    _archive, tag = image
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kondor-image"},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "agent",
                    "image": tag,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", SCRIPT],
                    # The image's numeric USER lets the kubelet check this.
                    "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False},
                }
            ],
        },
    }
    core.create_namespaced_pod("default", body)

    def done() -> client.V1Pod | None:
        pod = core.read_namespaced_pod("kondor-image", "default")
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    pod = eventually(done, 180, "pod kondor-image finished")
    logs = core.read_namespaced_pod_log("kondor-image", "default")
    assert pod.status.phase == "Succeeded", logs
    [status] = pod.status.container_statuses
    assert status.image == f"docker.io/library/{tag}"
    lines = logs.split()
    assert "fetchwork imports" in logs
    assert "modules import" in logs, logs
    assert int(logs.split(" modules import")[0].split()[-1]) > 100
    assert lines[-1] == "65532", "the image's user, not root"
