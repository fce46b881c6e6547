"""JSON merge patches (RFC 7386), as the operator and the agent write them.

The agent writes its status as `merge_patch(last written, now)`, the operator its spec
changes the same way and its status subtrees as `model_patch(model)`: applying any of them
to the object as it was must give the object as it should be.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kondor_core.api import (
    OperatorStatus,
    SlotPolicyStatus,
    apply_merge_patch,
    condition,
    merge_patch,
    model_patch,
)

KEYS = st.sampled_from(["a", "b", "c", "status", "operator"])
SCALARS = st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2) | st.text(max_size=3)


def _documents(*, nulls: bool) -> st.SearchStrategy[dict[str, Any]]:
    """JSON objects with overlapping keys; with `nulls`, maps may hold null (an object as
    stored may; a document a patch should produce may not: null in a patch deletes)."""
    leaves = SCALARS if nulls else SCALARS.filter(lambda v: v is not None)
    values = st.recursive(
        leaves | st.lists(SCALARS, max_size=3),
        lambda inner: st.dictionaries(KEYS, inner, max_size=4),
        max_leaves=12,
    )
    return st.dictionaries(KEYS, values, max_size=5)


# 100 examples (was 200): generating the nested documents is what takes the time (about
# 5 ms each); 100 pairs of overlapping keys still reach deletions, type changes and nesting.
@settings(max_examples=100, deadline=None)
@given(old=_documents(nulls=True), new=_documents(nulls=False))
def test_applying_the_computed_patch_to_the_old_document_gives_the_new(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    patch = merge_patch(old, new)
    assert _same(apply_merge_patch(old, patch), new)
    # Applying it again changes nothing (a retried write is harmless).
    assert _same(apply_merge_patch(apply_merge_patch(old, patch), patch), new)


@settings(max_examples=100, deadline=None)
@given(document=_documents(nulls=False))
def test_an_unchanged_document_needs_no_patch(document: dict[str, Any]) -> None:
    assert merge_patch(document, document) == {}


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON: `True` is not `1`, nor `1.0` `1` (a patch must carry a type change)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


# RFC 7386, Appendix A, each case one level down (under "x") so that the patches that are not
# objects are values in an object patch; a null patch then deletes "x" (the RFC's `null`).
RFC_EXAMPLES: list[tuple[Any, Any, Any]] = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("original", "patch", "result"), RFC_EXAMPLES)
def test_apply_follows_the_rfc_examples(original: Any, patch: Any, result: Any) -> None:
    expected = {} if result is None else {"x": result}
    assert apply_merge_patch({"x": original, "kept": 1}, {"x": patch}) == {**expected, "kept": 1}


def test_a_model_patch_deletes_what_the_model_cleared_and_keeps_other_writers_keys() -> None:
    """SlotPolicy status: an invalid policy has no hash any more. status.operator: the
    agent's fields beside it are untouched."""
    stored = {"hash": "abc", "selectedNodes": 3, "conditions": [{"type": "Valid"}]}
    invalid = SlotPolicyStatus(observed_generation=2, hash=None)
    assert apply_merge_patch(stored, model_patch(invalid)) == invalid.dump()

    status = {"lastHeartbeat": "2026-01-02T03:04:05Z", "operator": {"policy": "old"}}
    operator = OperatorStatus(heartbeat="Fresh")  # no policy governs the node now
    patched = apply_merge_patch(status, {"operator": model_patch(operator)})
    assert patched == {"lastHeartbeat": "2026-01-02T03:04:05Z", "operator": operator.dump()}


@settings(max_examples=100, deadline=None)
@given(
    stored=_documents(nulls=True),
    status=st.builds(
        SlotPolicyStatus,
        observed_generation=st.none() | st.integers(0, 5),
        selected_nodes=st.integers(0, 5),
        governed_nodes=st.integers(0, 5),
        hash=st.none() | st.text(min_size=1, max_size=4),
        warnings=st.lists(st.text(max_size=4), max_size=2),
        conditions=st.lists(
            st.builds(
                condition,
                st.sampled_from(["Valid", "Ready"]),
                st.none() | st.booleans(),
                st.text(max_size=4),
                st.text(max_size=4),
            ),
            max_size=2,
        ),
    ),
)
def test_a_model_patch_makes_the_models_fields_what_the_model_says(
    stored: dict[str, Any], status: SlotPolicyStatus
) -> None:
    patched = apply_merge_patch(stored, model_patch(status))
    known = {info.alias or name for name, info in SlotPolicyStatus.model_fields.items()}
    assert {k: v for k, v in patched.items() if k in known} == status.dump()
    assert {k: v for k, v in patched.items() if k not in known} == {
        k: v for k, v in stored.items() if k not in known
    }
