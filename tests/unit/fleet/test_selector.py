"""Label selectors with Kubernetes semantics (metav1.LabelSelector)."""

from __future__ import annotations

from typing import Any

import pytest

from kondor_core.api import LabelSelector
from kondor_core.fleet import selector_problems, selects

GPU = {"gpu": "a100", "zone": "a"}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({}, {}, True),
        ({}, GPU, True),
        ({"matchLabels": {"gpu": "a100"}}, GPU, True),
        ({"matchLabels": {"gpu": "a100", "zone": "b"}}, GPU, False),
        ({"matchLabels": {"gpu": "a100"}}, {}, False),
        (
            {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100", "h100"]}]},
            GPU,
            True,
        ),
        ({"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]}, GPU, False),
        ({"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]}, {}, False),
        (
            {"matchExpressions": [{"key": "gpu", "operator": "NotIn", "values": ["h100"]}]},
            GPU,
            True,
        ),
        (
            {"matchExpressions": [{"key": "gpu", "operator": "NotIn", "values": ["a100"]}]},
            GPU,
            False,
        ),
        # NotIn holds for a node without the key, as in Kubernetes.
        ({"matchExpressions": [{"key": "gpu", "operator": "NotIn", "values": ["a100"]}]}, {}, True),
        ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, GPU, True),
        ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, GPU, False),
        ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, {}, True),
        # Every term must hold.
        (
            {
                "matchLabels": {"zone": "a"},
                "matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}],
            },
            GPU,
            False,
        ),
        # An empty label value is a value.
        ({"matchLabels": {"spot": ""}}, {"spot": ""}, True),
        ({"matchLabels": {"spot": ""}}, {}, False),
    ],
)
def test_selects(selector: dict[str, Any], labels: dict[str, str], expected: bool) -> None:
    assert selects(LabelSelector.model_validate(selector), labels) is expected


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ({"key": "a", "operator": "In"}, "operator In needs at least one value"),
        ({"key": "a", "operator": "NotIn", "values": []}, "operator NotIn needs at least one"),
        ({"key": "a", "operator": "Exists", "values": ["x"]}, "operator Exists takes no values"),
    ],
)
def test_selector_problems_name_the_field(expression: dict[str, Any], problem: str) -> None:
    selector = LabelSelector.model_validate({"matchExpressions": [expression]})
    [found] = selector_problems(selector)
    assert found.startswith("spec.nodeSelector.matchExpressions[0].values: ")
    assert problem in found


def test_well_formed_selector_has_no_problems() -> None:
    selector = LabelSelector.model_validate(
        {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x"]}]}
    )
    assert selector_problems(selector) == []
