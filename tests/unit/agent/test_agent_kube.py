"""KubernetesAPI's reads: which come from the API server's watch cache, and what happens when
the cache has not got the object yet."""

from __future__ import annotations

import json
from typing import Any

from agent_fakes import policy_status
from kubernetes import client

from kondor_agent.kube import KubernetesAPI, SlotPolicies, WatchedExecutionPoint


class Answer:
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.reason = "OK" if status == 200 else "Not Found"
        self.data = json.dumps(body).encode()
        self.response = self
        self.headers: dict[str, str] = {}

    def getheaders(self) -> dict[str, str]:
        return self.headers


class FakeServer(client.ApiClient):
    """Answers GETs from `cache` when resourceVersion=0 is asked, else from `etcd`."""

    def __init__(self, cache: dict[str, Any], etcd: dict[str, Any]) -> None:
        super().__init__(client.Configuration(host="https://127.0.0.1:1"))
        self.cache, self.etcd = cache, etcd
        self.asked: list[tuple[str, bool]] = []

    def call_api(self, method: str, url: str, *_: Any, **__: Any) -> Answer:  # type: ignore[override]
        path, _, query = url.partition("?")
        name = path.rsplit("/", 1)[1]
        cached = "resourceVersion=0" in query
        self.asked.append((name, cached))
        found = (self.cache if cached else self.etcd).get(name)
        return Answer(200, found) if found is not None else Answer(404, {"code": 404})


def policy(generation: int) -> dict[str, Any]:
    return {"metadata": {"name": "batch", "generation": generation}, "spec": {}}


def test_a_slot_policy_is_read_from_the_watch_cache() -> None:
    server = FakeServer(cache={"batch": policy(2)}, etcd={"batch": policy(2)})
    assert KubernetesAPI(server).read_slot_policy("batch") == policy(2)
    assert server.asked == [("batch", True)]


def test_a_slot_policy_missing_from_the_cache_is_read_from_etcd_before_it_is_called_missing() -> (
    None
):
    server = FakeServer(cache={}, etcd={"batch": policy(3)})
    assert KubernetesAPI(server).read_slot_policy("batch") == policy(3)
    assert server.asked == [("batch", True), ("batch", False)]
    gone = FakeServer(cache={}, etcd={})
    assert KubernetesAPI(gone).read_slot_policy("batch") is None


def test_an_execution_point_is_read_from_etcd() -> None:
    ep = {"metadata": {"name": "n"}, "spec": {"nodeName": "n"}}
    server = FakeServer(cache={}, etcd={"n": ep})
    assert KubernetesAPI(server).read_execution_point("n") == ep
    assert server.asked == [("n", False)]


def test_the_slot_policies_watch_wakes_the_agent_for_checked_edits_not_for_status() -> None:
    woken: list[int] = []
    policies = SlotPolicies(on_change=lambda: woken.append(1))
    assert policies.get("batch") is None and not policies.synced.is_set()

    policies.listed([policy(1)])
    assert policies.synced.is_set() and policies.get("batch") == policy(1)
    assert len(woken) == 1  # a policy appeared
    checked = {**policy(1), "status": policy_status(1)}
    policies.changed("MODIFIED", checked)
    assert len(woken) == 2  # the operator's verdict: the agent may carve it now
    counted = {**policy(1), "status": {**policy_status(1), "governedNodes": 3}}
    policies.changed("MODIFIED", counted)
    assert len(woken) == 2  # the node counts: nothing for the agent to do
    policies.changed("MODIFIED", policy(2))  # an edit the operator has not checked yet
    assert len(woken) == 2 and policies.get("batch") == policy(2)
    invalid = {**policy(2), "status": policy_status(2, valid=False)}
    policies.changed("MODIFIED", invalid)
    assert len(woken) == 3  # found invalid: the agent says so
    policies.listed([invalid])  # listed again after a dropped watch: nothing new
    assert len(woken) == 3
    policies.listed([policy(3)])  # edited meanwhile, not checked yet
    assert len(woken) == 3
    policies.changed("MODIFIED", {**policy(3), "status": policy_status(3)})
    assert len(woken) == 4
    policies.changed("DELETED", policy(3))
    assert len(woken) == 5 and policies.get("batch") is None
    policies.lost()
    assert not policies.synced.is_set()


def test_a_watched_agent_reads_policies_from_its_watch_and_is_woken_by_their_edits() -> None:
    server = FakeServer(cache={"other": {"metadata": {"name": "other"}}}, etcd={})
    woken: list[int] = []
    watched = WatchedExecutionPoint(KubernetesAPI(server), "n1", lambda: woken.append(1))
    assert watched.read_slot_policy("other") == {"metadata": {"name": "other"}}
    assert server.asked == [("other", True)]  # not listed yet: from the API server

    watched.policies.listed([policy(1)])
    assert watched.read_slot_policy("batch") == policy(1)
    assert len(server.asked) == 1  # from the watch
    checked = {**policy(2), "status": policy_status(2)}
    watched.policies.changed("MODIFIED", checked)
    assert woken == [1, 1] and watched.read_slot_policy("batch") == checked
    # A policy the watch has not seen (yet): asked of the API server, not taken as gone.
    assert watched.read_slot_policy("other") == {"metadata": {"name": "other"}}
    assert server.asked[-1] == ("other", True)
