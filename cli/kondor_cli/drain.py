"""`kubectl kondor drain`: condor_drain for ExecutionPoints.

    kubectl kondor drain [-graceful | -quick | -fast] [-reason TEXT]
                         [-resume-on-completion | -exit-on-completion] [-check EXPR]
                         [-start EXPR] NODE ...
    kubectl kondor drain -cancel NODE ...

The request is written to the ExecutionPoint's `spec.drain` (a JSON merge patch; the operator
never touches that field) and the node's agent carries it out along the startd's drain
transitions: `-graceful` (the default) lets running jobs finish within their
MaxJobRetirementTime, `-quick` vacates them at once within MachineMaxVacateTime, `-fast` kills
them. While draining no slot takes a new job; once every slot is Drained the node stays so until
`-cancel`, or runs jobs again at once with `-resume-on-completion`, or, with
`-exit-on-completion`, its startd exits: the drain shows Exited, the node publishes no slots and
takes no job (as an exited startd's ads leave the collector) until `-cancel`; the agent itself
stays up under its DaemonSet, so that `-cancel` brings the node back without a restart.
`-check EXPR` drains only if EXPR is true for every slot of the node (evaluated here, in each
slot's ad as published). `kubectl get xp` and the status's `drain` show how it goes.

`-start EXPR` (with -graceful only, as condor_drain) replaces the node's START while it drains:
the resources of jobs that finished retiring take jobs EXPR accepts (the slot ads publish it
as Start) until the last job that ran when the drain began exits; then the jobs accepted
while draining are evicted (MaxJobRetirementTime 0, their vacate time honoured) and the
drain completes.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from kondor_cli.kube import Cluster, add_connection_arguments, connect_cluster
from kondor_cli.status import select, slot_ads
from kondor_core.api import EXECUTION_POINTS
from kondor_core.api.meta import format_time
from kondor_core.classads import ExpressionError, parse_expr
from kondor_kube import paths


class DrainApi(Protocol):
    def read_execution_point(self, name: str) -> dict[str, Any] | None: ...
    def patch_execution_point(self, name: str, patch: Mapping[str, Any]) -> None: ...
    def whoami(self) -> str: ...


class KubeDrain:
    """ExecutionPoints over the CLI's `Cluster` (kondor_cli.kube), connected as `kubectl
    kondor q` is."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def read_execution_point(self, name: str) -> dict[str, Any] | None:
        path = paths.kondor(EXECUTION_POINTS, name)
        return self.cluster.read(f"read executionpoint {name}", path)

    def patch_execution_point(self, name: str, patch: Mapping[str, Any]) -> None:
        path = paths.kondor(EXECUTION_POINTS, name)
        self.cluster.merge_patch(f"patch executionpoint {name}", path, patch)

    def whoami(self) -> str:
        return self.cluster.whoami()


def drain_request(args: argparse.Namespace, user: str, now: float) -> dict[str, Any]:
    """spec.drain for these options (`kondor_core.api.DrainRequest`)."""
    request: dict[str, Any] = {
        "mode": args.mode,
        "resumeOnCompletion": bool(args.resume_on_completion),
        "exitOnCompletion": bool(args.exit_on_completion),
        "requestedAt": format_time(now),
        "requestedBy": user,
    }
    if args.reason:
        request["reason"] = args.reason
    if args.check:
        request["check"] = args.check
    if args.start is not None:
        request["start"] = args.start
    return request


def check_fails(ep: Mapping[str, Any], check: str) -> list[str]:
    """The slots of `ep` for which `check` is not true (condor_drain's -check)."""
    ads = slot_ads([ep])
    passing = {ad.name for ad in select(ads, None, check)}
    return [ad.name for ad in ads if ad.name not in passing]


def run(
    args: argparse.Namespace,
    *,
    connect_api: Callable[[argparse.Namespace], DrainApi] | None = None,
    clock: Callable[[], float] = time.time,
) -> int:
    if args.start is not None and (args.cancel or args.mode != "graceful"):
        print(
            "kubectl kondor drain: -start goes with -graceful only (the draining schedule "
            "that lets jobs retire)",
            file=sys.stderr,
        )
        return 2
    for option, text in (("-check", args.check), ("-start", args.start)):
        if text is None:
            continue
        try:
            parse_expr(text, field=option)
        except ExpressionError as err:
            print(f"kubectl kondor drain: {option} {text!r}: {err.reason}", file=sys.stderr)
            return 2
    api = (connect_api or (lambda a: KubeDrain(connect_cluster(a))))(args)
    user = "" if args.cancel else api.whoami()
    failed = 0
    for node in args.nodes:
        ep = api.read_execution_point(node)
        if ep is None:
            print(f"Can't find address for {node}: no ExecutionPoint {node}", file=sys.stderr)
            failed += 1
            continue
        if args.cancel:
            api.patch_execution_point(node, {"spec": {"drain": None}})
            print(f"Sent request to cancel draining on {node}")
            continue
        if args.check:
            failing = check_fails(ep, args.check)
            if failing:
                print(
                    f"Draining {node} was refused: -check {args.check} is not true for "
                    f"{', '.join(failing)}",
                    file=sys.stderr,
                )
                failed += 1
                continue
        request = drain_request(args, user, clock())
        api.patch_execution_point(node, {"spec": {"drain": request}})
        print(f"Sent request to drain {node}")
    return 1 if failed else 0


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `drain` to the `kondor` (and `kubectl kondor`) command."""
    parser = commands.add_parser(
        "drain",
        help="condor_drain: drain ExecutionPoints (or -cancel a drain)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("nodes", nargs="+", metavar="NODE")
    how = parser.add_mutually_exclusive_group()
    for mode in ("graceful", "quick", "fast"):
        how.add_argument(f"-{mode}", dest="mode", action="store_const", const=mode)
    how.add_argument("-cancel", action="store_true", help="stop draining the nodes")
    parser.set_defaults(mode="graceful")
    parser.add_argument("-reason", help="why (shown in the ExecutionPoint's status)")
    completion = parser.add_mutually_exclusive_group()
    completion.add_argument(
        "-resume-on-completion",
        dest="resume_on_completion",
        action="store_true",
        help="run jobs again once every slot is drained",
    )
    completion.add_argument(
        "-exit-on-completion",
        dest="exit_on_completion",
        action="store_true",
        help="once every slot is drained, the startd exits: no slots until -cancel",
    )
    parser.add_argument("-check", help="drain only if this is true for every slot")
    parser.add_argument("-start", help="the START expression while draining (-graceful)")
    add_connection_arguments(parser)
    parser.set_defaults(func=run)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kubectl kondor")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))
