"""Kubeconfigs: the user's (contexts admin, alice, bob) and one per component."""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kondor_devcluster.pki import KeyPair

CLUSTER_NAME = "kondor-dev"
#: First line of every kubeconfig we write; we overwrite only files that carry it.
MARKER = "# Written by kondor dev-cluster; rewritten by every `up`."


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def kubeconfig(
    server: str, ca_pem: bytes, users: Mapping[str, KeyPair], current: str
) -> dict[str, Any]:
    """A kubeconfig with one context per user, named after the user, credentials inline."""
    if current not in users:
        raise ValueError(f"current context {current!r} is not one of {sorted(users)}")
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": name,
                "user": {
                    "client-certificate-data": _b64(pair.cert_pem),
                    "client-key-data": _b64(pair.key_pem),
                },
            }
            for name, pair in users.items()
        ],
        "contexts": [
            {"name": name, "context": {"cluster": CLUSTER_NAME, "user": name}} for name in users
        ],
        "current-context": current,
    }


def token_kubeconfig(server: str, ca_pem: bytes, user: str, token: str) -> dict[str, Any]:
    """A kubeconfig for one ServiceAccount token (an agent's, bound to its Node)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": user,
    }


def write_kubeconfig(path: Path, config: Mapping[str, Any], *, force: bool = False) -> None:
    """Write `config` (mode 0600), refusing to replace a kubeconfig we did not write."""
    if path.exists() and not force:
        head = path.read_text(errors="replace").splitlines()[:1]
        if head != [MARKER] and path.stat().st_size > 0:
            raise FileExistsError(
                f"{path} exists and was not written by kondor dev-cluster; "
                "pass another --kubeconfig path or remove the file"
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(MARKER + "\n")
        yaml.safe_dump(dict(config), handle, sort_keys=False)
    temporary.replace(path)
