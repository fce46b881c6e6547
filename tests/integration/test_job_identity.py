"""One job identity and one writer per field, on the dev cluster.

- A job's life (submit, match, run, exit, Completed; a hold and its release) leaves every
  status field of its ExecutionJob owned, in `metadata.managedFields`, by the one field
  manager docs/architecture.md's "Who writes what" table names (the table is read from the
  doc, so the doc and the test cannot drift).
- The `.job.ad` file a running process job reads is the ad `kondor q -l` prints, attribute
  for attribute but those that change over a job's life (`LIFE_ATTRIBUTES`), with QDate and
  GlobalJobId in HTCondor's form.
- ClusterIds come from the Pool's counter: the operator restarted after the newest job was
  deleted gives the next job a new ClusterId, never the deleted one's.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kondor_core.jobs import LIFE_ATTRIBUTES
from kondor_devcluster import kondor
from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port

from .conftest import MACHINES, ROOT, skip_reason
from .test_jobs_end_to_end import Cluster, eventually, process_job, slot_policy

ARCHITECTURE = ROOT / "docs" / "architecture.md"


class Identity(Cluster):
    """The cluster, with its DevCluster (to restart the operator)."""

    def __init__(self, dev: DevCluster) -> None:
        super().__init__(dev.spec.kubeconfig)
        self.dev = dev

    def managed(self, name: str) -> dict[str, Any]:
        """The job with its `metadata.managedFields` (kubectl leaves them out unless asked)."""
        where = ["-n", "default", "-o", "json", "--show-managed-fields"]
        found: dict[str, Any] = json.loads(self.kubectl("get", "executionjob", name, *where))
        return found

    def patch_spec(self, name: str, spec: dict[str, Any]) -> None:
        patch = yaml.safe_dump({"spec": spec})
        where = ["-n", "default", "--type", "merge", "-p", patch]
        self.kubectl("patch", "executionjob", name, *where, user="alice")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Identity]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("job-identity")
    spec = ClusterSpec(
        port=free_port(),
        kubeconfig=tmp / "kubeconfig",
        state_dir=tmp / "state",
        nodes=(MACHINES / "kwok-small.yaml",),
        operator=True,
        agents=True,
    )
    dev = DevCluster(spec, log=sys.stderr)
    dev.start()
    try:
        made = Identity(dev)
        made.apply(slot_policy("everything", {"kondor.io/pool": "cpu"}, "POLLING_INTERVAL = 1\n"))
        made.apply(
            {
                "apiVersion": "kondor.io/v1alpha1",
                "kind": "Pool",
                "metadata": {"name": "default"},
                "spec": {"negotiatorInterval": 2},
            }
        )

        def unclaimed() -> bool:
            slots = made.slots()
            return bool(slots) and all(s["state"] == "Unclaimed" for s in slots)

        eventually(unclaimed, 90, "the node's slots Unclaimed")
        yield made
    finally:
        dev.stop()


# ---- the writers table ---------------------------------------------------------------------


def writers_table(kind: str) -> dict[str, str]:
    """docs/architecture.md's "Who writes what" rows of `kind`: status field -> manager."""
    owners: dict[str, str] = {}
    row = re.compile(r"^\|\s*(\w+)\s*\|\s*([^|]+?)\s*\|\s*[^|]+\|\s*([\w-]+)\s*\|\s*$")
    for line in ARCHITECTURE.read_text().splitlines():
        found = row.match(line)
        if found is None or found.group(1) != kind:
            continue
        for field in found.group(2).split(","):
            owners[field.strip()] = found.group(3)
    return owners


def status_owners(obj: dict[str, Any]) -> dict[str, set[str]]:
    """Top-level status field -> the field managers `metadata.managedFields` says own it."""
    owners: dict[str, set[str]] = {}
    for entry in obj["metadata"].get("managedFields") or []:
        fields = (entry.get("fieldsV1") or {}).get("f:status") or {}
        for key in fields:
            if key.startswith("f:"):
                owners.setdefault(key[2:], set()).add(entry.get("manager", "(none)"))
    return owners


def test_the_table_names_every_status_field_of_an_execution_job() -> None:
    from pydantic.alias_generators import to_camel

    from kondor_core.api.job import ExecutionJobStatus

    fields = {to_camel(name) for name in ExecutionJobStatus.model_fields}
    assert set(writers_table("ExecutionJob")) == fields


def test_a_job_s_life_leaves_each_status_field_to_its_one_writer(cluster: Identity) -> None:
    table = writers_table("ExecutionJob")
    cluster.apply(process_job("life", "sleep 1; exit 0"), user="alice")
    cluster.apply(process_job("held", "sleep 1; exit 0", hold=True), user="alice")
    eventually(lambda: cluster.job("held")["status"]["jobStatus"] == "Held", 30, "held Held")
    cluster.patch_spec("held", {"hold": False})

    def completed() -> bool:
        return all(cluster.job(n)["status"]["jobStatus"] == "Completed" for n in ("life", "held"))

    eventually(completed, 60, "both jobs Completed")
    wrong: list[str] = []
    for name in ("life", "held"):
        owners = status_owners(cluster.managed(name))
        assert "jobStatus" in owners and "execution" in owners, owners
        for field, managers in sorted(owners.items()):
            expected = table.get(field)
            if managers != {expected}:
                wrong.append(f"{name}: status.{field} owned by {sorted(managers)}, not {expected}")
    assert not wrong, "\n".join(wrong)


# ---- the .job.ad file ------------------------------------------------------------------------


def attributes(text: str) -> dict[str, str]:
    """An ad in the old ClassAd form, attribute -> expression."""
    pairs = (line.split(" = ", 1) for line in text.splitlines() if " = " in line)
    return {name.strip(): value.strip() for name, value in pairs}


def test_the_job_ad_file_of_a_running_job_is_the_ad_q_long_prints(cluster: Identity) -> None:
    cluster.apply(process_job("adfile", "sleep 30"), user="alice")
    execution = eventually(
        lambda: (
            (e := cluster.job("adfile")["status"].get("execution") or {}).get("state") == "Running"
            and e
        ),
        30,
        "adfile Running",
    )
    path = Path(execution["directory"]) / "scratch" / ".job.ad"
    seen = attributes(eventually(lambda: path.exists() and path.read_text(), 10, "its .job.ad"))
    eventually(
        lambda: cluster.job("adfile")["status"]["jobStatus"] == "Running", 20, "JobStatus Running"
    )
    printed = attributes(cluster.kubectl("kondor", "q", "adfile", "-l", user="alice"))
    job = cluster.job("adfile")
    qdate = seen["QDate"]
    cluster_id = job["status"]["clusterId"]
    assert seen["ClusterId"] == str(cluster_id)
    assert seen["GlobalJobId"] == f'"default#{cluster_id}.0#{qdate}"'
    assert seen["Owner"] == '"alice"'
    steady = {k: v for k, v in seen.items() if k not in LIFE_ATTRIBUTES}
    assert steady == {k: v for k, v in printed.items() if k not in LIFE_ATTRIBUTES}
    assert printed["JobStatus"] == "2" and seen["JobStatus"] == "1"  # launched while Idle
    cluster.patch_spec("adfile", {"remove": True})


# ---- ClusterIds --------------------------------------------------------------------------------


def test_an_operator_restarted_after_the_newest_job_was_deleted_gives_a_new_cluster_id(
    cluster: Identity,
) -> None:
    cluster.apply(process_job("first", "exit 0", hold=True), user="alice")
    cluster.apply(process_job("newest", "exit 0", hold=True), user="alice")
    ids = eventually(
        lambda: (
            all((cluster.job(n)["status"] or {}).get("clusterId") for n in ("first", "newest"))
            and [cluster.job(n)["status"]["clusterId"] for n in ("first", "newest")]
        ),
        30,
        "both jobs given a ClusterId",
    )
    newest = max(ids)
    pool = cluster.get("pools", "default", None)
    assert pool["status"]["lastClusterId"] >= newest
    cluster.kubectl("delete", "executionjob", "newest", "-n", "default", user="alice")
    assert cluster.dev.stop_process(kondor.OPERATOR)
    cluster.dev.start_operator_replica("kondor-operator-restarted")
    cluster.apply(process_job("after", "exit 0", hold=True), user="alice")
    given = eventually(
        lambda: (cluster.job("after").get("status") or {}).get("clusterId"),
        90,
        "the job submitted after the restart given a ClusterId",
    )
    assert given > newest, f"ClusterId {given} given again (the deleted newest had {newest})"
    assert cluster.get("pools", "default", None)["status"]["lastClusterId"] == given
    # The counter's one writer, as docs/architecture.md's table says.
    pool = json.loads(
        cluster.kubectl("get", "pools", "default", "-o", "json", "--show-managed-fields")
    )
    assert status_owners(pool)["lastClusterId"] == {writers_table("Pool")["lastClusterId"]}
