"""Power management on the dev cluster: with HIBERNATE "RAM" in every Unclaimed slot and
HIBERNATE_CHECK_INTERVAL 1 s, each idle node's ExecutionPoint shows the sleep state and its
Node gets the cluster autoscaler's scale-down mark; a job only one node can run claims a slot
there, the slot vetoes, and that node (only) loses the mark."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .conftest import skip_reason
from .test_jobs_end_to_end import (
    Cluster,
    eventually,
    job_cluster,
    kwok_machines,
    process_job,
    slot_policy,
)

NODES = ("power-a", "power-b")
LABELS = {"kondor.io/pool": "cpu"}
SLEEP = "kondor.io/sleep-state"
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
pytestmark = pytest.mark.timeout(180)

POLICY = """POLLING_INTERVAL = 1
HIBERNATE_CHECK_INTERVAL = 1
HIBERNATE = ifThenElse(State == "Unclaimed", "RAM", "NONE")
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("power")
    policy = slot_policy("power", LABELS, POLICY)
    with job_cluster(
        tmp, kwok_machines(tmp, NODES, cpus=2, memory="4Gi", labels=LABELS), [policy]
    ) as made:
        yield made


def annotations_of(cluster: Cluster, node: str) -> dict[str, str]:
    found: dict[str, str] = cluster.get("nodes", node, None)["metadata"].get("annotations") or {}
    return found


def marked(cluster: Cluster, node: str) -> bool:
    found = annotations_of(cluster, node)
    return found.get(SLEEP) == "RAM" and found.get(SCALE_DOWN_DISABLED) == "false"


def test_idle_nodes_are_marked_and_a_job_only_one_can_run_unmarks_it(cluster: Cluster) -> None:
    eventually(
        lambda: all(marked(cluster, node) for node in NODES), 30, "every node marked for scale-down"
    )
    for node in NODES:
        power = cluster.get("executionpoints", node, None)["status"]["power"]
        assert power["sleepState"] == "RAM"
        assert set(power["slots"].values()) == {"RAM"}

    cluster.apply(
        process_job("wake", "sleep 30", requirements='Machine == "power-a"'), user="alice"
    )
    eventually(
        lambda: cluster.job("wake")["status"].get("jobStatus") == "Running", 30, "wake Running"
    )

    def unmarked() -> bool:
        found = annotations_of(cluster, "power-a")
        return SLEEP not in found and found.get(SCALE_DOWN_DISABLED) == "true"

    eventually(unmarked, 15, "power-a unmarked (scale-down disabled again)")
    power = cluster.get("executionpoints", "power-a", None)["status"]["power"]
    assert "sleepState" not in power
    assert "NONE" in power["slots"].values() and power["reason"]
    assert marked(cluster, "power-b")  # the other node stays marked

    cluster.kubectl("delete", "executionjob", "wake", "-n", "default")
    eventually(lambda: marked(cluster, "power-a"), 30, "power-a marked again once idle")


ORIGINAL = "kondor.io/scale-down-disabled-original"
KONDORS = (SLEEP, SCALE_DOWN_DISABLED, ORIGINAL)


def sleep_column(cluster: Cluster, node: str) -> str:
    """The Sleep column of `kubectl get xp NODE` ("" when empty): read at the header's offset,
    as kubectl aligns its columns."""
    header, row = cluster.kubectl("get", "xp", node).splitlines()[:2]
    cells = row[header.index("SLEEP") :].split()
    return cells[0] if cells and not row[header.index("SLEEP")].isspace() else ""


def test_turning_power_management_off_gives_the_nodes_back(cluster: Cluster) -> None:
    eventually(lambda: all(marked(cluster, node) for node in NODES), 30, "every node marked")
    assert sleep_column(cluster, "power-b") == "RAM"

    # The interval back to 0: status.power goes, and so do Kondor's annotations (there was no
    # scale-down-disabled before Kondor took it).
    off = POLICY.replace("HIBERNATE_CHECK_INTERVAL = 1", "HIBERNATE_CHECK_INTERVAL = 0")
    cluster.apply(slot_policy("power", {"kondor.io/pool": "cpu"}, off))

    def given_back(node: str, admins: dict[str, str]) -> bool:
        found = annotations_of(cluster, node)
        return {key: found[key] for key in KONDORS if key in found} == admins

    eventually(lambda: all(given_back(node, {}) for node in NODES), 30, "both nodes given back")
    assert "power" not in cluster.get("executionpoints", "power-b", None)["status"]
    assert sleep_column(cluster, "power-b") == ""

    # The admin's own scale-down-disabled, recorded when power management is on again, comes
    # back when no SlotPolicy selects the node any more (its ExecutionPoint is deleted).
    cluster.kubectl("annotate", "node", "power-b", f"{SCALE_DOWN_DISABLED}=true")
    cluster.apply(slot_policy("power", LABELS, POLICY))
    eventually(lambda: all(marked(cluster, node) for node in NODES), 30, "marked again")
    assert annotations_of(cluster, "power-b")[ORIGINAL] == '"true"'
    cluster.kubectl("delete", "slotpolicy", "power")
    eventually(
        lambda: given_back("power-a", {}) and given_back("power-b", {SCALE_DOWN_DISABLED: "true"}),
        30,
        "the admin's scale-down-disabled back on power-b, nothing of Kondor's on either",
    )
