"""`kondor-agent detect`: print the node's machine description in the machine-file format.

The output is the YAML of `examples/machines/*.yaml` (what `kondor simulate
--machine` and the development cluster read), preceded by comments saying where
each figure comes from. `register(subparsers)` adds the subcommand to a parser;
`python -m kondor_agent.detect` runs it alone.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from kondor_agent.detect._gpus import NvmlLibrary
from kondor_agent.detect._hostfs import DetectionError, HostFS
from kondor_agent.detect._machine import Detected, detect
from kondor_agent.detect.nvml_fake import FakeNvml

_ORDER = ("name", "cpus", "memory", "disk", "swap", "gpus", "resources", "labels", "attributes")


class _Flow(dict[str, Any]):
    """A mapping written on one line (`properties: {Capability: 8.0, ...}`)."""


class _Dumper(yaml.SafeDumper):
    pass


def _flow(dumper: yaml.SafeDumper, data: _Flow) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=True)


_Dumper.add_representer(_Flow, _flow)


def render_machine(detected: Detected) -> str:
    """The machine file for `detected`: notes as comments, then the YAML."""
    data = detected.machine.dump()
    ordered: dict[str, Any] = {}
    for key in _ORDER:
        value = data.get(key)
        if value in (None, [], {}) or (key in ("disk", "swap") and value == 0):
            continue
        if key == "gpus":
            value = [{"id": gpu["id"], "properties": _Flow(gpu["properties"])} for gpu in value]
        ordered[key] = value
    header = [f"# Detected by `kondor-agent detect` on {detected.machine.name}."]
    header += [f"# {note}" for note in detected.notes]
    body = yaml.dump(ordered, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096)
    return "\n".join(header) + "\n" + body


def _pairs(values: Sequence[str], option: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise DetectionError(f"{option}: {item!r} is not KEY=VALUE")
        pairs[key] = value
    return pairs


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `detect` to the `kondor-agent` command."""
    parser = subparsers.add_parser(
        "detect",
        help="print this node's machine description (the machine-file YAML)",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    add_arguments(parser)
    parser.set_defaults(func=detect_command)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root", type=Path, default=Path("/"), help="where the host's / is mounted (default /)"
    )
    parser.add_argument(
        "--execute-dir",
        type=Path,
        default=Path("."),
        help="the directory jobs run in; its free space is the disk (default: current directory)",
    )
    parser.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME"),
        help="machine name (default $NODE_NAME, else the host's name)",
    )
    parser.add_argument(
        "--label", action="append", default=[], metavar="KEY=VALUE", help="a node label (repeat)"
    )
    parser.add_argument(
        "--allocatable",
        action="append",
        default=[],
        metavar="RESOURCE=QUANTITY",
        help="the node's allocatable, e.g. cpu=7900m memory=30Gi ephemeral-storage=100Gi",
    )
    parser.add_argument(
        "--reserve",
        action="append",
        default=[],
        metavar="RESOURCE=QUANTITY",
        help="kept back from jobs beyond the kubelet's reservations (cpu, memory, "
        "ephemeral-storage)",
    )
    parser.add_argument("--cgroup", help="cgroup whose limits bound the jobs (default kubepods)")
    parser.add_argument(
        "--nvml-recording",
        type=Path,
        help="answer NVML from a recording (JSON) instead of the GPUs of this host",
    )


def detect_command(args: argparse.Namespace) -> int:
    host = HostFS(args.root)
    try:
        name = args.node_name or _hostname(host)
        nvml: NvmlLibrary | None = None
        if args.nvml_recording is not None:
            nvml = FakeNvml.load(args.nvml_recording)
        detected = detect(
            host,
            node_name=name,
            labels=_pairs(args.label, "--label"),
            allocatable=_pairs(args.allocatable, "--allocatable"),
            reserved=_pairs(args.reserve, "--reserve"),
            execute_dir=args.execute_dir,
            nvml=nvml,
            cgroup=args.cgroup,
        )
    except (DetectionError, OSError, ValueError) as err:
        print(f"kondor-agent detect: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(render_machine(detected))
    return 0


def _hostname(host: HostFS) -> str:
    text = host.read_optional("/proc/sys/kernel/hostname") or host.read_optional("/etc/hostname")
    name = (text or "").strip() or os.uname().nodename
    return name


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kondor-agent detect", description=__doc__)
    add_arguments(parser)
    return detect_command(parser.parse_args(argv))
