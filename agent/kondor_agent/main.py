"""`kondor-agent`: one per node. Detects the machine, carves its slots under the SlotPolicy its
ExecutionPoint names, evaluates the startd policy every polling interval and publishes the
slot ads to the ExecutionPoint's status.

    kondor-agent --node-name NODE [--machine FILE] [--kubeconfig F] [--context C]
    kondor-agent --machine FILE --policy POLICY.yaml [--hooks-dir DIR] --oneshot --no-publish
    kondor-agent detect ...

With `--machine FILE` the node is simulated: the machine is the file, re-read when it
changes. Without it the machine is detected on the host (`kondor_agent.detect`).

Startd cron jobs run from `--hooks-dir` only; `--oneshot` runs each once (waiting up to
`--cron-timeout` seconds for it) and shows their attributes in the slot ads. RUNBENCHMARKS
runs the built-in Mips and KFlops benchmarks.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from kondor_agent.backfill import BackfillRunner, KubeBackfillPods
from kondor_agent.benchmarks import BenchmarkRunner, measure
from kondor_agent.cron import CronRunner
from kondor_agent.detect import FakeNvml, detect_machine
from kondor_agent.detect import register as register_detect
from kondor_agent.execute.cgroups import CgroupError, JobCgroups
from kondor_agent.gpu_isolation import GpuDeviceIsolation
from kondor_agent.gpu_usage import GpuWatch
from kondor_agent.hostsource import HostMachine
from kondor_agent.jobs import JobRunner, RuntimeLaunchers
from kondor_agent.loop import Agent, AgentConfig, LiveFacts, no_live_facts
from kondor_agent.machinefile import MachineFile, load
from kondor_agent.metrics import AgentMetrics
from kondor_agent.runtimes.process import ProcessJobs
from kondor_agent.runtimes.process_launcher import ProcessLauncher
from kondor_agent.services import (
    BackfillService,
    BenchmarkService,
    CodService,
    CronService,
    FetchService,
    JobService,
    NodeService,
)
from kondor_core import startd
from kondor_core.api import InvalidObjectError, Machine, ResolvedPolicy, SlotPolicy
from kondor_core.config import PolicyError, compile_policy
from kondor_core.cron import DEFAULT_HOOKS_DIR
from kondor_core.policy import ActionKind, BenchmarksDone, EngineError
from kondor_core.policy import Activity as EngineActivity
from kondor_core.slots import LayoutError

if TYPE_CHECKING:  # the client is imported only where the agent publishes
    from kondor_agent.kube import KubernetesAPI

log = logging.getLogger("kondor_agent")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kondor-agent",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME"),
        help="the node (and ExecutionPoint) this agent serves; default $NODE_NAME",
    )
    parser.add_argument("--machine", type=Path, help="machine description YAML (simulated node)")
    _gpu_arguments(parser)
    parser.add_argument(
        "--policy", type=Path, help="SlotPolicy manifest YAML (with --oneshot --no-publish)"
    )
    parser.add_argument("--oneshot", action="store_true", help="run one cycle and exit")
    parser.add_argument(
        "--no-publish", action="store_true", help="print the slot ads instead of publishing"
    )
    parser.add_argument("--kubeconfig", type=Path, help="default $KUBECONFIG, ~/.kube/config")
    parser.add_argument("--context", help="the kubeconfig context to use")
    parser.add_argument(
        "--polling-interval",
        type=float,
        help="seconds between policy evaluations (default: the policy's POLLING_INTERVAL, 5)",
    )
    parser.add_argument(
        "--update-interval",
        type=float,
        help="seconds between heartbeat writes when nothing changes (default: the policy's "
        "UPDATE_INTERVAL, 300)",
    )
    parser.add_argument(
        "--state-dir", type=Path, help="node-local state: the last status written (status.json)"
    )
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics on this port")
    parser.add_argument(
        "--host-root",
        type=Path,
        default=Path("/"),
        help="where the host's / is mounted, for detection (a DaemonSet mounts it at /host)",
    )
    parser.add_argument(
        "--execute-dir",
        type=Path,
        default=Path("/var/lib/kondor/execute"),
        help="the directory jobs run in; its size is the slots' disk",
    )
    parser.add_argument(
        "--cgroup-root",
        default="/kondor",
        help="the cgroup under which job cgroups are made, in every hierarchy (default /kondor); "
        "empty: none (jobs run without limits and are not frozen)",
    )
    parser.add_argument(
        "--hooks-dir",
        type=Path,
        default=Path(DEFAULT_HOOKS_DIR),
        help=(
            "startd cron executables and job hooks run from this directory only "
            f"(default {DEFAULT_HOOKS_DIR})"
        ),
    )
    parser.add_argument(
        "--cron-timeout",
        type=float,
        default=10.0,
        help="with --oneshot: seconds to wait for each startd cron job's output (default 10)",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    return parser


def _detect_command(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="kondor-agent")
    commands = parser.add_subparsers(dest="command", required=True)
    register_detect(commands)
    args = parser.parse_args(list(argv))
    return int(args.func(args) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["detect"]:
        return _detect_command(arguments)
    parser = build_parser()
    args = parser.parse_args(arguments)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.no_publish:
        if not args.oneshot or args.policy is None:
            parser.error("--no-publish runs one cycle offline: give --oneshot and --policy too")
        return _offline(args)
    if args.policy is not None:
        parser.error(
            "--policy is for --oneshot --no-publish; a publishing agent reads the "
            "SlotPolicy its ExecutionPoint names"
        )
    if not args.node_name:
        parser.error("--node-name is required (or set $NODE_NAME)")
    try:
        return _publish(args)
    except InvalidObjectError as err:
        print(f"kondor-agent: {err}", file=sys.stderr)
        return 2


def _gpu_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the agent finds GPUs when they are not the host's own (tests, the dev cluster)."""
    parser.add_argument(
        "--gpu-devices-root",
        type=Path,
        help="read the GPU device nodes (/dev/nvidiactl, /proc/driver/nvidia) under this "
        "directory, not the host root: stand-in device nodes for tests",
    )
    parser.add_argument(
        "--nvml-recording",
        type=Path,
        help="answer NVML from this recording (kondor_agent.detect.FakeNvml) instead of the "
        "host's libnvidia-ml: recorded GPUs on a host without any (the dev cluster's real node)",
    )


def _host(args: argparse.Namespace, read_node: Callable[[], Any]) -> HostMachine:
    name = args.node_name or socket.gethostname()
    nvml = _nvml(args)
    return HostMachine(
        node_name=name,
        root=args.host_root,
        execute_dir=args.execute_dir,
        read_node=read_node,
        clock=time.time,
        detect=detect_machine if nvml is None else functools.partial(detect_machine, nvml=nvml),
    )


def _nvml(args: argparse.Namespace) -> FakeNvml | None:
    """The recorded NVML --nvml-recording names; None: the host's own (pynvml)."""
    path = getattr(args, "nvml_recording", None)
    return None if path is None else FakeNvml.load(path)


def _machine_file(path: Path) -> tuple[Callable[[], Machine], LiveFacts]:
    source = MachineFile(path)
    source.read()  # a bad file fails now, with its name
    return source.read, no_live_facts


def _offline(args: argparse.Namespace) -> int:
    """One whole cycle without an API server; the slot ads as `kondor simulate -o json`."""
    try:
        if args.machine is not None:
            machines, live = _machine_file(args.machine)
        else:  # this host, without the Node's labels and allocatable (no API server)
            host = _host(args, lambda: None)
            machines, live = host.read, host.live
        machine = machines()
        policy = load(args.policy, SlotPolicy)
        assert isinstance(policy, SlotPolicy)
        now = time.time()
        ref = ResolvedPolicy(name=policy.metadata.name, generation=policy.metadata.generation or 0)
        node = startd.start(machine, compile_policy(policy.spec), now, applied=ref)
        for warning in node.warnings:
            print(f"warning: {args.policy}: {warning}", file=sys.stderr)
        if node.cron_jobs:
            runner = CronRunner(args.hooks_dir)
            runner.run_once(node.cron_jobs, node.cron_settings, timeout=args.cron_timeout)
            node = startd.with_cron_ads(node, runner.ads())
        facts = live(now)
        result = startd.tick(node, facts, now)
        node = result.startd
        if any(a.kind is ActionKind.RUN_BENCHMARKS for a in result.actions):
            node = startd.with_benchmarks(node, measure().attributes(now))
            done = {
                slot.name: [BenchmarksDone()]
                for slot in node.state.slots
                if slot.activity is EngineActivity.BENCHMARKING
            }
            node = startd.tick(node, facts, now, slot_events=done).startd
        ads = [ad.to_json() for ad in startd.published_ads(node, facts, now)]
    except (
        InvalidObjectError,
        PolicyError,
        LayoutError,
        EngineError,
        OSError,
    ) as err:
        print(f"kondor-agent: {err}", file=sys.stderr)
        return 2
    print(json.dumps({"slots": ads, "placements": []}, indent=2))
    return 0


class _StatusFile:
    """Keeps the last status written in the state directory (what `kubectl` would show)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        # The agent's own: jobs (never root) may cross it to their execute directory, where
        # it is inside, but neither list nor read it.
        os.chmod(directory, stat.S_IMODE(directory.stat().st_mode) & ~0o066)
        self.path = directory / "status.json"

    def save(self, status: Mapping[str, Any]) -> None:
        temporary = self.path.with_suffix(".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(status, indent=2) + "\n")
        temporary.replace(self.path)


def _publish(args: argparse.Namespace) -> int:
    """The agent against the API server: watch the node's objects, run its services, publish
    its ExecutionPoint's status until SIGTERM (one step with --oneshot)."""
    # Offline runs need no client.
    from kondor_agent.kube import KubernetesAPI, WatchedExecutionPoint  # noqa: PLC0415

    api = KubernetesAPI.connect(args.kubeconfig, args.context)
    if args.machine is not None:
        machines, live = _machine_file(args.machine)
    else:
        host = _host(args, lambda: api.read_node(args.node_name))
        machines, live = host.read, host.live
    metrics = AgentMetrics()
    if args.metrics_port is not None:
        metrics.serve(args.metrics_port)
    config = AgentConfig(
        node_name=args.node_name,
        polling_interval=args.polling_interval,
        update_interval=args.update_interval,
    )
    watched = WatchedExecutionPoint(api, args.node_name)
    node = _NodeServices(api, args)
    agent = Agent(config, watched, machines, live=live, metrics=metrics, services=node.services)
    node.start(wake=agent.wake)
    watched.on_change = agent.wake
    watched.start()
    if args.state_dir is not None:
        agent.on_written = _StatusFile(args.state_dir).save
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()
        agent.wake()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("kondor-agent for node %s", args.node_name)
    if args.oneshot:
        agent.step()
        node.cron.stop()
        return 0
    agent.run(stop)
    watched.stop()
    node.stop()
    agent.close()
    log.info("stopped")
    return 0


class _NodeServices:
    """The node's services as the agent runs them against the API server (jobs of both
    runtimes, COD, cron, benchmarks, backfill, fetch work), in the order the loop asks
    them, with the watches and threads they need."""

    def __init__(self, api: KubernetesAPI, args: argparse.Namespace) -> None:
        from kondor_agent.cod import CodRunner, WatchedCodClaims  # noqa: PLC0415
        from kondor_agent.fetchwork import (  # noqa: PLC0415
            FetchWork,
            HookCaller,
            KubernetesFetchAPI,
        )
        from kondor_agent.kube import WatchedJobs  # noqa: PLC0415
        from kondor_agent.runtimes.pod import PodLauncher  # noqa: PLC0415

        self.cron = CronRunner(args.hooks_dir)
        self.benchmarks = BenchmarkRunner()
        self.jobs = WatchedJobs(api, args.node_name)
        self.pods = PodLauncher(api, args.node_name, hooks_dir=args.hooks_dir)
        launcher = _process_launcher(args)
        processes = ProcessJobs(launcher)
        processes.gpu_watch = GpuWatch.open(_nvml(args))  # nothing measured without NVML
        runner = JobRunner(self.jobs, RuntimeLaunchers(process=processes, pod=self.pods), time.time)
        self.cod_claims = WatchedCodClaims(api, args.node_name)
        cod = CodRunner(self.cod_claims, launcher, args.node_name, clock=time.time)
        self.fetch = FetchWork(
            KubernetesFetchAPI(api.api_client), HookCaller(args.hooks_dir), args.node_name
        )
        runner.on_evict = self.fetch.evicted
        runner.on_hook_failure = self.fetch.hook_failed
        # Backfill processes are expendable: killed when the agent stops, or by the next agent.
        backfill = BackfillRunner(
            launcher.execute_dir / "backfill",
            launcher.cgroups,
            pods=KubeBackfillPods(api.api_client),
            node=args.node_name,
        )
        self.services: list[NodeService] = [
            CronService(self.cron),
            BenchmarkService(self.benchmarks),
            JobService(runner),
            BackfillService(backfill),
            CodService(cod, runner),
            FetchService(self.fetch, runner),
        ]

    def start(self, *, wake: Callable[[], None]) -> None:
        """Start the watches and the pods' thread; each change wakes the agent."""
        self.cron.on_update = self.benchmarks.on_done = self.fetch.on_done = wake
        self.pods.on_done = self.jobs.on_change = self.cod_claims.on_change = wake
        self.jobs.start()
        self.cod_claims.start()
        self.pods.start()

    def stop(self) -> None:
        """Stop the watches and the pods' thread (the services stop with `Agent.close`)."""
        self.jobs.stop()
        self.cod_claims.stop()
        self.pods.stop()


def _process_launcher(args: argparse.Namespace) -> ProcessLauncher:
    """Jobs run under the execute dir, in cgroups under the host's `/kondor` where this agent
    may create them, else without (said in the log: no limits, no freezing)."""
    try:
        if not args.cgroup_root:
            # Asked for none (the chart without agent.execution): whatever the host has.
            raise CgroupError("--cgroup-root is empty")
        cgroups = JobCgroups.open(args.host_root, root=args.cgroup_root)
    except (CgroupError, OSError) as err:
        log.warning("jobs run without cgroups: %s", err)
        cgroups = JobCgroups.disabled()
    log.info("job cgroups: %s", cgroups.describe())
    isolation = GpuDeviceIsolation.disabled()
    if cgroups.enabled:  # a job's other GPUs refused in its cgroups (v1 devices, v2 eBPF)
        isolation = GpuDeviceIsolation.open(
            args.host_root, root=args.cgroup_root, gpu_root=args.gpu_devices_root
        )
    log.info("GPU device isolation: %s", isolation)
    # Job hooks run from the same admin-controlled directory as startd cron jobs.
    return ProcessLauncher(
        args.execute_dir, cgroups, hooks_dir=args.hooks_dir, gpu_isolation=isolation
    )


if __name__ == "__main__":
    sys.exit(main())
