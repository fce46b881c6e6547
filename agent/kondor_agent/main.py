"""`kondor-agent`: one per node.

Today it runs one whole cycle offline (`--oneshot --no-publish`): read the
machine description, compile the policy, carve the slots and print the slot ads
as `kondor simulate --output json` does. Live detection and publishing to the
ExecutionPoint arrive with the operator/agent work.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml
from pydantic import ValidationError

from kondor_core.api import InvalidObjectError, Machine, SlotPolicy, describe_errors, validate
from kondor_core.config import PolicyError, compile_policy
from kondor_core.slots import LayoutError, simulate


def _load(path: Path, model: type[Machine] | type[SlotPolicy]) -> Machine | SlotPolicy:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise InvalidObjectError(str(path), [f"cannot read it: {err}"]) from None
    try:
        return validate(model, data, what=str(path))
    except ValidationError as err:  # pragma: no cover - validate already converts
        raise InvalidObjectError(str(path), describe_errors(err)) from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kondor-agent", description=__doc__)
    parser.add_argument("--machine", type=Path, required=True, help="machine description YAML")
    parser.add_argument("--policy", type=Path, required=True, help="SlotPolicy manifest YAML")
    parser.add_argument("--oneshot", action="store_true", help="run one cycle and exit")
    parser.add_argument("--no-publish", action="store_true", help="print instead of publishing")
    args = parser.parse_args(argv)
    if not (args.oneshot and args.no_publish):
        parser.error(
            "only --oneshot --no-publish is available so far; the publishing agent "
            "(live detection, ExecutionPoint status) is not built yet"
        )
    try:
        machine = _load(args.machine, Machine)
        policy = _load(args.policy, SlotPolicy)
        assert isinstance(machine, Machine) and isinstance(policy, SlotPolicy)
        result = simulate(machine, compile_policy(policy.spec), [])
    except (InvalidObjectError, PolicyError, LayoutError) as err:
        print(f"kondor-agent: {err}", file=sys.stderr)
        return 2
    print(json.dumps({"slots": result.slots, "placements": []}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
