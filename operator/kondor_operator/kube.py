"""The operator's door to the API server: connection settings, writes, Events and the Lease.

kopf watches (with its own client) all but Nodes and ExecutionPoints; everything the
operator *writes* goes through `Kube`, synchronously, from worker threads, so the reconciler
takes any object with these methods and tests can hand it a fake. Requests are paced by a `Pacer`
(client-go's QPS and burst) shared by every `Kube` of the process. Nodes are listed and
watched here as metadata only (PartialObjectMetadata), for `kondor_operator.nodewatch`, and
ExecutionPoints whole, for `kondor_operator.epwatch`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from kondor_core.api import (
    API_VERSION,
    EXECUTION_JOBS,
    EXECUTION_POINTS,
    GROUP,
    MERGE_PATCH,
    POOLS,
    SLOT_POLICIES,
    VERSION,
    format_time,
    kube_config_source,
)
from kondor_core.fleet import Event, TokenBucket

logger = logging.getLogger(__name__)

COMPONENT = "kondor-operator"
#: The API server's metadata-only views of a list and of a watch's objects (what client-go's
#: metadata informers ask for): name, uid, labels and the rest of metadata, no spec, no status.
PARTIAL_OBJECT_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
PARTIAL_OBJECT_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
#: Page size of a listing.
LIST_PAGE = 500
EXECUTION_POINTS_PATH = f"/apis/{GROUP}/{VERSION}/{EXECUTION_POINTS}"
EXECUTION_JOBS_PATH = f"/apis/{GROUP}/{VERSION}/{EXECUTION_JOBS}"
#: Events about cluster-scoped objects (Nodes, ExecutionPoints, SlotPolicies) live here, as
#: the kubelet's Node events do; `kubectl describe` finds them.
EVENTS_NAMESPACE = "default"


def load_configuration(kubeconfig: Path | None, context: str | None) -> client.Configuration:
    """The client's configuration from where `kondor_core.api.kube_config_source` says:
    `--kubeconfig`, else $KUBECONFIG, else the pod's ServiceAccount, else ~/.kube/config,
    with `--context`. The `kubernetes` client reads and merges the kubeconfig files."""
    source = kube_config_source(kubeconfig, context, os.environ)
    configuration = client.Configuration()
    if source.in_cluster:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return configuration
        except config.ConfigException:
            pass  # not in a pod
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=source.config_file,
        context=source.context,
        client_configuration=configuration,
    )
    return configuration


def bearer_token(configuration: client.Configuration) -> tuple[str | None, str | None]:
    """(scheme, token) of the configuration's Authorization header, if it has one."""
    header = configuration.get_api_key_with_prefix("BearerToken") or (
        configuration.get_api_key_with_prefix("authorization")
    )
    if not header:
        return None, None
    scheme, _, token = str(header).partition(" ")
    return (scheme, token) if token else (None, scheme)


def default_identity() -> str:
    """This replica's name in the Lease: the pod's host name plus a random suffix, so that a
    restarted process is a new candidate (as client-go's leader election does)."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class ObjectRef:
    """An Event's involvedObject."""

    api_version: str
    kind: str
    name: str
    uid: str | None = None

    def dump(self) -> dict[str, Any]:
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.uid:
            ref["uid"] = self.uid
        return ref


def execution_point_ref(name: str, uid: str | None) -> ObjectRef:
    return ObjectRef(API_VERSION, "ExecutionPoint", name, uid)


def slot_policy_ref(name: str, uid: str | None) -> ObjectRef:
    return ObjectRef(API_VERSION, "SlotPolicy", name, uid)


def node_ref(name: str, uid: str | None) -> ObjectRef:
    return ObjectRef("v1", "Node", name, uid)


class Pacer:
    """Client-side rate limit of the operator's requests: `burst` at once, then `qps` a
    second (client-go's rest config QPS and Burst); `qps` <= 0 means none. Thread-safe:
    the reconciler's writer threads and the negotiator share one."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self.clock = clock
        self.sleep = sleep
        self._lock = threading.Lock()
        self._bucket = TokenBucket.full(self.burst, clock())

    def wait(self) -> float:
        """Block until the next request may go; the seconds waited."""
        with self._lock:
            self._bucket, delay = self._bucket.take(self.clock(), self.qps, self.burst)
        if delay > 0:
            self.sleep(delay)
        return delay


class Kube:
    """The writes the reconciler makes, over the `kubernetes` client. 404 and 409 are
    returned as False (someone else got there first; the next event settles it)."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        instance: str = COMPONENT,
        pacer: Pacer | None = None,
    ) -> None:
        self.api_client = api_client
        self.objects = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.instance = instance
        self.pacer = pacer

    def _pace(self) -> None:
        if self.pacer is not None:
            self.pacer.wait()

    def _applied(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
        """Make the call; False when it met 404 or 409, which the next event settles."""
        self._pace()
        try:
            call(*args, **kwargs)
        except ApiException as error:
            if error.status in (404, 409):
                return False
            raise
        return True

    def create_execution_point(self, manifest: Mapping[str, Any]) -> str | None:
        """Create the ExecutionPoint; its uid, or None if it exists already."""
        self._pace()
        try:
            created = self.objects.create_cluster_custom_object(
                GROUP, VERSION, EXECUTION_POINTS, dict(manifest)
            )
        except ApiException as error:
            if error.status == 409:
                return None
            raise
        metadata = created.get("metadata", {}) if isinstance(created, dict) else {}
        return str(metadata.get("uid", ""))

    def patch_execution_point(self, name: str, patch: Mapping[str, Any]) -> bool:
        return self._applied(
            self.objects.patch_cluster_custom_object,
            *(GROUP, VERSION, EXECUTION_POINTS, name, dict(patch)),
            _content_type=MERGE_PATCH,
        )

    def patch_execution_point_status(self, name: str, patch: Mapping[str, Any]) -> bool:
        return self._applied(
            self.objects.patch_cluster_custom_object_status,
            *(GROUP, VERSION, EXECUTION_POINTS, name, dict(patch)),
            _content_type=MERGE_PATCH,
        )

    def delete_execution_point(self, name: str) -> bool:
        return self._applied(
            self.objects.delete_cluster_custom_object, GROUP, VERSION, EXECUTION_POINTS, name
        )

    def patch_slot_policy_status(self, name: str, patch: Mapping[str, Any]) -> bool:
        return self._applied(
            self.objects.patch_cluster_custom_object_status,
            *(GROUP, VERSION, SLOT_POLICIES, name, dict(patch)),
            _content_type=MERGE_PATCH,
        )

    def patch_execution_job_status(
        self, namespace: str, name: str, patch: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any] | None:
        """Merge-patch the job's status subresource, guarded by the resourceVersion the
        decision was made on: the job as it is now, or None when it changed meanwhile (409)
        or is gone (404); the next watch event brings what changed."""
        body = dict(patch)
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        self._pace()
        try:
            updated = self.objects.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, EXECUTION_JOBS, name, body, _content_type=MERGE_PATCH
            )
        except ApiException as error:
            if error.status in (404, 409):
                return None
            raise
        return updated if isinstance(updated, dict) else None

    def read_pool(self, name: str) -> dict[str, Any] | None:
        """The Pool as the API server has it; None when there is none."""
        self._pace()
        try:
            found = self.objects.get_cluster_custom_object(GROUP, VERSION, POOLS, name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return found if isinstance(found, dict) else None

    def patch_pool_status(self, name: str, patch: Mapping[str, Any]) -> bool:
        """Merge-patch the Pool's status (the accountant); a missing Pool is created first,
        with the defaults (an empty spec)."""
        if self._applied(
            self.objects.patch_cluster_custom_object_status,
            *(GROUP, VERSION, POOLS, name, dict(patch)),
            _content_type=MERGE_PATCH,
        ):
            return True
        manifest = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Pool",
            "metadata": {"name": name},
            "spec": {},
        }
        self._applied(self.objects.create_cluster_custom_object, GROUP, VERSION, POOLS, manifest)
        return self._applied(
            self.objects.patch_cluster_custom_object_status,
            *(GROUP, VERSION, POOLS, name, dict(patch)),
            _content_type=MERGE_PATCH,
        )

    def post_event(self, ref: ObjectRef, event: Event) -> None:
        """Post a core/v1 Event; a failure is logged, never raised (Events are best effort)."""
        now = format_time(datetime.now(UTC))
        body = client.CoreV1Event.from_dict(
            {
                "metadata": {"generateName": f"{ref.name}."},
                "involvedObject": ref.dump(),
                "type": event.type,
                "reason": event.reason,
                "message": event.message[:1024],
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
                "source": {"component": COMPONENT},
                "reportingComponent": COMPONENT,
                "reportingInstance": self.instance,
            }
        )
        self._pace()
        try:
            assert body is not None  # from_dict of a dict
            self.core.create_namespaced_event(EVENTS_NAMESPACE, body)
        except (ApiException, ValueError) as error:
            logger.warning("cannot post Event %s on %s: %s", event.reason, ref.name, error)

    # ---- Nodes, metadata only -----------------------------------------------------------

    def _get(
        self, path: str, query: list[tuple[str, str]], accept: str, timeout: float | None
    ) -> Any:
        """A GET of `path` as the client's own calls make it (auth, TLS, pool), the
        response unread (urllib3's); ApiException when it is not a 2xx."""
        return self._request("GET", path, query, accept, timeout)

    def _request(
        self,
        verb: str,
        path: str,
        query: list[tuple[str, str]],
        accept: str,
        timeout: float | None,
        *,
        body: Mapping[str, Any] | None = None,
    ) -> Any:
        """`_get`'s request with any verb; a `body` is sent as a JSON merge patch."""
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = MERGE_PATCH
        method, url, headers, serialized, post = self.api_client.param_serialize(
            verb,
            path,
            query_params=query,
            header_params=headers,
            body=dict(body) if body is not None else None,
            auth_settings=["BearerToken"],
        )
        response = self.api_client.call_api(
            method, url, headers, serialized, post, _request_timeout=timeout
        )
        if not 200 <= response.status <= 299:
            raise ApiException(http_resp=response.response)
        return response.response

    def read_node_annotations(self, name: str) -> dict[str, str] | None:
        """The Node's annotations, read as metadata only (power management: a Node's status
        is large and never needed); None when there is no such Node."""
        self._pace()
        try:
            raw = self._get(f"/api/v1/nodes/{name}", [], PARTIAL_OBJECT_METADATA, 60)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        metadata = json.loads(raw.data).get("metadata") or {}
        return {str(k): str(v) for k, v in (metadata.get("annotations") or {}).items()}

    def patch_node_annotations(self, name: str, patch: Mapping[str, str | None]) -> None:
        """Merge-patch the Node's annotations (None removes one); a Node gone is no error (its
        ExecutionPoint goes with it). The answer is read as metadata only."""
        self._pace()
        try:
            answer = self._request(
                "PATCH",
                f"/api/v1/nodes/{name}",
                [],
                PARTIAL_OBJECT_METADATA,
                60,
                body={"metadata": {"annotations": dict(patch)}},
            )
            answer.data  # noqa: B018 (read it all, so that the connection goes back to the pool)
        except ApiException as error:
            if error.status != 404:
                raise

    def _list(self, path: str, accept: str) -> tuple[list[dict[str, Any]], str]:
        """Every object at `path` (in pages of LIST_PAGE) and the listing's resourceVersion,
        to watch from; without metadata.managedFields, which nothing here reads (as
        client-go's informers strip them), so that a page's are freed before the next."""
        items: list[dict[str, Any]] = []
        page = ""
        while True:
            self._pace()
            query = [("limit", str(LIST_PAGE))] + ([("continue", page)] if page else [])
            raw = self._get(path, query, accept, 60)
            listing = json.loads(raw.data)
            for item in listing.get("items") or []:
                (item.get("metadata") or {}).pop("managedFields", None)
                items.append(item)
            metadata = listing.get("metadata") or {}
            page = str(metadata.get("continue") or "")
            if not page:
                return items, str(metadata.get("resourceVersion") or "")

    def _watch(
        self, path: str, accept: str, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        """Watch events at `path` from `resource_version` (with bookmarks), until the server
        ends the watch after `timeout_seconds`: {"type": ..., "object": {...}}."""
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        raw = self._get(path, query, accept, timeout_seconds + 30)
        try:
            for line in iter_resp_lines(raw):  # type: ignore[no-untyped-call]
                if line:
                    yield json.loads(line)
        finally:
            raw.release_conn()

    def list_node_metadata(self) -> tuple[list[dict[str, Any]], str]:
        """Every Node's metadata (PartialObjectMetadataList) and the listing's
        resourceVersion, to watch from."""
        items, version = self._list("/api/v1/nodes", PARTIAL_OBJECT_METADATA_LIST)
        return [item.get("metadata") or {} for item in items], version

    def watch_node_metadata(
        self, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        """Watch events of Node metadata from `resource_version`."""
        return self._watch(
            "/api/v1/nodes", PARTIAL_OBJECT_METADATA, resource_version, timeout_seconds
        )

    # ---- ExecutionPoints, whole ---------------------------------------------------------

    def list_execution_points(self) -> tuple[list[dict[str, Any]], str]:
        """Every ExecutionPoint and the listing's resourceVersion, to watch from."""
        return self._list(EXECUTION_POINTS_PATH, "application/json")

    def watch_execution_points(
        self, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        """Watch events of ExecutionPoints from `resource_version`."""
        return self._watch(
            EXECUTION_POINTS_PATH, "application/json", resource_version, timeout_seconds
        )

    # ---- SlotPolicies, whole (a handful) ---------------------------------------------------

    def list_slot_policies(self) -> list[dict[str, Any]]:
        """Every SlotPolicy (what pod jobs may ask for at admission: `PodSecurityCeiling`)."""
        return self._list(f"/apis/{GROUP}/{VERSION}/{SLOT_POLICIES}", "application/json")[0]

    # ---- ExecutionJobs, whole, in every namespace ----------------------------------------

    def list_execution_jobs(self) -> tuple[list[dict[str, Any]], str]:
        """Every ExecutionJob and the listing's resourceVersion, to watch from."""
        return self._list(EXECUTION_JOBS_PATH, "application/json")

    def watch_execution_jobs(
        self, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        """Watch events of ExecutionJobs from `resource_version`."""
        return self._watch(
            EXECUTION_JOBS_PATH, "application/json", resource_version, timeout_seconds
        )
