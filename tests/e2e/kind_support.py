"""Shared by the e2e fixtures and tests: commands, the cluster handle, waiting."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = os.environ.get("KONDOR_E2E_CLUSTER", "kondor-e2e")
IMAGE = "kondor:e2e"
NAMESPACE = "kondor-system"
RELEASE = "kondor"


def run(
    args: Sequence[str], *, timeout: float = 300, check: bool = True, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command, its output shown on failure."""
    print("+", " ".join(args), file=sys.stderr)
    result = subprocess.run(
        list(args), capture_output=True, text=True, timeout=timeout, check=False, input=input
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
        )
    return result


def helm_binary() -> Path:
    spec = importlib.util.spec_from_file_location("fetch_helm", ROOT / "tools" / "fetch_helm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        return Path(module.ensure_helm())
    except module.FetchError as error:
        pytest.skip(f"no helm binary: {error}")


@dataclass(frozen=True)
class Kind:
    """The e2e cluster: kubectl and helm bound to its kubeconfig."""

    kubeconfig: Path
    helm_bin: Path

    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> str:
        result = run(
            ["kubectl", f"--kubeconfig={self.kubeconfig}", *args], check=check, input=input
        )
        return result.stdout if result.returncode == 0 else result.stderr

    def helm(self, *args: str, timeout: float = 600) -> str:
        return run(
            [str(self.helm_bin), f"--kubeconfig={self.kubeconfig}", *args], timeout=timeout
        ).stdout


def eventually(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(2)
    raise AssertionError(f"{what} not reached within {timeout:g}s (last: {last!r})")
