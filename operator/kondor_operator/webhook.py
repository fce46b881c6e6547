"""The admission webhook's server: kopf's WebhookServer, locally or behind a Service.

* Local development (the default): listen on 127.0.0.1 and let kopf register
  `https://127.0.0.1:PORT/...` in the ValidatingWebhookConfiguration it manages.
  Without `--webhook-cert`, a self-signed certificate for the host is made at
  start (with `cryptography`; kopf's own generator needs `certbuilder`) and is
  its own CA bundle.
* In a cluster (the Helm chart): `--webhook-cert/--webhook-key` from a mounted
  Secret (kopf re-reads them when they change), `--webhook-ca` for the bundle,
  `--webhook-addr 0.0.0.0`, and `--webhook-service NAMESPACE/NAME[:PORT]` so the
  configuration points at the Service rather than a URL. With
  `--webhook-configuration ''` kopf manages no configuration (the chart ships it).
"""

from __future__ import annotations

import datetime
import ipaddress
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import kopf
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class ServiceRef:
    namespace: str
    name: str
    port: int = 443

    @classmethod
    def parse(cls, text: str) -> ServiceRef:
        """`NAMESPACE/NAME` or `NAMESPACE/NAME:PORT`."""
        namespace, slash, rest = text.partition("/")
        name, colon, port = rest.partition(":")
        if not slash or not namespace or not name or (colon and not port.isdigit()):
            raise ValueError(
                f"--webhook-service: {text!r} is not NAMESPACE/NAME or NAMESPACE/NAME:PORT"
            )
        return cls(namespace, name, int(port) if colon else 443)


@dataclass(frozen=True)
class WebhookOptions:
    addr: str = "127.0.0.1"
    port: int = 9443
    host: str | None = None
    cert: Path | None = None
    key: Path | None = None
    ca: Path | None = None
    service: ServiceRef | None = None


def self_signed(host: str, directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate (its own CA) for `host`, written as tls.crt and tls.key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    try:
        san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        san = x509.DNSName(host)
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([san]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.touch(mode=0o600)
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class ServiceWebhookServer(kopf.WebhookServer):
    """kopf's server, announced to the API server as a Service instead of a URL."""

    def __init__(self, service: ServiceRef, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.service = service

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        async for announced in super().__call__(fn):
            config = kopf.WebhookClientConfig()
            if announced.get("caBundle"):
                config["caBundle"] = announced["caBundle"]
            config["service"] = kopf.WebhookClientConfigService(
                namespace=self.service.namespace,
                name=self.service.name,
                port=self.service.port,
                path=self.path or "/",
            )
            yield config


def build_server(options: WebhookOptions) -> kopf.WebhookServer:
    """The server for `options`, making a self-signed certificate if none was given."""
    host = options.host or ("127.0.0.1" if options.addr in ("", "0.0.0.0") else options.addr)
    cert, key = options.cert, options.key
    if cert is None or key is None:
        directory = Path(tempfile.mkdtemp(prefix="kondor-webhook-"))
        cert, key = self_signed(host, directory)
    if options.service is not None:
        return ServiceWebhookServer(
            options.service,
            addr=options.addr,
            port=options.port,
            certfile=cert,
            pkeyfile=key,
            cafile=options.ca,
        )
    return kopf.WebhookServer(
        addr=options.addr,
        port=options.port,
        host=host,
        certfile=cert,
        pkeyfile=key,
        cafile=options.ca,
    )
