"""Kubernetes quantities and HTCondor's bare units."""

from __future__ import annotations

import pytest

from kondor_core.api.quantity import Unit, format_quantity, to_unit


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [
        ("16Gi", Unit.MIB, 16384),
        ("1Ti", Unit.KIB, 1024**3),
        ("200Gi", Unit.KIB, 200 * 1024**2),
        ("500M", Unit.MIB, 476),  # 500e6 bytes, rounded down to whole MiB
        ("1.5Gi", Unit.MIB, 1536),
        (4096, Unit.MIB, 4096),  # a bare number is in the field's unit
        ("4096", Unit.MIB, 4096),
        (10240, Unit.KIB, 10240),
        ("1e3", Unit.MIB, 1000),
        (0, Unit.MIB, 0),
    ],
)
def test_quantities_convert_to_htcondor_units(value: str | int, unit: Unit, expected: int) -> None:
    assert to_unit(value, unit, field="memory") == expected


@pytest.mark.parametrize("value", ["16 GB", "lots", "-1Gi", "1.2.3", "", "Gi", True])
def test_bad_quantities_name_field_value_and_forms(value: object) -> None:
    with pytest.raises(ValueError) as err:
        to_unit(value, Unit.MIB, field="spec.reserved.memory")  # type: ignore[arg-type]
    assert "spec.reserved.memory" in str(err.value)


def test_negative_bare_number_is_refused() -> None:
    with pytest.raises(ValueError, match=r"negative"):
        to_unit(-5, Unit.MIB, field="memory")


@pytest.mark.parametrize(
    ("amount", "unit", "text"),
    [
        (16384, Unit.MIB, "16Gi"),
        (1536, Unit.MIB, "1536Mi"),
        (3, Unit.BYTES, "3"),
        (0, Unit.MIB, "0"),
    ],
)
def test_format_quantity(amount: int, unit: Unit, text: str) -> None:
    assert format_quantity(amount, unit) == text
