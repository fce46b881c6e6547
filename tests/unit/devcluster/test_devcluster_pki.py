"""Certificates and identities of the dev cluster (kondor_devcluster.pki)."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from kondor_devcluster import pki

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def test_client_certificate_carries_user_and_groups() -> None:
    ca = pki.new_ca("test-ca", NOW)
    alice = pki.issue(ca, "alice", NOW, organizations=["kondor:users"], client=True)

    assert pki.certificate_identity(alice.cert_pem) == ("alice", ("kondor:users",))
    cert = x509.load_pem_x509_certificate(alice.cert_pem)
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.cert_pem))


def test_serving_certificate_names_loopback_and_service_ip() -> None:
    ca = pki.new_ca("test-ca", NOW)
    serving = pki.issue(
        ca,
        "kube-apiserver",
        NOW,
        dns_names=["localhost"],
        ip_addresses=["127.0.0.1", "10.0.0.1"],
        server=True,
    )
    cert = x509.load_pem_x509_certificate(serving.cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "10.0.0.1"]
    assert cert.not_valid_after_utc > NOW + datetime.timedelta(days=365)


def test_a_certificate_must_be_for_client_or_server() -> None:
    ca = pki.new_ca("test-ca", NOW)
    with pytest.raises(ValueError, match="client, server or both"):
        pki.issue(ca, "nobody", NOW)


def test_ensure_pki_creates_identities_once_and_keeps_them(tmp_path: Path) -> None:
    files = pki.ensure_pki(tmp_path / "pki", "10.0.0.1", NOW)
    admin = files.cert("admin").read_bytes()

    assert pki.certificate_identity(admin) == ("admin", ("system:masters",))
    assert pki.certificate_identity(files.cert("bob").read_bytes()) == ("bob", ("kondor:users",))
    assert pki.certificate_identity(files.cert("kube-scheduler").read_bytes())[0] == (
        "system:kube-scheduler"
    )
    assert files.sa_private.stat().st_mode & 0o077 == 0
    assert files.key("alice").stat().st_mode & 0o077 == 0

    again = pki.ensure_pki(tmp_path / "pki", "10.0.0.1", NOW)
    assert again.cert("admin").read_bytes() == admin
