"""ExecutionJob admission on the dev cluster: real kubectl as alice, bob and admin against
kondor-operator's mutating and validating webhooks.

The owner is whoever submits (a cluster admin may name another); only the owner or an admin
deletes a job; a bad job is refused at `kubectl apply` naming the field and the value; the
requests of a submitted job do not change. One operator runs for the module, its webhooks
failing closed so that an unreachable webhook fails a test instead of admitting a bad job.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kondor_devcluster.cluster import DevCluster, free_port
from kondor_operator.webhook import MUTATE_JOB_ID, VALIDATE_JOB_ID

from .waiting import eventually

pytestmark = pytest.mark.timeout(120)

PROCESS = {"executable": "/bin/sleep", "arguments": ["600"]}


@dataclass
class Operator:
    process: subprocess.Popen[bytes]
    log: Path
    configuration: str


@pytest.fixture(scope="module")
def operator(
    dev_cluster: DevCluster,
    kondor_crds: list[str],
    admin: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    """kondor-operator with its webhooks registered (kopf manages a configuration of its own
    name here; the chart ships the same webhooks)."""
    configuration = f"kondor-test-jobs-{uuid.uuid4().hex[:6]}.kondor.io"
    metrics_port = free_port()
    log = tmp_path_factory.mktemp("job-admission") / "operator.log"
    args = [
        sys.executable,
        "-m",
        "kondor_operator.main",
        f"--kubeconfig={dev_cluster.spec.kubeconfig}",
        "--context=admin",
        "--namespace=default",
        "--no-leader-election",
        f"--metrics-port={metrics_port}",
        "--metrics-addr=127.0.0.1",
        f"--webhook-port={free_port()}",
        f"--webhook-configuration={configuration}",
        "--webhook-failure-policy=Fail",
        "--verbose",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    hooks = client.AdmissionregistrationV1Api(admin)
    running = Operator(process, log, configuration)

    def registered() -> bool:
        assert process.poll() is None, log.read_text()[-3000:]
        try:
            validating = hooks.read_validating_webhook_configuration(configuration)
            mutating = hooks.read_mutating_webhook_configuration(configuration)
        except ApiException:
            return False
        webhooks: list[Any] = [*(validating.webhooks or []), *(mutating.webhooks or [])]
        names = {hook.name.split(".")[0] for hook in webhooks if hook.client_config.ca_bundle}
        return {MUTATE_JOB_ID, VALIDATE_JOB_ID} <= names

    def serving() -> bool:
        try:
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    try:
        eventually(serving, timeout=30, what="operator serving metrics")
        eventually(registered, timeout=30, what="the ExecutionJob webhooks registered")
        yield running
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for delete in (
            hooks.delete_validating_webhook_configuration,
            hooks.delete_mutating_webhook_configuration,
        ):
            try:
                delete(configuration)
            except ApiException as error:
                if error.status != 404:
                    raise
        sys.stderr.write(log.read_text()[-3000:])


@dataclass
class Kubectl:
    binary: str
    kubeconfig: Path
    namespace: str

    def run(
        self, user: str, *args: str, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                self.binary,
                f"--kubeconfig={self.kubeconfig}",
                f"--context={user}",
                f"--namespace={self.namespace}",
                *args,
            ],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def ok(self, user: str, *args: str, stdin: str | None = None) -> str:
        result = self.run(user, *args, stdin=stdin)
        assert result.returncode == 0, f"{user}: kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def refused(self, user: str, *args: str, stdin: str | None = None) -> str:
        result = self.run(user, *args, stdin=stdin)
        assert result.returncode != 0, f"{user}: kubectl {' '.join(args)} was admitted"
        return result.stderr

    def apply(self, user: str, name: str, spec: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        manifest = {
            "apiVersion": "kondor.io/v1alpha1",
            "kind": "ExecutionJob",
            "metadata": {"name": name},
            "spec": spec,
        }
        return self.run(user, "apply", "-f", "-", stdin=yaml.safe_dump(manifest))

    def job(self, user: str, name: str) -> dict[str, Any]:
        found = json.loads(self.ok(user, "get", "executionjob", name, "-o", "json"))
        assert isinstance(found, dict)
        return found


@pytest.fixture
def kubectl(operator: Operator, kubectl_bin: str, kubeconfig: Path, namespace: str) -> Kubectl:
    return Kubectl(kubectl_bin, kubeconfig, namespace)


def test_the_owner_is_the_submitter_and_only_the_owner_deletes(kubectl: Kubectl) -> None:
    ns = kubectl.namespace
    applied = kubectl.apply("alice", "hello", {"owner": "bob", "process": PROCESS})
    assert applied.returncode == 0, applied.stderr

    assert kubectl.job("alice", "hello")["spec"]["owner"] == "alice"
    assert kubectl.job("bob", "hello")["spec"]["owner"] == "alice"  # bob may look

    error = kubectl.refused("bob", "delete", "executionjob", "hello")
    assert f"bob may not delete alice's job {ns}/hello: only its owner or a cluster admin may" in (
        error
    )
    error = kubectl.refused(
        "bob", "patch", "executionjob", "hello", "--type=merge", "-p", '{"spec": {"hold": true}}'
    )
    assert f"bob may not update alice's job {ns}/hello" in error
    kubectl.ok("bob", "get", "executionjob", "hello")  # still there

    # A cluster admin submits for someone else.
    applied = kubectl.apply("admin", "for-bob", {"owner": "bob", "process": PROCESS})
    assert applied.returncode == 0, applied.stderr
    assert kubectl.job("admin", "for-bob")["spec"]["owner"] == "bob"

    kubectl.ok("alice", "delete", "executionjob", "hello")
    kubectl.ok("bob", "delete", "executionjob", "for-bob")


def test_the_owner_holds_but_may_not_change_requests(kubectl: Kubectl) -> None:
    spec = {"process": PROCESS, "requestCpus": 1, "requestMemory": "1Gi"}
    applied = kubectl.apply("alice", "steady", spec)
    assert applied.returncode == 0, applied.stderr

    changed = kubectl.apply("alice", "steady", {**spec, "requestCpus": 4})
    assert changed.returncode != 0
    assert "spec.requestCpus may not change after submission (was 1, now 4)" in changed.stderr
    error = kubectl.refused(
        "alice",
        "patch",
        "executionjob",
        "steady",
        "--type=merge",
        "-p",
        '{"spec": {"pod": {"template": {"spec": {"containers": [{"name": "a", "image": "b"}]}}}}}',
    )
    assert "the runtime may not change after submission (was process, now process and pod)" in (
        error
    )

    held = kubectl.apply("alice", "steady", {**spec, "hold": True, "priority": 5})
    assert held.returncode == 0, held.stderr
    job = kubectl.job("alice", "steady")
    assert job["spec"]["hold"] is True
    assert job["spec"]["requestCpus"] == 1


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {"process": PROCESS, "requirements": "Memory >"},
            ["spec.requirements", "'Memory >'", "not a valid ClassAd expression"],
            id="requirements",
        ),
        pytest.param(
            {"process": PROCESS, "rank": "(Mips"},
            ["spec.rank", "'(Mips'", "not a valid ClassAd expression"],
            id="rank",
        ),
        pytest.param(
            {"process": PROCESS, "attributes": {"Project": "physics +"}},
            ["spec.attributes.Project", "'physics +'"],
            id="attribute",
        ),
        # The CRD's schema refuses these before the webhook sees them, in the API server's
        # words; both name the field and the value.
        pytest.param(
            {"process": PROCESS, "requestCpus": -1}, ["spec.requestCpus", "-1"], id="negative-cpus"
        ),
        pytest.param(
            {"process": PROCESS, "requestMemory": "lots"},
            ["spec.requestMemory", "'lots'", "not a quantity"],
            id="memory",
        ),
        pytest.param(
            {"docker": {"image": "busybox"}}, ['unknown field "spec.docker"'], id="unknown-runtime"
        ),
        pytest.param(
            {"process": {"arguments": ["1"]}}, ["spec.process.executable"], id="no-executable"
        ),
        pytest.param(
            {"pod": {"template": {"image": "busybox", "command": ["sleep", "1"]}}},
            ["spec.pod.template.image", "'busybox'", "spec.pod.template.spec"],
            id="not-a-pod-template",
        ),
        pytest.param(
            {"pod": {"template": {"spec": {"containers": [{"name": "main"}]}}}},
            ["spec.pod.template.spec.containers[0].image"],
            id="container-without-image",
        ),
        pytest.param(
            {"process": PROCESS, "apptainer": {"image": "x.sif", "executable": "/bin/true"}},
            ["exactly one runtime", "process and apptainer"],
            id="two-runtimes",
        ),
        pytest.param(
            {"requestCpus": 2},
            ["a job has no runtime: give one of process, apptainer or pod"],
            id="no-runtime",
        ),
    ],
)
def test_bad_jobs_are_refused_naming_field_and_value(
    kubectl: Kubectl, spec: dict[str, Any], expected: list[str]
) -> None:
    result = kubectl.apply("alice", "bad", spec)

    assert result.returncode != 0, f"admitted: {spec}"
    for part in expected:
        assert part in result.stderr
    assert kubectl.run("alice", "get", "executionjob", "bad").returncode != 0  # not stored


def test_deleting_a_namespace_deletes_its_jobs(
    kubectl: Kubectl, admin: client.ApiClient, kubectl_bin: str, kubeconfig: Path
) -> None:
    """The namespace controller deletes other users' jobs: Kubernetes' own controllers act
    for others, or no namespace with a job could ever be deleted."""
    core = client.CoreV1Api(admin)
    name = f"t-jobs-gone-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    elsewhere = Kubectl(kubectl_bin, kubeconfig, name)
    applied = elsewhere.apply("alice", "doomed", {"process": PROCESS})
    assert applied.returncode == 0, applied.stderr

    core.delete_namespace(name)

    def gone() -> bool:
        try:
            core.read_namespace(name)
        except ApiException as error:
            return bool(error.status == 404)
        return False

    eventually(gone, timeout=60, what=f"namespace {name} and its job deleted")
