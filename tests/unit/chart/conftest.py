"""A real helm for the chart tests: fetched once into ~/.cache/kondor/helm, else skipped."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # --import-mode=importlib does not put test folders on sys.path
    sys.path.insert(0, _HERE)

from chart_support import fetch_helm_module  # noqa: E402


@pytest.fixture(scope="session")
def helm() -> Path:
    fetcher = fetch_helm_module()
    try:
        return Path(fetcher.ensure_helm())
    except fetcher.FetchError as error:
        pytest.skip(f"no helm binary: {error} (set KONDOR_HELM to a helm 3 binary)")
