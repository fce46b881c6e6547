"""Kubernetes API conventions in one place: names, times, merge patches, where a kubeconfig is.

Every edge (operator, agent, CLI) talks to the API server with these, so that the group,
the plurals, the time format and the patch semantics cannot differ between them. Nothing
here does I/O: the edges read files and call the `kubernetes` client themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from os import PathLike
from typing import Any

from pydantic import BaseModel

GROUP = "kondor.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

#: The plurals of Kondor's kinds: the path segment of `/apis/kondor.io/v1alpha1/<plural>`.
SLOT_POLICIES = "slotpolicies"
EXECUTION_POINTS = "executionpoints"
EXECUTION_JOBS = "executionjobs"

#: The label the negotiator puts on a matched ExecutionJob, naming its ExecutionPoint, so an
#: agent watches only its own node's jobs (docs/jobs.md).
EXECUTION_POINT_LABEL = "kondor.io/execution-point"

#: The content type of a JSON merge patch (RFC 7386): a map is patched key by key, so a
#: writer changes its own fields and leaves the rest of the object (another writer's) alone.
MERGE_PATCH = "application/merge-patch+json"


# ---- times ------------------------------------------------------------------------------------


def format_time(when: datetime | float) -> str:
    """A metav1.Time: RFC 3339 in UTC with a `Z`, to the second, as Kubernetes writes times.

    `when` is a datetime (a naive one is taken as UTC) or seconds since the epoch.
    """
    return _utc(when).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(when: datetime | float) -> str:
    """A metav1.MicroTime (a Lease's renewTime): RFC 3339 with exactly six fraction digits."""
    return _utc(when).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime | None:
    """A Kubernetes time (`2026-01-02T03:04:05Z`, fractions and offsets allowed) as an aware
    datetime; None when `text` is not one. A time without an offset is taken as UTC."""
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _utc(when: datetime | float) -> datetime:
    if isinstance(when, datetime):
        return when.astimezone(UTC) if when.tzinfo is not None else when.replace(tzinfo=UTC)
    return datetime.fromtimestamp(when, UTC)


# ---- JSON merge patches (RFC 7386) -----------------------------------------------------------


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch that turns `old` into `new` (keys gone from `new` become null).

    Lists are replaced whole, as merge patches do; a map is patched key by key. A merge
    patch cannot set a value to null, so `new` holds no None (a None in `new` deletes).
    """
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = merge_patch(before, value)
            if sub:
                patch[key] = sub
        elif key not in old or before != value or type(before) is not type(value):
            patch[key] = value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


def apply_merge_patch(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386 MergePatch(target, patch) for a map `patch`: null deletes a key, a map is
    merged into the map it replaces (or into an empty one), anything else replaces."""
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping):
            before = out.get(key)
            out[key] = apply_merge_patch(before if isinstance(before, Mapping) else {}, value)
        else:
            out[key] = value
    return out


def model_patch(model: BaseModel) -> dict[str, Any]:
    """A merge patch that makes an object's map hold `model`'s fields: each field as the model
    dumps it (camelCase), a field that is None as null, so that it is deleted, and a nested
    model as a patch of its own. Keys the model does not know (another writer's) are left as
    they are."""
    dumped = model.model_dump(by_alias=True, exclude_none=True, mode="json")
    patch: dict[str, Any] = {}
    for name, info in type(model).model_fields.items():
        key = info.alias or name
        value = getattr(model, name)
        if value is None:
            patch[key] = None
        elif isinstance(value, BaseModel):
            patch[key] = model_patch(value)
        else:
            patch[key] = dumped[key]
    return patch


# ---- where the cluster is ---------------------------------------------------------------------

#: kubectl's default kubeconfig (`~` is expanded by the client).
DEFAULT_KUBECONFIG = "~/.kube/config"


@dataclass(frozen=True)
class KubeConfigSource:
    """How an edge reaches the API server, decided before any file is read.

    `in_cluster`: try the pod's ServiceAccount first, and use the kubeconfig only when that
    fails (not in a pod). `config_file` is what `kubernetes.config.load_kube_config` takes as
    `config_file`: one path or several joined by `:` (the client merges them as kubectl does).
    """

    config_file: str
    context: str | None = None
    in_cluster: bool = False


def kube_config_source(
    kubeconfig: str | PathLike[str] | None,
    context: str | None,
    environ: Mapping[str, str],
) -> KubeConfigSource:
    """Where the kubeconfig is, in the order controller-runtime's `GetConfig` looks:
    `--kubeconfig`, else $KUBECONFIG (a `:`-separated list allowed), else the pod's
    ServiceAccount, else ~/.kube/config. A `--context` means a kubeconfig, never the
    ServiceAccount.

    $KUBECONFIG is read from `environ` at the call, not when the client was imported (the
    client's own default is fixed at its import).
    """
    if kubeconfig is not None and str(kubeconfig):
        return KubeConfigSource(str(kubeconfig), context)
    from_env = environ.get("KUBECONFIG", "")
    if from_env:
        return KubeConfigSource(from_env, context)
    return KubeConfigSource(DEFAULT_KUBECONFIG, context, in_cluster=context is None)
