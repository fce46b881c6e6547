"""Pod jobs under Pod Security `restricted` on the dev cluster's real node (issue 29): the
kubelet runs the job's pod as real processes, and the job itself reports who it is: a
non-root uid, no effective, permitted or bounding capabilities, no_new_privs and a seccomp
filter, as `id` and /proc/self/status print them. A template asking for `privileged: true`
is refused at `kubectl apply`, naming the field."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from kondor_core.jobs.runas import slot_user_ids

from .conftest import real_node_skip_reason
from .test_jobs_end_to_end import Cluster, eventually, job_cluster
from .test_jobs_real_node import NODE, job_pod, pod_job, policy

pytestmark = pytest.mark.timeout(300)

REPORT = "id; grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; echo done"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = real_node_skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("podsecurity-real")
    with job_cluster(tmp, [], [policy("dedicated")], real_node=NODE) as made:
        yield made


def test_a_pod_job_runs_as_non_root_with_no_capabilities(cluster: Cluster) -> None:
    cluster.apply(pod_job("whoami", REPORT), user="bob")
    done = eventually(
        lambda: (job := cluster.job("whoami"))["status"].get("jobStatus") == "Completed" and job,
        120,
        "the pod job Completed",
    )
    assert done["status"]["exitCode"] == 0
    pod = job_pod(cluster, "whoami")
    assert pod is not None and pod["spec"]["nodeName"] == NODE
    uid = pod["spec"]["securityContext"]["runAsUser"]
    logs = cluster.kubectl("logs", "-n", "default", pod["metadata"]["name"])
    assert "done" in logs, logs
    found = re.search(r"uid=(\d+)\b.*gid=(\d+)\b", logs)
    assert found is not None, logs
    assert int(found[1]) == uid != 0 and int(found[2]) != 0
    # bob has no mapped uid: the pod runs as its slot's own user, as a process job would.
    slot = done["status"]["execution"]["slot"].split("@", 1)[0]
    assert uid == slot_user_ids(slot).uid
    account = done["status"]["execution"]["account"]  # who it ran as, in the job's status
    assert (account["name"], account["uid"]) == (slot, uid)
    status = dict(re.findall(r"^(\w+):\s+(\S+)$", logs, re.MULTILINE))
    assert status["CapEff"] == status["CapPrm"] == status["CapBnd"] == "0000000000000000", logs
    assert status["NoNewPrivs"] == "1"
    assert status["Seccomp"] == "2"  # a filter: the runtime's default profile


def test_a_privileged_template_is_refused_at_apply_naming_the_field(cluster: Cluster) -> None:
    job = pod_job("privileged", "id")
    job["spec"]["pod"]["template"]["spec"]["containers"][0]["securityContext"] = {
        "privileged": True
    }
    with pytest.raises(AssertionError) as refused:
        cluster.apply(job, user="bob")
    message = str(refused.value)
    assert "denied the request" in message
    assert (
        "spec.pod.template.spec.containers[0].securityContext.privileged: true is not allowed "
        "by Pod Security 'restricted'"
    ) in message
    assert job_pod(cluster, "privileged") is None
