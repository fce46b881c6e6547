"""core/v1 Events, as Kondor's components post them (best effort: a failure is logged)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kondor_core.api import API_VERSION, format_time
from kondor_kube import paths
from kondor_kube.client import Client
from kondor_kube.errors import KubeError

logger = logging.getLogger(__name__)

#: Events about cluster-scoped objects (Nodes, ExecutionPoints, SlotPolicies) live here, as
#: the kubelet's Node events do; `kubectl describe` finds them.
EVENTS_NAMESPACE = "default"


def event_body(
    involved: Mapping[str, Any],
    *,
    type_: str,
    reason: str,
    message: str,
    component: str,
    instance: str | None = None,
    host: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """An Event about `involved` (an involvedObject: apiVersion, kind, name, uid), its
    message cut to the API's 1024 characters."""
    stamp = format_time(now or datetime.now(UTC))
    source: dict[str, str] = {"component": component}
    if host:
        source["host"] = host
    body: dict[str, Any] = {
        "metadata": {"generateName": f"{involved['name']}."},
        "involvedObject": dict(involved),
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "source": source,
        "reportingComponent": component,
    }
    if instance:
        body["reportingInstance"] = instance
    return body


def agent_warning(
    node: str, reason: str, message: str, *, uid: str | None = None
) -> dict[str, Any]:
    """A Warning Event from the agent of `node` about its ExecutionPoint (the one object an
    agent may post Events about)."""
    involved = {"apiVersion": API_VERSION, "kind": "ExecutionPoint", "name": node}
    if uid:
        involved["uid"] = uid
    return event_body(
        involved,
        type_="Warning",
        reason=reason,
        message=message,
        component="kondor-agent",
        instance=node,
        host=node,
    )


def post_event(client: Client, body: Mapping[str, Any], namespace: str = EVENTS_NAMESPACE) -> bool:
    """Post the Event; False (logged) when it could not be posted: Events are best effort."""
    try:
        client.create(paths.core("events", namespace=namespace), body)
    except (KubeError, OSError) as error:
        logger.warning(
            "cannot post Event %s on %s: %s",
            body.get("reason"),
            (body.get("involvedObject") or {}).get("name"),
            error,
        )
        return False
    return True
