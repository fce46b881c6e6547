"""`kondor_core.lazy.cached`: computed once per instance, kept in it, on frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kondor_core.lazy import cached


@dataclass(frozen=True)
class Box:
    value: int
    calls: list[int]

    @cached
    def double(self) -> int:
        """Twice the value."""
        self.calls.append(self.value)
        return self.value * 2


def test_computed_once_per_instance_and_anew_for_a_new_one() -> None:
    calls: list[int] = []
    box = Box(3, calls)
    assert (box.double, box.double) == (6, 6)
    assert calls == [3]
    other = replace(box, value=5)
    assert other.double == 10
    assert calls == [3, 5]
    assert box.__dict__["double"] == 6


def test_the_class_attribute_is_the_descriptor_with_its_doc() -> None:
    assert isinstance(Box.double, cached)
    assert Box.double.__doc__ == "Twice the value."
