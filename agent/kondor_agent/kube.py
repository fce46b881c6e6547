"""The agent's only door to the API server: read its ExecutionPoint and SlotPolicy, patch the
ExecutionPoint's status. The loop takes any object with these methods, so tests use a fake."""

from __future__ import annotations

import copy
import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, cast

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from kondor_core.api import (
    EXECUTION_JOBS,
    EXECUTION_POINTS,
    GROUP,
    MERGE_PATCH,
    SLOT_POLICIES,
    VERSION,
    kube_config_source,
)
from kondor_core.fleet import policy_verdict

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
    """ExecutionPointAPI over the `kubernetes` client."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self.objects = client.CustomObjectsApi(api_client)

    @classmethod
    def connect(
        cls,
        kubeconfig: Path | None = None,
        context: str | None = None,
        *,
        connections: int | None = None,
    ) -> KubernetesAPI:
        """The client's configuration from where `kondor_core.api.kube_config_source` says:
        `--kubeconfig`, else $KUBECONFIG, else the pod's ServiceAccount, else ~/.kube/config,
        with `--context`. The `kubernetes` client reads and merges the kubeconfig files.
        `connections` sizes the connection pool (urllib3's default, 10, otherwise): it is
        read when the client is made, so it is set here."""
        source = kube_config_source(kubeconfig, context, os.environ)
        configuration = client.Configuration()
        if connections is not None:
            configuration.connection_pool_maxsize = connections
        if source.in_cluster:
            try:
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
                return cls(client.ApiClient(configuration))
            except config.ConfigException:
                pass  # not in a pod
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=source.config_file,
            context=source.context,
            client_configuration=configuration,
        )
        return cls(client.ApiClient(configuration))

    def _get(self, plural: str, name: str, *, cached: bool = False) -> dict[str, Any] | None:
        """The object, or None. `cached`: as the API server's watch cache holds it
        (resourceVersion=0), without a quorum read from etcd; for readers that check what
        they got is new enough."""
        request = self.api_client.param_serialize(
            "GET",
            f"/apis/{GROUP}/{VERSION}/{plural}/{name}",
            query_params=[("resourceVersion", "0")] if cached else [],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api_client.call_api(*request, _request_timeout=60)
            if not 200 <= response.status <= 299:
                raise ApiException(http_resp=response.response)
            found = json.loads(response.response.data)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return dict(cast("Mapping[str, Any]", found))

    def read_execution_point(self, name: str) -> dict[str, Any] | None:
        return self._get(EXECUTION_POINTS, name)

    def read_slot_policy(self, name: str) -> dict[str, Any] | None:
        # From the watch cache: a whole fleet reads the policy at once after an edit. Not
        # there (another API server's cache behind this one's): from etcd, to be sure.
        found = self._get(SLOT_POLICIES, name, cached=True)
        return found if found is not None else self._get(SLOT_POLICIES, name)

    def list_slot_policies(self, **options: Any) -> Any:
        """A list or watch of every SlotPolicy (`informer`'s `list_objects`)."""
        return self.objects.list_cluster_custom_object(GROUP, VERSION, SLOT_POLICIES, **options)

    def read_node(self, name: str) -> dict[str, Any] | None:
        """The Node (labels and allocatable feed host detection), as plain JSON."""
        try:
            node = client.CoreV1Api(self.api_client).read_node(name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        plain = self.api_client.sanitize_for_serialization(node)  # type: ignore[no-untyped-call]
        return dict(cast("Mapping[str, Any]", plain))

    def patch_status(self, name: str, patch: Mapping[str, Any]) -> None:
        try:
            self.objects.patch_cluster_custom_object_status(
                GROUP, VERSION, EXECUTION_POINTS, name, dict(patch), _content_type=MERGE_PATCH
            )
        except ApiException as error:
            if error.status == 404:
                raise NotFoundError(f"executionpoint {name} does not exist") from None
            raise WriteError(f"{error.status} {error.reason}: {error.body}") from None


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
            args=(api.list_slot_policies, {}),
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
            lambda **kw: self.api.objects.list_cluster_custom_object(
                GROUP, VERSION, EXECUTION_POINTS, **kw
            ),
            {"field_selector": f"metadata.name={self.name}"},
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
        try:
            self.api.objects.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                self.plural,
                name,
                dict(patch),
                _content_type=MERGE_PATCH,
            )
        except ApiException as error:
            kind = self.plural.removesuffix("s")
            if error.status == 404:
                raise NotFoundError(f"{kind} {namespace}/{name} does not exist") from None
            if error.status == 409:
                raise ConflictError(f"{kind} {namespace}/{name} changed meanwhile") from None
            raise WriteError(f"{error.status} {error.reason}: {error.body}") from None

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
            lambda **kw: self.api.objects.list_cluster_custom_object(
                GROUP, VERSION, self.plural, **kw
            ),
            self.selector,
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


def informer(
    list_objects: Callable[..., Any],
    selector: Mapping[str, str],
    *,
    listed: Callable[[list[Mapping[str, Any]]], None],
    changed: Callable[[str, Mapping[str, Any]], None],
    lost: Callable[[], None],
    stop: threading.Event,
    what: str,
    timeout_seconds: int,
) -> None:
    """List, then watch from the list's resourceVersion, until `stop`; a dropped or expired
    watch lists again after a growing pause (client-go's informer, for a few objects)."""
    backoff = 1.0
    while not stop.is_set():
        try:
            listing = cast("Mapping[str, Any]", list_objects(**selector))
            listed([item for item in listing.get("items") or [] if isinstance(item, Mapping)])
            version = str((listing.get("metadata") or {}).get("resourceVersion") or "")
            stream = watch.Watch()  # type: ignore[no-untyped-call]
            for event in stream.stream(  # type: ignore[no-untyped-call]
                list_objects,
                **selector,
                resource_version=version,
                timeout_seconds=timeout_seconds,
            ):
                if stop.is_set():
                    stream.stop()  # type: ignore[no-untyped-call]
                    break
                # `raw_object` is the plain JSON, also for typed lists (pods).
                kind, found = event.get("type"), event.get("raw_object", event.get("object"))
                if kind in ("ADDED", "MODIFIED", "DELETED") and isinstance(found, Mapping):
                    changed(str(kind), found)
            backoff = 1.0
        except Exception as err:  # a dropped or expired watch: list and watch again
            lost()
            log.info("watch of %s ended (%s); listing again", what, err)
            stop.wait(backoff)
            backoff = min(backoff * 2, 30.0)


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
