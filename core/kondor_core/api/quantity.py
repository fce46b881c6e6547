"""Kubernetes quantities and HTCondor's units, converted in one place.

Inside ClassAds HTCondor counts memory and swap in MiB and disk in KiB
(Memory, Disk, VirtualMemory is KiB too); specs use Kubernetes quantities
(`16Gi`, `500M`). A bare number in a spec means the HTCondor unit of the
field it is in, so an admin can paste numbers from a condor_status ad.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation, localcontext
from enum import Enum

from kondor_core.inputs import CLASSAD_INT_MAX

_SUFFIXES: dict[str, Decimal] = {
    "Ki": Decimal(1024),
    "Mi": Decimal(1024**2),
    "Gi": Decimal(1024**3),
    "Ti": Decimal(1024**4),
    "Pi": Decimal(1024**5),
    "Ei": Decimal(1024**6),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
# Kubernetes' <number> ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
_QUANTITY = re.compile(
    r"^\s*([+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]{0,2})\s*$"
)
#: Decimal digits above which a quantity is refused before any arithmetic: beyond every
#: ClassAd integer in any unit (2^63 KiB is 9.4e21 bytes), so arithmetic on it stays exact.
_MAX_ADJUSTED_EXPONENT = 30


class Unit(Enum):
    """The HTCondor unit a bare number stands for, with its size in bytes."""

    BYTES = 1
    KIB = 1024
    MIB = 1024**2


def parse_quantity(value: str | int | float, *, bare: Unit, field: str) -> Decimal:
    """Return the bytes in `value`: a Kubernetes quantity, or a bare number in `bare` units.

    Raises ValueError naming `field`, the value and the accepted forms; an amount beyond
    what a ClassAd integer holds in the field's unit is refused with the largest allowed.
    """
    if isinstance(value, bool):
        raise ValueError(f"{field}: {value!r} is not a quantity")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{field}: {value!r} is not a quantity; NaN and infinity are not amounts")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"{field}: {value!r} is negative; quantities are >= 0")
        return _bounded(Decimal(str(value)), Decimal(bare.value), value, bare, field)
    if not isinstance(value, str):
        raise ValueError(f"{field}: {value!r} is not a quantity")
    match = _QUANTITY.match(value)
    if not match or match.group(2) not in _SUFFIXES:
        raise ValueError(
            f"{field}: {value!r} is not a quantity; use a Kubernetes quantity such as 16Gi, "
            f"500M or 1.5Ti, or a bare number meaning {bare.name}"
        )
    try:
        number = Decimal(match.group(1))
    except InvalidOperation as err:  # pragma: no cover - the regex admits only decimals
        raise ValueError(f"{field}: {value!r} is not a number") from err
    suffix = match.group(2)
    return _bounded(
        number, _SUFFIXES[suffix] if suffix else Decimal(bare.value), value, bare, field
    )


def _bounded(
    number: Decimal, scale: Decimal, value: str | int | float, bare: Unit, field: str
) -> Decimal:
    """`number * scale` bytes, refused when it is more `bare` units than a ClassAd holds."""
    if number and number.adjusted() > _MAX_ADJUSTED_EXPONENT:
        raise ValueError(_too_large(value, bare, field))
    with localcontext() as context:
        context.prec = 80
        amount = number * scale
        if amount // bare.value > CLASSAD_INT_MAX:
            raise ValueError(_too_large(value, bare, field))
    return amount


def _too_large(value: str | int | float, bare: Unit, field: str) -> str:
    unit = {Unit.BYTES: "bytes", Unit.KIB: "KiB", Unit.MIB: "MiB"}[bare]
    return (
        f"{field}: {value!r} is too large; in {unit}, as a ClassAd holds it, the amount is at "
        f"most {CLASSAD_INT_MAX} (2^63 - 1)"
    )


def to_unit(value: str | int | float, unit: Unit, *, field: str) -> int:
    """Parse `value` (bare numbers in `unit`) and return it in whole `unit`s, rounded down.

    A ClassAd integer holds the result: larger amounts are refused by parse_quantity."""
    amount = parse_quantity(value, bare=unit, field=field)
    with localcontext() as context:
        context.prec = 80
        return int(amount // unit.value)


def format_quantity(amount: int, unit: Unit) -> str:
    """Render `amount` `unit`s as the shortest exact binary Kubernetes quantity (`16Gi`)."""
    total = amount * unit.value
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        size = int(_SUFFIXES[suffix])
        if total and total % size == 0:
            return f"{total // size}{suffix}"
    return str(total)
