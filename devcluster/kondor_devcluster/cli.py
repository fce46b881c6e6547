"""`kondor dev-cluster up|down`: the command the demo, the tests and other tools depend on.

The `kondor` CLI loads this through the entry point group `kondor.commands`
(`dev-cluster = "kondor_devcluster.cli:register"`); `python -m kondor_devcluster` runs it alone.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import socket
import sys
import threading
import traceback
from pathlib import Path
from types import FrameType
from typing import TextIO, cast

from kondor_devcluster.build import BuildError
from kondor_devcluster.cluster import (
    SUPERVISOR,
    ClusterSpec,
    DevCluster,
    DevClusterError,
    read_supervisor,
    running_pids,
    stop_detached,
    write_supervisor,
)
from kondor_devcluster.components import Layout
from kondor_devcluster.kondor import agent_node
from kondor_devcluster.realnode import RealNodeError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `dev-cluster` (with `up` and `down`) to the `kondor` command."""
    parser = subparsers.add_parser(
        "dev-cluster",
        help="run a local Kubernetes control plane with simulated (kwok) nodes",
        description="A real kube-apiserver, etcd, controller manager and scheduler as local "
        "processes, and kwok nodes from machine files. Pods on those nodes are simulated.",
    )
    parser.set_defaults(func=lambda _args: _usage(parser))
    commands = parser.add_subparsers(dest="dev_cluster_command", metavar="{up,down,ps}")

    up = commands.add_parser("up", help="start a dev cluster (foreground unless --detach)")
    up.add_argument("--port", type=int, required=True, help="the API server's port on 127.0.0.1")
    up.add_argument(
        "--kubeconfig",
        type=Path,
        required=True,
        help="kubeconfig to write (contexts admin, alice, bob)",
    )
    up.add_argument(
        "--state-dir", type=Path, required=True, help="certificates, etcd data, logs, pids"
    )
    up.add_argument(
        "--nodes",
        type=Path,
        nargs="+",
        action="extend",
        default=[],
        metavar="MACHINE.yaml",
        help="machine files; each becomes a kwok-managed Node",
    )
    up.add_argument(
        "--operator",
        action="store_true",
        help="run the Kondor operator too (as admin; log in STATE/logs/kondor-operator.log)",
    )
    up.add_argument(
        "--agents",
        action="store_true",
        help="run one Kondor agent per simulated node, on its machine file "
        "(log in STATE/logs/kondor-agent-NODE.log)",
    )
    up.add_argument(
        "--real-node",
        nargs="?",
        const=socket.gethostname(),
        metavar="NAME",
        help="also run one real node on this host (containerd, runc, a kubelet; needs root): "
        "a Node named NAME (default: the host's name) labelled kondor.io/real-node=true",
    )
    up.add_argument(
        "--real-node-machine",
        type=Path,
        metavar="MACHINE.yaml",
        help="a machine file whose labels the real node gets (its facts are the host's)",
    )
    up.add_argument(
        "--image",
        type=Path,
        action="append",
        default=[],
        metavar="ARCHIVE.oci.tar",
        dest="images",
        help="an OCI image archive (`make image` writes one) imported into the real node's "
        "containerd before the node is Ready, so pods use it without a registry; repeatable",
    )
    up.add_argument(
        "--detach", action="store_true", help="return once ready; stop with `dev-cluster down`"
    )
    up.add_argument(
        "--cache-dir",
        type=Path,
        help="binaries cache; default $KONDOR_CACHE_DIR or ~/.cache/kondor",
    )
    up.set_defaults(func=up_command)

    down = commands.add_parser("down", help="stop a detached dev cluster, keeping its data")
    down.add_argument("--state-dir", type=Path, required=True)
    down.set_defaults(func=down_command)

    ps = commands.add_parser("ps", help="list a running dev cluster's processes")
    ps.add_argument("--state-dir", type=Path, required=True)
    ps.add_argument("-o", "--output", choices=("table", "json"), default="table")
    ps.set_defaults(func=ps_command)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def up_command(args: argparse.Namespace) -> int:
    spec = ClusterSpec(
        port=args.port,
        kubeconfig=args.kubeconfig.absolute(),
        state_dir=args.state_dir.absolute(),
        nodes=tuple(path.absolute() for path in args.nodes),
        cache_dir=args.cache_dir,
        operator=args.operator,
        agents=args.agents,
        real_node=args.real_node,
        real_node_machine=None
        if args.real_node_machine is None
        else args.real_node_machine.absolute(),
        images=tuple(path.absolute() for path in args.images),
    )
    if args.detach:
        return _detach(spec)
    return _serve(spec, sys.stderr)


#: The line a detached `up` sends its caller once the cluster is ready.
_READY = "\0ready\n"


class _Tee(io.TextIOBase):
    """The log of a detached `up`: its own log file, and its caller's terminal until ready."""

    def __init__(self, log: TextIO, caller: TextIO) -> None:
        self.log = log
        self.caller: TextIO | None = caller

    def write(self, text: str) -> int:
        self.log.write(text)
        if self.caller is not None:
            with contextlib.suppress(OSError):  # the caller was interrupted: log only
                self.caller.write(text)
        return len(text)

    def flush(self) -> None:
        self.log.flush()
        if self.caller is not None:
            with contextlib.suppress(OSError):
                self.caller.flush()

    def release(self, output: str) -> None:
        """Tell the caller the cluster is ready, with its standard output; stop writing to it."""
        self.log.write(output)
        if self.caller is not None:
            with contextlib.suppress(OSError):
                self.caller.write(_READY + output)
                self.caller.close()
            self.caller = None


def _detach(spec: ClusterSpec) -> int:
    """`up --detach`: the same `up` in a child of its own session, which keeps running the
    cluster (restarting dead agents as a DaemonSet would) until `down`; this process relays its
    progress and returns once the cluster is ready, with its exit code if it failed."""
    logs = Layout(spec.state_dir).logs
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{SUPERVISOR}.log"
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the cluster's `up`, detached from the caller's terminal
        code = 1
        try:
            os.close(read_end)
            os.setsid()
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            with log_path.open("ab") as log_file:
                os.dup2(log_file.fileno(), 1)
                os.dup2(log_file.fileno(), 2)
            tee = _Tee(sys.stderr, os.fdopen(write_end, "w", buffering=1))
            code = _serve(spec, cast(TextIO, tee), tee)
        except BaseException:  # the child must never return into the caller's code
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(write_end)
    ready = False
    try:
        with os.fdopen(read_end, errors="replace") as child:
            for line in child:
                if line == _READY:
                    ready = True
                    sys.stdout.write(child.read())
                    break
                sys.stderr.write(line)
                sys.stderr.flush()
    except KeyboardInterrupt:
        os.kill(pid, signal.SIGTERM)  # it stops what it started, as a foreground `up` does
        os.waitpid(pid, 0)
        return 130
    if ready:
        print(f"the cluster runs in process {pid}, which restarts dead agents (log {log_path})")
        return 0
    _pid, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) or 1


def _serve(spec: ClusterSpec, log: TextIO, tee: _Tee | None = None) -> int:
    """Start the cluster and run it until stopped (Ctrl-C, SIGTERM, `down`, a dead component).

    This process is the cluster's supervisor: `down` stops the cluster by stopping it.
    """
    layout = Layout(spec.state_dir)
    running = running_pids(layout)
    if running:
        print(
            f"error: a dev cluster already runs from {spec.state_dir} (process "
            f"{running[0][1]}); stop it first: kondor dev-cluster down --state-dir "
            f"{spec.state_dir}",
            file=log,
        )
        return 1
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    write_supervisor(layout)
    try:
        return _run(spec, log, tee)
    finally:
        if (found := read_supervisor(layout)) is not None and found[1] == os.getpid():
            layout.supervisor.unlink(missing_ok=True)


def _run(spec: ClusterSpec, log: TextIO, tee: _Tee | None) -> int:
    cluster = DevCluster(spec, log=log)
    stop = threading.Event()

    def interrupt(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    # While starting, SIGTERM interrupts like Ctrl-C, so what already runs is stopped again.
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        cluster.start()
    except (DevClusterError, BuildError, RealNodeError, ValueError, FileExistsError) as error:
        print(f"error: {error}", file=log)
        return 1
    except KeyboardInterrupt:
        print("interrupted; stopped what had started", file=log)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    exported = f"export KUBECONFIG={spec.kubeconfig}\n"
    if tee is not None:
        tee.release(
            f"{exported}stop it with: kondor dev-cluster down --state-dir {spec.state_dir}\n"
        )
    else:
        print(f"{exported}running; Ctrl-C or `kondor dev-cluster down` stops it", flush=True)
    return cluster.run_until_stopped(stop)


def down_command(args: argparse.Namespace) -> int:
    stopped = stop_detached(args.state_dir.absolute())
    if stopped:
        print(f"stopped {', '.join(stopped)}; data kept in {args.state_dir}")
    else:
        print(f"nothing runs from {args.state_dir}")
    return 0


def ps_command(args: argparse.Namespace) -> int:
    rows: list[dict[str, str | int | None]] = [
        {"component": name, "node": agent_node(name), "pid": pid}
        for name, pid, _binary in running_pids(Layout(args.state_dir.absolute()))
    ]
    if args.output == "json":
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"nothing runs from {args.state_dir}")
        return 0
    width = max(len(str(row["component"])) for row in rows)
    print(f"{'COMPONENT':<{width}}  {'NODE':<16}  PID")
    for row in rows:
        print(f"{row['component']!s:<{width}}  {row['node'] or '-'!s:<16}  {row['pid']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m kondor_devcluster dev-cluster ...`, for use without the `kondor` command."""
    parser = argparse.ArgumentParser(prog="kondor")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code
