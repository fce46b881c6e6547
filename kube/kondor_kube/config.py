"""The one kubeconfig / in-cluster loader, as kubectl finds the API server.

`--kubeconfig`, else $KUBECONFIG, else the pod's ServiceAccount, else ~/.kube/config, with
`--context` (the precedence is `kondor_core.api.kube_config_source`'s, a pure function); the
`kubernetes` client reads and merges the kubeconfig files. Every Kondor process (operator,
agent, CLI, benchmarks) connects through `load`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client, config

from kondor_core.api import kube_config_source
from kondor_kube.errors import KubeError

#: The client's settings and its connection pool, for the callers' type annotations.
Configuration = client.Configuration
ApiClient = client.ApiClient

#: A pod's namespace, as its ServiceAccount's token mount says.
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class KubeConfigError(KubeError):
    """No usable kubeconfig: the file is missing or unreadable, or names no such context."""


@dataclass(frozen=True)
class Connection:
    """Where and how to reach the API server, and the namespace a command defaults to: the
    ServiceAccount's in a pod, else the context's, else `default` (as kubectl's)."""

    configuration: client.Configuration
    namespace: str
    in_cluster: bool

    def api_client(self) -> client.ApiClient:
        """A client (a pool of connections) with this configuration."""
        return client.ApiClient(self.configuration)


def load(
    kubeconfig: Path | str | None = None,
    context: str | None = None,
    *,
    connections: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> Connection:
    """The connection from where `kube_config_source` says. In a pod (no `--kubeconfig`,
    no $KUBECONFIG, no `--context`) the ServiceAccount's; outside one, ~/.kube/config.
    `connections` sizes the connection pool (urllib3's default, 10, otherwise): it is read
    when the client is made, so it is set here. Raises KubeConfigError."""
    source = kube_config_source(
        Path(kubeconfig) if kubeconfig is not None else None,
        context,
        os.environ if environ is None else environ,
    )
    configuration = client.Configuration()
    if connections is not None:
        configuration.connection_pool_maxsize = connections
    if source.in_cluster:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            pass  # not in a pod
        else:
            return Connection(configuration, _pod_namespace(), in_cluster=True)
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=source.config_file,
            context=source.context,
            client_configuration=configuration,
        )
        contexts, current = config.list_kube_config_contexts(config_file=source.config_file)  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError) as err:
        raise KubeConfigError(f"cannot load the kubeconfig: {err}") from None
    chosen = next((c for c in contexts if c.get("name") == source.context), current)
    namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
    return Connection(configuration, str(namespace), in_cluster=False)


def connect(
    kubeconfig: Path | str | None = None,
    context: str | None = None,
    *,
    connections: int | None = None,
) -> client.ApiClient:
    """A client for `load`'s connection."""
    return load(kubeconfig, context, connections=connections).api_client()


def bearer_token(configuration: client.Configuration) -> tuple[str | None, str | None]:
    """(scheme, token) of the configuration's Authorization header, if it has one (for
    kopf's own client, which takes credentials apart)."""
    header = configuration.get_api_key_with_prefix("BearerToken") or (
        configuration.get_api_key_with_prefix("authorization")
    )
    if not header:
        return None, None
    scheme, _, token = str(header).partition(" ")
    return (scheme, token) if token else (None, scheme)


def _pod_namespace() -> str:
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"
