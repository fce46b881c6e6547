"""Glue around HTCondor's own ClassAd engine (`classad2` from the htcondor wheel).

Kondor never evaluates an expression itself: every expression is parsed and
evaluated by classad2. This module gives the rest of the core a typed surface
and error messages that name the field a bad expression came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import classad2

from kondor_core.errors import KondorError

ClassAd = classad2.ClassAd
ExprTree = classad2.ExprTree
Value = classad2.Value


def _one_lookup_rule() -> None:
    """Put classad2 in the mode it takes anyway on the first read of a nested ad.

    classad2 (25.x) evaluates `expr.eval(my, target)` with the New ClassAd rule (an
    unprefixed attribute is looked up in MY only) until the process first reads a nested
    ClassAd value, such as a GPU's property ad in a slot ad; from then on, for the rest of
    the process, it uses HTCondor's matchmaking rule (MY, then TARGET). A process's answers
    must not depend on what it happened to read before, so Kondor takes that step at import.
    `match_scope` gives the matchmaking rule either way.
    """
    _ = ClassAd({"nested": ClassAd()})["nested"]


_one_lookup_rule()

#: What classad2 returns for a literal or an evaluation: a Python scalar, a list,
#: a nested ClassAd, or one of the special values UNDEFINED and ERROR.
Scalar = bool | int | float | str


class ExpressionError(KondorError):
    """An expression classad2 cannot parse, with the field it came from."""

    def __init__(self, field: str, text: str, reason: str) -> None:
        super().__init__(f"{field}: {text!r} is not a valid ClassAd expression ({reason})")
        self.field = field
        self.text = text
        self.reason = reason


@lru_cache(maxsize=4096)
def _parse(text: str) -> Any:
    return classad2.ExprTree(text)


def parse_expr(text: str, *, field: str) -> Any:
    """Parse `text` with classad2; raise ExpressionError naming `field` if it is not an expression.

    Parsed trees are cached: policies repeat the same few expressions on every slot.
    """
    if not text.strip():
        raise ExpressionError(field, text, "the expression is empty")
    try:
        return _parse(text)
    except classad2.ClassAdException as err:
        raise ExpressionError(field, text, f"classad2: {err}") from None


def check_expr(text: str, *, field: str) -> str:
    """Validate `text` as a ClassAd expression and return it unchanged (for pydantic validators)."""
    parse_expr(text, field=field)
    return text


def is_undefined(value: object) -> bool:
    return value is Value.Undefined


def is_error(value: object) -> bool:
    return value is Value.Error


def evaluate(text: str, *, my: Any = None, target: Any = None, field: str = "expression") -> Any:
    """Evaluate expression `text` with MY = `my` and TARGET = `target` (either may be None)."""
    tree = parse_expr(text, field=field)
    if my is None:
        return tree.eval()
    if target is None:
        return tree.eval(my)
    return tree.eval(my, target)


def match_scope(my: Any, target: Any) -> Any:
    """An ad to evaluate MY's expressions in, with HTCondor's matchmaking lookup rule.

    In HTCondor an unqualified attribute reference is looked up in MY and, when MY
    does not have it, in TARGET (`Requirements = OpSys == "LINUX"` in a job means
    the machine's OpSys). classad2's `eval(my, target)` looks only in MY, so the
    result is MY's attributes layered over a copy of TARGET's; evaluate with
    `tree.eval(match_scope(my, target), target)`. `MY.x` of an attribute only TARGET
    has resolves too, where HTCondor would say UNDEFINED: a deliberate, documented
    approximation.
    """
    scope = classad2.ClassAd()
    scope.update(target)
    scope.update(my)
    return scope


def parse_ad(text: str, *, field: str) -> Any:
    """Parse ClassAd text, in the new `[a = 1; b = 2]` or the old one-`a = 1`-per-line form.

    Old-form lines are joined into a new-form ad so classad2's strict parser sees
    every line: its old-form parser stops quietly at the first bad line.
    """
    stripped = text.strip()
    if not stripped.startswith("["):
        lines = [line.strip() for line in stripped.splitlines()]
        stripped = "[" + ";\n".join(line for line in lines if line and line[0] != "#") + "]"
    try:
        return classad2.ClassAd(stripped)
    except classad2.ClassAdException as err:
        raise ExpressionError(field, text[:200], f"classad2: {err}") from None


def literal(value: object) -> str:
    """Render a Python value as ClassAd source text (strings quoted the ClassAd way)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return str(classad2.quote(value))
    if isinstance(value, list | tuple):
        return "{" + ", ".join(literal(v) for v in value) + "}"
    if isinstance(value, Mapping):
        return "[" + "; ".join(f"{k} = {literal(v)}" for k, v in value.items()) + "]"
    raise TypeError(f"no ClassAd literal for {type(value).__name__}")
