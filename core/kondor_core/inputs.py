"""Bounds on what users hand Kondor: YAML files, numbers and names.

One place turns a file into YAML data (`load_yaml`): the CLI, the agent, the development
cluster and the admission webhook (`check_document`, for the JSON the API server already
parsed) share its bounds on size, nesting, alias expansion and encoding, so a hostile file
is refused with one message naming it instead of exhausting the stack or memory.

The numeric and name rules say what a value will become: a ClassAd integer is 64-bit
(HTCondor's `long long`), a ClassAd attribute name is `[A-Za-z_][A-Za-z0-9_]*`, a machine
name is a host name. Each check raises `InputError` (a KondorError) naming the field, the
value and what is allowed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from kondor_core.errors import KondorError

#: The range of a ClassAd integer (HTCondor stores them as 64-bit `long long`).
CLASSAD_INT_MIN = -(2**63)
CLASSAD_INT_MAX = 2**63 - 1

_ATTRIBUTE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: A host name: DNS labels of letters, digits and `-` (`_` too, as detected host names have
#: it), separated by dots; 253 characters at most.
_HOST_NAME = re.compile(
    r"^[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?)*$"
)


_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
# Lenient about case: detected labels keep the node's spelling (HTCondor folds case anyway).
_DNS_SUBDOMAIN = re.compile(
    r"^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*$"
)


class InputError(KondorError):
    """Input beyond Kondor's bounds (a file too large or too deep, a number no ClassAd
    holds, a name no ClassAd or DNS allows); the message names where and what."""


@dataclass(frozen=True)
class YamlLimits:
    """How much a YAML document may hold. Manifests and machine files are a few KiB and
    a dozen levels deep; these leave them plenty of room."""

    #: Bytes in the file (Kubernetes keeps objects under 1.5 MiB).
    max_bytes: int = 4 * 1024 * 1024
    #: Nested collections.
    max_depth: int = 64
    #: Nodes once every alias is expanded (a "billion laughs" file is small but expands to
    #: billions of nodes when validated or printed).
    max_nodes: int = 200_000


LIMITS = YamlLimits()


def load_yaml(content: bytes | str, *, source: str, limits: YamlLimits = LIMITS) -> Any:
    """The YAML data in `content` (bytes are decoded as UTF-8), within `limits`.

    Raises InputError naming `source`: not UTF-8 (with the byte offset), too large, nested
    too deep, too many nodes once aliases are expanded, or not valid YAML.
    """
    if isinstance(content, bytes):
        if len(content) > limits.max_bytes:
            raise InputError(
                f"{source}: the file has {len(content)} bytes; at most {limits.max_bytes} are read"
            )
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InputError(
                f"{source}: not UTF-8 text (byte {content[err.start]:#04x} at offset "
                f"{err.start}); save the file as UTF-8"
            ) from None
    else:
        text = content
        if len(text) > limits.max_bytes:
            raise InputError(
                f"{source}: the file has {len(text)} characters; at most {limits.max_bytes} "
                "are read"
            )
    try:
        # The reader checks the characters as it is built: a NUL is a YAMLError here too.
        loader = _BoundedLoader(text, limits)
    except yaml.YAMLError as err:
        raise InputError(f"{source}: not valid YAML ({_yaml_reason(err)})") from None
    try:
        return loader.get_single_data()
    except yaml.YAMLError as err:
        raise InputError(f"{source}: not valid YAML ({_yaml_reason(err)})") from None
    except _TooBigError as err:
        raise InputError(f"{source}: {err}") from None
    except (ValueError, OverflowError) as err:
        # PyYAML's scanner and constructors raise these for values it cannot represent: an
        # escape beyond Unicode (`"\UA0000000"`), a timestamp like 2026-13-45.
        raise InputError(f"{source}: not valid YAML ({err})") from None
    finally:
        loader.dispose()


def _yaml_reason(err: yaml.YAMLError) -> str:
    # PyYAML's messages quote the offending text; keep them short and on few lines.
    text = str(err)
    return text if len(text) <= 500 else text[:500] + "..."


class _TooBigError(Exception):
    pass


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer counts depth and expanded nodes as it builds the tree."""

    def __init__(self, stream: str, limits: YamlLimits) -> None:
        super().__init__(stream)
        self._limits = limits
        self._depth = 0
        self._nodes = 0
        # The expanded size of each anchored node, so an alias counts what it stands for.
        self._weights: dict[int, int] = {}

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:  # noqa: N803 (PyYAML's)
        # The scanner reads ahead through a flow collection's brackets before the composer
        # counts any depth, and checks every open level at each token: `[` x 3000 took seconds.
        if self.flow_level >= self._limits.max_depth:
            raise _TooBigError(
                f"nested more than {self._limits.max_depth} levels deep (line {self.line + 1})"
            )
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            anchor = event.anchor
            node = super().compose_node(parent, index)
            self._count(self._weights.get(id(node), 1), event.start_mark, anchor)
            return node
        self._depth += 1
        if self._depth > self._limits.max_depth:
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise _TooBigError(
                f"nested more than {self._limits.max_depth} levels deep (line {mark.line + 1})"
            )
        before = self._nodes
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._count(1, node.start_mark if node is not None else None, None)
        self._weights[id(node)] = self._nodes - before
        return node

    def _count(self, weight: int, mark: Any, anchor: str | None) -> None:
        self._nodes += weight
        if self._nodes > self._limits.max_nodes:
            via = f" through the alias *{anchor}" if anchor else ""
            line = f" (line {mark.line + 1})" if mark is not None else ""
            raise _TooBigError(
                f"more than {self._limits.max_nodes} values once aliases are expanded{via}{line}"
            )


def check_document(data: Any, *, source: str, limits: YamlLimits = LIMITS) -> None:
    """Hold already-parsed data (an admission request's object) to `limits`' depth and node
    count; raises InputError naming `source`.

    Any mapping counts, not only dicts: kopf hands the webhook its object as a `kopf.Body`,
    a read-only mapping over the request's JSON."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    nodes = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > limits.max_nodes:
            raise InputError(f"{source}: more than {limits.max_nodes} values")
        if isinstance(value, Mapping | list | tuple):
            if depth > limits.max_depth:
                raise InputError(f"{source}: nested more than {limits.max_depth} levels deep")
            children = value.values() if isinstance(value, Mapping) else value
            stack.extend((child, depth + 1) for child in children)


def check_classad_int(value: int, *, field: str) -> int:
    """`value` if a ClassAd (64-bit) integer holds it."""
    if not CLASSAD_INT_MIN <= value <= CLASSAD_INT_MAX:
        raise InputError(
            f"{field}: {value} is beyond a ClassAd integer; use a whole number from "
            f"{CLASSAD_INT_MIN} to {CLASSAD_INT_MAX}"
        )
    return value


def check_number(value: object, *, field: str) -> object:
    """`value` if, as a number, a ClassAd holds it: finite floats, 64-bit ints (bools and
    other types pass through)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return check_classad_int(value, field=field)
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(
            f"{field}: {value!r} is not a finite number; NaN and infinity have no ClassAd value"
        )
    return value


def check_attribute_name(name: str, *, field: str) -> str:
    """`name` if it is a ClassAd attribute name (a letter or `_`, then letters, digits, `_`)."""
    if not isinstance(name, str) or not _ATTRIBUTE_NAME.match(name):
        raise InputError(
            f"{field}: {name!r} is not a ClassAd attribute name; use a letter or _ followed "
            "by letters, digits and _"
        )
    return name


def check_host_name(name: str, *, field: str) -> str:
    """`name` if it is a host name (DNS labels: letters, digits, `-`, `_`; 253 at most)."""
    if len(name) > 253 or not _HOST_NAME.match(name):
        shown = name if len(name) <= 80 else name[:80] + "..."
        raise InputError(
            f"{field}: {shown!r} is not a machine name; use a host name: letters, digits, "
            "- and _ in labels separated by dots, 253 characters at most"
        )
    return name


def check_label(key: str, value: str, *, field: str) -> None:
    """A Kubernetes label: `[prefix/]name` (a DNS subdomain prefix, a name of 63 characters
    at most) and a value of 63 characters at most, letters, digits, `-`, `_` and `.`."""
    prefix, slash, name = key.rpartition("/")
    if (
        not _LABEL_NAME.match(name)
        or len(name) > 63
        or (slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)))
    ):
        raise InputError(
            f"{field}: {key!r} is not a label key; use [prefix/]name: a DNS subdomain prefix, "
            "a name of 63 letters, digits, -, _ and . at most"
        )
    if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
        raise InputError(
            f"{field}: {key!r}: {value!r} is not a label value; use 63 letters, digits, -, _ "
            "and . at most, beginning and ending with a letter or digit"
        )
