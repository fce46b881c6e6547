"""kondor_core.api.quantity against the Kubernetes client's own parser.

`kubernetes.utils.quantity.parse_quantity` is the oracle: every quantity Kondor accepts
must have the value the Kubernetes client gives it (in bytes; a bare number is in the
field's HTCondor unit, as quantity.py says), and whatever the client refuses Kondor must
refuse too. Where Kondor refuses what the client accepts, STRICTER says why; where it
accepts what the client refuses, LENIENT does.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Callable
from decimal import Decimal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kubernetes.utils.quantity import parse_quantity as kubernetes_quantity
from pydantic import ValidationError

from kondor_core.api.quantity import Unit, parse_quantity, to_unit
from kondor_core.api.slotpolicy import SlotPolicySpec


def kubernetes(value: str | int | float) -> Decimal | None:
    """The Kubernetes client's value in bytes, or None if it refuses `value`."""
    try:
        result: Decimal = kubernetes_quantity(value)  # type: ignore[no-untyped-call]
    except (ValueError, ArithmeticError):
        return None
    return result


def kondor(value: str | int | float, bare: Unit = Unit.BYTES) -> Decimal | None:
    """Kondor's value in bytes, or None if it refuses `value` (with a ValueError)."""
    try:
        return parse_quantity(value, bare=bare, field="spec.memory")
    except ValueError:
        return None


def _suffix(text: str) -> str:
    match = re.search(r"[A-Za-z]*\s*$", text.strip())
    return match.group(0).strip() if match else ""


#: What Kubernetes' client reads and Kondor deliberately refuses, and how to recognise it.
STRICTER: dict[str, tuple[str, Callable[[str], bool]]] = {
    "negative": (
        "An amount of a resource is >= 0; Kondor refuses a negative quantity, which the client "
        "(and the API server) read.",
        lambda text: text.strip().startswith("-"),
    ),
    "uppercase K": (
        "K is not a Kubernetes suffix (the API server knows k, Ki); the Python client also "
        "reads K as 1000.",
        lambda text: _suffix(text) == "K",
    ),
    "not a decimal": (
        "The Python client hands the number to Python's Decimal, which also reads NaN, "
        "Infinity, underscores (1_000) and non-ASCII digits; the API server reads none of them.",
        lambda text: (
            not text.isascii()
            or "_" in text
            or re.search(r"nan|inf", text, re.IGNORECASE) is not None
        ),
    ),
    "beyond a ClassAd integer": (
        "An amount becomes a ClassAd integer in the field's unit (64-bit, HTCondor's long "
        "long); Kondor refuses more than 2^63 - 1 units, naming the field, which the client "
        "reads as an arbitrary-precision Decimal.",
        lambda text: (kubernetes(text) or 0) > 2**63 - 1,
    ),
}

#: What Kondor reads and the Kubernetes client refuses.
LENIENT: dict[str, tuple[str, Callable[[str], bool]]] = {
    "trailing whitespace": (
        "Kondor ignores whitespace around a quantity (its pattern is ^\\s*...\\s*$); the client "
        "ignores it before the number and before the suffix (Decimal strips it) but not after "
        "the suffix. The API server refuses all of it.",
        lambda text: text != text.rstrip(),
    ),
}


def _why(text: str, table: dict[str, tuple[str, Callable[[str], bool]]]) -> str | None:
    return next((name for name, (_, applies) in table.items() if applies(text)), None)


def check(text: str) -> None:
    """Kondor agrees with the Kubernetes client about `text`, or a listed reason says why not."""
    ours, theirs = kondor(text), kubernetes(text)
    if ours is not None and theirs is not None:
        # The Python client computes with Decimal's default 28 significant digits (the API
        # server's Go code is exact); Kondor is exact: compare at the client's precision.
        rounded = decimal.Context(prec=28).plus(ours)
        assert rounded == theirs, f"{text!r}: Kondor reads {ours}, Kubernetes {theirs}"
    elif ours is not None:
        assert _why(text, LENIENT), f"{text!r}: Kondor reads {ours}, Kubernetes refuses it"
    elif theirs is not None:
        assert _why(text, STRICTER), f"{text!r}: Kondor refuses it, Kubernetes reads {theirs}"


@pytest.mark.parametrize(
    "text",
    [
        *("16Gi", "1Ti", "200Gi", "500M", "1.5Gi", "1Ki", "1Mi", "1Pi", "1Ei", "1.5Ti"),
        *("1k", "1M", "1G", "1T", "1P", "1E", "100m", "1n", "1u", "250m"),
        *("0", "4096", "1e3", "1E3", "2.5e-3k", "1e3Mi", "5.", "+5Gi", "0.5Ki", "12.25Mi"),
        *("16 Gi", " 16Gi"),
    ],
)
def test_kondor_reads_a_quantity_as_kubernetes_does(text: str) -> None:
    ours, theirs = kondor(text), kubernetes(text)
    assert ours is not None and ours == theirs


@pytest.mark.parametrize(
    "text",
    [
        *("16GB", "lots", "1.2.3", "", "Gi", "1ki", "1mi", "1ni", "1ui", "1e", "0x10", "1 0"),
        *("Ki1", "1Kii", "--1", "1iB", "1Gb", "e3", "1e3.5", "1.5e", "1 Gi i", "+"),
    ],
)
def test_what_kubernetes_refuses_kondor_refuses(text: str) -> None:
    assert kubernetes(text) is None
    assert kondor(text) is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("-1Gi", "negative"),
        ("-5", "negative"),
        ("1K", "uppercase K"),
        ("1.5K", "uppercase K"),
        ("NaN", "not a decimal"),
        ("Infinity", "not a decimal"),
        ("1_000Mi", "not a decimal"),
        ("\u0661\u0662Mi", "not a decimal"),  # Arabic-Indic digits
    ],
)
def test_kondor_is_stricter_where_it_says(text: str, reason: str) -> None:
    assert kubernetes(text) is not None
    assert kondor(text) is None
    assert _why(text, STRICTER) == reason


@pytest.mark.parametrize("text", ["16Gi ", " 16Gi ", "500M\n"])
def test_kondor_is_more_lenient_where_it_says(text: str) -> None:
    assert kubernetes(text) is None
    assert kondor(text) == kubernetes(text.strip())
    assert _why(text, LENIENT) == "trailing whitespace"


_SUFFIXES = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"]
_NOT_SUFFIXES = ["K", "ki", "mi", "KI", "i", "B", "GB", "iB", "e", "x", "Gii"]


@st.composite
def quantity_texts(draw: st.DrawFn) -> str:
    """Strings shaped like quantities: sign, digits, a point, an exponent, a suffix."""
    sign = draw(st.sampled_from(["", "", "+", "-"]))
    whole = draw(st.text("0123456789", max_size=8))
    point = draw(st.sampled_from(["", "", "."]))
    fraction = draw(st.text("0123456789", max_size=4)) if point else ""
    exponent = ""
    if draw(st.booleans()):
        exponent = draw(st.sampled_from(["e", "E"])) + draw(st.sampled_from(["", "+", "-"]))
        exponent += draw(st.text("0123456789", min_size=0, max_size=2))
    suffix = draw(st.sampled_from(_SUFFIXES * 3 + _NOT_SUFFIXES))
    space = draw(st.sampled_from(["", "", "", " "]))
    return f"{sign}{whole}{point}{fraction}{exponent}{space}{suffix}"


@settings(max_examples=200, deadline=None)
@given(quantity_texts())
@example("1e3Mi")
@example("1E")
@example("10000000.001e-10Ei")  # 29 significant digits: the client rounds to 28
def test_generated_quantities_agree_with_kubernetes(text: str) -> None:
    check(text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789.eEkKMGTPiun+- _", max_size=8))
def test_any_short_text_agrees_with_kubernetes(text: str) -> None:
    check(text)


@settings(max_examples=100, deadline=None)
@given(quantity_texts(), st.sampled_from(list(Unit)))
def test_whole_units_are_kubernetes_bytes_rounded_down(text: str, unit: Unit) -> None:
    """to_unit: a suffixed quantity in whole `unit`s; a bare number is already in `unit`."""
    theirs = kubernetes(text)
    if kondor(text) is None or theirs is None or theirs >= Decimal(10) ** 24:
        return  # absurd amounts: test_an_absurd_quantity_is_refused_naming_the_field
    bare = not _suffix(text)
    expected = int(theirs // 1) if bare else int(theirs // unit.value)
    assert to_unit(text, unit, field="spec.memory") == expected


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=10**15), st.sampled_from(list(Unit)))
def test_a_bare_integer_is_in_the_fields_unit(number: int, unit: Unit) -> None:
    assert kondor(number, bare=unit) == kubernetes(number) * unit.value  # type: ignore[operator]


@settings(max_examples=100, deadline=None)
@given(st.floats(min_value=0, max_value=1e12, allow_nan=False), st.sampled_from(list(Unit)))
def test_a_bare_float_is_read_by_its_decimal_form(number: float, unit: Unit) -> None:
    """The client reads a float by its binary value (0.1 is 0.1000000000000000055...); Kondor by
    its shortest decimal form, as YAML wrote it, which the client gives for the same text."""
    assert kondor(number, bare=unit) == kubernetes(repr(number)) * unit.value  # type: ignore[operator]


@pytest.mark.parametrize("text", [".5Gi", ".25", "+.5Mi"])
def test_a_quantity_may_start_with_its_decimal_point(text: str) -> None:
    assert kondor(text) == kubernetes(text)


@pytest.mark.parametrize("text", ["1e30", "1e9999999", "1e999999Ei"])
def test_an_absurd_quantity_is_refused_naming_the_field(text: str) -> None:
    """Accepted, or refused with a ValidationError naming the field: never an ArithmeticError."""
    try:
        SlotPolicySpec.model_validate({"reserved": {"memory": text}})
    except ValidationError as err:
        assert "reserved.memory" in str(err)
