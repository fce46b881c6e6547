"""What the cgroup v1 and v2 modules share: a hierarchy's place, reading and writing its
control files with errors that name the file, and the interface each version implements
(`VersionFiles`: which file holds what, and how its values read).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kondor_agent.detect._cgroups import parse_keyed
from kondor_agent.detect._hostfs import DetectionError
from kondor_agent.execute.limits import CgroupLimits

#: A v1 memory limit at or above this reads as "unlimited".
V1_UNLIMITED = 1 << 62


class CgroupError(Exception):
    """A cgroup cannot be created, written or removed; the message names the file."""


@dataclass(frozen=True)
class Hierarchy:
    """One mounted hierarchy: its local directory and where Kondor's root is inside it."""

    base: Path
    root: str
    v2: bool

    def dir(self, cgroup: str) -> Path:
        inner = "/".join(part for part in (self.root.strip("/"), cgroup.strip("/")) if part)
        return self.base / inner if inner else self.base

    def file(self, cgroup: str, name: str) -> Path:
        return self.dir(cgroup) / name

    def has(self, name: str) -> bool:
        """Whether the kernel shows control file `name` here (in Kondor's root, or at the
        hierarchy's top, where v1 shows every file its children get)."""
        return self.file("", name).exists() or (self.base / name).exists()


@dataclass(frozen=True)
class MemoryLimits:
    """A cgroup's memory limits as read back: hard, soft, swap (None: none)."""

    memory_bytes: int | None
    soft_bytes: int | None
    swap_bytes: int | None


class VersionFiles(Protocol):
    """One cgroup version's control files for what `JobCgroups` does with a controller."""

    #: The memory controller's peak usage, OOM kill count and swap limit files.
    peak_memory: str
    oom_kills: str
    swap_limit: str

    def write_memory(
        self, h: Hierarchy, cgroup: str, limits: CgroupLimits, *, swap: bool
    ) -> None: ...

    def read_memory(self, h: Hierarchy, cgroup: str) -> MemoryLimits: ...

    def write_cpu(self, h: Hierarchy, cgroup: str, limits: CgroupLimits) -> None: ...

    def read_cpu(self, h: Hierarchy, cgroup: str) -> tuple[float | None, float | None]: ...

    def freeze_file(self, h: Hierarchy, cgroup: str) -> Path: ...

    def set_frozen(self, h: Hierarchy, cgroup: str, frozen: bool) -> None: ...

    def frozen(self, h: Hierarchy, cgroup: str) -> bool: ...

    def cpu_seconds(self, h: Hierarchy, cgroup: str) -> tuple[float | None, float | None]: ...

    def memory_bytes(self, h: Hierarchy, cgroup: str) -> int | None: ...


def write(path: Path, value: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError as err:
        reason = os.strerror(err.errno or 0)
        raise CgroupError(f"{path}: cannot write {value!r} ({reason})") from None


def read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        raise CgroupError(f"{path}: cannot read it ({os.strerror(err.errno or 0)})") from None


def read_int(path: Path) -> int | None:
    text = read(path)
    return None if text is None else int(text)


def limit_bytes(path: Path) -> int | None:
    """A memory limit file's value; None for "max", unset, or v1's "unlimited"."""
    text = (read(path) or "max").strip()
    if text == "max" or int(text) >= V1_UNLIMITED:
        return None
    return int(text)


def keyed(text: str, path: Path) -> dict[str, int]:
    try:
        return parse_keyed(text, what=str(path))
    except DetectionError as err:
        raise CgroupError(str(err)) from None


def mkdir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CgroupError(f"{path}: cannot create it ({os.strerror(err.errno or 0)})") from None


def rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except FileNotFoundError:
        return
    except OSError as err:
        # The kernel's control files vanish with rmdir (a busy cgroup is EBUSY), so
        # ENOTEMPTY means an ordinary directory of recorded files: a test's tree.
        if err.errno == errno.ENOTEMPTY:
            _remove_tree(path)
            return
        raise CgroupError(f"{path}: cannot remove it ({os.strerror(err.errno or 0)})") from None


def _remove_tree(path: Path) -> None:
    for child in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if child.is_dir():
            child.rmdir()
        else:
            child.unlink()
    path.rmdir()
