"""URL paths of the API objects Kondor reads and writes."""

from __future__ import annotations

from kondor_core.api import GROUP, VERSION


def _path(
    prefix: str,
    resource: str,
    name: str | None,
    namespace: str | None,
    subresource: str | None,
) -> str:
    path = prefix + (f"/namespaces/{namespace}" if namespace else "") + f"/{resource}"
    if name:
        path += f"/{name}"
        if subresource:
            path += f"/{subresource}"
    return path


def kondor(
    plural: str,
    name: str | None = None,
    *,
    namespace: str | None = None,
    subresource: str | None = None,
) -> str:
    """A Kondor custom resource: `/apis/kondor.io/v1alpha1/[namespaces/NS/]PLURAL[/NAME[/SUB]]`."""
    return _path(f"/apis/{GROUP}/{VERSION}", plural, name, namespace, subresource)


def core(
    resource: str,
    name: str | None = None,
    *,
    namespace: str | None = None,
    subresource: str | None = None,
) -> str:
    """A core/v1 object (nodes, pods, events, configmaps): `/api/v1/...`."""
    return _path("/api/v1", resource, name, namespace, subresource)


def group(
    group_version: str,
    resource: str,
    name: str | None = None,
    *,
    namespace: str | None = None,
    subresource: str | None = None,
) -> str:
    """An object of another API group (`coordination.k8s.io/v1` leases, ...)."""
    return _path(f"/apis/{group_version}", resource, name, namespace, subresource)
