"""Kueue beside the dev cluster: the peer batch queue `bench/bench_scale.py` runs beside Kondor.

Kueue's manager is built from its Go module (`devcluster/controlplane/kueue/`, pinned at
`versions.KUEUE`) into the version-keyed cache, the way the control plane is, with its CRDs and
its webhook manifests copied from the same module. It then runs as a local process against the
dev cluster with its admission webhooks on 127.0.0.1 (a CA and serving certificate of its own,
Kueue's internal certificate management off: that one wants an in-cluster Service), only the
`batch/job` integration, and none of the features that need more than the API server (the
on-demand visibility API server, MultiKueue, provisioning requests).

Built only on demand (`ensure_kueue`, called by the benchmark): `make check`, `.ci/run` and
`make controlplane` never build it.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import httpx
import yaml

from kondor_devcluster import build, pki, versions

MODULE = "sigs.k8s.io/kueue"
PACKAGE = "sigs.k8s.io/kueue/cmd/kueue"
#: Kueue's own namespace (its default `namespace` setting): it must exist.
NAMESPACE = "kueue-system"
#: Where the job's LocalQueue is named (Kueue's label).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: Features off: each needs more than an API server (an aggregated API, other clusters,
#: the cluster autoscaler's ProvisioningRequest).
FEATURE_GATES = "VisibilityOnDemand=false,MultiKueue=false,ProvisioningACC=false"
#: The webhooks kept from Kueue's manifests: its own kinds and batch/v1 Jobs (the one
#: integration enabled); the others would intercept every Pod, Deployment... with no handler.
_KEPT_PATHS = ("-batch-v1-job", "-kueue-x-k8s-io-")


class KueueError(RuntimeError):
    """Kueue could not be built or started; the message says why."""


def kueue_dir(root: Path | None = None) -> Path:
    """The cache of the pinned version: `bin/kueue`, `crds/`, `webhooks.yaml`."""
    base = versions.cache_root() if root is None else root
    return base / "kueue" / versions.KUEUE


def module_source() -> Path:
    return build.controlplane_source() / "kueue"


def build_step() -> build.BuildStep:
    return build.BuildStep("kueue", (PACKAGE,), ("kueue",), "-s -w")


def ensure_kueue(root: Path | None = None, *, log: TextIO | None = None) -> Path:
    """The cache directory holding Kueue's binary, CRDs and webhooks, building what is missing."""
    out = sys.stderr if log is None else log
    target = kueue_dir(root)
    if _complete(target):
        return target
    if shutil.which("go") is None:
        raise KueueError(f"Kueue is not built and `go` is not on PATH; put it in {target}")
    source = module_source()
    with build.locked(target.parent / "build.lock"):  # the control plane's lock
        if _complete(target):
            return target
        partial = target.parent / f"{versions.KUEUE}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        (partial / "bin").mkdir(parents=True)
        out.write(f"Building Kueue {versions.KUEUE} into {target} (a cold build takes minutes)\n")
        try:
            build._run_step(build_step(), source.parent, partial / "bin", out)
        except build.BuildError as error:
            raise KueueError(str(error)) from None
        module_dir = _module_dir(source)
        crds = partial / "crds"
        crds.mkdir()
        for path in sorted((module_dir / "config/components/crd/bases").glob("*.yaml")):
            shutil.copyfile(path, crds / path.name)
        shutil.copyfile(
            module_dir / "config/components/webhook/manifests.yaml", partial / "webhooks.yaml"
        )
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    return target


def _complete(target: Path) -> bool:
    return (
        os.access(target / "bin" / "kueue", os.X_OK)
        and (target / "webhooks.yaml").is_file()
        and any((target / "crds").glob("*.yaml"))
    )


def _module_dir(source: Path) -> Path:
    """Kueue's module in the Go module cache (its CRDs and manifests ship in it)."""
    found = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", MODULE],
        cwd=source,
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0 or not found.stdout.strip():
        raise KueueError(f"go list -m {MODULE} in {source} failed: {found.stderr.strip()}")
    return Path(found.stdout.strip())


# ---- what Kueue is given (pure) -------------------------------------------------------------


def configuration(
    webhook_port: int, cert_dir: Path, metrics_port: int, health_port: int
) -> dict[str, Any]:
    """Kueue's `Configuration`: its defaults (client QPS 50, burst 100; five workers for Jobs
    and Workloads), one replica without leader election, its own certificates, batch/v1 Jobs
    only, and only Jobs that name a LocalQueue managed."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": ["batch/job"]},
    }


def webhook_configurations(
    manifests: Sequence[Mapping[str, Any]], url: str, ca_pem: bytes
) -> list[dict[str, Any]]:
    """Kueue's webhook configurations pointed at `url` (its process) instead of its Service,
    trusting `ca_pem`, with only the webhooks of Kueue's kinds and batch/v1 Jobs."""
    bundle = base64.b64encode(ca_pem).decode()
    configured = []
    for manifest in manifests:
        if manifest.get("kind") not in (
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ):
            continue
        hooks = []
        for hook in manifest.get("webhooks") or []:
            path = ((hook.get("clientConfig") or {}).get("service") or {}).get("path") or ""
            if not any(kept in path for kept in _KEPT_PATHS):
                continue
            hooks.append(
                {**hook, "clientConfig": {"url": f"{url.rstrip('/')}{path}", "caBundle": bundle}}
            )
        configured.append(
            {
                "apiVersion": manifest["apiVersion"],
                "kind": manifest["kind"],
                "metadata": {"name": f"kueue-{manifest['metadata']['name']}"},
                "webhooks": hooks,
            }
        )
    return configured


def resource_flavor(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
    }


def cluster_queue(name: str, flavor: str, quotas: Mapping[str, str]) -> dict[str, Any]:
    """One ClusterQueue of nominal `quotas` (resource -> quantity) in one flavor, every
    namespace's LocalQueues may point at it, FIFO that lets a small job past a big one
    (Kueue's default, BestEffortFIFO)."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": sorted(quotas),
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [
                                {"name": resource, "nominalQuota": quota}
                                for resource, quota in sorted(quotas.items())
                            ],
                        }
                    ],
                }
            ],
        },
    }


def local_queue(namespace: str, name: str, cluster_queue_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


# ---- the process ----------------------------------------------------------------------------


@dataclass
class Kueue:
    """Kueue's manager running against one dev cluster; `start` installs what it needs."""

    directory: Path
    kubeconfig: Path
    workdir: Path
    webhook_port: int
    metrics_port: int
    health_port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.workdir / "kueue.log"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise KueueError("Kueue is not running")
        return self.process.pid

    def start(self, api: httpx.Client, timeout: float = 120.0) -> None:
        """CRDs, namespace, certificates, the process, then its webhooks once it is healthy."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        for path in sorted((self.directory / "crds").glob("*.yaml")):
            _create(api, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", _load(path))
        _create(
            api,
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        )
        _wait_established(api, [_load(p) for p in (self.directory / "crds").glob("*.yaml")])
        now = datetime.datetime.now(datetime.UTC)
        ca = pki.new_ca("kueue-webhook-ca", now)
        serving = pki.issue(ca, "kueue-webhook", now, ip_addresses=["127.0.0.1"], server=True)
        certs = self.workdir / "certs"
        certs.mkdir(exist_ok=True)
        (certs / "tls.crt").write_bytes(serving.cert_pem)
        (certs / "tls.key").write_bytes(serving.key_pem)
        config = self.workdir / "config.yaml"
        config.write_text(
            yaml.safe_dump(
                configuration(self.webhook_port, certs, self.metrics_port, self.health_port)
            )
        )
        command = [
            str(self.directory / "bin" / "kueue"),
            f"--config={config}",
            f"--kubeconfig={self.kubeconfig}",
            f"--feature-gates={FEATURE_GATES}",
            "--zap-log-level=error",
        ]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._wait_healthy(timeout)
        manifests = list(yaml.safe_load_all((self.directory / "webhooks.yaml").read_text()))
        url = f"https://127.0.0.1:{self.webhook_port}"
        for hook in webhook_configurations(manifests, url, ca.cert_pem):
            kind = hook["kind"].lower() + "s"
            _create(api, f"/apis/admissionregistration.k8s.io/v1/{kind}", hook)

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.health_port}/readyz"
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise KueueError(
                    f"Kueue exited with {self.process.returncode}; last lines of {self.log}:\n"
                    + "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            time.sleep(0.5)
        raise KueueError(f"Kueue not ready within {timeout:.0f}s (log {self.log})")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


@contextlib.contextmanager
def running(
    api: httpx.Client, kubeconfig: Path, workdir: Path, ports: Sequence[int]
) -> Iterator[Kueue]:
    """Kueue (built if needed) running against the cluster `api` reaches, until the block ends."""
    webhook, metrics, health = ports
    kueue = Kueue(ensure_kueue(), kubeconfig, workdir, webhook, metrics, health)
    try:
        kueue.start(api)
        yield kueue
    finally:
        kueue.stop()


def _load(path: Path) -> dict[str, Any]:
    found = yaml.safe_load(path.read_text())
    if not isinstance(found, dict):
        raise KueueError(f"{path}: not one YAML object")
    return found


def _create(api: httpx.Client, path: str, body: Mapping[str, Any]) -> None:
    response = api.post(path, content=json.dumps(body), headers=_JSON)
    if response.status_code not in (200, 201, 409):
        raise KueueError(f"POST {path} {body.get('kind')}: {response.status_code} {response.text}")


def _wait_established(api: httpx.Client, crds: Sequence[Mapping[str, Any]]) -> None:
    deadline = time.monotonic() + 60
    for crd in crds:
        name = crd["metadata"]["name"]
        while True:
            found = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = (found.json().get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise KueueError(f"CRD {name} not Established within 60s")
            time.sleep(0.2)


_JSON = {"Content-Type": "application/json"}
