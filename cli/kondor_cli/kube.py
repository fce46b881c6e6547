"""The CLI's connection to the API server: `kondor_kube`'s loader and client, as kubectl's.

`connect_cluster` finds the API server and the default namespace as kubectl does
(`kondor_kube.config.load`: `--kubeconfig`, else $KUBECONFIG, else the pod's
ServiceAccount, else ~/.kube/config, with `--context`; the namespace is the context's, the
ServiceAccount's in a pod, else `default`). `Cluster` makes the requests, every write as
the `kondor-cli` field manager, and turns every failure into the CLI's `ApiError`, whose
message says what was asked (`cannot patch executionjob ns/x: 403 Forbidden: ...`).
`KubeJobs` is the job commands' API over it; `kubectl kondor cod`, `drain`, `userprio` and
`status` use the same `Cluster`.

`kubernetes` is imported (through kondor_kube's client) only when a command connects, so
that commands that never talk to a cluster start without it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kondor_cli.files import UserError
from kondor_core.api import EXECUTION_JOBS, EXECUTION_POINTS
from kondor_kube import paths
from kondor_kube.errors import ApiError as KubeApiError
from kondor_kube.errors import KubeError

if TYPE_CHECKING:
    from kondor_kube.client import Client

T = TypeVar("T")
SELF_SUBJECT_REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """`--kubeconfig` and `--context`, as kubectl takes them, for a command that connects."""
    parser.add_argument("--kubeconfig", type=Path, help="default $KUBECONFIG, ~/.kube/config")
    parser.add_argument("--context", help="the kubeconfig context to use")


class ApiError(Exception):
    """The API server refused or could not be reached; the message says who asked for what."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Cluster:
    """Requests to one API server through `kondor_kube.Client`, failures as `ApiError`."""

    def __init__(self, client: Client, namespace: str) -> None:
        self.client = client
        self.namespace = namespace

    def call(self, what: str, request: Callable[[], T]) -> T:
        """`request()`, its failure an ApiError saying it could not `what`."""
        try:
            return request()
        except KubeApiError as err:
            raise ApiError(f"cannot {what}: {err.describe()}", err.status) from None
        except (KubeError, OSError) as err:
            raise ApiError(f"cannot reach the API server to {what}: {err}") from None

    def read(self, what: str, path: str) -> dict[str, Any] | None:
        """The object at `path`, or None when there is none."""
        try:
            return self.call(what, lambda: self.client.get(path))
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def list(self, what: str, path: str) -> list[dict[str, Any]]:
        return self.call(what, lambda: self.client.list(path)[0])

    def create(self, what: str, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.call(what, lambda: self.client.create(path, body))

    def merge_patch(self, what: str, path: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        return self.call(what, lambda: self.client.merge_patch(path, patch))

    def delete(self, what: str, path: str) -> None:
        self.call(what, lambda: self.client.delete(path))

    def whoami(self) -> str:
        """The user the API server authenticates us as (a SelfSubjectReview, as `kubectl auth
        whoami` asks), whatever the credential: client certificate, token or exec plugin."""
        review = self.create(
            "ask the API server who you are (SelfSubjectReview)",
            SELF_SUBJECT_REVIEWS,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        user = (review.get("status") or {}).get("userInfo") or {}
        if not user.get("username"):
            raise ApiError("the API server did not say who you are; give -all")
        return str(user["username"])


def connect_cluster(args: argparse.Namespace) -> Cluster:
    """The API server and the default namespace, found as kubectl finds them."""
    from kondor_kube import managers  # noqa: PLC0415 - only commands that connect need these
    from kondor_kube.client import Client  # noqa: PLC0415
    from kondor_kube.config import KubeConfigError, load  # noqa: PLC0415

    try:
        connection = load(args.kubeconfig, args.context)
    except KubeConfigError as err:
        raise UserError(str(err)) from None
    client = Client(connection.api_client(), field_manager=managers.CLI)
    return Cluster(client, connection.namespace)


class KubeJobs:
    """ExecutionJobs (and the ExecutionPoints `-better-analyze` reads) over a `Cluster`."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.namespace = cluster.namespace

    def list_jobs(self, namespace: str | None) -> list[dict[str, Any]]:
        where = f"in namespace {namespace}" if namespace is not None else "in all namespaces"
        path = paths.kondor(EXECUTION_JOBS, namespace=namespace)
        return self.cluster.list(f"list executionjobs {where}", path)

    def patch_job(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        path = paths.kondor(EXECUTION_JOBS, name, namespace=namespace)
        self.cluster.merge_patch(f"patch executionjob {namespace}/{name}", path, patch)

    def list_execution_points(self) -> list[dict[str, Any]]:
        return self.cluster.list("list executionpoints", paths.kondor(EXECUTION_POINTS))

    def whoami(self) -> str:
        return self.cluster.whoami()


def connect(args: argparse.Namespace) -> KubeJobs:
    """The job commands' API, connected as kubectl would be."""
    return KubeJobs(connect_cluster(args))
