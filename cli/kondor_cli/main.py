"""`kondor`: see what a SlotPolicy gives a node before deploying it, and more.

Subcommands from other parts of Kondor (the development cluster, for one)
register through the `kondor.commands` entry-point group, so the CLI does not
import them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import yaml

from kondor_cli import cod, drain, jobs, status, userprio
from kondor_cli.files import (
    UserError,
    load_machine,
    load_policy,
    load_request,
    load_scenario_file,
)
from kondor_cli.render import slot_table, table, timeline_table
from kondor_core.api import ExecutionJob
from kondor_core.config import compile_policy, render_policy
from kondor_core.errors import KondorError
from kondor_core.jobs import submit_ad
from kondor_core.sim import replay, simulate


def _simulate(args: argparse.Namespace) -> int:
    if args.timeline is not None:
        return _timeline(args)
    if args.machine is None or args.policy is None:
        raise UserError("--machine and --policy are required (or give --timeline SCENARIO.yaml)")
    machine = load_machine(args.machine)
    policy = load_policy(args.policy)
    effective = compile_policy(policy.spec)
    for warning in effective.warnings:
        print(f"warning: {args.policy}: {warning}", file=sys.stderr)
    requests = []
    for path in args.request:
        name, request = load_request(path)
        ad = submit_ad(request.spec, name) if isinstance(request, ExecutionJob) else request
        requests.append((name, ad))
    result = simulate(machine, effective, requests)
    if args.output == "json":
        document = {
            "slots": result.slots,
            "placements": [placement.as_dict() for placement in result.placements],
        }
        print(json.dumps(document, indent=2))
    elif args.output == "classad":
        print("\n\n".join(result.classad_text()))
    else:
        print(slot_table(result.slots, result.placements))
    return 0


def _timeline(args: argparse.Namespace) -> int:
    """`kondor simulate --timeline`: replay a scenario (kondor_core.sim.replay)."""
    if args.output == "classad":
        raise UserError("--timeline prints a table or json, not classad")
    if args.machine is not None or args.policy is not None or args.request:
        raise UserError(
            "--timeline takes the machine, the policy and the jobs from the scenario file; "
            "leave out --machine, --policy and --request"
        )
    scenario = load_scenario_file(args.timeline)
    result = replay(scenario)
    for warning in result.warnings:
        print(f"warning: {args.timeline}: policy: {warning}", file=sys.stderr)
    document = result.as_dict()
    if args.output == "json":
        print(json.dumps(document, indent=2))
    else:
        print(timeline_table(document))
        if document.get("cod"):
            print("\nCOD claims:")
            print(cod_timeline_table(document["cod"]))
    return 0


def cod_timeline_table(rows: Sequence[dict[str, Any]]) -> str:
    """The COD claims' changes of a timeline: when, which claim (and its COD id) on which
    slot, whose, from and to which state, what the slot's batch claim does then, and why."""
    headers = ("TIME", "CLAIM", "ID", "SLOT", "USER", "FROM", "STATE", "BATCH", "REASON")
    keys = ("time", "claim", "id", "slot", "user", "from", "state", "batch", "reason")
    return table(headers, [[row.get(key, "") for key in keys] for row in rows])


def _compile(args: argparse.Namespace) -> int:
    policy = load_policy(args.policy)
    effective = compile_policy(policy.spec)
    rendered = render_policy(effective)
    if args.output == "json":
        print(json.dumps(rendered, indent=2))
    else:
        print(yaml.safe_dump(rendered, sort_keys=False, width=100), end="")
    for warning in effective.warnings:
        print(f"warning: {args.policy}: {warning}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kondor", description="HTCondor-style execution points on Kubernetes."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sim = commands.add_parser(
        "simulate",
        help="show the slots a SlotPolicy gives a machine, and where requests would land",
        description="Carve MACHINE's slots with POLICY exactly as the agent will, place each "
        "request in order as the startd would, and print the slot ads. With --timeline, "
        "replay a scenario (machine, policy, and steps over simulated time) instead and "
        "print every state/activity transition.",
    )
    sim.add_argument("--machine", type=Path, help="machine description YAML")
    sim.add_argument("--policy", type=Path, help="SlotPolicy manifest YAML")
    sim.add_argument(
        "--request",
        type=Path,
        action="append",
        default=[],
        help="ExecutionJob manifest or ClassAd file; repeat to place several in order",
    )
    sim.add_argument(
        "--timeline",
        type=Path,
        metavar="SCENARIO",
        help="replay a scenario over simulated time and print every state/activity "
        "transition (see docs/scenarios.md); --machine and --policy are then not used",
    )
    sim.add_argument("--output", "-o", choices=("table", "json", "classad"), default="table")
    sim.set_defaults(func=_simulate)

    policy = commands.add_parser("policy", help="work with SlotPolicy manifests")
    policy_commands = policy.add_subparsers(dest="policy_command", required=True)
    comp = policy_commands.add_parser(
        "compile",
        help="print the effective policy (structured fields and condorConfig merged)",
    )
    comp.add_argument("policy", type=Path, help="SlotPolicy manifest YAML")
    comp.add_argument("--output", "-o", choices=("yaml", "json"), default="yaml")
    comp.set_defaults(func=_compile)

    status.add_parser(commands)
    jobs.add_parsers(commands)
    userprio.add_parser(commands)
    drain.add_parser(commands)
    cod.add_parser(commands)

    for plugin in entry_points(group="kondor.commands"):
        try:
            register = plugin.load()
        except ImportError:
            # The runtime image leaves the dev cluster out (kondor_devcluster is not
            # installed there, only its entry point is declared): its commands are not offered.
            continue
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result: Any = args.func(args)
    except (UserError, KondorError) as err:
        print(f"kondor {args.command}: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `kondor simulate ... | head`
        return 0
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
