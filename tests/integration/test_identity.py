"""Who may write what, enforced by the API server itself (docs/security.md): the owner policy
refuses a job naming another owner with the operator up or down, an agent's Node-bound token
writes only its own node's objects, every operator replica answers admission (a waiting one
too, while the Lease still names a dead leader), and the verbs each identity has on each kind
are those of the table in docs/security.md.

Real kubectl as alice, bob, admin and each agent (its own kubeconfig, the dev cluster's
TokenRequest bound to its Node), against a dev cluster with the operator and two agents.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kondor_devcluster import kondor
from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port

from .conftest import ROOT, skip_reason
from .test_jobs_end_to_end import Cluster, eventually, kwok_machines, process_job, slot_policy

pytestmark = pytest.mark.timeout(240)

NODES = ("cpu-0", "cpu-1")
LABELS = {"kondor.io/pool": "identity"}
SECURITY_DOC = ROOT / "docs" / "security.md"
OWNER_POLICY = "kondor-owner.kondor.io"
NODE_CLAIM = "authentication.kubernetes.io/node-name"


class Identities(Cluster):
    """The cluster through kubectl, as a user of the user kubeconfig or as an agent."""

    def __init__(self, dev: DevCluster) -> None:
        super().__init__(dev.spec.kubeconfig)
        self.dev = dev

    def as_agent(
        self, node: str, *args: str, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        path = kondor.agent_kubeconfig(self.dev.layout, node)
        return subprocess.run(
            ["kubectl", "--kubeconfig", str(path), *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )

    def agent_objects(self, node: str) -> client.CustomObjectsApi:
        """The agent's own API client (its kubeconfig, as the agent process uses it)."""
        path = str(kondor.agent_kubeconfig(self.dev.layout, node))
        api = config.new_client_from_config(config_file=path)  # type: ignore[no-untyped-call]
        return client.CustomObjectsApi(api)

    def try_as(
        self, user: str, *args: str, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), "--context", user, *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Identities]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("identity")
    machines = kwok_machines(tmp, NODES, cpus=2, memory="4Gi", labels=LABELS)
    spec = ClusterSpec(
        port=free_port(),
        kubeconfig=tmp / "kubeconfig",
        state_dir=tmp / "state",
        nodes=tuple(machines),
        operator=True,
        agents=True,
    )
    dev = DevCluster(spec, log=sys.stderr)
    dev.start()
    try:
        made = Identities(dev)
        made.apply(slot_policy("identity", LABELS, "POLLING_INTERVAL = 1\n"))

        def published() -> bool:
            return all(made.get("executionpoints", n, None)["status"].get("slots") for n in NODES)

        eventually(published, 90, "both agents publishing their slots as themselves")
        yield made
    finally:
        dev.stop()


def job(name: str, owner: str | None = None) -> str:
    manifest = process_job(name, "sleep 60")  # not left running long after the cluster
    if owner is not None:
        manifest["spec"]["owner"] = owner
    return yaml.safe_dump(manifest)


# -- the agents' node identities --------------------------------------------------------------


def test_each_agent_runs_as_the_agent_service_account_bound_to_its_node(
    cluster: Identities,
) -> None:
    for node in NODES:
        done = cluster.as_agent(node, "auth", "whoami", "-o", "json")
        assert done.returncode == 0, done.stderr
        user = json.loads(done.stdout)["status"]["userInfo"]
        assert user["username"] == kondor.RELEASE.user(kondor.RELEASE.agent)
        assert user["extra"][NODE_CLAIM] == [node]


def test_an_agent_patches_its_own_execution_point_status_and_no_other(
    cluster: Identities,
) -> None:
    """As the agent writes it: a merge patch of the status subresource (kubectl patch would
    read the subresource first, which the agent may not)."""
    objects = cluster.agent_objects("cpu-0")
    heartbeat = {"status": {"lastHeartbeat": time.strftime("%Y-%m-%dT%H:%M:%SZ")}}
    objects.patch_cluster_custom_object_status(
        "kondor.io", "v1alpha1", "executionpoints", "cpu-0", heartbeat
    )
    with pytest.raises(ApiException) as refused:
        objects.patch_cluster_custom_object_status(
            "kondor.io", "v1alpha1", "executionpoints", "cpu-1", heartbeat
        )
    assert refused.value.status == 403
    assert "the agent of node cpu-0 may not update executionpoints/status cpu-1" in str(
        refused.value.body
    )


def test_an_agent_makes_pods_only_on_its_own_node(cluster: Identities) -> None:
    def pod(node: str) -> str:
        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"probe-{node}", "namespace": "default"},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
            }
        )

    own = cluster.as_agent("cpu-1", "create", "--dry-run=server", "-f", "-", stdin=pod("cpu-1"))
    assert own.returncode == 0, own.stderr
    other = cluster.as_agent("cpu-1", "create", "--dry-run=server", "-f", "-", stdin=pod("cpu-0"))
    assert other.returncode != 0
    assert "the agent of node cpu-1 may not create pods probe-cpu-0" in other.stderr


# -- owners ------------------------------------------------------------------------------------


def test_alice_may_not_submit_as_bob_and_owns_what_she_submits(cluster: Identities) -> None:
    refused = cluster.try_as("alice", "create", "-f", "-", stdin=job("as-bob", owner="bob"))
    assert refused.returncode != 0
    assert OWNER_POLICY in refused.stderr
    assert "spec.owner: bob is not alice" in refused.stderr
    admitted = cluster.try_as("alice", "create", "-f", "-", stdin=job("alices"))
    assert admitted.returncode == 0, admitted.stderr
    assert cluster.job("alices")["spec"]["owner"] == "alice"
    named = cluster.try_as("bob", "create", "-f", "-", stdin=job("bobs", owner="bob"))
    assert named.returncode == 0, named.stderr
    # An admin may submit for another (kondor_core.jobs.Delegates).
    cluster.kubectl("create", "-f", "-", stdin=job("for-alice", owner="alice"))
    assert cluster.job("for-alice")["spec"]["owner"] == "alice"


def _lease_holder(cluster: Identities) -> str:
    lease = cluster.get("lease", "kondor-operator", "default")
    return str(lease["spec"].get("holderIdentity") or "")


def _log(dev: DevCluster, name: str) -> str:
    return (dev.layout.logs / f"{name}.log").read_text(errors="replace")


def test_a_waiting_replica_admits_jobs_while_the_dead_leader_still_holds_the_lease(
    cluster: Identities,
) -> None:
    """Both replicas listen on the webhook's one port (as a Service's two endpoints); the
    leader is killed (no Lease released), and submissions go on being admitted, owner set,
    before the waiting replica may take the Lease (15 s after the last renewal)."""
    dev = cluster.dev
    leader = _lease_holder(cluster)
    assert leader, "the first operator leads"
    dev.start_operator_replica("kondor-operator-2")
    eventually(
        lambda: "waiting to lead" in _log(dev, "kondor-operator-2"),
        30,
        "the second replica waiting",
    )
    # Its webhook server is up before it waits (it answers from its start).
    time.sleep(2)
    assert dev.stop_process(kondor.OPERATOR, kill=True)
    for number in range(3):
        name = f"after-the-leader-{number}"
        done = cluster.try_as("alice", "create", "-f", "-", stdin=job(name))
        assert done.returncode == 0, done.stderr
        assert cluster.job(name)["spec"]["owner"] == "alice"
    assert _lease_holder(cluster) == leader, "admitted by a replica that does not lead yet"
    eventually(lambda: _lease_holder(cluster) not in ("", leader), 60, "the second replica leads")


def test_with_no_operator_the_api_server_still_refuses_another_owner_and_no_owner(
    cluster: Identities,
) -> None:
    dev = cluster.dev
    for name in ("kondor-operator-2", kondor.OPERATOR):
        dev.stop_process(name)
    refused = cluster.try_as("alice", "create", "-f", "-", stdin=job("down-as-bob", owner="bob"))
    assert refused.returncode != 0
    assert OWNER_POLICY in refused.stderr
    assert "spec.owner: bob is not alice" in refused.stderr
    # Without an owner the webhook must set it, and it fails closed: refused, never ownerless.
    ownerless = cluster.try_as("alice", "create", "-f", "-", stdin=job("down-ownerless"))
    assert ownerless.returncode != 0
    assert "mutate-executionjob" in ownerless.stderr
    assert "failed calling webhook" in ownerless.stderr
    # Naming herself is not refused by the policy; the webhook still checks the job (Fail).
    assert "down-ownerless" not in cluster.kubectl("get", "executionjobs", "-n", "default")


# -- the RBAC audit ------------------------------------------------------------------------


def rbac_table(text: str) -> tuple[list[str], dict[str, dict[str, set[str]]]]:
    """The table under "## RBAC" in docs/security.md: identity columns, and per resource the
    verbs of each (`—` for none, `*` for all)."""
    section = text.split("\n## RBAC", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    identities = header[1:]
    table: dict[str, dict[str, set[str]]] = {}
    for row in rows[2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        resource = cells[0].strip("`")
        table[resource] = {
            identity: set() if cell == "—" else {verb.strip() for verb in cell.split(",")}
            for identity, cell in zip(identities, cells[1:], strict=True)
        }
    return identities, table


#: A line of `kubectl auth can-i --list`: resource, non-resource URLs, resource names, verbs.
_RULE = re.compile(r"^(\S+)\s+\[[^\]]*\]\s+\[[^\]]*\]\s+\[([^\]]*)\]\s*$")


def granted(listing: str, resources: list[str]) -> dict[str, set[str]]:
    """Verbs on each of `resources` (kubectl's names: `executionjobs.kondor.io/status`, `pods`)
    from `kubectl auth can-i --list` (a SelfSubjectRulesReview); `*` for a wildcard."""
    verbs: dict[str, set[str]] = {resource: set() for resource in resources}
    for line in listing.splitlines()[1:]:
        match = _RULE.match(line)
        if not match:
            continue
        name, found = match.group(1), set(match.group(2).split())
        for resource in resources:
            if name in ("*.*", resource):
                verbs[resource] |= found
    return {resource: {"*"} if "*" in v else v for resource, v in verbs.items()}


def test_each_identity_has_exactly_the_verbs_in_the_security_doc(cluster: Identities) -> None:
    identities, table = rbac_table(SECURITY_DOC.read_text())
    resources = list(table)
    agent_sa = kondor.RELEASE.user(kondor.RELEASE.agent)
    operator_sa = kondor.RELEASE.user(kondor.RELEASE.operator)
    listings: dict[str, list[str]] = {}
    for identity in identities:
        if identity in ("admin", "alice", "bob"):
            done = [cluster.try_as(identity, "auth", "can-i", "--list", "-n", "default")]
        elif identity == "agent":
            done = [
                cluster.as_agent(node, "auth", "can-i", "--list", "-n", "default") for node in NODES
            ]
        elif identity == "operator":
            done = [
                cluster.try_as(
                    "admin", "auth", "can-i", "--list", "-n", "default", f"--as={operator_sa}"
                )
            ]
        else:
            raise AssertionError(
                f"docs/security.md names an identity the test does not know: {identity}"
            )
        for result in done:
            assert result.returncode == 0, result.stderr
        listings[identity] = [result.stdout for result in done]
    assert agent_sa  # the agents authenticate as it (test_each_agent_runs_as_...)
    for identity, outputs in listings.items():
        for output in outputs:
            have = granted(output, resources)
            expected = {resource: table[resource][identity] for resource in resources}
            assert have == expected, (
                f"{identity}: the cluster grants {have}, the doc says {expected}"
            )


def test_the_doc_names_every_kondor_kind_and_its_status() -> None:
    _, table = rbac_table(SECURITY_DOC.read_text())
    for kind in ("executionjobs", "codclaims", "executionpoints", "slotpolicies", "pools"):
        assert f"{kind}.kondor.io" in table, kind
        assert f"{kind}.kondor.io/status" in table, kind
