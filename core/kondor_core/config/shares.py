"""Resource shares of a slot type, in SLOT_TYPE_<N> syntax or as a map.

As the reference's "Dividing System Resources in Multi-core Machines" says: a
share is a simple fraction (1/4), a percentage (25%), an absolute amount, or
`auto`; a list gives one share per resource, and a bare value in the list is
the blanket default for the resources it does not name. Resources that carry
properties (GPUs) may add `: constraint` to choose which devices the slot gets.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from kondor_core.classads import ExpressionError, check_expr
from kondor_core.errors import KondorError

STANDARD = ("cpus", "memory", "disk", "swap")

#: Spellings of the four predefined resources. The manual tells them apart by
#: their first letter (c, r/m, d, s/v); Kondor accepts those letters and any prefix
#: of the names it lists, so that a custom resource such as `cogs` is never cpus.
_STANDARD_WORDS = {
    "cpus": ("cpus",),
    "memory": ("memory", "ram", "mem"),
    "disk": ("disk",),
    "swap": ("swap", "virtualmemory", "virt"),
}

#: Units of an absolute amount with no suffix: cores, MiB, KiB, MiB (as in machine files).
UNITS = {"cpus": "cores", "memory": "MiB", "disk": "KiB", "swap": "MiB"}
_BINARY = {"k": 1, "m": 1024, "g": 1024**2, "t": 1024**3}  # suffix -> KiB
_AMOUNT = re.compile(
    r"^(?P<num>[0-9]+(?:\.[0-9]+)?|\.[0-9]+)\s*(?P<suffix>[KkMmGgTt](?:i?[Bb]?)?)?$"
)


class ShareError(KondorError):
    """A share that cannot be read, with the field it came from."""


def canonical_resource(name: str) -> str | None:
    """The standard resource `name` spells (cpus, memory, disk, swap), or None for a custom one."""
    lowered = name.strip().lower()
    for canonical, words in _STANDARD_WORDS.items():
        if lowered and any(word.startswith(lowered) for word in words):
            return canonical
    return None


@dataclass(frozen=True)
class Share:
    """One resource's share: a fraction of the total, an absolute amount, or auto."""

    kind: Literal["fraction", "absolute", "auto"]
    amount: Fraction = Fraction(0)
    constraint: str | None = None
    text: str = "auto"

    def __str__(self) -> str:
        return self.text


AUTO = Share("auto")


@dataclass(frozen=True)
class ShareSpec:
    """A slot type's shares by resource (standard names canonical, custom as written)."""

    shares: Mapping[str, Share] = field(default_factory=dict)
    default: Share = AUTO
    text: str = "auto"

    def share_for(self, resource: str) -> Share:
        """The share of `resource` (canonical or custom name, case-insensitive for custom)."""
        if resource in self.shares:
            return self.shares[resource]
        for name, share in self.shares.items():
            if name.lower() == resource.lower():
                return share
        return self.default

    def custom_names(self) -> list[str]:
        return [name for name in self.shares if name not in STANDARD]


def parse_share(value: str | int | float, *, resource: str | None, field: str) -> Share:
    """Read one share value; `resource` is the canonical name it applies to (None: blanket)."""
    if isinstance(value, bool):
        raise ShareError(f"{field}: {value!r} is not a share")
    text = str(value).strip()
    constraint = None
    if ":" in text:
        text, constraint_text = (part.strip() for part in text.split(":", 1))
        if not constraint_text:
            raise ShareError(f"{field}: the constraint after ':' in {value!r} is empty")
        try:
            constraint = check_expr(constraint_text, field=field)
        except ExpressionError as err:  # one problem of the policy, not an exception past it
            raise ShareError(str(err)) from None
        if resource in STANDARD or resource is None:
            raise ShareError(
                f"{field}: {value!r} has a constraint, but only resources with properties "
                f"(such as GPUs) take one; {resource or 'a blanket share'} does not"
            )
    share = _parse_amount(text, resource=resource, field=field, original=value)
    if constraint is not None:
        share = Share(share.kind, share.amount, constraint, str(value).strip())
    return share


def _parse_amount(text: str, *, resource: str | None, field: str, original: object) -> Share:
    allowed = "a fraction (1/4), a percentage (25%), an absolute amount or auto"
    lowered = text.lower()
    if lowered == "auto":
        return AUTO
    try:
        if lowered.endswith("%"):
            percent = Fraction(lowered[:-1].strip())
            amount = percent / 100
            kind: Literal["fraction", "absolute"] = "fraction"
        elif "/" in lowered:
            numerator, denominator = (Fraction(part.strip()) for part in lowered.split("/", 1))
            if denominator == 0:
                raise ShareError(f"{field}: {original!r} divides by zero")
            amount, kind = numerator / denominator, "fraction"
        else:
            amount, kind = _absolute(lowered, resource=resource, field=field), "absolute"
    except (ValueError, ZeroDivisionError) as err:
        if isinstance(err, ShareError):
            raise
        raise ShareError(f"{field}: {original!r} is not a share; use {allowed}") from None
    if amount < 0:
        raise ShareError(f"{field}: {original!r} is negative; shares are >= 0")
    if kind == "fraction" and amount > 1:
        raise ShareError(f"{field}: {original!r} is more than 100% of the machine")
    if kind == "absolute" and resource is None:
        raise ShareError(
            f"{field}: {original!r} is an absolute amount, but a blanket share applies to every "
            "resource; use a fraction, a percentage or auto"
        )
    return Share(kind, amount, None, text)


def _absolute(text: str, *, resource: str | None, field: str) -> Fraction:
    match = _AMOUNT.match(text.replace(" ", ""))
    if not match:
        raise ValueError(text)
    number = Fraction(match.group("num"))
    suffix = match.group("suffix")
    if not suffix:
        return number
    if resource not in {"memory", "disk", "swap"}:
        raise ShareError(f"{field}: {text!r} has a size suffix, but {resource} is a count")
    kib = number * _BINARY[suffix[0].lower()]
    return kib if resource == "disk" else kib / 1024


def _split_items(text: str) -> list[str]:
    """Split on commas and newlines, but not inside a constraint's parentheses or quotes."""
    items, depth, quote, current = [], 0, False, ""
    for char in text:
        if char == '"':
            quote = not quote
        elif not quote and char in "([{":
            depth += 1
        elif not quote and char in ")]}":
            depth -= 1
        if not quote and depth == 0 and char in ",\n":
            items.append(current)
            current = ""
            continue
        current += char
    items.append(current)
    return [item.strip() for item in items if item.strip()]


def parse_shares(text: str, *, field: str) -> ShareSpec:
    """Parse SLOT_TYPE_<N> text: `cpus=2, ram=50%, 1/4`, `25%`, or one share per line."""
    shares: dict[str, Share] = {}
    default = AUTO
    saw_default = False
    for item in _split_items(text):
        name, sep, value = item.partition("=")
        if not sep:
            if saw_default:
                raise ShareError(f"{field}: {text.strip()!r} has two blanket shares")
            default = parse_share(item, resource=None, field=field)
            saw_default = True
            continue
        name = name.strip()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ShareError(f"{field}: {name!r} is not a resource name")
        _add(shares, name, value, field=field)
    return ShareSpec(shares, default, " ".join(text.split()) or "auto")


def shares_from_map(value: Mapping[str, str | int | float], *, field: str) -> ShareSpec:
    """Shares written as a map; the key `default` holds the blanket share."""
    shares: dict[str, Share] = {}
    default = AUTO
    parts = []
    for name, amount in value.items():
        if name.lower() == "default":
            default = parse_share(amount, resource=None, field=f"{field}.{name}")
            parts.append(str(amount))
            continue
        _add(shares, name, amount, field=f"{field}.{name}")
        parts.append(f"{name}={amount}")
    return ShareSpec(shares, default, ", ".join(parts) or "auto")


def _add(shares: dict[str, Share], name: str, value: str | int | float, *, field: str) -> None:
    canonical = canonical_resource(name)
    key = canonical or name
    if any(existing.lower() == key.lower() for existing in shares):
        raise ShareError(f"{field}: the resource {name!r} is given twice")
    shares[key] = parse_share(value, resource=canonical or key, field=field)
