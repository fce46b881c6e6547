"""The API server's refusals and failures, mapped once from the `kubernetes` client's.

Callers catch these, never `kubernetes.client.ApiException`: `NotFoundError` (404),
`ConflictError` (409: exists already, or a resourceVersion guard failed), `ForbiddenError`
(403), `GoneError` (410: a watch's version expired), any other answer as `ApiError` with the
server's own message; `UnreachableError` (an `OSError`) when no answer came at all.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any


class KubeError(Exception):
    """Any failure of a request to the API server."""


class ApiError(KubeError):
    """The API server answered with an error: its HTTP status, reason and message."""

    def __init__(self, status: int, reason: str = "", message: str = "") -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(self.describe())

    def describe(self) -> str:
        """`409 Conflict: the message`, as the server put it (its Status's message)."""
        head = f"{self.status} {self.reason}".strip()
        return f"{head}: {self.message}" if self.message else head


class NotFoundError(ApiError):
    """404: the object (or its namespace, or its kind) does not exist."""


class ConflictError(ApiError):
    """409: the object exists already, or changed since the resourceVersion a write named."""


class ForbiddenError(ApiError):
    """403: RBAC (or an admission webhook) refused the request."""


class GoneError(ApiError):
    """410: the resourceVersion a watch or list asked for is too old; list again."""


class UnreachableError(KubeError, OSError):
    """No answer: the connection failed, timed out or broke (an OSError, as callers that
    catch network failures expect)."""


_BY_STATUS: dict[int, type[ApiError]] = {
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
}


def server_message(body: Any) -> str:
    """The `message` of a Status the server sent as the body, or "" when it sent none."""
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return str(json.loads(body or "").get("message") or "")
    return ""


def api_error(status: int, reason: str | None, body: Any) -> ApiError:
    """The error for an answer with this status, reason and body."""
    kind = _BY_STATUS.get(status, ApiError)
    return kind(status, reason or "", server_message(body))


def status_error(status: int, reason: str, message: str) -> ApiError:
    """The error a watch's ERROR event (a Status object) stands for."""
    return _BY_STATUS.get(status, ApiError)(status, reason, message)
