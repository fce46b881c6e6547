"""`kondor-operator`: the kopf operator that keeps one ExecutionPoint per selected node and
runs the pool's schedd and negotiator (kondor_operator.negotiator).

    kondor-operator [--kubeconfig PATH] [--context NAME] [--namespace NS]
                    [--webhook-addr A] [--webhook-host H] [--webhook-port N]
                    [--webhook-cert F --webhook-key F] [--webhook-ca F]
                    [--webhook-service NS/NAME[:PORT]] [--webhook-configuration NAME]
                    [--webhook-failure-policy Ignore|Fail]
                    [--no-webhook] [--metrics-port N]
                    [--leader-election | --no-leader-election] [--leader-election-*]
                    [--kube-qps N] [--kube-burst N] [--write-concurrency N]

Every flag has an environment variable (`KONDOR_` + the flag in upper case with
`_`, for example KONDOR_WEBHOOK_PORT) for the Helm chart; a flag wins over its
variable. The namespace (of the leader Lease) defaults to $POD_NAMESPACE.

Only one replica acts at a time: before kopf starts, the process takes the
Lease `--leader-election-lease` in `--namespace` (see kondor_operator.leader);
it stops handling and exits when it loses it, and releases it on SIGTERM.

Its requests to the API server are paced as client-go's are (`--kube-qps`,
`--kube-burst`), and a pass writes up to `--write-concurrency` ExecutionPoints at once
(the negotiator as many ExecutionJobs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf

from kondor_kube import managers, paths
from kondor_kube.client import Client
from kondor_kube.config import ApiClient, Configuration, bearer_token, load
from kondor_kube.errors import KubeError
from kondor_kube.pacer import Pacer
from kondor_kube.reflector import Reflector
from kondor_operator import cordon, defrag, handlers, negotiator, power
from kondor_operator.epwatch import (
    ExecutionPointChanges,
    ExecutionPointWatch,
    Listener,
    on_loop,
)
from kondor_operator.jobwatch import JobChanges, JobWatch
from kondor_operator.jobwatch import Listener as JobListener
from kondor_operator.kube import Kube, default_identity
from kondor_operator.leader import KubeLeases, LeaderElector, LeaseTimings
from kondor_operator.metrics import Metrics
from kondor_operator.reconciler import Reconciler
from kondor_operator.webhook import (
    Reviewer,
    ServiceRef,
    Standby,
    WebhookOptions,
    build_server,
    operator_user,
    serve,
    webhook_configurations,
)

logger = logging.getLogger("kondor_operator")

DEFAULT_WEBHOOK_CONFIGURATION = "kondor-operator.kondor.io"
DEFAULT_LEASE = "kondor-operator"


@dataclass(frozen=True)
class Options:
    kubeconfig: Path | None
    context: str | None
    namespace: str
    webhook: WebhookOptions | None
    webhook_configuration: str
    webhook_failure_policy: str
    metrics_port: int
    metrics_addr: str
    leader_election: bool
    lease: str
    identity: str
    timings: LeaseTimings
    resync: float
    verbose: bool
    kube_qps: float = 200.0
    kube_burst: int = 400
    write_concurrency: int = 16
    admission_policies: bool = False


def _env(flag: str, default: str | None = None) -> str | None:
    return os.environ.get("KONDOR_" + flag.upper().replace("-", "_"), default)


def _flag_bool(flag: str, default: bool) -> bool:
    value = _env(flag)
    return default if value is None else value.lower() not in ("", "0", "false", "no")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kondor-operator",
        description="Keep one ExecutionPoint per node a SlotPolicy selects; validate SlotPolicies.",
    )
    add = p.add_argument
    add(
        "--kubeconfig",
        type=Path,
        default=_env("kubeconfig"),
        help="kubeconfig (default $KUBECONFIG, else in-cluster, else ~/.kube/config)",
    )
    add("--context", default=_env("context"), help="kubeconfig context")
    add(
        "--namespace",
        default=_env("namespace") or os.environ.get("POD_NAMESPACE") or "default",
        help="namespace of the leader Lease (default $POD_NAMESPACE, else default)",
    )
    web = p.add_argument_group("admission webhook")
    web.add_argument(
        "--webhook",
        action=argparse.BooleanOptionalAction,
        default=_flag_bool("webhook", True),
        help="serve the SlotPolicy validating webhook (default on)",
    )
    web.add_argument("--webhook-addr", default=_env("webhook-addr", "127.0.0.1"))
    web.add_argument("--webhook-host", default=_env("webhook-host"), help="host in the URL")
    web.add_argument("--webhook-port", type=int, default=int(_env("webhook-port", "9443") or 0))
    web.add_argument("--webhook-cert", type=Path, default=_env("webhook-cert"))
    web.add_argument("--webhook-key", type=Path, default=_env("webhook-key"))
    web.add_argument("--webhook-ca", type=Path, default=_env("webhook-ca"), help="CA bundle")
    web.add_argument(
        "--webhook-service",
        default=_env("webhook-service"),
        help="NAMESPACE/NAME[:PORT]: announce the webhook as this Service, not a URL",
    )
    web.add_argument(
        "--webhook-configuration",
        default=_env("webhook-configuration", DEFAULT_WEBHOOK_CONFIGURATION),
        help="the ValidatingWebhookConfiguration kopf manages; '' to manage none",
    )
    web.add_argument(
        "--webhook-failure-policy",
        choices=("Ignore", "Fail"),
        default=_env("webhook-failure-policy", "Ignore"),
        help="when the webhook cannot be reached: Ignore (admit; status reports an invalid "
        "policy) or Fail (refuse every SlotPolicy write). Default Ignore",
    )
    web.add_argument(
        "--admission-policies",
        action=argparse.BooleanOptionalAction,
        default=_flag_bool("admission-policies", False),
        help="the chart's owner ValidatingAdmissionPolicy is installed: the owner-setting "
        "webhooks of the configuration the operator writes are not called for what it "
        "refuses (default off)",
    )
    met = p.add_argument_group("metrics")
    met.add_argument(
        "--metrics-port",
        type=int,
        default=int(_env("metrics-port", "8080") or 0),
        help="Prometheus /metrics port; 0 turns it off (default 8080)",
    )
    met.add_argument("--metrics-addr", default=_env("metrics-addr", "0.0.0.0"))
    lead = p.add_argument_group("leader election (coordination.k8s.io/v1 Lease)")
    lead.add_argument(
        "--leader-election",
        action=argparse.BooleanOptionalAction,
        default=_flag_bool("leader-election", True),
        help="default on",
    )
    lead.add_argument(
        "--leader-election-lease", default=_env("leader-election-lease", DEFAULT_LEASE)
    )
    lead.add_argument(
        "--leader-election-identity",
        default=_env("leader-election-identity"),
        help="this replica's name (default host name plus a random suffix)",
    )
    defaults = LeaseTimings()
    for name, value in (
        ("lease-duration", defaults.duration),
        ("renew-deadline", defaults.renew_deadline),
        ("retry-period", defaults.retry_period),
    ):
        lead.add_argument(
            f"--leader-election-{name}",
            type=float,
            default=float(_env(f"leader-election-{name}", str(value)) or value),
            metavar="SECONDS",
        )
    add(
        "--resync",
        type=float,
        default=float(_env("resync", "30") or 30),
        help="seconds between full passes (heartbeats go stale without events)",
    )
    api = p.add_argument_group("API client")
    api.add_argument(
        "--kube-qps",
        type=float,
        default=float(_env("kube-qps", "200") or 0),
        help="requests a second to the API server once the burst is spent, as client-go's "
        "QPS; 0 for no limit (default 200)",
    )
    api.add_argument(
        "--kube-burst",
        type=int,
        default=int(_env("kube-burst", "400") or 1),
        help="requests at once before --kube-qps applies (default 400)",
    )
    api.add_argument(
        "--write-concurrency",
        type=int,
        default=int(_env("write-concurrency", "16") or 1),
        help="ExecutionPoints a reconcile pass, and ExecutionJobs the negotiator, writes at "
        "once (default 16)",
    )
    add("-v", "--verbose", action="store_true", default=_flag_bool("verbose", False))
    return p


def parse_options(argv: Sequence[str] | None = None) -> Options:
    p = parser()
    args = p.parse_args(argv)
    timings = LeaseTimings(
        args.leader_election_lease_duration,
        args.leader_election_renew_deadline,
        args.leader_election_retry_period,
    )
    problems = timings.problems() if args.leader_election else []
    if args.kube_qps < 0 or args.kube_burst < 1 or args.write_concurrency < 1:
        problems.append("--kube-qps is at least 0, --kube-burst and --write-concurrency at least 1")
    if (args.webhook_cert is None) != (args.webhook_key is None):
        problems.append("--webhook-cert and --webhook-key go together")
    service = None
    if args.webhook_service:
        try:
            service = ServiceRef.parse(args.webhook_service)
        except ValueError as error:
            problems.append(str(error))
    if problems:
        p.error("; ".join(problems))
    webhook = (
        WebhookOptions(
            addr=args.webhook_addr,
            port=args.webhook_port,
            host=args.webhook_host,
            cert=args.webhook_cert,
            key=args.webhook_key,
            ca=args.webhook_ca,
            service=service,
        )
        if args.webhook
        else None
    )
    return Options(
        kubeconfig=args.kubeconfig,
        context=args.context,
        namespace=args.namespace,
        webhook=webhook,
        webhook_configuration=args.webhook_configuration,
        webhook_failure_policy=args.webhook_failure_policy,
        metrics_port=args.metrics_port,
        metrics_addr=args.metrics_addr,
        leader_election=args.leader_election,
        lease=args.leader_election_lease,
        identity=args.leader_election_identity or default_identity(),
        timings=timings,
        resync=args.resync,
        verbose=args.verbose,
        kube_qps=args.kube_qps,
        kube_burst=args.kube_burst,
        write_concurrency=args.write_concurrency,
        admission_policies=args.admission_policies,
    )


def connection_info(configuration: Configuration) -> kopf.ConnectionInfo:
    """kopf's credentials from the same configuration the writes use."""
    scheme, token = bearer_token(configuration)
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        username=configuration.username or None,
        password=configuration.password or None,
        scheme=scheme,
        token=token,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
    )


def kopf_settings(
    options: Options, reviewers: Mapping[str, Reviewer] | None = None
) -> kopf.OperatorSettings:
    """kopf's settings; its webhook server answers the webhooks in `reviewers` itself."""
    settings = kopf.OperatorSettings()
    settings.peering.standalone = True  # our Lease elects the one replica, not kopf's peering
    settings.posting.level = logging.WARNING  # our own Events say what changed
    if options.webhook is not None:
        # Every replica serves the webhooks from its start (`run`), leading or not, and
        # writes the configurations itself: kopf serves and manages nothing.
        settings.admission.server = Standby()
        settings.admission.managed = None
    return settings


def apply_webhook_configurations(
    api_client: ApiClient, configurations: Mapping[str, Mapping[str, Any]]
) -> None:
    """Server-side apply of the operator's webhook configurations (every replica writes the
    same, as one field manager, so none undoes another's)."""
    writer = Client(api_client, field_manager=managers.WEBHOOKS)
    for kind, body in configurations.items():
        plural = (
            "validatingwebhookconfigurations"
            if kind == "ValidatingWebhookConfiguration"
            else "mutatingwebhookconfigurations"
        )
        name = body["metadata"]["name"]
        writer.apply(paths.group("admissionregistration.k8s.io/v1", plural, name), body)


def fan_out(
    loop: asyncio.AbstractEventLoop,
    reconciler: Reconciler,
    schedd: negotiator.Negotiator,
    follower: power.PowerFollower,
) -> list[Listener]:
    """Where the ExecutionPoint watch's changes go: the reconciler (touched for a name whose
    view changed) and the negotiator (the parsed ExecutionPoint's offers) on the event loop,
    power's follower on its own thread."""

    def on_the_loop(changes: ExecutionPointChanges) -> None:
        for name, change in changes.items():
            if change.entry_changed:
                reconciler.touch(name)
            schedd.execution_point_changed(name, change.point)

    def to_power(changes: ExecutionPointChanges) -> None:
        follower.offer([change.power_change() for change in changes.values()])

    return [on_loop(loop, on_the_loop), to_power]


def jobs_on_loop(loop: asyncio.AbstractEventLoop, schedd: negotiator.Negotiator) -> JobListener:
    """The job watch's changes, handed to the negotiator on the event loop."""

    def hand_over(changes: JobChanges) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the operator stops
            loop.call_soon_threadsafe(schedd.jobs_changed, changes)

    return hand_over


async def _synced(watches: Sequence[Reflector]) -> None:
    """Until every watch's first listing is in its table (a thread waits a second at a
    time, so that cancelling this leaves none waiting)."""
    for watch in watches:
        while not await asyncio.to_thread(watch.synced.wait, 1.0):
            pass


async def run(options: Options) -> int:
    """Run until SIGTERM/SIGINT (0), until leadership is lost (1), or until kopf fails (2)."""
    # A connection each for the writer threads, the negotiator's, defrag, the Node and
    # ExecutionPoint watches, power's follower and the Lease.
    connection = load(
        options.kubeconfig, options.context, connections=2 * options.write_concurrency + 7
    )
    configuration = connection.configuration
    api_client = connection.api_client()
    metrics = Metrics()
    if options.metrics_port:
        metrics.serve(options.metrics_port, options.metrics_addr)
    pacer = Pacer(options.kube_qps, options.kube_burst)
    kube = Kube(api_client, instance=options.identity, pacer=pacer)
    reconciler = Reconciler(
        kube, metrics, resync=options.resync, concurrency=options.write_concurrency
    )
    schedd = negotiator.Negotiator(
        Kube(
            api_client,
            instance=options.identity,
            pacer=pacer,
            field_manager=managers.NEGOTIATOR,
        ),
        metrics,
        write_concurrency=options.write_concurrency,
    )
    marker = power.NodeMarker(Kube(api_client, instance=options.identity, pacer=pacer))
    follower = power.PowerFollower(marker)
    loop = asyncio.get_running_loop()
    points = ExecutionPointWatch(kube, fan_out(loop, reconciler, schedd, follower))
    queue = JobWatch(kube, jobs_on_loop(loop, schedd))
    registry = kopf.OperatorRegistry()
    reviewers: dict[str, Reviewer] = {}
    handlers.register(
        registry,
        reconciler,
        kube,
        points,
        connection=connection_info(configuration),
        webhook=options.webhook is not None,
        webhook_fails_closed=options.webhook_failure_policy == "Fail",
        reviewers=reviewers,
        slot_policies=kube.list_slot_policies,
    )
    negotiator.register(registry, schedd, queue, points)
    defragger = defrag.Defrag(
        schedd,
        Kube(api_client, instance=options.identity, pacer=pacer, field_manager=managers.DEFRAG),
    )
    defrag.register(registry, defragger)
    cordons = cordon.CordonDrains(
        schedd,
        cordon.KubeCordon(api_client),
        Kube(api_client, instance=options.identity, pacer=pacer),
    )
    cordon.register(registry, cordons)

    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    def on_leadership(leading: bool) -> None:
        metrics.set_leader(leading)
        schedd.set_leading(leading)  # no job write once the Lease is lost
        defragger.set_leading(leading)
        marker.set_leading(leading)
        cordons.set_leading(leading)

    # Every replica answers admission from its start, waiting for the Lease or not.
    serving = None
    if options.webhook is not None:
        configure = configurer(options, registry, api_client, connection_info(configuration))
        server = build_server(options.webhook, reviewers)
        serving = asyncio.create_task(serve(server, configure), name="webhooks")
    try:
        elector = None
        if options.leader_election:
            elector = LeaderElector(
                KubeLeases(Client(api_client, field_manager=managers.LEADER)),
                namespace=options.namespace,
                name=options.lease,
                identity=options.identity,
                timings=options.timings,
                on_change=on_leadership,
            )
            metrics.set_leader(False)
            if not await elector.acquire(stop):
                return 0
        metrics.set_leader(True)

        # The ExecutionPoint and job watches write nothing; they start with the leadership.
        watch_stop = threading.Event()
        follower.start()
        points.start(watch_stop)
        queue.start(watch_stop)
        try:
            settings = kopf_settings(options, reviewers)
            return await _operate(settings, registry, (points, queue), stop, elector)
        finally:
            watch_stop.set()
            follower.close()
    finally:
        if serving is not None:
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)


def configurer(
    options: Options,
    registry: kopf.OperatorRegistry,
    api_client: ApiClient,
    connection: kopf.ConnectionInfo,
) -> Callable[[kopf.WebhookClientConfig], None]:
    """What to do with the client configuration the webhook server announces: write the
    configurations `--webhook-configuration` names (none with '': the chart ships them)."""
    operator = operator_user(connection)

    def configure(client_config: kopf.WebhookClientConfig) -> None:
        if not options.webhook_configuration:
            return
        configurations = webhook_configurations(
            options.webhook_configuration,
            registry,
            client_config,
            operator=operator,
            owner_policy=options.admission_policies,
        )
        try:
            apply_webhook_configurations(api_client, configurations)
        except (KubeError, OSError) as error:
            logger.error("writing the webhook configurations failed: %s", error)

    return configure


async def _operate(
    settings: kopf.OperatorSettings,
    registry: kopf.OperatorRegistry,
    watches: Sequence[Reflector],
    stop: asyncio.Event,
    elector: LeaderElector | None,
) -> int:
    """Hold the Lease; run kopf once the ExecutionPoint and job watches' first listings are
    in their tables (no handler sees part of the fleet or of the queue), until kopf stops (2
    when it failed, else 0), `stop` is set (0) or the Lease is lost (1)."""
    stopped = asyncio.create_task(stop.wait(), name="stop")
    ending: set[asyncio.Task[Any]] = {stopped}
    lost = None
    if elector is not None:
        lost = asyncio.create_task(elector.hold(), name="lease")
        ending.add(lost)
    syncing = asyncio.create_task(_synced(watches), name="executionpoints and jobs listed")
    done, _ = await asyncio.wait({syncing, *ending}, return_when=asyncio.FIRST_COMPLETED)
    outcome: object = None
    if syncing in done:
        kopf_stop = asyncio.Event()
        operator = asyncio.create_task(
            kopf.operator(
                registry=registry,
                settings=settings,
                clusterwide=True,
                standalone=True,
                stop_flag=kopf_stop,
            ),
            name="kopf",
        )
        # kopf installs its own SIGTERM/SIGINT handlers: a signal ends `operator`, not `stop`.
        done, _ = await asyncio.wait({operator, *ending}, return_when=asyncio.FIRST_COMPLETED)
        kopf_stop.set()
        [outcome] = await asyncio.gather(operator, return_exceptions=True)
    else:
        syncing.cancel()
        await asyncio.gather(syncing, return_exceptions=True)
    stopped.cancel()
    failed = isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError)
    if failed:
        logger.error("kopf stopped with an error: %r", outcome)
    if lost is not None and lost in done:
        logger.error("stepped down: leadership lost; exiting so that one replica acts")
        return 1
    if lost is not None:
        lost.cancel()
        await asyncio.gather(lost, return_exceptions=True)
    if elector is not None:
        await asyncio.to_thread(elector.release)
    return 2 if failed else 0


#: glibc's mallopt parameter for the number of malloc arenas (M_ARENA_MAX).
M_ARENA_MAX = -8


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Cap glibc's malloc arenas, as MALLOC_ARENA_MAX does: each writer thread would
    otherwise get an arena of its own, and the memory freed in it stays resident. False
    where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_ARENA_MAX, arenas))


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv)
    limit_malloc_arenas()
    kopf.configure(verbose=options.verbose)
    logging.getLogger("urllib3").setLevel(logging.INFO)  # one line per request is too many
    if not options.verbose:
        # kopf logs every index and event handler call at INFO: lines per ExecutionPoint
        # heartbeat, most of an idle operator's CPU at 1,000 nodes.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
        # aiohttp logs every admission request at INFO: a line per job submitted.
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    return asyncio.run(run(options))


if __name__ == "__main__":
    sys.exit(main())
