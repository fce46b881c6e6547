"""`kondor dev-cluster up|down`: the command the demo, the tests and other tools depend on.

The `kondor` CLI loads this through the entry point group `kondor.commands`
(`dev-cluster = "kondor_devcluster.cli:register"`); `python -m kondor_devcluster` runs it alone.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import threading
from pathlib import Path
from types import FrameType

from kondor_devcluster.build import BuildError
from kondor_devcluster.cluster import (
    ClusterSpec,
    DevCluster,
    DevClusterError,
    running_pids,
    stop_detached,
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
    cluster = DevCluster(spec)
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
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; stopped what had started", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not args.detach:
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
    print(f"export KUBECONFIG={spec.kubeconfig}")
    sys.stdout.flush()
    if args.detach:
        print(f"stop it with: kondor dev-cluster down --state-dir {spec.state_dir}")
        return 0
    print("running; Ctrl-C stops it")
    sys.stdout.flush()
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
