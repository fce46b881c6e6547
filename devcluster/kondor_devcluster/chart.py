"""The Helm chart's own security objects, read by the dev cluster: one source for both.

The dev cluster has no helm, so it renders the few chart templates it applies itself (the
agent's RBAC, the admission policies) with the values it knows, as `helm template` would with
the chart's defaults: `if` guards taken, the names below substituted, Kondor's labels. Any other
template expression is refused with its line, so that a template growing past what this knows
fails here loudly instead of applying something else than the chart (tests/unit/chart compares
the two renderings).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

#: The chart, beside the source roots (the dev cluster runs from a checkout).
CHART = Path(__file__).resolve().parents[2] / "helm" / "kondor"
AGENT_RBAC = "rbac-agent.yaml"
OPERATOR_RBAC = "rbac-operator.yaml"
ADMISSION_POLICIES = "admission-policies.yaml"

_COMMENT = re.compile(r"\{\{-?\s*/\*.*?\*/\s*-?\}\}\n?", re.DOTALL)
_EXPRESSION = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}")
#: Lines that are only a guard, its end, a variable or a comment: dropped.
_CONTROL = re.compile(r"^\s*\{\{-?\s*(if |end\b).*\}\}\s*$")
#: `{{- $name := include "kondor.agentName" . }}`: a variable, of an expression known here.
_VARIABLE = re.compile(r"^\s*\{\{-?\s*\$(\w+) := (.*?)\s*-?\}\}\s*$")
_LABELS = re.compile(r'^(\s*)\{\{-?\s*include "kondor\.labels" \. \| nindent (\d+)\s*\}\}\s*$')


class ChartError(ValueError):
    """A template holds what this renderer does not know; the message names it."""


@dataclass(frozen=True)
class Release:
    """The release the dev cluster renders for: its name (`<fullname>`), namespace and
    ServiceAccounts, as the chart names them from `<fullname>`."""

    fullname: str = "kondor"
    namespace: str = "kondor-system"

    @property
    def agent(self) -> str:
        return f"{self.fullname}-agent"

    @property
    def operator(self) -> str:
        return f"{self.fullname}-operator"

    @property
    def webhook(self) -> str:
        return f"{self.fullname}-webhook"

    def user(self, service_account: str) -> str:
        """The user name the API server gives a ServiceAccount's tokens."""
        return f"system:serviceaccount:{self.namespace}:{service_account}"

    def expressions(self) -> dict[str, str]:
        """The template expressions this renderer knows, with their values."""
        return {
            'include "kondor.fullname" .': self.fullname,
            ".Release.Namespace": self.namespace,
            'include "kondor.agentName" .': self.agent,
            'include "kondor.operatorName" .': self.operator,
            'include "kondor.agentServiceAccount" .': self.agent,
            'include "kondor.operatorServiceAccount" .': self.operator,
        }


def render(text: str, release: Release, source: str = "template") -> list[dict[str, Any]]:
    """The objects of one simple chart template, as `helm template` renders it with the
    chart's default values (every guard on) for `release`."""
    known = release.expressions()
    lines = []
    # Comments go first (they span lines); the line numbers of errors are the rendered text's.
    text = _COMMENT.sub("", text)
    for number, line in enumerate(text.splitlines(), start=1):
        labels = _LABELS.match(line)
        if labels:
            pad = " " * int(labels.group(2))
            lines.append(f"{pad}app.kubernetes.io/part-of: kondor")
            continue
        if _CONTROL.match(line):
            continue
        variable = _VARIABLE.match(line)
        if variable:
            name, expression = variable.groups()
            if expression not in known:
                raise ChartError(f"{source}:{number}: unknown template expression {expression}")
            known[f"${name}"] = known[expression]
            continue

        def substitute(match: re.Match[str], number: int = number) -> str:
            expression = match.group(1)
            if expression not in known:
                raise ChartError(
                    f"{source}:{number}: unknown template expression {{{{ {expression} }}}}"
                )
            return known[expression]

        lines.append(_EXPRESSION.sub(substitute, line))
    try:
        documents = list(yaml.safe_load_all("\n".join(lines)))
    except yaml.YAMLError as error:
        raise ChartError(f"{source}: not YAML once rendered: {error}") from None
    return [document for document in documents if document]


def render_template(name: str, release: Release, chart: Path = CHART) -> list[dict[str, Any]]:
    path = chart / "templates" / name
    try:
        text = path.read_text()
    except OSError as error:
        raise ChartError(
            f"the chart's {name} cannot be read ({error}): run from a checkout"
        ) from None
    return render(text, release, str(path))


def agent_rbac(release: Release, chart: Path = CHART) -> list[dict[str, Any]]:
    """The chart's agent ClusterRole, Role and their bindings (rbac-agent.yaml)."""
    return render_template(AGENT_RBAC, release, chart)


def operator_rbac(release: Release, chart: Path = CHART) -> list[dict[str, Any]]:
    """The chart's operator ClusterRole, Roles and their bindings (rbac-operator.yaml)."""
    return render_template(OPERATOR_RBAC, release, chart)


def admission_policies(release: Release, chart: Path = CHART) -> list[dict[str, Any]]:
    """The chart's ValidatingAdmissionPolicies and their bindings (admission-policies.yaml)."""
    return render_template(ADMISSION_POLICIES, release, chart)
