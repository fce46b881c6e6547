"""The agent's only door to the API server: read its ExecutionPoint and SlotPolicy, patch the
ExecutionPoint's status, watch what concerns its node. The loop takes any object with these
methods, so tests use a fake. Requests, watches and errors are `kondor_kube`'s; every write
names the agent's field manager (`kondor-agent`)."""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from kondor_core.api import EXECUTION_JOBS, EXECUTION_POINTS, SLOT_POLICIES
from kondor_core.fleet import policy_verdict
from kondor_kube import managers, paths
from kondor_kube.client import Client, Query
from kondor_kube.config import ApiClient, load
from kondor_kube.errors import ConflictError as ApiConflictError
from kondor_kube.errors import KubeError
from kondor_kube.errors import NotFoundError as ApiNotFoundError
from kondor_kube.reflector import ListWatch

log = logging.getLogger("kondor_agent")


class NotFoundError(LookupError):
    """The object does not exist (yet)."""


class WriteError(RuntimeError):
    """The API server refused or failed a write; the message says why."""


class ConflictError(WriteError):
    """A write guarded by a resourceVersion found the object changed (409)."""


class ExecutionPointAPI(Protocol):
    """What the agent's loop reads and writes. The objects read may be a watch's own (read
    every polling interval, they are not copied): the caller does not change them."""

    def read_execution_point(self, name: str) -> dict[str, Any] | None: ...

    def read_slot_policy(self, name: str) -> dict[str, Any] | None: ...

    def patch_status(self, name: str, patch: Mapping[str, Any]) -> None:
        """Merge-patch the status subresource; raise NotFoundError or WriteError."""


class KubernetesAPI:
    """ExecutionPointAPI over `kondor_kube`, writing as the `kondor-agent` field manager."""

    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client
        self.client = Client(api_client, field_manager=managers.AGENT)

    @classmethod
    def connect(
        cls,
        kubeconfig: Path | None = None,
        context: str | None = None,
        *,
        connections: int | None = None,
    ) -> KubernetesAPI:
        """Connected as `kondor_kube.config.load` finds the API server: `--kubeconfig`, else
        $KUBECONFIG, else the pod's ServiceAccount, else ~/.kube/config, with `--context`.
        `connections` sizes the connection pool (urllib3's default, 10, otherwise)."""
        return cls(load(kubeconfig, context, connections=connections).api_client())

    def _get(self, plural: str, name: str, *, cached: bool = False) -> dict[str, Any] | None:
        """The object, or None. `cached`: as the API server's watch cache holds it
        (resourceVersion=0), without a quorum read from etcd; for readers that check what
        they got is new enough."""
        return self.client.read(paths.kondor(plural, name), cached=cached)

    def read_execution_point(self, name: str) -> dict[str, Any] | None:
        return self._get(EXECUTION_POINTS, name)

    def read_slot_policy(self, name: str) -> dict[str, Any] | None:
        # From the watch cache: a whole fleet reads the policy at once after an edit. Not
        # there (another API server's cache behind this one's): from etcd, to be sure.
        found = self._get(SLOT_POLICIES, name, cached=True)
        return found if found is not None else self._get(SLOT_POLICIES, name)

    def read_node(self, name: str) -> dict[str, Any] | None:
        """The Node (labels and allocatable feed host detection), as plain JSON."""
        return self.client.read(paths.core("nodes", name))

    def patch_status(self, name: str, patch: Mapping[str, Any]) -> None:
        try:
            self.client.merge_patch(
                paths.kondor(EXECUTION_POINTS, name, subresource="status"), patch
            )
        except ApiNotFoundError:
            raise NotFoundError(f"executionpoint {name} does not exist") from None
        except KubeError as error:
            raise WriteError(str(error)) from None


class PodApi:
    """The Pods the agent makes (pod jobs), through `kondor_kube`, as the agent's field
    manager; reads and lists as plain JSON. Errors are `kondor_kube.errors`'."""

    def __init__(self, api_client: ApiClient) -> None:
        self.client = Client(api_client, field_manager=managers.AGENT)

    def create(self, namespace: str, body: Mapping[str, Any]) -> None:
        """Create the Pod; ConflictError when one of its name exists."""
        self.client.create(paths.core("pods", namespace=namespace), body)

    def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Pod, or None when there is none."""
        return self.client.read(paths.core("pods", name, namespace=namespace))

    def delete(self, namespace: str, name: str, grace_seconds: int | None) -> None:
        """Delete the Pod (`grace_seconds`: its termination grace, the Pod's own if None);
        NotFoundError when it is gone."""
        query = [("gracePeriodSeconds", str(grace_seconds))] if grace_seconds is not None else []
        self.client.delete(paths.core("pods", name, namespace=namespace), query=query)

    def list(self, label_selector: str) -> list[dict[str, Any]]:
        """The Pods of every namespace that `label_selector` picks."""
        return self.client.list(paths.core("pods"), query=[("labelSelector", label_selector)])[0]


class SlotPolicies:
    """Every SlotPolicy as a watch saw them (a cluster holds a few): the agent reads its own
    every cycle without a request, and `on_change` is called when the operator's verdict on a
    policy (`policy_verdict`) changes to one an agent acts on (valid or invalid), or a policy
    appears or goes, so that its nodes re-carve at once, as startds do at condor_reconfig. An
    edit wakes nobody until the operator has checked it: until then the slots stay as they
    were, and a thousand agents evaluating at once would only delay the check.
    Fed by `listed`, `changed` and `lost`, as `informer` calls them (from its thread), so tests
    feed it by hand."""

    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        self.on_change = on_change
        self.synced = threading.Event()
        self._by_name: dict[str, Mapping[str, Any]] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> dict[str, Any] | None:
        """The policy as last seen (a shallow copy: its contents are shared, not to be
        changed), or None."""
        with self._lock:
            found = self._by_name.get(name)
        return dict(found) if found is not None else None

    def read(self, name: str, api: ExecutionPointAPI) -> dict[str, Any] | None:
        """The policy from the watch, or from `api` until the watch has listed or while it
        has not seen this one (yet)."""
        found = self.get(name) if self.synced.is_set() else None
        return found if found is not None else api.read_slot_policy(name)

    def listed(self, items: list[Mapping[str, Any]]) -> None:
        fresh = {_name_of(item): item for item in items}
        with self._lock:
            before, self._by_name = self._by_name, fresh
        self.synced.set()
        if any(_news(before.get(n), fresh.get(n)) for n in {*before, *fresh}):
            self._changed()

    def changed(self, kind: str, found: Mapping[str, Any]) -> None:
        name = _name_of(found)
        with self._lock:
            before = self._by_name.pop(name, None)
            if kind != "DELETED":
                self._by_name[name] = found
        if _news(before, None if kind == "DELETED" else found):
            self._changed()

    def lost(self) -> None:
        self.synced.clear()

    def follow(self, api: KubernetesAPI, stop: threading.Event, timeout_seconds: int = 300) -> None:
        """Watch every SlotPolicy until `stop`, on a daemon thread of its own."""
        threading.Thread(
            target=informer,
            args=(api.client, paths.kondor(SLOT_POLICIES), ()),
            kwargs={
                "listed": self.listed,
                "changed": self.changed,
                "lost": self.lost,
                "stop": stop,
                "what": "slotpolicies",
                "timeout_seconds": timeout_seconds,
            },
            name="watch-slotpolicies",
            daemon=True,
        ).start()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()


class WatchedExecutionPoint:
    """An ExecutionPointAPI whose reads of one ExecutionPoint and of the SlotPolicies come
    from watches, so an idle agent reads nothing from the API server between changes (the
    informer pattern, for one object and a few). Until a watch has listed, reads go to the
    API server; so does the read of a policy the watch has not seen (yet).

    `on_change` is called (from a watch thread) when the ExecutionPoint's spec or its
    existence changes, not for status writes, and when a SlotPolicy changes, so that the agent
    acts on a new or edited policy at once.
    """

    def __init__(
        self,
        api: KubernetesAPI,
        name: str,
        on_change: Callable[[], None] | None = None,
        *,
        timeout_seconds: int = 300,
    ) -> None:
        self.api = api
        self.name = name
        self.on_change = on_change
        self.timeout_seconds = timeout_seconds
        self.synced = False
        self.policies = SlotPolicies(on_change=self._changed)
        self._cached: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self.policies.follow(self.api, self._stop, self.timeout_seconds)

    def stop(self) -> None:
        self._stop.set()

    def read_execution_point(self, name: str) -> dict[str, Any] | None:
        if name == self.name and self.synced:
            return self._cached  # the watch's own: read-only (ExecutionPointAPI)
        return self.api.read_execution_point(name)

    def read_slot_policy(self, name: str) -> dict[str, Any] | None:
        return self.policies.read(name, self.api)

    def read_node(self, name: str) -> dict[str, Any] | None:
        return self.api.read_node(name)

    def patch_status(self, name: str, patch: Mapping[str, Any]) -> None:
        self.api.patch_status(name, patch)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def _set(self, found: Mapping[str, Any] | None) -> None:
        before = self._cached
        self._cached = dict(found) if found is not None else None
        if _spec_of(before) != _spec_of(self._cached):
            self._changed()

    def _run(self) -> None:
        def listed(items: list[Mapping[str, Any]]) -> None:
            self._set(items[0] if items else None)
            self.synced = True

        def changed(kind: str, found: Mapping[str, Any]) -> None:
            self._set(None if kind == "DELETED" else found)

        def lost() -> None:
            self.synced = False

        informer(
            self.api.client,
            paths.kondor(EXECUTION_POINTS),
            [("fieldSelector", f"metadata.name={self.name}")],
            listed=listed,
            changed=changed,
            lost=lost,
            stop=self._stop,
            what=f"executionpoint {self.name}",
            timeout_seconds=self.timeout_seconds,
        )


class WatchedNodeObjects:
    """The objects of one kind (`plural`) of one node, in every namespace, as `selector`
    (a list's label or field selector) picks them, kept by a watch: the agent reads them
    every cycle without a request. `on_change` is called (from the watch thread) on every
    change of one of them."""

    def __init__(
        self,
        api: KubernetesAPI,
        node: str,
        plural: str,
        selector: Mapping[str, str],
        on_change: Callable[[], None] | None = None,
        *,
        timeout_seconds: int = 300,
    ) -> None:
        self.api = api
        self.node = node
        self.plural = plural
        self.selector = dict(selector)
        self.on_change = on_change
        self.timeout_seconds = timeout_seconds
        self._objects: dict[str, dict[str, Any]] = {}
        #: The watch has listed the objects once.
        self.synced = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"watch-{plural}-{node}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def objects(self) -> list[dict[str, Any]]:
        """The node's objects as last seen, as plain JSON."""
        with self._lock:
            return [copy.deepcopy(found) for found in self._objects.values()]

    def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """Merge-patch an object's status subresource; raise NotFoundError, ConflictError
        (the patch names a `metadata.resourceVersion` the object no longer has) or
        WriteError."""
        path = paths.kondor(self.plural, name, namespace=namespace, subresource="status")
        kind = self.plural.removesuffix("s")
        try:
            self.api.client.merge_patch(path, patch)
        except ApiNotFoundError:
            raise NotFoundError(f"{kind} {namespace}/{name} does not exist") from None
        except ApiConflictError:
            raise ConflictError(f"{kind} {namespace}/{name} changed meanwhile") from None
        except KubeError as error:
            raise WriteError(str(error)) from None

    def _run(self) -> None:
        def listed(items: list[Mapping[str, Any]]) -> None:
            with self._lock:
                self._objects = {_uid(item): dict(item) for item in items}
            self.synced = True
            self._changed()

        def changed(kind: str, found: Mapping[str, Any]) -> None:
            with self._lock:
                if kind == "DELETED":
                    self._objects.pop(_uid(found), None)
                else:
                    self._objects[_uid(found)] = dict(found)
            self._changed()

        informer(
            self.api.client,
            paths.kondor(self.plural),
            selector_query(self.selector),
            listed=listed,
            changed=changed,
            lost=lambda: None,
            stop=self._stop,
            what=f"{self.plural} of {self.node}",
            timeout_seconds=self.timeout_seconds,
        )

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()


class WatchedJobs(WatchedNodeObjects):
    """The ExecutionJobs matched to one node: `status.executionPoint` names it (a selectable
    field of the CRD, so the match needs no label of its own)."""

    def __init__(
        self,
        api: KubernetesAPI,
        node: str,
        on_change: Callable[[], None] | None = None,
        *,
        timeout_seconds: int = 300,
    ) -> None:
        selector = {"field_selector": f"status.executionPoint={node}"}
        super().__init__(
            api, node, EXECUTION_JOBS, selector, on_change, timeout_seconds=timeout_seconds
        )

    def jobs(self) -> list[dict[str, Any]]:
        return self.objects()

    def patch_job_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self.patch_status(namespace, name, patch)


def _uid(found: Mapping[str, Any]) -> str:
    meta = found.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


def selector_query(selector: Mapping[str, str]) -> Query:
    """A list's `label_selector` / `field_selector` as the API's query parameters."""
    names = {"label_selector": "labelSelector", "field_selector": "fieldSelector"}
    return [(names.get(key, key), value) for key, value in selector.items()]


def informer(
    client: Client,
    path: str,
    query: Query,
    *,
    listed: Callable[[list[Mapping[str, Any]]], None],
    changed: Callable[[str, Mapping[str, Any]], None],
    lost: Callable[[], None],
    stop: threading.Event,
    what: str,
    timeout_seconds: int,
) -> None:
    """List the objects at `path` (`query`: a selector), then watch from the list's
    resourceVersion, until `stop`: `kondor_kube.reflector.ListWatch` (bookmarks, a watch the
    server ends resumed from the last version, 410 lists again, errors back off). `listed`
    after each listing, `changed` for each change, `lost` when the objects are to be listed
    again."""
    ListWatch(
        client,
        path,
        query=query,
        on_listed=lambda items: listed(list(items)),
        on_event=changed,
        on_lost=lost,
        kind=what,
        timeout_seconds=timeout_seconds,
    ).run(stop)


def _name_of(found: Mapping[str, Any]) -> str:
    return str((found.get("metadata") or {}).get("name") or "")


def _news(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> bool:
    """Whether a SlotPolicy's change is one its agents act on: it appeared or went, or the
    operator's verdict on it changed to valid or invalid (not an edit still pending the
    operator's check, nor the node counts its status also holds). Each generation's spec is
    the one the verdict is about: an edit of the spec raises the generation."""
    if before is None or after is None:
        return before is not after
    verdict = policy_verdict(after)
    return verdict.state != "pending" and verdict != policy_verdict(before)


def _spec_of(found: Mapping[str, Any] | None) -> Any:
    if found is None:
        return None
    return (found.get("spec"), (found.get("metadata") or {}).get("generation"))
