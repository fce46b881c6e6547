"""Reading an HTCondor configuration snippet into an ordered macro table.

The language is HTCondor's, as the manual's "Introduction to Configuration"
describes it:

- `NAME = value`; names are case-insensitive and a later definition replaces an
  earlier one. A definition that refers to itself (`X = $(X) more`) is expanded
  against the previous value at once, so it appends.
- `$(NAME)` is expanded when the value is used (a later definition of NAME
  changes every value that refers to it), recursively; `$(NAME:default)` falls
  back to `default` when NAME is undefined or empty; `$(DOLLAR)` is a `$`.
  `$$(ATTR)` (match-time substitution) is left as it is.
- a line ending in `\\` continues on the next; `NAME @=tag` ... `@tag` holds a
  multi-line value; a line starting with `#` is a comment.
- configuration functions (`$INT(...)`, `$EVAL(...)`, `$RANDOM_INTEGER(...)`, ...), evaluated
  at compile time where their inputs are known (kondor_core.config.functions).
- `if` / `elif` / `else` / `endif` with `defined NAME`, `version >= X.Y[.Z]` (the
  HTCondor version Kondor follows), `true`/`false`/`yes`/`no`, a number, or a `$(...)`
  that expands to one, each optionally negated with `!`.
- the obsolete `NAME : value` is read as `NAME = value`, with a warning, as HTCondor does.
- `use CATEGORY : Template[(args)][, Template...]` applies HTCondor's templates
  (kondor_core.config.templates); `error :` and `warning :` lines.
- `STARTD.NAME = value` applies to the startd and wins over `NAME`; a knob for
  another daemon (`SCHEDD.NAME`) is reported and ignored.

Unlike HTCondor, a reference to a macro nothing defines is an error naming the
macro and where it was used, not an empty string: it is almost always a typo.

Expansion is bounded, since the snippet comes from a user and is expanded inside the
operator's admission webhook and the agent: a value may expand to at most
`MAX_EXPANSION_LENGTH` characters (a macro that doubles another, forty times, would fill the
memory) through at most `MAX_EXPANSION_DEPTH` nested references (a long chain would exhaust
the interpreter's recursion limit). Either bound is a MacroError naming the knob.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache

from kondor_core.config.functions import FunctionError, call, is_function
from kondor_core.config.htcondor_defaults import HTCONDOR_VERSION
from kondor_core.config.templates import BUILTIN_MACROS, TEMPLATES, known_templates
from kondor_core.errors import KondorError

SOURCE = "condorConfig"
BUILTIN = "built-in"
_MAX_TEMPLATE_DEPTH = 16

#: The longest value a macro may expand to, in characters (HTCondor's own configuration
#: files hold nothing near it; the largest template expands to about 2,000).
MAX_EXPANSION_LENGTH = 256 * 1024
#: How deeply $(...) references may nest, through macros or inside one another.
MAX_EXPANSION_DEPTH = 64

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\s*=(.*)", re.DOTALL)
_BLOCK = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\s*@=\s*(\w+)\s*")
_USE = re.compile(r"use\s+(\w+)\s*:\s*(.*)", re.IGNORECASE | re.DOTALL)
_DIRECTIVE = re.compile(r"(error|warning)\s*:\s*(.*)", re.IGNORECASE | re.DOTALL)
_FUNCTION = re.compile(r"\$([A-Za-z_]+)\(")
_COLON_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\s*:(.*)", re.DOTALL)
_VERSION = re.compile(r"version\s*(==|!=|>=|<=|>|<)\s*(\d+\.\d+(?:\.\d+)?)\s*", re.IGNORECASE)
_INCLUDE = re.compile(r"include\s*(?:\w+\s*)?:.*", re.IGNORECASE | re.DOTALL)
_CONDITION = re.compile(r"(if|elif)(?=[\s!])(.*)", re.IGNORECASE | re.DOTALL)
_BARE_KEYWORD = re.compile(r"(else|endif)", re.IGNORECASE)
_TEMPLATE_ITEM = re.compile(r"(\w+)\s*(?:\((.*)\))?", re.DOTALL)
_METAKNOB_ARG = re.compile(r"(\d)([?#+]?)(?::(.*))?", re.DOTALL)


@dataclass(frozen=True)
class Origin:
    """Where a definition came from: a snippet line (maybe a template it used), spec.macros, or
    Kondor's built-ins."""

    line: int = 0
    text: str = ""
    template: str | None = None
    source: str = SOURCE

    def label(self, name: str) -> str:
        """How problems name the definition: `condorConfig line 4 (SLOT_TYPE_1)`."""
        if self.source == BUILTIN:
            return f"the built-in macro {name}"
        if self.source != SOURCE:
            return self.source
        via = f", from use {self.template}" if self.template else ""
        return f"condorConfig line {self.line} ({name}{via})"


@dataclass(frozen=True)
class Definition:
    """One macro: its name as last written, its unexpanded value, and where it came from."""

    name: str
    value: str
    origin: Origin
    #: The upper-case name, which macro names are compared by (computed once: expansion
    #: compares it with every definition on the stack at each reference).
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", self.name.upper())

    @property
    def is_builtin(self) -> bool:
        return self.origin.source == BUILTIN


#: A definition's upper-case name, for `in map(_KEY_OF, stack)`.
_KEY_OF = operator.attrgetter("key")


class SnippetError(KondorError):
    """A line of the snippet that cannot be read; the message names the line and its text."""

    def __init__(self, line: int, text: str, reason: str) -> None:
        super().__init__(f"condorConfig line {line}: {text.strip()!r}: {reason}")
        self.line = line
        self.text = text
        self.reason = reason


class MacroError(KondorError):
    """A $(NAME) that cannot be expanded: nothing defines it, or it refers back to itself.

    `key` is the same for every report of one mistake, whichever knob reached it.
    """

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key or message


@dataclass(frozen=True)
class Expansion:
    """An expanded value and the macros it used (upper case), for the unknown-knob report."""

    value: str
    used: frozenset[str]


class MacroTable:
    """Macros by upper-case name, in definition order, with HTCondor's lazy $(NAME) expansion.

    Treat it as immutable: `with_macros` returns a new table. Expansions are cached.
    """

    def __init__(self, definitions: Mapping[str, Definition]) -> None:
        self._definitions = dict(definitions)
        self._cache: dict[str, Expansion] = {}
        self._user: list[Definition] | None = None

    @property
    def definitions(self) -> Mapping[str, Definition]:
        return self._definitions

    def user_definitions(self) -> list[Definition]:
        """Definitions from the snippet, its templates or spec.macros (not the built-ins)."""
        if self._user is None:
            self._user = [d for d in self._definitions.values() if not d.is_builtin]
        return list(self._user)

    def get(self, name: str) -> Definition | None:
        """The definition the startd sees for `name`: `STARTD.NAME` first, then `NAME`."""
        upper = name.upper()
        return self._definitions.get(f"STARTD.{upper}") or self._definitions.get(upper)

    def is_defined(self, name: str) -> bool:
        """HTCondor's `defined NAME`: a definition with a non-empty value."""
        definition = self.get(name)
        return definition is not None and bool(definition.value.strip())

    def value(self, name: str) -> Expansion | None:
        """`name`'s value with every $(...) expanded, or None if nothing defines it."""
        definition = self.get(name)
        if definition is None:
            return None
        return self._expand_definition(definition, (), 0)

    def expand(self, text: str, *, owner: Definition) -> Expansion:
        """Expand the $(...) in `text`, which belongs to `owner` (for error messages)."""
        used: set[str] = set()
        value = self._expand(text, (owner,), used, 0)
        return Expansion(value, frozenset(used))

    def with_macros(self, macros: Mapping[str, str], *, source: str) -> MacroTable:
        """A table with `macros` defined last (`source.NAME` names each in messages)."""
        definitions = dict(self._definitions)
        for name, value in macros.items():
            previous = definitions.pop(name.upper(), None)
            origin = Origin(source=f"{source}.{name}")
            definitions[name.upper()] = Definition(
                name, _append_self(name, value, previous), origin
            )
        return MacroTable(definitions)

    def _expand_definition(
        self, definition: Definition, stack: tuple[Definition, ...], level: int
    ) -> Expansion:
        key = definition.key
        cached = self._cache.get(key)
        if cached is not None and self.get(definition.name) is definition:
            return cached
        used: set[str] = set()
        value = self._expand(definition.value, (*stack, definition), used, level)
        expansion = Expansion(value.strip(), frozenset(used))
        if self.get(definition.name) is definition:
            self._cache[key] = expansion
        return expansion

    def _expand(self, text: str, stack: tuple[Definition, ...], used: set[str], level: int) -> str:
        """`text` with its $(...) expanded; `level` counts the references around it."""
        if level > MAX_EXPANSION_DEPTH:
            raise MacroError(
                f"{_knob_where(stack)}: macros nest more than {MAX_EXPANSION_DEPTH} deep "
                f"(reached by {' -> '.join(d.name for d in stack[-8:])}); "
                "shorten the chain of $(...) references",
                key="depth",
            )
        out: list[str] = []
        size = 0
        index = 0
        while (start := text.find("$", index)) >= 0:
            out.append(text[index:start])
            if text.startswith("$$(", start):
                close = _close_paren(text, start + 2)
                end = len(text) if close < 0 else close + 1
                out.append(text[start:end])
                index = end
            elif text.startswith("$(", start):
                close = _close_paren(text, start + 1)
                if close < 0:
                    raise MacroError(
                        f"{_where(stack)}: '$(' has no closing ')' in {text.strip()!r}"
                    )
                expanded = self._reference(text[start + 2 : close], stack, used, level + 1)
                out.append(expanded)
                size += start - index + len(expanded)
                if size > MAX_EXPANSION_LENGTH:
                    reached = ""
                    if len(stack) > 1:
                        reached = f", reached by {' -> '.join(d.name for d in stack[:8])}"
                    raise MacroError(
                        f"{_where(stack)}: expands to more than {MAX_EXPANSION_LENGTH} "
                        f"characters (at $({text[start + 2 : close].strip()[:40]}){reached}); "
                        "a macro that repeats another several times multiplies its length",
                        key=f"length {stack[-1].name.upper()}",
                    )
                index = close + 1
            elif (function := _FUNCTION.match(text, start)) and is_function(function.group(1)):
                close = _close_paren(text, function.end() - 1)
                if close < 0:
                    raise MacroError(
                        f"{_where(stack)}: '{function.group(0)}' has no closing ')' in "
                        f"{text.strip()!r}"
                    )
                inner = text[function.end() : close]
                expanded = self._function(function.group(1), inner, stack, used, level + 1)
                out.append(expanded)
                size += start - index + len(expanded)
                index = close + 1
            else:
                out.append("$")
                index = start + 1
        out.append(text[index:])
        return "".join(out)

    def _function(
        self, name: str, inner: str, stack: tuple[Definition, ...], used: set[str], level: int
    ) -> str:
        """`$name(inner)`: its arguments expanded, then the configuration function applied."""
        args = _split_top(self._expand(inner, stack, used, level)) if inner.strip() else []

        def lookup(macro: str) -> str | None:
            definition = self.get(macro)
            if definition is None:
                return None
            used.add(definition.name.upper())
            expansion = self._expand_definition(definition, stack, level)
            used.update(expansion.used)
            return expansion.value

        try:
            return call(name, args, lookup=lookup, seed=stack[0].name.upper())
        except FunctionError as err:
            raise MacroError(f"{_where(stack)}: {err}") from None

    def _reference(
        self, inner: str, stack: tuple[Definition, ...], used: set[str], level: int
    ) -> str:
        name_part, has_default, default = _split_default(inner)
        name = self._expand(name_part, stack, used, level) if "$" in name_part else name_part
        name = name.strip()
        if name.upper() == "DOLLAR":
            return "$"
        if not _NAME.fullmatch(name):
            raise MacroError(f"{_where(stack)}: $({inner}) does not name a macro")
        definition = self.get(name)
        if definition is not None and (definition.value.strip() or not has_default):
            if definition.key in map(_KEY_OF, stack):  # C-level: this runs at every reference
                chain = [d.key for d in stack]
                cycle = " -> ".join([*(d.name for d in stack), definition.name])
                members = sorted({d.key for d in stack[chain.index(definition.key) :]})
                raise MacroError(
                    f"{_where(stack)}: $({name}) refers back to itself: {cycle}",
                    key=f"cycle {' '.join(members)}",
                )
            used.add(definition.key)
            expansion = self._expand_definition(definition, stack, level)
            used.update(expansion.used)
            return expansion.value
        if has_default:
            return self._expand(default, stack, used, level)
        reached = ""
        if len(stack) > 1:
            reached = f" (reached by {' -> '.join(d.name for d in stack)})"
        raise MacroError(
            f"{_where(stack)}: $({name}) is not defined{reached}; define {name} in condorConfig "
            "or spec.macros, or write $(" + name + ":default)",
            key=f"missing {_where(stack)} {name.upper()}",
        )


def _where(stack: tuple[Definition, ...]) -> str:
    owner = stack[-1]
    return owner.origin.label(owner.name)


def _knob_where(stack: tuple[Definition, ...]) -> str:
    """The knob whose expansion went too far (the outermost definition), for the bounds."""
    owner = stack[0]
    return owner.origin.label(owner.name)


def _close_paren(text: str, open_index: int) -> int:
    """Index of the ')' matching the '(' at `open_index`, or -1."""
    close = text.find(")", open_index)
    if text.startswith("(", open_index) and text.find("(", open_index + 1, close) < 0:
        return close  # nothing nested (the common case, found without a Python loop)
    depth = 0
    for index in range(open_index, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return index
    return -1


def _split_default(inner: str) -> tuple[str, bool, str]:
    """Split `NAME:default` at the first ':' outside nested parentheses."""
    if ":" not in inner:
        return inner, False, ""
    depth = 0
    for index, char in enumerate(inner):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == ":" and depth == 0:
            return inner[:index], True, inner[index + 1 :]
    return inner, False, ""


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses and quotes; items stripped."""
    items: list[str] = []
    depth, quoted = 0, False
    current: list[str] = []
    for char in text:
        if char == '"':
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
        elif not quoted and char == ")":
            depth -= 1
        if char == "," and depth == 0 and not quoted:
            items.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    items.append("".join(current).strip())
    return items


def _append_self(name: str, value: str, previous: Definition | None) -> str:
    """Expand `$(NAME)` inside NAME's own new value against its previous value (appending)."""
    if name.upper() not in value.upper():
        return value  # no $(NAME) in it; spares compiling a pattern per definition
    pattern = re.compile(r"\$\(\s*" + re.escape(name) + r"\s*(?::([^()]*))?\)", re.IGNORECASE)
    if not pattern.search(value):
        return value
    before = previous.value if previous is not None and previous.value.strip() else None
    grown = len(value) + len(pattern.findall(value)) * len(before or "")
    if grown > MAX_EXPANSION_LENGTH:
        raise MacroError(
            f"{name}: appending to its own value makes it longer than {MAX_EXPANSION_LENGTH} "
            "characters; a value that repeats $(" + name + ") doubles with every line",
            key=f"length {name.upper()}",
        )

    def replace(match: re.Match[str]) -> str:
        if before is not None:
            return before
        return match.group(1) or ""

    return pattern.sub(replace, value)


def substitute_template_args(text: str, args: list[str]) -> str:
    """Replace a metaknob's `$(1)`, `$(2:default)`, `$(3+)`, `$(1?)`, `$(0#)`, `$(0)` with `args`.

    As HTCondor's param_info.in describes metaknob arguments; nested forms such as
    `$(NUM_SLOTS_TYPE_$(1:1))` are substituted inside out. Other `$(NAME)` stay.
    """
    out: list[str] = []
    index = 0
    while (start := text.find("$(", index)) >= 0:
        close = _close_paren(text, start + 1)
        if close < 0:
            break
        inner = substitute_template_args(text[start + 2 : close], args)
        out.append(text[index:start])
        out.append(_template_arg(inner, args))
        index = close + 1
    out.append(text[index:])
    return "".join(out)


def _template_arg(inner: str, args: list[str]) -> str:
    match = _METAKNOB_ARG.fullmatch(inner)
    if match is None:
        return f"$({inner})"
    number, kind, default = int(match.group(1)), match.group(2), match.group(3)
    if kind == "?":
        given = any(args) if number == 0 else number <= len(args) and bool(args[number - 1])
        return "1" if given else "0"
    if kind == "#":
        return str(len(args))
    if kind == "+" or number == 0:
        value = ", ".join(args[max(number, 1) - 1 :])
    else:
        value = args[number - 1] if number <= len(args) else ""
    if not value and default is not None:
        return default
    return value


@dataclass(frozen=True)
class _Line:
    """A logical line: continuations joined, or a whole `@=tag` block."""

    number: int
    text: str
    content: str
    block: tuple[str, str] | None = None
    error: str | None = None


def _logical_lines(text: str) -> Iterator[_Line]:
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        raw = lines[index]
        block = _BLOCK.fullmatch(raw.strip())
        if block is not None:
            name, tag = block.groups()
            body, after, closed = _block_body(lines, index + 1, tag)
            error = None if closed else f"the multi-line value of {name} has no closing @{tag} line"
            yield _Line(index + 1, raw, raw, (name, body), error)
            index = after
            continue
        number = index + 1
        content = raw
        while content.rstrip().endswith("\\") and index + 1 < len(lines):
            index += 1
            content = content.rstrip()[:-1] + lines[index].lstrip()
        if content.rstrip().endswith("\\"):
            content = content.rstrip()[:-1]
        yield _Line(number, raw, content)
        index += 1


def _block_body(lines: list[str], start: int, tag: str) -> tuple[str, int, bool]:
    """Lines of an `@=tag` block from `start` up to `@tag`; the index after it; whether closed."""
    body: list[str] = []
    index = start
    while index < len(lines):
        if lines[index].strip() == f"@{tag}":
            return "\n".join(body), index + 1, True
        body.append(lines[index])
        index += 1
    return "\n".join(body), index, False


def _truth(value: str) -> bool | None:
    """HTCondor's truth of a condition value: true/false/yes/no or a number; None if neither."""
    lowered = value.strip().lower()
    if lowered in {"true", "yes", "t", "y"}:
        return True
    if lowered in {"false", "no", "f", "n", ""}:
        return False
    try:
        return float(lowered) != 0
    except ValueError:
        return None


@dataclass
class _Branch:
    active: bool
    taken: bool
    parent_active: bool
    line: _Line
    seen_else: bool = False


@dataclass(frozen=True)
class Snippet:
    """A parsed snippet: its macro table (built-ins included), the templates it used, and every
    problem found (the parser carries on after a bad line so all of them are reported)."""

    table: MacroTable
    templates: tuple[str, ...] = ()
    errors: tuple[SnippetError, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass
class _Reader:
    """Reads snippet text (and the templates it uses) into definitions; collects errors."""

    definitions: dict[str, Definition]
    errors: list[SnippetError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    templates: list[str] = field(default_factory=list)

    def read(self, text: str, use: Origin | None = None, depth: int = 0) -> None:
        branches: list[_Branch] = []
        for line in _logical_lines(text):
            if self._statement(line, branches, use, depth):
                return  # as in HTCondor, an `error :` line stops the template
        for branch in branches:
            self._fail(branch.line, use, "this if has no endif")

    def _statement(
        self, line: _Line, branches: list[_Branch], use: Origin | None, depth: int
    ) -> bool:
        """Apply one logical line; True when an `error :` line ends a template."""
        content = line.content.strip()
        if line.block is None and (not content or content.startswith("#")):
            return False
        if line.block is None and self._conditional(content, line, branches, use):
            return False
        if line.error is not None:
            self._fail(line, use, line.error)
            return False
        if branches and not branches[-1].active:
            return False
        if line.block is not None:
            self._assign(line.block[0], line.block[1], line, use)
        elif directive := _DIRECTIVE.fullmatch(content):
            kind, message = directive.group(1).lower(), directive.group(2).strip()
            return self._directive(kind, message, line, use) and use is not None
        elif use_match := _USE.fullmatch(content):
            self._use(use_match.group(1), use_match.group(2), line, use, depth)
        elif _INCLUDE.fullmatch(content):
            self._fail(
                line,
                use,
                "include is not supported: a SlotPolicy cannot read the node's "
                "files; put the configuration in condorConfig",
            )
        elif assign := _ASSIGN.fullmatch(content):
            self._assign(assign.group(1), assign.group(2).strip(), line, use)
        elif colon := _COLON_ASSIGN.fullmatch(content):
            # HTCondor still reads `NAME : value`, warning "obsolete use of ':' for parameter
            # assignment".
            name = colon.group(1)
            self.notes.append(
                f"{self._origin(line, use).label(name)}: obsolete use of ':' for parameter "
                f"assignment; write {name} = {colon.group(2).strip()}"
            )
            self._assign(name, colon.group(2).strip(), line, use)
        else:
            self._fail(
                line,
                use,
                "not a configuration statement; expected NAME = value, "
                "NAME @=tag, use CATEGORY : Template, if/elif/else/endif, or a # comment",
            )
        return False

    def _conditional(
        self, content: str, line: _Line, branches: list[_Branch], use: Origin | None
    ) -> bool:
        active = branches[-1].active if branches else True
        if match := _CONDITION.fullmatch(content):
            keyword, condition = match.group(1).lower(), match.group(2)
            if keyword == "if":
                value = active and self._condition(condition, line, use)
                branches.append(_Branch(value, value, active, line))
            elif not branches:
                self._fail(line, use, "elif without an if before it")
            elif branches[-1].seen_else:
                self._fail(line, use, "elif after else")
            else:
                branch = branches[-1]
                value = branch.parent_active and not branch.taken
                value = value and self._condition(condition, line, use)
                branch.active, branch.taken = value, branch.taken or value
            return True
        if match := _BARE_KEYWORD.fullmatch(content):
            keyword = match.group(1).lower()
            if not branches:
                self._fail(line, use, f"{keyword} without an if before it")
            elif keyword == "endif":
                branches.pop()
            elif branches[-1].seen_else:
                self._fail(line, use, "a second else for the same if")
            else:
                branch = branches[-1]
                branch.active = branch.parent_active and not branch.taken
                branch.taken = branch.seen_else = True
            return True
        return False

    def _condition(self, text: str, line: _Line, use: Origin | None) -> bool:
        condition = text.strip()
        negate = False
        while condition.startswith("!"):
            negate, condition = not negate, condition[1:].strip()
        table = MacroTable(self.definitions)
        owner = Definition("if", condition, self._origin(line, use))
        try:
            defined = re.fullmatch(r"defined\s+(.+)", condition, re.IGNORECASE | re.DOTALL)
            if defined is not None:
                name = table.expand(defined.group(1), owner=owner).value.strip()
                return table.is_defined(name) != negate
            if re.match(r"version\b", condition, re.IGNORECASE):
                return self._version(condition, line, use) != negate
            value = table.expand(condition, owner=owner).value
        except MacroError as err:
            self._fail(line, use, str(err))
            return False
        truth = _truth(value)
        if truth is None:
            self._fail(
                line,
                use,
                f"the condition {value.strip()!r} is not true, false, yes, no or "
                "a number (write 'defined NAME' to test whether NAME is set)",
            )
            return False
        return truth != negate

    def _version(self, condition: str, line: _Line, use: Origin | None) -> bool:
        """`if version >= 9.0`: against the HTCondor version whose configuration Kondor
        follows (HTCONDOR_VERSION). A version of two parts compares two parts
        ("Configuration File Conditionals"); HTCondor refuses one part, and so does Kondor."""
        match = _VERSION.fullmatch(condition)
        if match is None:
            self._fail(
                line,
                use,
                "a version condition is `version <op> X.Y[.Z]` (a version literal needs at "
                "least two parts) with op one of "
                "==, !=, <, <=, >, >=",
            )
            return False
        operator, wanted = match.group(1), tuple(int(p) for p in match.group(2).split("."))
        ours = tuple(int(p) for p in HTCONDOR_VERSION.split("."))[: len(wanted)]
        return {
            "==": ours == wanted,
            "!=": ours != wanted,
            ">=": ours >= wanted,
            "<=": ours <= wanted,
            ">": ours > wanted,
            "<": ours < wanted,
        }[operator]

    def _directive(self, kind: str, message: str, line: _Line, use: Origin | None) -> bool:
        if kind == "error":
            self._fail(line, use, f"error: {message}")
            return True
        self.notes.append(f"{self._origin(line, use).label('warning')}: {message}")
        return False

    def _use(self, category: str, items: str, line: _Line, use: Origin | None, depth: int) -> None:
        if depth >= _MAX_TEMPLATE_DEPTH:
            self._fail(line, use, "templates use each other too deeply")
            return
        for item in _split_top(items):
            match = _TEMPLATE_ITEM.fullmatch(item)
            template = None
            if match is not None:
                template = TEMPLATES.get((category.upper(), match.group(1).upper()))
            if match is None or template is None:
                self._fail(
                    line,
                    use,
                    f"there is no template {category.upper()} : {item}; "
                    f"Kondor knows {known_templates()}",
                )
                continue
            arg_text = match.group(2)
            args = _split_top(arg_text) if arg_text is not None and arg_text.strip() else []
            origin = self._origin(line, use)
            self.templates.append(template.label)
            inner = Origin(origin.line, origin.text, template.label, SOURCE)
            self.read(substitute_template_args(template.body, args), inner, depth + 1)

    def _assign(self, name: str, value: str, line: _Line, use: Origin | None) -> None:
        prefix, dot, bare = name.rpartition(".")
        if dot and prefix.upper() != "STARTD":
            self.notes.append(
                f"{self._origin(line, use).label(name)}: {name} applies to {prefix.upper()}, "
                "not the startd; ignored"
            )
            return
        key = f"STARTD.{bare.upper()}" if dot else name.upper()
        previous = self.definitions.pop(key, None)
        if previous is None and dot:
            previous = self.definitions.get(bare.upper())
        try:
            new_value = _append_self(bare if dot else name, value, previous)
        except MacroError as err:
            self._fail(line, use, str(err))
            return
        self.definitions[key] = Definition(name, new_value, self._origin(line, use))

    def _origin(self, line: _Line, use: Origin | None) -> Origin:
        if use is not None:
            return use
        return Origin(line.number, line.text, None, SOURCE)

    def _fail(self, line: _Line, use: Origin | None, reason: str) -> None:
        if use is not None:
            reason = f"in use {use.template}: {reason}"
            self.errors.append(SnippetError(use.line, use.text, reason))
        else:
            self.errors.append(SnippetError(line.number, line.text, reason))


def parse_snippet(text: str, *, builtins: Mapping[str, str] = BUILTIN_MACROS) -> Snippet:
    """Read `text` (a SlotPolicy's condorConfig) into a macro table on top of `builtins`.

    Never raises for a bad snippet: every problem is in `Snippet.errors`, each naming its line.
    """
    if builtins is BUILTIN_MACROS:
        definitions = dict(_builtin_definitions())
    else:
        definitions = {
            name.upper(): Definition(name, value, Origin(source=BUILTIN))
            for name, value in builtins.items()
        }
    reader = _Reader(definitions)
    reader.read(text)
    return Snippet(
        MacroTable(reader.definitions),
        tuple(dict.fromkeys(reader.templates)),
        tuple(reader.errors),
        tuple(reader.notes),
    )


@cache
def _builtin_definitions() -> Mapping[str, Definition]:
    return {
        name.upper(): Definition(name, value, Origin(source=BUILTIN))
        for name, value in BUILTIN_MACROS.items()
    }


@cache
def _builtin_table() -> MacroTable:
    return parse_snippet("").table


def builtin_value(name: str) -> str | None:
    """A built-in macro's value with every $(...) expanded (`CPUBusy` ->
    `((LoadAvg - CondorLoadAvg) >= 0.5)`), or None if Kondor has no such built-in.

    The manual's helper macros are built-ins, so the policy engine reads their default
    meaning here rather than keeping a second copy ("Examples of Policy Configuration")."""
    expansion = _builtin_table().value(name)
    return None if expansion is None else expansion.value
