"""Requests to the API server: typed reads, lists, watches and writes, errors mapped once.

Every request goes through `Client.request` (the `kubernetes` ApiClient's own serialisation,
authentication, TLS and connection pool, the answer read as plain JSON, never as the
client's generated models), paced by an optional `Pacer`. Every write names the client's
field manager (`kondor_kube.managers`), so `metadata.managedFields` says which component
wrote what.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines
from urllib3.exceptions import HTTPError

from kondor_kube.errors import NotFoundError, UnreachableError, api_error
from kondor_kube.pacer import Pacer

JSON: Final = "application/json"
MERGE_PATCH: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
APPLY_PATCH: Final = "application/apply-patch+yaml"
#: The API server's metadata-only views of a list and of a watch's objects (what client-go's
#: metadata informers ask for): name, uid, labels and the rest of metadata, no spec, no status.
PARTIAL_OBJECT_METADATA_LIST: Final = (
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
)
PARTIAL_OBJECT_METADATA: Final = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
#: Page size of a listing.
LIST_PAGE: Final = 500
#: Seconds a request other than a watch may take.
TIMEOUT: Final = 60.0

Query = Sequence[tuple[str, str]]


def without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` with metadata.managedFields dropped (in place), as client-go's informers strip
    them: nothing reads them, and a fleet's would double what a watch keeps."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj


class Client:
    """The API server, through one `kubernetes` ApiClient; writes as `field_manager`."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        field_manager: str,
        pacer: Pacer | None = None,
    ) -> None:
        self.api_client = api_client
        self.field_manager = field_manager
        self.pacer = pacer

    def with_manager(self, field_manager: str) -> Client:
        """The same connection and pacing, writing as another field manager."""
        return Client(self.api_client, field_manager=field_manager, pacer=self.pacer)

    # ---- the one request --------------------------------------------------------------

    def request(
        self,
        verb: str,
        path: str,
        *,
        query: Query = (),
        accept: str = JSON,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | None = TIMEOUT,
    ) -> Any:
        """The answer to one request, unread (urllib3's response: `.data`, `.stream`);
        ApiError (or a subclass) when it is not a 2xx, UnreachableError when none came."""
        if self.pacer is not None:
            self.pacer.wait()
        headers = {"Accept": accept}
        if content_type is not None:
            headers["Content-Type"] = content_type
        method, url, headers, serialized, post = self.api_client.param_serialize(
            verb,
            path,
            query_params=list(query),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            answer = self.api_client.call_api(
                method, url, headers, serialized, post, _request_timeout=timeout
            )
        except HTTPError as err:  # urllib3's MaxRetryError is no OSError
            raise UnreachableError(f"cannot reach the API server: {err}") from None
        if not 200 <= answer.status <= 299:
            raw = answer.response
            raise api_error(answer.status, getattr(raw, "reason", ""), getattr(raw, "data", b""))
        return answer.response

    def _json(self, verb: str, path: str, **options: Any) -> dict[str, Any]:
        raw = self.request(verb, path, **options)
        try:
            data = raw.data
        except HTTPError as err:
            raise UnreachableError(f"the API server's answer broke off: {err}") from None
        found = json.loads(data) if data else {}
        return found if isinstance(found, dict) else {}

    # ---- reads ------------------------------------------------------------------------

    def get(
        self, path: str, *, accept: str = JSON, query: Query = (), cached: bool = False
    ) -> dict[str, Any]:
        """The object at `path` as plain JSON; NotFoundError when there is none. `cached`:
        as the API server's watch cache holds it (resourceVersion=0), without a quorum read
        from etcd, for readers that check what they got is new enough."""
        if cached:
            query = [*query, ("resourceVersion", "0")]
        return self._json("GET", path, query=query, accept=accept)

    def read(
        self, path: str, *, accept: str = JSON, query: Query = (), cached: bool = False
    ) -> dict[str, Any] | None:
        """`get`, with None for an object that does not exist."""
        try:
            return self.get(path, accept=accept, query=query, cached=cached)
        except NotFoundError:
            return None

    def list(
        self, path: str, *, accept: str = JSON, query: Query = ()
    ) -> tuple[list[dict[str, Any]], str]:
        """Every object at `path` (in pages of LIST_PAGE) and the listing's resourceVersion,
        to watch from; managedFields dropped, so that a page's are freed before the next."""
        items: list[dict[str, Any]] = []
        page = ""
        while True:
            paging = [("limit", str(LIST_PAGE))] + ([("continue", page)] if page else [])
            listing = self._json("GET", path, query=[*query, *paging], accept=accept)
            items += [without_managed_fields(item) for item in listing.get("items") or []]
            metadata = listing.get("metadata") or {}
            page = str(metadata.get("continue") or "")
            if not page:
                return items, str(metadata.get("resourceVersion") or "")

    def watch(
        self,
        path: str,
        resource_version: str,
        timeout_seconds: int,
        *,
        accept: str = JSON,
        query: Query = (),
    ) -> Iterator[dict[str, Any]]:
        """Watch events at `path` from `resource_version`, with bookmarks, until the server
        ends the watch after `timeout_seconds`: {"type": ..., "object": {...}}, each line
        parsed once, managedFields dropped. UnreachableError when the stream breaks."""
        watching = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        raw = self.request(
            "GET", path, query=[*query, *watching], accept=accept, timeout=timeout_seconds + 30
        )
        try:
            for line in iter_resp_lines(raw):  # type: ignore[no-untyped-call]
                if line:
                    event = json.loads(line)
                    if isinstance(event.get("object"), dict):
                        without_managed_fields(event["object"])
                    yield event
        except HTTPError as err:
            raise UnreachableError(f"the watch of {path} broke off: {err}") from None
        finally:
            raw.release_conn()

    # ---- writes -------------------------------------------------------------------------

    def _write(
        self,
        verb: str,
        path: str,
        body: Any,
        content_type: str | None,
        *,
        accept: str = JSON,
        query: Query = (),
    ) -> dict[str, Any]:
        manager = [("fieldManager", self.field_manager)]
        return self._json(
            verb,
            path,
            query=[*query, *manager],
            accept=accept,
            body=body,
            content_type=content_type,
        )

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST `body` to the collection at `path`: the object made. ConflictError when one of
        its name exists."""
        return self._write("POST", path, dict(body), None)

    def merge_patch(
        self, path: str, patch: Mapping[str, Any], *, accept: str = JSON
    ) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386) of the object at `path` (`.../status` for the status
        subresource); a `metadata.resourceVersion` in it guards it (ConflictError)."""
        return self._write("PATCH", path, dict(patch), MERGE_PATCH, accept=accept)

    def json_patch(self, path: str, operations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """A JSON patch (RFC 6902) of the object at `path`: `test` operations guard it."""
        return self._write("PATCH", path, [dict(op) for op in operations], JSON_PATCH)

    def apply(self, path: str, body: Mapping[str, Any], *, force: bool = True) -> dict[str, Any]:
        """Server-side apply of `body` to the object at `path`, as this field manager: the
        fields it names become this manager's (`force`: taken from any other)."""
        query = [("force", "true")] if force else []
        return self._write("PATCH", path, dict(body), APPLY_PATCH, query=query)

    def delete(self, path: str, *, query: Query = ()) -> None:
        """DELETE the object at `path`; NotFoundError when it is gone already."""
        self._json("DELETE", path, query=query)
