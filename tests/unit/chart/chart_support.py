"""Render the Helm chart with a real helm (fetched by tools/fetch_helm.py) and read it back."""

from __future__ import annotations

import importlib.util
import subprocess
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "helm" / "kondor"
RELEASE = "t"
NAMESPACE = "kondor-system"


@cache
def fetch_helm_module() -> ModuleType:
    """tools/fetch_helm.py, loaded by path (tools/ is a folder of scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("fetch_helm", ROOT / "tools" / "fetch_helm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *args], capture_output=True, text=True, timeout=120, check=False
    )


def render(
    helm: Path, *args: str, crds: bool = True, release: str = RELEASE
) -> list[dict[str, Any]]:
    """The chart's objects as `helm template` renders them, with extra arguments (`--set`).

    Each test gets its own objects (parsed anew, with libyaml's safe loader: the pure-Python
    one took 4 of the chart tests' 21 s); the text of a rendering asked for twice in a run
    is helm's first answer (the chart does not change while the tests run)."""
    text = _template(helm, args, crds, release)
    return [doc for doc in yaml.load_all(text, Loader=_SAFE_LOADER) if doc]


_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@cache
def _template(helm: Path, args: tuple[str, ...], crds: bool, release: str) -> str:
    extra = ["--include-crds"] if crds else []
    result = run_helm(
        helm, "template", release, str(CHART), "--namespace", NAMESPACE, *extra, *args
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"{len(found)} {kind} named {name}: {[o['metadata'] for o in found]}"
    return found[0]


def containers(workload: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    pod = workload["spec"]["template"]["spec"]
    yield from pod.get("initContainers", [])
    yield from pod["containers"]


def substitute(args: list[str], env: Mapping[str, str]) -> list[str]:
    """The arguments as the kubelet expands them: `$(VAR)` from the container's env."""
    out = []
    for arg in args:
        expanded = arg
        for key, value in env.items():
            expanded = expanded.replace(f"$({key})", value)
        out.append(expanded)
    return out
