"""`cached`: `functools.cached_property` without Python 3.11's lock.

Python 3.8-3.11's `cached_property` takes one lock per property for every instance of the
class, so threads stepping many agents (the fleet benchmark's 500 agents per process, 16
threads) wait on each other's first access to unrelated startds; Python 3.12 dropped the lock
for that reason. Two threads computing the same value at once both compute it; the values are
pure functions of a frozen object, so either is right.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class cached(Generic[T]):  # noqa: N801 - used as a decorator, like cached_property
    """A value computed on first access and kept in the instance's `__dict__` (which the
    lookup then finds first): for frozen dataclasses, as `cached_property`."""

    def __init__(self, func: Callable[[Any], T]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type[Any] | None = None) -> cached[T]: ...
    @overload
    def __get__(self, instance: object, owner: type[Any] | None = None) -> T: ...
    def __get__(self, instance: object | None, owner: type[Any] | None = None) -> T | cached[T]:
        if instance is None:
            return self
        value = self.func(instance)
        instance.__dict__[self.name] = value
        return value
