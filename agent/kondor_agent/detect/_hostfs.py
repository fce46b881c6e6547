"""The one way the agent reads the host: files under a root directory.

On a node the DaemonSet mounts the host's `/` (or `/proc`, `/sys`, `/etc`,
`/dev`) under a directory such as `/host` and the agent runs with
`HostFS(Path("/host"))`; tests point the same object at a recorded tree. Paths
are always written as the host sees them (`/proc/meminfo`), never joined by
hand, so nothing reads the agent's own container by mistake.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class DetectionError(Exception):
    """A host fact cannot be read or makes no sense; the message names the file and the value."""


class HostFS:
    """Read-only access to a host's files, rooted at `root` (`/` on the host itself)."""

    def __init__(self, root: Path = Path("/")) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"HostFS({str(self.root)!r})"

    def path(self, host_path: str) -> Path:
        """The local path of `host_path` (an absolute path as the host sees it)."""
        if not host_path.startswith("/"):
            raise ValueError(f"host paths are absolute, got {host_path!r}")
        return self.root / host_path.lstrip("/")

    def exists(self, host_path: str) -> bool:
        return self.path(host_path).exists()

    def is_dir(self, host_path: str) -> bool:
        return self.path(host_path).is_dir()

    def read_text(self, host_path: str) -> str:
        """The file's text; DetectionError when it is missing or unreadable."""
        text = self.read_optional(host_path)
        if text is None:
            raise DetectionError(f"{host_path}: missing under {self.root}")
        return text

    def read_optional(self, host_path: str) -> str | None:
        """The file's text, or None when it does not exist (a controller or feature absent).

        Any other failure (permission, I/O, a directory where a file should be) is a
        DetectionError: an unreadable limit must not pass for "no limit".
        """
        try:
            return self.path(host_path).read_text(errors="replace")
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            return None
        except OSError as err:
            reason = os.strerror(err.errno) if err.errno else str(err)
            if err.errno == errno.EISDIR:
                reason = "it is a directory"
            raise DetectionError(f"{host_path}: cannot read it ({reason})") from None

    def listdir(self, host_path: str) -> list[str]:
        """Names in a directory, sorted; empty when it does not exist or cannot be listed."""
        try:
            return sorted(os.listdir(self.path(host_path)))
        except OSError:
            return []

    def atime(self, host_path: str) -> float | None:
        """Last access time (seconds since the epoch), None when the file cannot be stat'ed."""
        try:
            return self.path(host_path).stat().st_atime
        except OSError:
            return None

    def device_major(self, host_path: str) -> int | None:
        """Major number of a character/block device; None for anything else or when absent."""
        try:
            st = self.path(host_path).stat()
        except OSError:
            return None
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            return os.major(st.st_rdev)
        return None
