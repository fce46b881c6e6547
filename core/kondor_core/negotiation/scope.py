"""Evaluating one side's expression against the other's ad with HTCondor's matchmaking
lookup (unqualified names in MY, then TARGET), as `classads.match_scope` does, but copying
only the attributes the expression refers to: the cost of one evaluation does not grow with
the ads. The negotiator evaluates this way millions of times a cycle."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import classad2

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@lru_cache(maxsize=8192)
def identifiers(text: str) -> frozenset[str]:
    """The names an expression's text refers to, quoted strings left out (`TARGET.Cpus`
    gives TARGET and Cpus: a superset is harmless)."""
    unquoted = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    return frozenset(_IDENTIFIER.findall(unquoted))


def closure(ads: Sequence[Any], names: Iterable[str]) -> list[str]:
    """`names` and the attributes the expressions of those names (in any of `ads`) refer
    to, transitively."""
    seen: dict[str, None] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen[name] = None
        for ad in ads:
            value = ad.get(name)
            if isinstance(value, classad2.ExprTree):
                todo.extend(identifiers(str(value)) - seen.keys())
    return list(seen)


def evaluate_tree(tree: Any, my: Any, target: Any, extra: Mapping[str, Any] | None = None) -> Any:
    """The expression `tree` with MY = `my` and TARGET = `target`; `extra` are attributes
    MY has for this evaluation only (the negotiator's ephemeral RemoteUserPrio...)."""
    refs = identifiers(str(tree))
    if not refs:
        return tree.eval()
    scope: dict[str, Any] = {}
    for name in closure((my, target), refs):
        if extra and name in extra:
            scope[name] = extra[name]
        elif name in my:
            scope[name] = my.lookup(name)
        elif name in target:
            scope[name] = target.lookup(name)
    return tree.eval(classad2.ClassAd(scope), target)


def evaluate(my: Any, target: Any, attribute: str) -> Any:
    """MY's `attribute` evaluated against TARGET (its value when it is no expression)."""
    value = my.get(attribute)
    if not isinstance(value, classad2.ExprTree):
        return value
    return evaluate_tree(value, my, target)
