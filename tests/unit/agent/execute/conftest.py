"""Make `execute_fakes` importable (pytest's importlib mode puts no test folder on sys.path),
and the session's `apptainer`: the real one where it is built, else the stand-in."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import apptainer_runtimes  # noqa: E402 - importable once _HERE is on sys.path


@pytest.fixture(scope="session", params=[apptainer_runtimes.which()])
def apptainer(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[apptainer_runtimes.Apptainer]:
    """The `apptainer` jobs run: the real one where it is built, else the stand-in; the
    test's id says which (`[real-apptainer]`, `[stand-in]`)."""
    scratch = tmp_path_factory.mktemp("apptainer")
    runtime = apptainer_runtimes.Apptainer.start(request.param, scratch)
    yield runtime
    runtime.stop()
