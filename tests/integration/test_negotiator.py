"""The operator's schedd and negotiator on the dev cluster (docs/jobs.md, steps 1, 4, 5).

No agents: each test makes ExecutionPoints whose status is what an agent publishes for a
fresh startd (`kondor_core.startd`, an example machine under the default policy, with a
fresh heartbeat), submits ExecutionJobs with kubectl as admin, and writes
`status.execution` as the agent would. The Pool `default` shortens the negotiator interval.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kondor_core import startd
from kondor_core.api import MERGE_PATCH, Machine, SlotPolicySpec, format_time
from kondor_core.config import compile_policy
from kondor_devcluster.cluster import DevCluster

from .test_operator import Operator, start_operator, stop_operator, wait_ready
from .waiting import eventually

pytestmark = pytest.mark.timeout(120)

GROUP, VERSION = "kondor.io", "v1alpha1"
JOBS, EPS, POOLS = "executionjobs", "executionpoints", "pools"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pool(admin: client.ApiClient, kondor_crds: list[str]) -> Iterator[dict[str, Any]]:
    """The Pool `default`: a cycle every second, MATCH_TIMEOUT long until a test shortens it."""
    objects = client.CustomObjectsApi(admin)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Pool",
        "metadata": {"name": "default"},
        "spec": {"negotiatorInterval": 1, "matchTimeout": 600},
    }
    try:
        objects.create_cluster_custom_object(GROUP, VERSION, POOLS, body)
    except ApiException as err:
        if err.status != 409:
            raise
        # An operator of this session (another module's) made the Pool `default` already,
        # as it does when there is none: take it over with this module's settings.
        patch = {"spec": body["spec"]}
        objects.patch_cluster_custom_object(GROUP, VERSION, POOLS, "default", patch)
    try:
        yield body
    finally:
        with contextlib.suppress(ApiException):
            objects.delete_cluster_custom_object(GROUP, VERSION, POOLS, "default")


@pytest.fixture(scope="module")
def negotiating(
    dev_cluster: DevCluster,
    pool: dict[str, Any],
    admin: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    running = start_operator(
        dev_cluster,
        tmp_path_factory.mktemp("negotiator"),
        lease=f"neg-{uuid.uuid4().hex[:6]}",
        webhook=False,
    )
    try:
        wait_ready(running, admin)
        yield running
    finally:
        stop_operator(running, admin)


class Pool:
    """ExecutionPoints with an agent's published status, jobs submitted with kubectl."""

    def __init__(self, admin: client.ApiClient, kubeconfig: Path, kubectl: str, ns: str) -> None:
        self.objects = client.CustomObjectsApi(admin)
        self.kubeconfig = kubeconfig
        self.kubectl = kubectl
        self.namespace = ns
        self.suffix = uuid.uuid4().hex[:6]
        self.eps: list[str] = []

    def execution_point(self, name: str, cpus: int = 4) -> str:
        """An ExecutionPoint as an agent reports it: its startd's status, heartbeat now."""
        full = f"{name}-{self.suffix}"
        values = yaml.safe_load((ROOT / "examples/machines/kwok-small.yaml").read_text())
        machine = Machine.model_validate({**values, "name": full, "cpus": cpus})
        now = time.time()
        node = startd.start(machine, compile_policy(SlotPolicySpec()), now)
        status = startd.status(startd.tick(node, {}, now).startd, {}, now).dump()
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ExecutionPoint",
            "metadata": {"name": full},
            "spec": {"nodeName": full},
        }
        self.objects.create_cluster_custom_object(GROUP, VERSION, EPS, body)
        self.eps.append(full)
        # No Node backs it, so the operator's reconciler leaves it (and status.operator) alone:
        # the freshness verdict is written here, as the reconciler would for a live agent.
        status.update(lastHeartbeat=format_time(now), operator={"heartbeat": "Fresh"})
        self.objects.patch_cluster_custom_object_status(
            GROUP, VERSION, EPS, full, {"status": status}, _content_type=MERGE_PATCH
        )
        return full

    def submit(self, name: str, **spec: Any) -> None:
        manifest = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ExecutionJob",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"owner": "admin", "process": {"executable": "/bin/sleep"}, **spec},
        }
        subprocess.run(
            [
                self.kubectl,
                f"--kubeconfig={self.kubeconfig}",
                "--context=admin",
                "apply",
                "-f",
                "-",
            ],
            input=yaml.safe_dump(manifest).encode(),
            check=True,
            capture_output=True,
        )

    def job(self, name: str) -> dict[str, Any]:
        found = self.objects.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, JOBS, name
        )
        return cast(dict[str, Any], found)

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.job(name).get("status") or {})

    def answer(self, name: str, **execution: Any) -> None:
        """Write status.execution as the agent does."""
        self.objects.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            self.namespace,
            JOBS,
            name,
            {"status": {"execution": execution}},
            _content_type=MERGE_PATCH,
        )

    def cleanup(self) -> None:
        for name in self.eps:
            with contextlib.suppress(ApiException):
                self.objects.delete_cluster_custom_object(GROUP, VERSION, EPS, name)


@pytest.fixture
def jobs(
    negotiating: Operator,
    admin: client.ApiClient,
    kubeconfig: Path,
    kubectl_bin: str,
    namespace: str,
) -> Iterator[Pool]:
    made = Pool(admin, kubeconfig, kubectl_bin, namespace)
    try:
        yield made
    finally:
        made.cleanup()


def matched(jobs: Pool, name: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        job = jobs.job(name)
        status = job.get("status") or {}
        return job if status.get("claimId") else None

    # A cycle every second; the slack is for a loaded CI machine.
    return cast(dict[str, Any], eventually(check, timeout=30, what=f"{name} matched"))


def test_a_job_is_matched_and_follows_the_agent_to_completed(jobs: Pool) -> None:
    ep = jobs.execution_point("neg-run")
    jobs.submit("run", requestCpus=1, requirements=f'Machine == "{ep}"')
    job = matched(jobs, "run")
    status = job["status"]
    uid = job["metadata"]["uid"]
    assert status["jobStatus"] == "Idle"  # matched, not running yet
    assert status["executionPoint"] == ep
    assert status["slot"] == f"slot1@{ep}"
    assert status["claimId"] == f"{uid}#1"
    assert status["clusterId"] >= 1
    # The agent's field selector finds it (a selectable field of the CRD), and only it.
    found = jobs.objects.list_namespaced_custom_object(
        "kondor.io",
        "v1alpha1",
        jobs.namespace,
        "executionjobs",
        field_selector=f"status.executionPoint={ep}",
    )
    assert [item["metadata"]["name"] for item in found["items"]] == [job["metadata"]["name"]]

    jobs.answer("run", claimId=status["claimId"], state="Running", slot=f"slot1_1@{ep}")
    eventually(lambda: jobs.status("run").get("jobStatus") == "Running", timeout=30, what="Running")
    assert jobs.status("run")["numJobStarts"] == 1
    jobs.answer("run", claimId=status["claimId"], state="Exited", exitCode=3)
    done = eventually(
        lambda: (s := jobs.status("run")).get("jobStatus") == "Completed" and s,
        timeout=30,
        what="Completed",
    )
    assert done["exitCode"] == 3
    assert done["completionDate"]
    assert done["numJobStarts"] == 1
    assert done["execution"]["state"] == "Exited"  # the agent's field, as it wrote it


def test_a_rejected_match_returns_the_job_to_idle_with_the_reason(jobs: Pool) -> None:
    ep = jobs.execution_point("neg-rej")
    jobs.submit("picky", requirements=f'Machine == "{ep}"')
    first = matched(jobs, "picky")["status"]["claimId"]
    jobs.answer("picky", claimId=first, state="Rejected", reason="START is false for the job")

    def rejected() -> dict[str, Any] | None:
        status = jobs.status("picky")
        if status.get("lastRejMatchReason") == "START is false for the job":
            return status
        return None

    status = eventually(rejected, timeout=30, what="Idle with lastRejMatchReason")
    assert status.get("claimId") != first  # cleared, or already a new match
    assert status["jobStatus"] == "Idle"
    # The slot is offered again and the job matched anew, with a new claim.
    again = matched(jobs, "picky")["status"]["claimId"]
    assert again.endswith("#2")


def test_a_job_no_slot_meets_stays_idle_with_why(jobs: Pool) -> None:
    ep = jobs.execution_point("neg-small", cpus=2)
    jobs.submit("huge", requestCpus=64, requirements=f'Machine == "{ep}"')

    def why() -> str | None:
        return cast(str | None, jobs.status("huge").get("lastRejMatchReason"))

    reason = eventually(why, timeout=30, what="lastRejMatchReason")
    assert "not enough Cpus" in reason or "Requirements" in reason or ep in reason
    job = jobs.job("huge")
    assert job["status"]["jobStatus"] == "Idle"
    assert "claimId" not in job["status"]
    assert "executionPoint" not in job["status"]


def test_an_unanswered_match_expires_after_match_timeout(
    jobs: Pool, admin: client.ApiClient
) -> None:
    objects = client.CustomObjectsApi(admin)
    objects.patch_cluster_custom_object(
        GROUP, VERSION, POOLS, "default", {"spec": {"matchTimeout": 3}}, _content_type=MERGE_PATCH
    )
    try:
        ep = jobs.execution_point("neg-timeout")
        jobs.submit("unanswered", requirements=f'Machine == "{ep}"')
        first = matched(jobs, "unanswered")["status"]["claimId"]

        def expired() -> str | None:
            reason = jobs.status("unanswered").get("lastRejMatchReason") or ""
            return reason if "MATCH_TIMEOUT" in reason else None

        reason = eventually(expired, timeout=15, what="MATCH_TIMEOUT expiry")
        assert reason == f"{ep} did not answer the match within MATCH_TIMEOUT (3s)"
        # Idle again and matched anew with a new claim.
        again = eventually(
            lambda: (c := jobs.status("unanswered").get("claimId")) not in (None, first) and c,
            timeout=30,
            what="a new match",
        )
        assert again != first
    finally:
        objects.patch_cluster_custom_object(
            GROUP,
            VERSION,
            POOLS,
            "default",
            {"spec": {"matchTimeout": 600}},
            _content_type=MERGE_PATCH,
        )


def test_a_status_patch_with_a_stale_resource_version_is_refused(jobs: Pool) -> None:
    """What the negotiator's guarded writes rely on: the status subresource honours
    metadata.resourceVersion in a merge patch."""
    jobs.submit("guarded", hold=True)
    stale = jobs.job("guarded")["metadata"]["resourceVersion"]
    eventually(lambda: jobs.status("guarded").get("jobStatus") == "Held", what="Held")
    with pytest.raises(ApiException) as refused:
        jobs.objects.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            jobs.namespace,
            JOBS,
            "guarded",
            {"metadata": {"resourceVersion": stale}, "status": {"jobStatus": "Idle"}},
            _content_type=MERGE_PATCH,
        )
    assert refused.value.status == 409
    status = jobs.status("guarded")
    assert status["holdReasonCode"] == 1
    assert status["holdReason"] == "via condor_hold (by user admin)"
