"""The development cluster's PKI: one CA, serving and client certificates, service-account keys.

Identities are client certificates, as kubeadm issues them: the common name is the user, each
organization a group. `admin` is in `system:masters`; `alice` and `bob` are in `kondor:users`,
whose only permissions are the ClusterRole in `kondor_devcluster.rbac`.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Users of the kubeconfig, with their groups; the first is the default context.
USERS: dict[str, tuple[str, ...]] = {
    "admin": ("system:masters",),
    "alice": ("kondor:users",),
    "bob": ("kondor:users",),
    "carol": ("kondor:users",),
}

#: Identities of the components; RBAC's bootstrap policy knows the first two by these names.
COMPONENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "kube-controller-manager": ("system:kube-controller-manager", ()),
    "kube-scheduler": ("system:kube-scheduler", ()),
    # The API server's identity towards aggregated API servers (requestheader authentication).
    "front-proxy-client": ("front-proxy-client", ()),
    # kwok plays the kubelet of every simulated node, so it may write any node's and pod's status.
    "kwok": ("kwok-controller", ("system:masters",)),
    # The API server's identity towards kubelets (logs, exec, port-forward on the real node).
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", ("system:masters",)),
}

#: Names the API server's serving certificate is valid for (in-cluster and loopback).
APISERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)

_VALIDITY = datetime.timedelta(days=3650)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes


def _new_key() -> ec.EllipticCurvePrivateKey:
    # P-256: every component (Go, OpenSSL via the Python clients) accepts it, and it is fast.
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def new_ca(common_name: str, now: datetime.datetime) -> KeyPair:
    """A self-signed CA certificate valid for ten years from `now`."""
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue(
    ca: KeyPair,
    common_name: str,
    now: datetime.datetime,
    *,
    organizations: Sequence[str] = (),
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    client: bool = False,
    server: bool = False,
) -> KeyPair:
    """A leaf certificate signed by `ca`: client (user = CN, groups = O) and/or server (SANs)."""
    if not client and not server:
        raise ValueError(f"certificate {common_name!r}: ask for client, server or both")
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an EC key; delete the state directory's pki/")
    key = _new_key()
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    usages = []
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attributes))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def new_service_account_key() -> KeyPair:
    """The service-account token signing key; `cert_pem` holds the public key (PEM)."""
    key = _new_key()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(public, _key_pem(key))


def certificate_identity(cert_pem: bytes) -> tuple[str, tuple[str, ...]]:
    """The user and groups the API server reads from a client certificate."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    orgs = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    return str(cn[0].value), tuple(str(org.value) for org in orgs)


@dataclass(frozen=True)
class PkiFiles:
    """Where the PKI lives in the state directory (`<state>/pki/`)."""

    root: Path

    @property
    def ca_cert(self) -> Path:
        return self.root / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.root / "ca.key"

    @property
    def sa_public(self) -> Path:
        return self.root / "sa.pub"

    @property
    def sa_private(self) -> Path:
        return self.root / "sa.key"

    def cert(self, name: str) -> Path:
        return self.root / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.root / f"{name}.key"

    def pair(self, name: str) -> KeyPair:
        return KeyPair(self.cert(name).read_bytes(), self.key(name).read_bytes())

    def ca(self) -> KeyPair:
        return KeyPair(self.ca_cert.read_bytes(), self.ca_key.read_bytes())


def _write_pair(files: PkiFiles, name: str, pair: KeyPair) -> None:
    files.cert(name).write_bytes(pair.cert_pem)
    key_path = files.key(name)
    key_path.touch(mode=0o600)
    key_path.write_bytes(pair.key_pem)


def node_credentials(root: Path, node: str, now: datetime.datetime | None = None) -> str:
    """A kubelet's client certificate (user `system:node:NODE`, group `system:nodes`, what the
    Node authorizer and NodeRestriction expect); returns its name in `root`."""
    files = PkiFiles(root)
    name = f"node-{node}"
    if not files.cert(name).exists():
        stamp = datetime.datetime.now(datetime.UTC) if now is None else now
        pair = issue(
            files.ca(), f"system:node:{node}", stamp, organizations=("system:nodes",), client=True
        )
        _write_pair(files, name, pair)
    return name


#: The operator's webhook serving certificate (every replica serves it, on one port).
WEBHOOK = "kondor-webhook"


def webhook_credentials(root: Path, now: datetime.datetime | None = None) -> str:
    """The operator's webhook serving certificate for 127.0.0.1, signed by the cluster CA
    (so every replica serves the one CA bundle the configuration names); returns its name."""
    files = PkiFiles(root)
    if not files.cert(WEBHOOK).exists():
        stamp = datetime.datetime.now(datetime.UTC) if now is None else now
        pair = issue(files.ca(), WEBHOOK, stamp, ip_addresses=("127.0.0.1",), server=True)
        _write_pair(files, WEBHOOK, pair)
    return WEBHOOK


def ensure_pki(root: Path, service_ip: str, now: datetime.datetime | None = None) -> PkiFiles:
    """Create the PKI under `root` unless it exists: a restart keeps certificates valid."""
    files = PkiFiles(root)
    stamp = datetime.datetime.now(datetime.UTC) if now is None else now
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not files.ca_cert.exists():
        ca = new_ca("kondor-devcluster-ca", stamp)
        files.ca_key.touch(mode=0o600)
        files.ca_key.write_bytes(ca.key_pem)
        files.ca_cert.write_bytes(ca.cert_pem)
    ca = files.ca()
    if not files.cert("apiserver").exists():
        serving = issue(
            ca,
            "kube-apiserver",
            stamp,
            dns_names=APISERVER_DNS_NAMES,
            ip_addresses=("127.0.0.1", service_ip),
            server=True,
        )
        _write_pair(files, "apiserver", serving)
    for user, groups in USERS.items():
        if not files.cert(user).exists():
            _write_pair(files, user, issue(ca, user, stamp, organizations=groups, client=True))
    for component, (user, groups) in COMPONENTS.items():
        if not files.cert(component).exists():
            pair = issue(ca, user, stamp, organizations=groups, client=True)
            _write_pair(files, component, pair)
    if not files.sa_private.exists():
        sa = new_service_account_key()
        files.sa_private.touch(mode=0o600)
        files.sa_private.write_bytes(sa.key_pem)
        files.sa_public.write_bytes(sa.cert_pem)
    return files
