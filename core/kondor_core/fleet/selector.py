"""Kubernetes label selectors (metav1.LabelSelector) matched against a node's labels.

The semantics are Kubernetes': every `matchLabels` pair and every
`matchExpressions` requirement must hold; `NotIn` and `DoesNotExist` hold for a
node without the key; an empty selector selects every node.
"""

from __future__ import annotations

from collections.abc import Mapping

from kondor_core.api.slotpolicy import LabelSelector, LabelSelectorRequirement


def requirement_holds(requirement: LabelSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """Whether one `matchExpressions` entry holds for `labels`."""
    present = requirement.key in labels
    match requirement.operator:
        case "In":
            return present and labels[requirement.key] in requirement.values
        case "NotIn":
            return not present or labels[requirement.key] not in requirement.values
        case "Exists":
            return present
        case "DoesNotExist":
            return not present
    raise ValueError(f"unknown label selector operator {requirement.operator!r}")


def selects(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """Whether `selector` selects an object with `labels`."""
    if any(labels.get(key) != value for key, value in selector.match_labels.items()):
        return False
    return all(requirement_holds(r, labels) for r in selector.match_expressions)


def selector_problems(selector: LabelSelector, *, field: str = "spec.nodeSelector") -> list[str]:
    """What the API server would refuse in a LabelSelector: values where the operator needs none,
    or none where it needs some."""
    problems = []
    for index, requirement in enumerate(selector.match_expressions):
        where = f"{field}.matchExpressions[{index}]"
        if requirement.operator in ("In", "NotIn") and not requirement.values:
            problems.append(
                f"{where}.values: operator {requirement.operator} needs at least one value"
            )
        if requirement.operator in ("Exists", "DoesNotExist") and requirement.values:
            problems.append(
                f"{where}.values: operator {requirement.operator} takes no values "
                f"(got {requirement.values!r})"
            )
    return problems
