"""What the hostile-input tests share: the valid examples they start from and one way to
drive the offline CLI that says what happened (exit code, stderr, stdout), never raising."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kondor_cli.main import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"

MACHINE: dict[str, Any] = yaml.safe_load((EXAMPLES / "machines" / "desk.yaml").read_text())
GPU_MACHINE: dict[str, Any] = yaml.safe_load((EXAMPLES / "machines" / "kwok-gpu.yaml").read_text())
POLICY: dict[str, Any] = yaml.safe_load((EXAMPLES / "policies" / "default.yaml").read_text())
JOB: dict[str, Any] = yaml.safe_load((EXAMPLES / "jobs" / "small.yaml").read_text())


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str


def run_cli(*argv: str | Path) -> Outcome:
    """`kondor ARGV` in this process: exit code and output. Any exception fails the caller."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(arg) for arg in argv])
    return Outcome(code, out.getvalue(), err.getvalue())


def simulate(tmp: Path, machine: bytes, policy: bytes, *, output: str = "json") -> Outcome:
    (tmp / "m.yaml").write_bytes(machine)
    (tmp / "p.yaml").write_bytes(policy)
    return run_cli(
        "simulate", "--machine", tmp / "m.yaml", "--policy", tmp / "p.yaml", "-o", output
    )


def dump(data: Any) -> bytes:
    return yaml.safe_dump(data, allow_unicode=True).encode()


def strict_json(text: str) -> Any:
    """JSON as RFC 8259 has it: NaN and Infinity are not JSON."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)
