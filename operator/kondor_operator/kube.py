"""The operator's door to the API server: writes, Events, and its own watches' requests.

kopf watches (with its own client) all but Nodes and ExecutionPoints; everything the
operator *writes* goes through `Kube`, synchronously, from worker threads, so the reconciler
takes any object with these methods and tests can hand it a fake. Requests go through
`kondor_kube.Client`, paced by a `kondor_kube.pacer.Pacer` (client-go's QPS and burst) shared
by every `Kube` of the process, each write as the `Kube`'s field manager (the reconciler's
or the negotiator's). Nodes are listed and watched here as metadata only
(PartialObjectMetadata), for `kondor_operator.nodewatch`, and ExecutionPoints whole, for
`kondor_operator.epwatch`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kondor_core.api import (
    API_VERSION,
    EXECUTION_JOBS,
    EXECUTION_POINTS,
    POOLS,
    SLOT_POLICIES,
)
from kondor_core.fleet import Event
from kondor_kube import managers, paths
from kondor_kube.client import (
    JSON,
    PARTIAL_OBJECT_METADATA,
    PARTIAL_OBJECT_METADATA_LIST,
    Client,
)
from kondor_kube.config import ApiClient
from kondor_kube.errors import ConflictError, NotFoundError
from kondor_kube.events import EVENTS_NAMESPACE, event_body, post_event
from kondor_kube.pacer import Pacer

logger = logging.getLogger(__name__)

COMPONENT = "kondor-operator"
EXECUTION_POINTS_PATH = paths.kondor(EXECUTION_POINTS)
EXECUTION_JOBS_PATH = paths.kondor(EXECUTION_JOBS)


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


class Kube:
    """The writes the reconciler (or the negotiator: `field_manager`) makes. 404 and 409 are
    returned as False (someone else got there first; the next event settles it)."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        instance: str = COMPONENT,
        pacer: Pacer | None = None,
        field_manager: str = managers.RECONCILER,
    ) -> None:
        self.api_client = api_client
        self.client = Client(api_client, field_manager=field_manager, pacer=pacer)
        self.instance = instance
        self.pacer = pacer

    def _merge(self, path: str, patch: Mapping[str, Any]) -> bool:
        """Merge-patch `path`; False when it met 404 or 409, which the next event settles."""
        try:
            self.client.merge_patch(path, patch)
        except (NotFoundError, ConflictError):
            return False
        return True

    def create_execution_point(self, manifest: Mapping[str, Any]) -> str | None:
        """Create the ExecutionPoint; its uid, or None if it exists already."""
        try:
            created = self.client.create(EXECUTION_POINTS_PATH, manifest)
        except ConflictError:
            return None
        return str((created.get("metadata") or {}).get("uid", ""))

    def patch_execution_point(self, name: str, patch: Mapping[str, Any]) -> bool:
        return self._merge(paths.kondor(EXECUTION_POINTS, name), patch)

    def patch_execution_point_status(self, name: str, patch: Mapping[str, Any]) -> bool:
        return self._merge(paths.kondor(EXECUTION_POINTS, name, subresource="status"), patch)

    def delete_execution_point(self, name: str) -> bool:
        try:
            self.client.delete(paths.kondor(EXECUTION_POINTS, name))
        except (NotFoundError, ConflictError):
            return False
        return True

    def patch_slot_policy_status(self, name: str, patch: Mapping[str, Any]) -> bool:
        return self._merge(paths.kondor(SLOT_POLICIES, name, subresource="status"), patch)

    def patch_execution_job_status(
        self, namespace: str, name: str, patch: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any] | None:
        """Merge-patch the job's status subresource, guarded by the resourceVersion the
        decision was made on: the job as it is now, or None when it changed meanwhile (409)
        or is gone (404); the next watch event brings what changed."""
        body = dict(patch)
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        path = paths.kondor(EXECUTION_JOBS, name, namespace=namespace, subresource="status")
        try:
            return self.client.merge_patch(path, body)
        except (NotFoundError, ConflictError):
            return None

    def read_pool(self, name: str) -> dict[str, Any] | None:
        """The Pool as the API server has it; None when there is none."""
        return self.client.read(paths.kondor(POOLS, name))

    def patch_pool_status(self, name: str, patch: Mapping[str, Any]) -> bool:
        """Merge-patch the Pool's status (the accountant); a missing Pool is created first,
        with the defaults (an empty spec)."""
        status = paths.kondor(POOLS, name, subresource="status")
        if self._merge(status, patch):
            return True
        manifest = {
            "apiVersion": API_VERSION,
            "kind": "Pool",
            "metadata": {"name": name},
            "spec": {},
        }
        with contextlib.suppress(ConflictError):
            self.client.create(paths.kondor(POOLS), manifest)
        return self._merge(status, patch)

    def post_event(self, ref: ObjectRef, event: Event) -> None:
        """Post a core/v1 Event; a failure is logged, never raised (Events are best effort)."""
        body = event_body(
            ref.dump(),
            type_=event.type,
            reason=event.reason,
            message=event.message,
            component=COMPONENT,
            instance=self.instance,
        )
        post_event(self.client, body, EVENTS_NAMESPACE)

    # ---- Nodes, metadata only -----------------------------------------------------------

    def read_node_annotations(self, name: str) -> dict[str, str] | None:
        """The Node's annotations, read as metadata only (power management: a Node's status
        is large and never needed); None when there is no such Node."""
        found = self.client.read(paths.core("nodes", name), accept=PARTIAL_OBJECT_METADATA)
        if found is None:
            return None
        metadata = found.get("metadata") or {}
        return {str(k): str(v) for k, v in (metadata.get("annotations") or {}).items()}

    def patch_node_annotations(self, name: str, patch: Mapping[str, str | None]) -> None:
        """Merge-patch the Node's annotations (None removes one); a Node gone is no error (its
        ExecutionPoint goes with it). The answer is read as metadata only."""
        with contextlib.suppress(NotFoundError):
            self.client.merge_patch(
                paths.core("nodes", name),
                {"metadata": {"annotations": dict(patch)}},
                accept=PARTIAL_OBJECT_METADATA,
            )

    def list_node_metadata(self) -> tuple[list[dict[str, Any]], str]:
        """Every Node's metadata (PartialObjectMetadataList) and the listing's
        resourceVersion, to watch from."""
        items, version = self.client.list(paths.core("nodes"), accept=PARTIAL_OBJECT_METADATA_LIST)
        return [item.get("metadata") or {} for item in items], version

    def watch_node_metadata(
        self, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        """Watch events of Node metadata from `resource_version`."""
        return self.client.watch(
            paths.core("nodes"), resource_version, timeout_seconds, accept=PARTIAL_OBJECT_METADATA
        )

    # ---- ExecutionPoints, whole ---------------------------------------------------------

    def list_execution_points(self) -> tuple[list[dict[str, Any]], str]:
        """Every ExecutionPoint and the listing's resourceVersion, to watch from."""
        return self.client.list(EXECUTION_POINTS_PATH)

    def watch_execution_points(
        self, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        """Watch events of ExecutionPoints from `resource_version`."""
        return self.client.watch(EXECUTION_POINTS_PATH, resource_version, timeout_seconds)

    # ---- SlotPolicies, whole (a handful) ---------------------------------------------------

    def list_slot_policies(self) -> list[dict[str, Any]]:
        """Every SlotPolicy (what pod jobs may ask for at admission: `PodSecurityCeiling`)."""
        return self.client.list(paths.kondor(SLOT_POLICIES), accept=JSON)[0]

    # ---- ExecutionJobs, whole, in every namespace ----------------------------------------

    def list_execution_jobs(self) -> tuple[list[dict[str, Any]], str]:
        """Every ExecutionJob and the listing's resourceVersion, to watch from."""
        return self.client.list(EXECUTION_JOBS_PATH)

    def watch_execution_jobs(
        self, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        """Watch events of ExecutionJobs from `resource_version`."""
        return self.client.watch(EXECUTION_JOBS_PATH, resource_version, timeout_seconds)
