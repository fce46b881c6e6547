"""RBAC of the dev cluster's users: `kondor:users` may work with Kondor's user-facing kinds only.

RBAC lets alice and bob create, read, update and delete any ExecutionJob (in `default` and in
the tests' own namespaces); whose job it is, is the operator's admission webhook's to enforce:
it stamps `spec.owner` and lets only the owner or a cluster admin change or delete a job.
"""

from __future__ import annotations

from typing import Any

USERS_GROUP = "kondor:users"
USER_ROLE = "kondor:user"
KONDOR_GROUP = "kondor.io"

#: Namespaced kinds a user submits and manages: jobs and computing-on-demand claims.
USER_WRITABLE = ("executionjobs", "codclaims")
#: Cluster-wide kinds a user may look at (`condor_status`), never change.
USER_READABLE = ("executionpoints", "slotpolicies", "pools")


def user_cluster_role() -> dict[str, Any]:
    """The ClusterRole of `kondor:users`: nothing beyond these rules (not even Secrets or Pods)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": USER_ROLE, "labels": {"app.kubernetes.io/part-of": "kondor"}},
        "rules": [
            {
                "apiGroups": [KONDOR_GROUP],
                "resources": list(USER_WRITABLE),
                "verbs": [
                    "get",
                    "list",
                    "watch",
                    "create",
                    "update",
                    "patch",
                    "delete",
                    "deletecollection",
                ],
            },
            {
                "apiGroups": [KONDOR_GROUP],
                "resources": list(USER_READABLE),
                "verbs": ["get", "list", "watch"],
            },
        ],
    }


def user_cluster_role_binding() -> dict[str, Any]:
    """Binds the role to the group every dev-cluster user (alice, bob) is in."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": USER_ROLE, "labels": {"app.kubernetes.io/part-of": "kondor"}},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": USER_ROLE,
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": USERS_GROUP}
        ],
    }
