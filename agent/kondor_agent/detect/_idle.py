"""KeyboardIdle and ConsoleIdle inputs, measured as the condor_startd measures them on Linux.

HTCondor (condor_sysapi `idle_time.cpp`) takes the *last access time* of terminals:

- **Terminals** (KeyboardIdle): the devices of the logins listed in utmp
  (`/var/run/utmp`, USER_PROCESS records only); with STARTD_HAS_BAD_UTMP, every
  `/dev/tty*`, `/dev/pty*` and `/dev/pts/*` instead. No terminal at all means
  "idle forever" (INT_MAX), unless a terminal was seen before, in which case the
  idle time keeps counting from that last activity.
- **Console devices** (ConsoleIdle, and KeyboardIdle too): each of CONSOLE_DEVICES
  under `/dev` (HTCondor's default `mouse, console`; Kondor adds `input/mice`, where
  current kernels put the aggregate of all mice). A device that does not exist
  counts as never used (access time 0), as in HTCondor.
- A device sharing `/dev/null`'s major number never counts, and an access time in
  the future counts as now.

HTCondor dropped the old `/proc/interrupts` keyboard/mouse counters, and so does
Kondor; condor_kbdd (X events) has no equivalent on a node.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from kondor_agent.detect._hostfs import HostFS

#: HTCondor's value for "no terminal ever seen": idle forever.
INT_MAX = 2**31 - 1

#: HTCondor's CONSOLE_DEVICES default, plus the kernel's aggregate mouse device.
CONSOLE_DEVICES = ("mouse", "console", "input/mice")

UTMP_FILES = ("/var/run/utmp", "/run/utmp", "/var/adm/utmp")

#: glibc's `struct utmp` on Linux (x86_64, aarch64, ...): 384 bytes.
_UTMP = struct.Struct("<hxxi32s4s32s256shhii2i4i20s")
USER_PROCESS = 7


def utmp_lines(data: bytes) -> list[str]:
    """The terminals (`pts/0`, `tty1`) of the USER_PROCESS records of a utmp file."""
    lines: list[str] = []
    for offset in range(0, len(data) - _UTMP.size + 1, _UTMP.size):
        record = _UTMP.unpack_from(data, offset)
        if record[0] != USER_PROCESS:
            continue
        line = record[2].split(b"\0", 1)[0].decode(errors="replace")
        lines.append(line)
    return lines


def _device_atime(host: HostFS, device: str, null_major: int | None) -> float:
    """Access time of `/dev/<device>`; 0 when it is unusable, missing or a /dev/null twin."""
    if not device or device.startswith("unix:"):
        return 0.0
    path = f"/dev/{device}"
    atime = host.atime(path)
    if atime is None:
        return 0.0
    if null_major is not None and host.device_major(path) == null_major:
        return 0.0
    return atime


def terminal_activity(host: HostFS, *, trust_utmp: bool = True) -> float | None:
    """Newest access time of the login terminals; None when there is no terminal at all."""
    null_major = host.device_major("/dev/null")
    devices: Iterable[str]
    if trust_utmp:
        data = _read_utmp(host)
        if data is None:
            return None
        devices = utmp_lines(data)
    else:
        devices = [name for name in host.listdir("/dev") if name.startswith(("tty", "pty"))] + [
            f"pts/{name}" for name in host.listdir("/dev/pts")
        ]
    times = [_device_atime(host, device, null_major) for device in devices]
    return max(times) if times else None


def console_activity(host: HostFS, devices: Iterable[str] = CONSOLE_DEVICES) -> float | None:
    """Newest access time of the console devices (0 for missing ones); None if none is named."""
    null_major = host.device_major("/dev/null")
    times = [_device_atime(host, device, null_major) for device in devices]
    return max(times) if times else None


def _read_utmp(host: HostFS) -> bytes | None:
    for path in UTMP_FILES:
        try:
            return host.path(path).read_bytes()
        except OSError:
            continue
    return None


def idle_seconds(now: float, activity: float | None) -> int:
    """Seconds since `activity` (INT_MAX when never), 0 when it lies in the future."""
    if activity is None:
        return INT_MAX
    return min(INT_MAX, max(0, int(now - activity)))
