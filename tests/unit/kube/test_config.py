"""The one kubeconfig loader: `--kubeconfig`, else $KUBECONFIG, else the pod's
ServiceAccount, else ~/.kube/config, with `--context`; and the namespace a command defaults to.
(The kubeconfig list test moved here from tests/unit/operator/test_cli.py with the loader.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import config

from kondor_kube import config as kube_config
from kondor_kube.config import KubeConfigError, bearer_token, load


def _kubeconfig(
    path: Path, name: str, server: str, *, current: bool = True, namespace: str | None = None
) -> Path:
    context: dict[str, Any] = {"cluster": name, "user": name}
    if namespace:
        context["namespace"] = namespace
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": name, "user": {"token": f"token-{name}"}}],
        "contexts": [{"name": name, "context": context}],
    }
    if current:
        body["current-context"] = name
    path.write_text(yaml.safe_dump(body))
    return path


@pytest.fixture
def no_pod(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Not in a pod: the in-cluster loader refuses (and counts its tries)."""
    tries: list[int] = []

    def refuse(**_: Any) -> None:
        tries.append(1)
        raise config.ConfigException("not in a pod")

    monkeypatch.setattr(config, "load_incluster_config", refuse)
    return tries


def test_kubeconfig_comes_from_the_flag_or_a_kubeconfig_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_pod: list[int]
) -> None:
    """$KUBECONFIG is read when a process starts (not when the client was imported), and
    a `:`-separated list is merged by the client. (Where several files set current-context
    the client takes the last, kubectl the first: only one sets it here.)"""
    first = _kubeconfig(tmp_path / "a.yaml", "a", "https://a.example:6443")
    second = _kubeconfig(tmp_path / "b.yaml", "b", "https://b.example:6443", current=False)
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'none.yaml'}:{first}:{second}")
    assert load(None, None).configuration.host == "https://a.example:6443"
    assert load(None, "b").configuration.host == "https://b.example:6443"
    monkeypatch.delenv("KUBECONFIG")
    assert load(first, "a").configuration.host == "https://a.example:6443"
    assert no_pod == [], "a flag or $KUBECONFIG: the ServiceAccount is not tried"


@pytest.mark.parametrize(
    "case",
    [
        ("flag", "env", None, "https://flag.example"),  # --kubeconfig beats $KUBECONFIG
        (None, "env", None, "https://env.example"),
        (None, None, None, "https://home.example"),  # no pod: ~/.kube/config
        (None, None, "home", "https://home.example"),  # --context: never the pod's
    ],
)
def test_precedence(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_pod: list[int],
    case: tuple[str | None, str | None, str | None, str],
) -> None:
    flag, env, context, expected = case
    names = ("flag", "env")
    files = {n: _kubeconfig(tmp_path / f"{n}.yaml", n, f"https://{n}.example") for n in names}
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    _kubeconfig(home / ".kube" / "config", "home", "https://home.example")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", "~/.kube/config")
    if env:
        monkeypatch.setenv("KUBECONFIG", str(files["env"]))
    else:
        monkeypatch.delenv("KUBECONFIG", raising=False)
    connection = load(files["flag"] if flag else None, context)
    assert connection.configuration.host == expected
    assert not connection.in_cluster
    assert len(no_pod) == (1 if (flag, env, context) == (None, None, None) else 0)


def test_in_a_pod_the_service_account_is_used_with_its_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def in_pod(client_configuration: Any) -> None:
        client_configuration.host = "https://10.0.0.1:443"

    monkeypatch.setattr(config, "load_incluster_config", in_pod)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    namespace = tmp_path / "namespace"
    namespace.write_text("kondor-system\n")
    monkeypatch.setattr(kube_config, "SERVICE_ACCOUNT_NAMESPACE", namespace)
    connection = load(None, None, connections=7)
    assert connection.in_cluster and connection.namespace == "kondor-system"
    assert connection.configuration.host == "https://10.0.0.1:443"
    assert connection.configuration.connection_pool_maxsize == 7
    monkeypatch.setattr(kube_config, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "none")
    assert load(None, None).namespace == "default"


def test_the_namespace_is_the_context_s_else_default(tmp_path: Path, no_pod: list[int]) -> None:
    with_ns = _kubeconfig(tmp_path / "a.yaml", "a", "https://a.example", namespace="team")
    without = _kubeconfig(tmp_path / "b.yaml", "b", "https://b.example")
    assert load(with_ns, None).namespace == "team"
    assert load(without, "b").namespace == "default"


def test_a_missing_kubeconfig_or_context_is_a_kube_config_error(
    tmp_path: Path, no_pod: list[int]
) -> None:
    with pytest.raises(KubeConfigError, match="cannot load the kubeconfig"):
        load(tmp_path / "missing.yaml", None)
    present = _kubeconfig(tmp_path / "a.yaml", "a", "https://a.example")
    with pytest.raises(KubeConfigError):
        load(present, "no-such-context")


def test_bearer_token_is_taken_apart_for_kopf(tmp_path: Path, no_pod: list[int]) -> None:
    configuration = load(_kubeconfig(tmp_path / "a.yaml", "a", "https://a.example")).configuration
    assert bearer_token(configuration) == ("Bearer", "token-a")
