"""Recorded host trees, a fake statvfs and a fake command runner for detection tests."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest

from kondor_agent.detect import FakeNvml, HostFS, RunResult

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def host_tree(tmp_path: Path) -> Callable[[str], Path]:
    """A writable copy of a recorded host tree (symlinks kept), to alter in a test."""

    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(FIXTURES / "hosts" / name, target, symlinks=True)
        return target

    return copy


@pytest.fixture
def recorded() -> Callable[[str], HostFS]:
    def host(name: str) -> HostFS:
        return HostFS(FIXTURES / "hosts" / name)

    return host


@pytest.fixture
def nvml() -> Callable[[str], FakeNvml]:
    def load(name: str) -> FakeNvml:
        return FakeNvml.load(FIXTURES / "nvml" / f"{name}.json")

    return load


def _statvfs_of(free_bytes: int, block: int = 4096) -> Callable[[str], SimpleNamespace]:
    """A statvfs whose file system has `free_bytes` available to unprivileged users."""

    def statvfs(path: str) -> SimpleNamespace:
        return SimpleNamespace(f_bavail=free_bytes // block, f_frsize=block, f_blocks=0)

    return statvfs


def _runner_of(answers: dict[str, RunResult]) -> Callable[[Sequence[str]], RunResult | None]:
    """A Runner that knows only the programs in `answers` (others are not on PATH)."""
    calls: list[list[str]] = []

    def run(argv: Sequence[str]) -> RunResult | None:
        calls.append(list(argv))
        return answers.get(argv[0])

    run.calls = calls  # type: ignore[attr-defined]
    return run


@pytest.fixture
def statvfs_of() -> Callable[..., Callable[[str], SimpleNamespace]]:
    return _statvfs_of


@pytest.fixture
def runner_of() -> Callable[..., Callable[[Sequence[str]], RunResult | None]]:
    return _runner_of


@pytest.fixture
def no_apptainer() -> Callable[[Sequence[str]], RunResult | None]:
    return _runner_of({})


@pytest.fixture
def roomy_disk() -> Callable[[str], SimpleNamespace]:
    return _statvfs_of(500 * 1024**3)
