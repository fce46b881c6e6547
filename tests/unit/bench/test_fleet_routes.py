"""One watch per kind for many simulated agents (`fleet_sim.Routed`): objects reach the node
their status (jobs) or label (pods) names, only the nodes of this process are kept, an agent
is woken only when something it acts on changed, and a job matched away from a node leaves
it."""

from __future__ import annotations

from typing import Any

import pytest

from fleet_sim import Routed, job_node, job_signature, node_label, object_name, pod_signature

pytestmark = pytest.mark.timeout(5)


def _job(name: str, node: str | None, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"requestCpus": 1},
        "status": {**status, "executionPoint": node} if node else status,
    }


def _routed(nodes: list[str] | None = None) -> tuple[Routed, list[str]]:
    woken: list[str] = []
    routed = Routed(job_node, job_signature, nodes=nodes)
    routed.on_change = woken.append
    return routed, woken


def test_a_listing_routes_each_job_to_its_node_and_sets_synced() -> None:
    routed, woken = _routed()
    assert not routed.synced.is_set()
    routed.listed([_job("a", "n1", claimId="c1"), _job("b", "n2"), _job("c", None)])
    assert routed.synced.is_set()
    assert [j["metadata"]["name"] for j in routed.of("n1")] == ["a"]
    assert [j["metadata"]["name"] for j in routed.of("n2")] == ["b"]
    assert sorted(woken) == ["n1", "n2"]


def test_only_changes_the_agent_acts_on_wake_it() -> None:
    routed, woken = _routed()
    routed.listed([_job("a", "n1", claimId="c1")])
    woken.clear()
    routed.changed("MODIFIED", _job("a", "n1", claimId="c1", jobStatus="Running"))
    assert woken == []  # the operator following the agent: nothing new for the agent
    routed.changed("MODIFIED", _job("a", "n1", claimId="c2"))
    assert woken == ["n1"]  # a new claim
    routed.changed("MODIFIED", _job("a", "n1", claimId="c2", jobStatus="Removed"))
    assert woken == ["n1", "n1"]
    routed.changed("DELETED", _job("a", "n1", claimId="c2"))
    assert woken == ["n1", "n1", "n1"]
    assert routed.of("n1") == []


def test_a_job_matched_to_another_node_leaves_the_first_and_wakes_both() -> None:
    routed, woken = _routed()
    routed.listed([_job("a", "n1", claimId="c1")])
    woken.clear()
    routed.changed("MODIFIED", _job("a", "n2", claimId="c2"))
    assert routed.of("n1") == [] and len(routed.of("n2")) == 1
    assert sorted(woken) == ["n1", "n2"]


def test_nodes_of_other_processes_are_not_kept() -> None:
    routed, woken = _routed(nodes=["n1"])
    routed.listed([_job("a", "n1"), _job("b", "n2")])
    assert routed.of("n2") == [] and len(routed.of("n1")) == 1
    routed.changed("MODIFIED", _job("a", "n2"))  # matched away to another process's node
    assert routed.of("n1") == []
    assert woken == ["n1", "n1"]


def test_a_relisting_drops_what_is_gone() -> None:
    routed, woken = _routed()
    routed.listed([_job("a", "n1"), _job("b", "n1")])
    woken.clear()
    routed.listed([_job("b", "n1")])
    assert [j["metadata"]["name"] for j in routed.of("n1")] == ["b"]
    assert woken == ["n1"]


def test_a_pod_wakes_its_agent_when_it_ends_not_when_it_runs() -> None:
    woken: list[str] = []
    routed = Routed(node_label, pod_signature)
    routed.on_change = woken.append
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "labels": {"kondor.io/execution-point": "n1"}}
    }
    routed.changed("ADDED", {**pod, "status": {"phase": "Pending"}})
    routed.changed("MODIFIED", {**pod, "status": {"phase": "Running"}})
    assert woken == ["n1"]  # added (nothing known before), then running: nothing new
    routed.changed("MODIFIED", {**pod, "status": {"phase": "Succeeded"}})
    assert woken == ["n1", "n1"]


def test_an_execution_point_is_routed_by_its_name() -> None:
    routed = Routed(object_name, lambda found: found)
    routed.listed([{"metadata": {"name": "n1"}, "spec": {}}])
    assert routed.one("n1") == {"metadata": {"name": "n1"}, "spec": {}}
    assert routed.one("n2") is None


class _Api:
    api_client = None  # the launcher's CoreV1Api is built but never called here


def _pod(phase: str, code: int = 0) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if phase in ("Succeeded", "Failed"):
        status["containerStatuses"] = [{"state": {"terminated": {"exitCode": code}}}]
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "labels": {"kondor.io/execution-point": "n1"},
        },
        "status": status,
    }


def test_the_pod_launcher_sees_its_node_s_pods_through_the_shared_watch() -> None:
    from fleet_sim import FleetPodLauncher
    from kondor_agent.runtimes.pod import PodHandle

    routed = Routed(node_label, pod_signature)
    launcher = FleetPodLauncher(_Api(), "n1", routed)  # type: ignore[arg-type]
    handle = PodHandle("ns", "p")
    routed.changed("ADDED", _pod("Running"))
    assert not launcher.ended(handle) and launcher.poll(handle) is None
    routed.changed("MODIFIED", _pod("Succeeded", 3))
    outcome = launcher.poll(handle)
    assert outcome is not None and outcome.exit_code == 3


def test_a_pod_the_launcher_deleted_stays_ended_whatever_the_watch_still_shows() -> None:
    from fleet_sim import FleetPodLauncher
    from kondor_agent.runtimes.pod import PodHandle

    routed = Routed(node_label, pod_signature)
    launcher = FleetPodLauncher(_Api(), "n1", routed)  # type: ignore[arg-type]
    routed.changed("ADDED", _pod("Running"))
    launcher._pods[("ns", "p")] = {"status": {"phase": "Failed"}}  # as `_delete` leaves it
    routed.changed("MODIFIED", _pod("Running"))  # terminating, as the watch still shows it
    assert launcher.ended(PodHandle("ns", "p"))
