"""The generated CRDs are OpenAPI v3 as the API server takes them: pydantic's JSON-schema
2020 numeric exclusiveMinimum/exclusiveMaximum (from `gt`/`lt`) is refused at apply time
("expected boolean"), so no schema may carry one."""

from __future__ import annotations

from typing import Any

from kondor_core.api.crds import all_crds


def _exclusive(node: Any, path: str = "") -> list[str]:
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
                found.append(f"{path}.{key}")
            found += _exclusive(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _exclusive(value, f"{path}[{index}]")
    return found


def test_no_crd_has_a_numeric_exclusive_bound() -> None:
    for crd in all_crds():
        assert _exclusive(crd) == [], crd["metadata"]["name"]
