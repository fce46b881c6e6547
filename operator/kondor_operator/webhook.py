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

It also holds the ExecutionJob and CodClaim admission webhooks (`register_job_admission`,
`register_cod_admission`): `kondor_core.jobs.admit_job` and `admit_cod_claim` decide. For
ExecutionJobs a mutating webhook sets `spec.owner` and refuses an invalid job on CREATE; a
validating one refuses changes to the owner, requests or runtime, and updates or deletions
by anyone but the job's owner, a cluster admin and the operator itself (docs/jobs.md, "The
ExecutionJob").

These webhooks are declared to kopf (which writes them into the configurations it manages)
but answered by the server itself (`Reviewer.answer`), not through kopf's handler machinery:
every submission passes through them, and kopf's per-request work (a memo, a diff, the
handler run on a worker thread, a JSON patch computed from the whole body) cost the operator
about 4 ms of CPU per job, most of a burst's operator time (issue 16).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
import ipaddress
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiohttp.web
import kopf
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kopf._cogs.structs.references import Resource
from kopf._core.engines.admission import build_webhooks
from kopf._core.intents.causes import WebhookType

from kondor_core.api import COD_CLAIMS, EXECUTION_JOBS, GROUP, VERSION
from kondor_core.fleet import admission_message, check_policy
from kondor_core.inputs import LIMITS
from kondor_core.jobs import Admission, Delegates, Requester, admit_job
from kondor_core.jobs.podsecurity import RESTRICTED, cluster_ceiling, spec_level
from kondor_core.startd.codadmission import admit_cod_claim

logger = logging.getLogger(__name__)

#: The ExecutionJob admission handlers' ids: kopf serves each at `/<id>` and names its
#: webhook `<id>.<configuration name>`; the chart's configurations use the same.
MUTATE_JOB_ID = "mutate-executionjob"
VALIDATE_JOB_ID = "validate-executionjob"
#: The CodClaim admission handlers' ids (served and named as the ExecutionJob ones).
MUTATE_COD_ID = "mutate-codclaim"
VALIDATE_COD_ID = "validate-codclaim"


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


#: The request's own fields, read from the AdmissionReview's text when it cannot be parsed.
#: They precede the object (Go writes AdmissionRequest's fields in order, `object` late).
_REVIEW_FIELDS = {
    key: re.compile(rf'"{key}"\s*:\s*"([^"\\]{{0,253}})"')
    for key in ("apiVersion", "uid", "name", "namespace")
}
_REVIEW_KIND = re.compile(r'"kind"\s*:\s*\{[^{}]*"kind"\s*:\s*"([A-Za-z]{1,63})"')


def refuse_unparsable(text: str) -> dict[str, Any] | None:
    """The AdmissionReview refusing a request whose JSON is nested too deep for Python's
    parser (the API server accepts 10,000 levels; `json` stops near 1,000): refused with the
    message `kondor_core.inputs.check_document` gives, instead of a 500 the user reads as an
    outage (and that failurePolicy Ignore would admit). None when the request names no uid."""
    head = text[: text.find('"object"')] if '"object"' in text else text[:4096]
    found = {key: pattern.search(head) for key, pattern in _REVIEW_FIELDS.items()}
    if found["uid"] is None:
        return None
    kind = _REVIEW_KIND.search(head)
    name = "/".join(
        match.group(1) for match in (found["namespace"], found["name"]) if match is not None
    )
    source = " ".join(part for part in (kind.group(1) if kind else "", name) if part)
    version = found["apiVersion"]
    return {
        "apiVersion": version.group(1) if version else "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": found["uid"].group(1),
            "allowed": False,
            "status": {
                "code": 422,
                "message": f"{source or 'the object'}: nested more than "
                f"{LIMITS.max_depth} levels deep",
            },
        },
    }


class ReviewError(ValueError):
    """The request is not an AdmissionReview (answered 400, as kopf answers one)."""


Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
#: A webhook's decision: (operation, requester, new object, old object) -> its Admission.
Admit = Callable[[str, Requester, Mapping[str, Any] | None, Mapping[str, Any] | None], Admission]


@dataclass(frozen=True)
class Reviewer:
    """One admission webhook Kondor answers itself: `admit` decides; a mutating webhook
    applies the Admission's merge patch, a validating one refuses with `unpatched` when the
    object still needs it (the mutating webhook that sets those fields did not run)."""

    admit: Admit
    mutating: bool
    unpatched: str = ""

    def decide(self, operation: str, userinfo: Mapping[str, Any], new: Any, old: Any) -> Admission:
        admission = self.admit(operation, Requester.of(userinfo), new, old)
        if admission.allowed and admission.patch and not self.mutating:
            return Admission(refusal=self.unpatched, forbidden=True)
        return admission

    def answer(self, review: Any) -> dict[str, Any]:
        """The AdmissionReview answering `review` (admission.k8s.io/v1): allowed, with the
        patch as a JSONPatch, or refused with the message and code the user reads."""
        request = review.get("request") if isinstance(review, Mapping) else None
        if not isinstance(request, Mapping) or not isinstance(request.get("userInfo"), Mapping):
            raise ReviewError("the AdmissionReview has no request or no userInfo")
        new, old = request.get("object"), request.get("oldObject")
        admission = self.decide(str(request.get("operation") or ""), request["userInfo"], new, old)
        response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": admission.allowed}
        if admission.refusal is not None:
            code = 403 if admission.forbidden else 422
            response["status"] = {"code": code, "message": admission.refusal}
        elif admission.patch:
            patch = json_patch(new if isinstance(new, Mapping) else {}, admission.patch)
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode("ascii")
            response["patchType"] = "JSONPatch"
        return {
            "apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
            "kind": "AdmissionReview",
            "response": response,
        }

    def handler(self) -> Callable[..., None]:
        """The same decision as a kopf handler, for kopf's own servers and tunnels."""

        def handle(
            userinfo: kopf.UserInfo,
            patch: kopf.Patch,
            operation: str | None = None,
            new: kopf.Body | None = None,
            old: kopf.Body | None = None,
            **_: Any,
        ) -> None:
            admission = self.decide(operation or "", userinfo, new, old)
            if admission.refusal is not None:
                code = 403 if admission.forbidden else 422
                raise kopf.AdmissionError(admission.refusal, code=code)
            patch.update(admission.patch)

        return handle


def json_patch(body: Mapping[str, Any], merge: Mapping[str, Any], at: str = "") -> list[Any]:
    """The RFC 6902 JSON patch doing to `body` what the merge patch `merge` (RFC 7386) does:
    a key `body` lacks is added whole, a nested mapping is descended, None removes."""
    operations: list[Any] = []
    for key, value in merge.items():
        path = f"{at}/{key.replace('~', '~0').replace('/', '~1')}"
        present = key in body
        if value is None:
            if present:
                operations.append({"op": "remove", "path": path})
        elif isinstance(value, Mapping) and present and isinstance(body[key], Mapping):
            operations += json_patch(body[key], value, path)
        else:
            operations.append({"op": "replace" if present else "add", "path": path, "value": value})
    return operations


#: The webhooks the server answers itself, by webhook id (filled at registration).
Reviewers = MutableMapping[str, Reviewer]


class BoundedWebhookServer(kopf.WebhookServer):
    """kopf's server, answering Kondor's own webhooks directly (`reviewers`) and refusing
    with a message a request nested too deep to parse."""

    def __init__(self, reviewers: Mapping[str, Reviewer] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reviewers: Mapping[str, Reviewer] = reviewers if reviewers is not None else {}

    async def _serve(  # type: ignore[override]  # kopf's is a staticmethod called on self
        self, fn: kopf.WebhookFn, request: aiohttp.web.Request
    ) -> aiohttp.web.Response:
        reviewer = self.reviewers.get(request.match_info.get("id", ""))
        try:
            if reviewer is None:
                return await kopf.WebhookServer._serve(fn, request)
            review = json.loads(await request.text())
        except RecursionError:  # from json.loads: aiohttp keeps the body, so read it again
            refusal = refuse_unparsable(await request.text())
            if refusal is None:
                raise aiohttp.web.HTTPBadRequest(reason="the request is nested too deep") from None
            return aiohttp.web.json_response(refusal)
        except json.JSONDecodeError as error:  # ours: kopf's path answers its own
            raise aiohttp.web.HTTPBadRequest(reason=str(error)) from None
        try:
            return aiohttp.web.json_response(reviewer.answer(review))
        except ReviewError as error:
            raise aiohttp.web.HTTPBadRequest(reason=str(error)) from None


class ServiceWebhookServer(BoundedWebhookServer):
    """kopf's server, announced to the API server as a Service instead of a URL."""

    def __init__(self, service: ServiceRef, **kwargs: Any) -> None:
        super().__init__(**kwargs)
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


def build_server(
    options: WebhookOptions, reviewers: Mapping[str, Reviewer] | None = None
) -> kopf.WebhookServer:
    """The server for `options`, making a self-signed certificate if none was given; it
    answers the webhooks in `reviewers` itself."""
    host = options.host or ("127.0.0.1" if options.addr in ("", "0.0.0.0") else options.addr)
    cert, key = options.cert, options.key
    if cert is None or key is None:
        directory = Path(tempfile.mkdtemp(prefix="kondor-webhook-"))
        cert, key = self_signed(host, directory)
    if options.service is not None:
        return ServiceWebhookServer(
            options.service,
            reviewers=reviewers,
            addr=options.addr,
            port=options.port,
            certfile=cert,
            pkeyfile=key,
            cafile=options.ca,
        )
    return BoundedWebhookServer(
        reviewers,
        addr=options.addr,
        port=options.port,
        host=host,
        certfile=cert,
        pkeyfile=key,
        cafile=options.ca,
    )


def register_job_admission(
    registry: kopf.OperatorRegistry,
    reviewers: Reviewers | None = None,
    *,
    connection: kopf.ConnectionInfo | None = None,
    fails_closed: bool = False,
    pod_security: Callable[[], str] | None = None,
) -> None:
    """Register the ExecutionJob mutating (CREATE: the owner set, an invalid job refused) and
    validating (UPDATE, DELETE) webhooks. A new job is checked by the mutating one, so a
    submission costs one webhook call (issue 16). The operator's own user (from
    `connection`) may act for others, as cluster admins and Kubernetes' controllers may
    (`kondor_core.jobs.Delegates`). A new pod job may ask for no more than `pod_security()`
    (a `PodSecurityCeiling`; without one, Pod Security `restricted`), asked only for pod jobs.

    `fails_closed` is the webhooks' failurePolicy. Ignore admits every job while the operator
    is down, owner included: a cluster that relies on `spec.owner` should choose Fail.
    """
    delegates = Delegates().with_users(operator_user(connection))

    def admit(operation: str, requester: Requester, new: Any, old: Any) -> Admission:
        level = RESTRICTED
        if pod_security is not None and operation == "CREATE" and _is_pod_job(new):
            level = pod_security()
        return admit_job(operation, requester, new, old, delegates=delegates, pod_security=level)

    declare = _declarer(registry, reviewers, EXECUTION_JOBS, fails_closed)
    declare(MUTATE_JOB_ID, ["CREATE"], Reviewer(admit, mutating=True))
    declare(VALIDATE_JOB_ID, ["UPDATE", "DELETE"], Reviewer(admit, mutating=False))


def _is_pod_job(job: Any) -> bool:
    spec = job.get("spec") if isinstance(job, Mapping) else None
    return isinstance(spec, Mapping) and spec.get("pod") is not None


class PodSecurityCeiling:
    """The most any SlotPolicy of the cluster lets a pod job ask for: what admission allows
    a job that has no node yet (`kondor_core.jobs.podsecurity.cluster_ceiling`; the node's
    agent checks again against its own SlotPolicy). Read from the API server (`list_policies`)
    at most once every `ttl` seconds and only for pod jobs, in whichever replica answers, so
    a SlotPolicy applied a moment ago counts within `ttl`; when the listing fails, the last
    level read (restricted before any), so an outage never allows more."""

    def __init__(
        self,
        list_policies: Callable[[], Sequence[Mapping[str, Any]]],
        *,
        ttl: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.list_policies = list_policies
        self.ttl = ttl
        self.clock = clock
        self._level: str | None = None
        self._read_at = 0.0

    def __call__(self) -> str:
        now = self.clock()
        if self._level is not None and now - self._read_at < self.ttl:
            return self._level
        try:
            policies = self.list_policies()
        except Exception as error:  # the API server's or the network's: keep the last level
            logger.warning("cannot list SlotPolicies for pod jobs' Pod Security: %s", error)
            return self._level or RESTRICTED
        self._level = cluster_ceiling(
            spec_level(spec)
            for policy in policies
            if isinstance(spec := policy.get("spec"), Mapping)
        )
        self._read_at = now
        return self._level


def register_cod_admission(
    registry: kopf.OperatorRegistry,
    reviewers: Reviewers | None = None,
    *,
    connection: kopf.ConnectionInfo | None = None,
    fails_closed: bool = False,
) -> None:
    """Register the CodClaim mutating (CREATE: `spec.owner` and the execution point's label)
    and validating (CREATE, UPDATE, DELETE: a valid spec, an inline job ad naming no other
    Owner, only the owner or a delegate acting on it) webhooks: `admit_cod_claim` decides."""
    delegates = Delegates().with_users(operator_user(connection))

    def admit(operation: str, requester: Requester, new: Any, old: Any) -> Admission:
        return admit_cod_claim(operation, requester, new, old, delegates=delegates)

    def set_owner(operation: str, requester: Requester, new: Any, old: Any) -> Admission:
        # The validating webhook refuses an invalid claim; this one only sets the fields.
        return Admission(admit(operation, requester, new, old).patch)

    declare = _declarer(registry, reviewers, COD_CLAIMS, fails_closed)
    declare(MUTATE_COD_ID, ["CREATE"], Reviewer(set_owner, mutating=True))
    declare(
        VALIDATE_COD_ID,
        ["CREATE", "UPDATE", "DELETE"],
        Reviewer(
            admit,
            mutating=False,
            unpatched="the CodClaim's owner and execution point label are set at admission "
            "and the webhook that sets them did not run; try again",
        ),
    )


def _declarer(
    registry: kopf.OperatorRegistry, reviewers: Reviewers | None, plural: str, fails_closed: bool
) -> Callable[[str, list[Operation], Reviewer], None]:
    """`declare(id, operations, reviewer)`: the webhook `id` on `plural`, declared to kopf (for
    the configurations it manages) and to the server (which answers it)."""

    def declare(id: str, operations: list[Operation], reviewer: Reviewer) -> None:
        on = kopf.on.mutate if reviewer.mutating else kopf.on.validate
        handler = on(
            GROUP,
            VERSION,
            plural,
            id=id,
            operations=operations,
            ignore_failures=not fails_closed,
            registry=registry,
        )
        handler(reviewer.handler())
        if reviewers is not None:
            reviewers[id] = reviewer

    return declare


#: The webhooks that set `spec.owner`: failurePolicy Fail whatever `--webhook-failure-policy`
#: says (a job the webhook cannot see is refused, never admitted without its owner).
OWNER_WEBHOOKS = (MUTATE_JOB_ID, MUTATE_COD_ID)


def owner_match_conditions(operator: str | None) -> list[dict[str, str]]:
    """The owner-setting webhooks' matchConditions beside the owner admission policy: the
    webhook is not called for an object whose spec.owner the policy refuses anyway, so that
    the policy's message answers it, with the operator up or down (the chart's
    `kondor.ownerWebhookMatch`; tests/unit/chart compares the two)."""
    delegates = Delegates().with_users(operator)  # who may name another owner
    users = ", ".join(f"'{user}'" for user in sorted(delegates.users))
    groups = ", ".join(f"'{group}'" for group in sorted(delegates.groups))
    return [
        {
            "name": "not-refused-by-the-owner-policy",
            "expression": "!has(object.spec) || !has(object.spec.owner) "
            "|| object.spec.owner == request.userInfo.username "
            f"|| request.userInfo.username in [{users}] "
            f"|| request.userInfo.groups.exists(g, g in [{groups}])",
        }
    ]


_RESOURCES = (
    Resource(GROUP, VERSION, "slotpolicies", kind="SlotPolicy", namespaced=False),
    Resource(GROUP, VERSION, EXECUTION_JOBS, kind="ExecutionJob", namespaced=True),
    Resource(GROUP, VERSION, COD_CLAIMS, kind="CodClaim", namespaced=True),
)


def webhook_configurations(
    name: str,
    registry: kopf.OperatorRegistry,
    client_config: kopf.WebhookClientConfig,
    *,
    operator: str | None = None,
    owner_policy: bool = False,
) -> dict[str, dict[str, Any]]:
    """The Validating- and MutatingWebhookConfiguration `name` for the webhooks declared on
    `registry`, as kopf builds them, with the owner-setting webhooks failing closed and, with
    the owner admission policy installed (`owner_policy`), its matchConditions."""
    handlers = registry._webhooks.get_all_handlers()
    configurations = {}
    for kind, reason in (
        ("ValidatingWebhookConfiguration", WebhookType.VALIDATING),
        ("MutatingWebhookConfiguration", WebhookType.MUTATING),
    ):
        webhooks = build_webhooks(
            [handler for handler in handlers if handler.reason == reason],
            resources=_RESOURCES,
            name_suffix=name,
            client_config=client_config,
        )
        for webhook in webhooks:
            if webhook["name"].removesuffix("." + name) in OWNER_WEBHOOKS:
                webhook["failurePolicy"] = "Fail"
                if owner_policy:
                    webhook["matchConditions"] = owner_match_conditions(operator)
        configurations[kind] = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": name},
            "webhooks": webhooks,
        }
    return configurations


class Standby:
    """kopf's `settings.admission.server` where the process serves the webhooks itself, in
    every replica from its start (`serve`): kopf starts no server of its own and announces
    nothing (the configurations are the operator's, `webhook_configurations`)."""

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        await asyncio.Event().wait()  # until kopf stops and cancels it
        yield kopf.WebhookClientConfig()  # pragma: no cover  (never reached)


async def _unknown_webhook(*_: Any, **__: Any) -> Any:
    raise kopf.AdmissionError("no such Kondor webhook", code=404)


async def serve(
    server: kopf.WebhookServer, configure: Callable[[kopf.WebhookClientConfig], None]
) -> None:
    """Serve the webhooks (every id is one of the server's reviewers) until cancelled; each
    client configuration the server announces is handed to `configure` (on a thread)."""
    async for client_config in server(_unknown_webhook):
        await asyncio.to_thread(configure, client_config)


def admit_slot_policy(
    operation: str, requester: Requester, new: Any, old: Any, *, checks: Mapping[str, Any]
) -> Admission:
    """A SlotPolicy create or update: refused (422) with the field, the value and classad2's
    message when the policy is invalid (`kondor_core.fleet.check_policy`)."""
    body = new if isinstance(new, Mapping) else {}
    spec = body.get("spec")
    name = str((body.get("metadata") or {}).get("name") or "")
    checked = check_policy(dict(spec) if isinstance(spec, Mapping) else {}, **checks)
    if not checked.valid:
        return Admission(refusal=admission_message(name, checked))
    return Admission()


def hook_checks(environ: Mapping[str, str]) -> dict[str, Any]:
    """How SlotPolicy admission checks hook programs: against KONDOR_HOOKS_DIR, the agents'
    hooks directory as the operator sees it (the same volume mounted), with symlinks resolved
    there, so that one leading out of it is refused at `kubectl apply`; without it, lexically
    against the default /etc/kondor/hooks (the agents check symlinks again)."""
    hooks_dir = environ.get("KONDOR_HOOKS_DIR", "").strip()
    if not hooks_dir:
        return {}
    return {"hooks_dir": hooks_dir, "resolve": os.path.realpath}


def operator_user(connection: kopf.ConnectionInfo | None) -> str | None:
    """The user the API server sees the operator as: a service account token's subject, or
    a client certificate's common name; None when neither says."""
    if connection is None:
        return None
    if connection.token:
        return token_subject(connection.token)
    if connection.certificate_path:
        try:
            cert = x509.load_pem_x509_certificate(
                Path(os.fsdecode(connection.certificate_path)).read_bytes()
            )
        except (OSError, ValueError):
            return None
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        return str(names[0].value) if names else None
    return None


def token_subject(token: str) -> str | None:
    """The `sub` claim of a JWT (a service account token names
    `system:serviceaccount:NAMESPACE:NAME`), read without verifying it: the API server did
    that when it authenticated the operator, and the claim only names who we are."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (binascii.Error, ValueError):
        return None
    subject = claims.get("sub") if isinstance(claims, dict) else None
    return subject if isinstance(subject, str) and subject else None
