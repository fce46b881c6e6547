"""When a dev cluster is usable, not only up: pure checks over what the API server lists.

A healthy API server and controller manager are not yet a cluster a user can use: a pod
applied before the controller manager's `serviceaccount` controller has made its namespace's
`default` ServiceAccount is refused ("error looking up service account default/default"), and
one whose namespace lacks `kube-root-ca.crt` (the `root-ca-cert-publisher`'s) never starts,
since every pod's projected service account volume mounts it. `up` waits until neither is
missing in any namespace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: The namespaces kube-apiserver creates at start (its `system-namespaces` controller).
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
#: What a pod in any namespace needs before it is admitted and can start: (kind, name).
POD_NEEDS = (("ServiceAccount", "default"), ("ConfigMap", "kube-root-ca.crt"))


def _names(items: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    return {
        (str(item["metadata"].get("namespace", "")), str(item["metadata"]["name"]))
        for item in items
    }


def missing_for_pods(
    namespaces: Iterable[Mapping[str, Any]],
    service_accounts: Iterable[Mapping[str, Any]],
    config_maps: Iterable[Mapping[str, Any]],
) -> list[str]:
    """What keeps a pod from being admitted or started, as `namespace: Kind name` lines.

    The arguments are the `items` of the API server's lists of Namespaces, ServiceAccounts and
    ConfigMaps. The system namespaces count even before they are listed (the API server makes
    them a moment after it is ready); a namespace being deleted needs nothing.
    """
    wanted = set(SYSTEM_NAMESPACES)
    for namespace in namespaces:
        name = str(namespace["metadata"]["name"])
        if namespace.get("status", {}).get("phase", "Active") == "Terminating":
            wanted.discard(name)
        else:
            wanted.add(name)
    have = {
        "ServiceAccount": _names(service_accounts),
        "ConfigMap": _names(config_maps),
    }
    return [
        f"{namespace}: {kind} {name}"
        for namespace in sorted(wanted)
        for kind, name in POD_NEEDS
        if (namespace, name) not in have[kind]
    ]
