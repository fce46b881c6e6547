"""HTCondor's configuration functions (`$INT(...)`, `$EVAL(...)`, `$RANDOM_INTEGER(...)`, ...),
evaluated when the SlotPolicy is compiled.

As HTCondor's "Configuration Macros" describe them: each takes macro names or text (with
its $(...) already expanded by the caller), and the ones that evaluate (`$INT`, `$REAL`,
`$STRING`, `$EVAL`, `$CHOICE`'s index) read a ClassAd expression with no ad. Where the
inputs are not known when the policy is compiled (an expression over the slot's
attributes, the node's environment, file names of the node) the function is refused with
the reason, since Kondor compiles one policy for many nodes.

`$RANDOM_INTEGER` and `$RANDOM_CHOICE` choose as HTCondor does, from the range or list
given, but with a choice seeded by the knob and the arguments, so that compiling the same
SlotPolicy twice gives the same policy (and the same policy hash): HTCondor picks anew
each time a daemon reads its configuration.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

from kondor_core.classads import ExpressionError, evaluate, is_error, is_undefined

#: Functions HTCondor documents; a `$NAME(` with another name is left as text.
FUNCTIONS = frozenset(
    {
        "INT",
        "REAL",
        "STRING",
        "EVAL",
        "CHOICE",
        "RANDOM_CHOICE",
        "RANDOM_INTEGER",
        "SUBSTR",
        "ENV",
        "DIRNAME",
        "BASENAME",
    }
)
_FILENAME = re.compile(r"F[fpdnxbqaw]*", re.IGNORECASE)


class FunctionError(Exception):
    """A configuration function that cannot be evaluated at compile time; the message says why."""


def is_function(name: str) -> bool:
    return name.upper() in FUNCTIONS or bool(_FILENAME.fullmatch(name))


def call(
    name: str,
    args: list[str],
    *,
    lookup: Callable[[str], str | None],
    seed: str,
) -> str:
    """The value of `$name(args)`; `lookup` gives a macro's expanded value (None if undefined).

    Raises FunctionError naming the function and why it cannot be evaluated.
    """
    upper = name.upper()
    text = f"${name}({', '.join(args)})"
    if upper in {"INT", "REAL", "STRING", "EVAL"}:
        if not args or not args[0]:
            raise FunctionError(f"{text} needs an argument")
        value = _evaluate(text, _item(args[0], lookup))
        return _format(text, upper, value, args[1] if len(args) > 1 else None)
    if upper == "RANDOM_INTEGER":
        return _random_integer(text, args, seed)
    if upper == "RANDOM_CHOICE":
        if not args or not any(args):
            raise FunctionError(f"{text}: no list to choose from")
        return args[_pick(seed, text, len(args))]
    if upper == "CHOICE":
        return _choice(text, args, lookup)
    if upper == "SUBSTR":
        return _substr(text, args, lookup)
    if upper == "ENV":
        raise FunctionError(
            f"{text} reads the environment of the daemon that reads the configuration, "
            "which a SlotPolicy compiled for many nodes does not have; write the value"
        )
    raise FunctionError(
        f"{text} works on file names of the node's HTCondor installation, which a "
        "SlotPolicy compiled for many nodes does not have; write the value"
    )


def _item(argument: str, lookup: Callable[[str], str | None]) -> str:
    """A function's item: the value of the macro it names, else the text itself. (HTCondor
    25 expands `$INT(NAME:default)` to nothing; Kondor reads it as text, and refuses it.)"""
    text = argument.strip()
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", text):
        value = lookup(text)
        if value is not None:
            return value
    return text


def _evaluate(text: str, expression: str) -> object:
    try:
        value = evaluate(expression, field=text)
    except ExpressionError as err:
        raise FunctionError(f"{text}: {expression!r} is not a ClassAd expression ({err})") from None
    if is_undefined(value) or is_error(value):
        state = "UNDEFINED" if is_undefined(value) else "ERROR"
        raise FunctionError(
            f"{text}: {expression!r} is {state} when the policy is compiled; a configuration "
            "function can use only values known then, not the slot's or the job's attributes"
        )
    return value


def _format(text: str, kind: str, value: object, fmt: str | None) -> str:
    if kind == "EVAL":
        return _unparse(value)
    if kind == "STRING":
        if not isinstance(value, str):
            raise FunctionError(f"{text}: {_unparse(value)} is not a string")
        return value if fmt is None else _printf(text, fmt, value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FunctionError(f"{text}: {_unparse(value)} is not a number")
    number: int | float = int(value) if kind == "INT" else float(value)
    if fmt is not None:
        return _printf(text, fmt, number)
    return str(number) if kind == "INT" else repr(number)


def _printf(text: str, fmt: str, value: object) -> str:
    try:
        return fmt.strip() % value
    except (TypeError, ValueError):
        raise FunctionError(f"{text}: {fmt.strip()!r} is not a format for {value!r}") from None


def _unparse(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


def _pick(seed: str, text: str, count: int) -> int:
    digest = hashlib.sha256(f"{seed}\0{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % count


def _whole(text: str, argument: str, what: str) -> int:
    try:
        return int(argument.strip())
    except ValueError:
        raise FunctionError(f"{text}: {what} {argument.strip()!r} is not a whole number") from None


def _random_integer(text: str, args: list[str], seed: str) -> str:
    if len(args) not in {2, 3}:
        raise FunctionError(f"{text} takes min, max and an optional step")
    low, high = _whole(text, args[0], "min"), _whole(text, args[1], "max")
    step = _whole(text, args[2], "step") if len(args) == 3 else 1
    if step < 1:
        raise FunctionError(f"{text}: the step must be 1 or more")
    if low > high:
        raise FunctionError(f"{text}: min > max")
    return str(low + step * _pick(seed, text, (high - low) // step + 1))


def _choice(text: str, args: list[str], lookup: Callable[[str], str | None]) -> str:
    if len(args) < 2:
        raise FunctionError(f"{text} takes an index and a list (or the name of one)")
    index = _evaluate(text, _item(args[0], lookup))
    if isinstance(index, bool) or not isinstance(index, int):
        raise FunctionError(f"{text}: the index {_unparse(index)} is not a whole number")
    items = args[1:]
    if len(items) == 1:
        listed = lookup(items[0].strip())
        if listed is None:
            raise FunctionError(f"{text}: no list named {items[0].strip()}")
        items = [item.strip() for item in listed.split(",")]
    if not 0 <= index < len(items):
        raise FunctionError(f"{text}: index {index} is out of range (0 to {len(items) - 1})")
    return items[index]


def _substr(text: str, args: list[str], lookup: Callable[[str], str | None]) -> str:
    if len(args) not in {2, 3}:
        raise FunctionError(f"{text} takes a macro name, a start and an optional length")
    value = lookup(args[0].strip())
    if value is None:
        raise FunctionError(f"{text}: {args[0].strip()} is not defined")
    start = _whole(text, args[1], "start")
    start = max(len(value) + start, 0) if start < 0 else min(start, len(value))
    if len(args) == 2:
        return value[start:]
    length = _whole(text, args[2], "length")
    end = len(value) + length if length < 0 else start + length
    return value[start : max(end, start)]
