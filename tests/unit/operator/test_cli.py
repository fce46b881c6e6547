"""`kondor-operator`'s flags and environment, and the webhook's server set-up."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from cryptography import x509

from kondor_operator.main import kopf_settings, parse_options
from kondor_operator.webhook import (
    ServiceRef,
    ServiceWebhookServer,
    Standby,
    build_server,
    self_signed,
)


def test_defaults_are_local_development(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    options = parse_options([])
    assert options.namespace == "default"
    assert options.leader_election and options.lease == "kondor-operator"
    assert options.webhook is not None and options.webhook.addr == "127.0.0.1"
    assert options.webhook_configuration == "kondor-operator.kondor.io"
    assert options.metrics_port == 8080
    assert (options.kube_qps, options.kube_burst, options.write_concurrency) == (200, 400, 16)


def test_environment_and_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "kondor-system")
    monkeypatch.setenv("KONDOR_WEBHOOK_PORT", "8443")
    monkeypatch.setenv("KONDOR_LEADER_ELECTION", "false")
    options = parse_options(["--webhook-port=9444", "--webhook-service=kondor-system/kondor:443"])
    assert options.namespace == "kondor-system"
    assert options.webhook is not None and options.webhook.port == 9444, "a flag wins"
    assert options.webhook.service == ServiceRef("kondor-system", "kondor", 443)
    assert not options.leader_election
    assert parse_options(["--no-webhook"]).webhook is None
    monkeypatch.setenv("KONDOR_KUBE_QPS", "50")
    paced = parse_options(["--kube-burst=100", "--write-concurrency=4"])
    assert (paced.kube_qps, paced.kube_burst, paced.write_concurrency) == (50, 100, 4)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--webhook-cert=/c"], "--webhook-cert and --webhook-key go together"),
        (["--webhook-service=kondor"], "is not NAMESPACE/NAME"),
        (["--leader-election-lease-duration=5"], "must be longer than"),
        (["--write-concurrency=0"], "--write-concurrency at least 1"),
    ],
)
def test_bad_flags_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_options(argv)
    assert message in capsys.readouterr().err


def test_self_signed_certificate_names_the_host(tmp_path: Path) -> None:
    cert_path, key_path = self_signed("127.0.0.1", tmp_path)
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert key_path.stat().st_mode & 0o077 == 0, "the key is private"


def test_settings_use_our_lease_not_kopf_peering_and_serve_the_webhook() -> None:
    """kopf neither serves nor manages the webhooks: every replica serves them itself from
    its start (kondor_operator.main.run), and writes the configurations it names."""
    settings = kopf_settings(parse_options(["--webhook-configuration=x.kondor.io"]))
    assert settings.peering.standalone
    assert settings.admission.managed is None
    assert isinstance(settings.admission.server, Standby)
    in_cluster = build_server(
        parse_options(["--webhook-service=ns/svc", "--webhook-addr=0.0.0.0"]).webhook  # type: ignore[arg-type]
    )
    assert isinstance(in_cluster, ServiceWebhookServer)
    assert kopf_settings(parse_options(["--no-webhook"])).admission.server is None
