"""Give up root for good in a forked child, before it execs a job, a job hook or an image test.

What HTCondor's starter does when it switches to the job's user (the manual's "User Accounts
in HTCondor on Unix Platforms"), with what Linux adds: while still root, every capability is
dropped from the bounding set (PR_CAPBSET_DROP) and the ambient set is cleared; then the
supplementary groups become the job's gid alone, the gid and uid switch (real, effective and
saved), the inheritable set is emptied (capset), and `no_new_privs` is set, so no setuid
program or file capability can give anything back. The job's /proc/self/status then reads
CapInh, CapPrm, CapEff, CapBnd and CapAmb 0 and NoNewPrivs 1.

Only the child calls this: the supervisor stays root, as it must freeze, kill and clean the
job's cgroup. `ctypes` is imported here, after the fork, so the supervisor's own start-up
(the job's launch latency) does not pay for it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
#: The highest capability number when the kernel does not say (CAP_CHECKPOINT_RESTORE, 5.9).
_LAST_CAP_DEFAULT = 40


class PrivilegeError(OSError):
    """The child could not give up its privileges: the job must not run."""


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return _LAST_CAP_DEFAULT


_LIBC: Any = None


def load_libc() -> Any:
    """libc through ctypes, loaded once. A threaded parent (the agent) calls this before it
    forks, so that its children only call into it: no import or dlopen after the fork."""
    global _LIBC  # noqa: PLW0603 - one handle per process
    if _LIBC is None:
        import ctypes  # noqa: PLC0415 - only where a child drops privileges

        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def ensure_traversable(directory: Path) -> None:
    """Let any user cross each directory above `directory` (the search bit for others where it
    lacks it; never the read bit), so that a job's account can reach its own directory."""
    for parent in Path(directory).parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(parent, stat.S_IMODE(mode) | stat.S_IXOTH)


def drop_privileges(uid: int | None, gid: int | None) -> None:
    """Become `uid`:`gid` (when given; the caller is root) with no capabilities and
    `no_new_privs`; without a uid (an agent that is not root cannot switch) only the
    capabilities and `no_new_privs`. Raises PrivilegeError; never leaves uid 0 switched to."""
    import ctypes  # noqa: PLC0415 - only in the forked child (already loaded by load_libc)

    if uid == 0 or gid == 0:
        raise PrivilegeError(0, f"refusing to run a job as uid {uid} gid {gid} (root)")
    libc = load_libc()
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

    def call(what: str, *args: int) -> int:
        result = int(prctl(*args, *([0] * (5 - len(args)))))
        if result != 0:
            code = ctypes.get_errno()
            raise PrivilegeError(code, f"{what}: {os.strerror(code)}")
        return result

    can_drop = os.geteuid() == 0
    if can_drop:
        for cap in range(_last_cap() + 1):
            call(f"prctl(PR_CAPBSET_DROP, {cap})", PR_CAPBSET_DROP, cap)
    try:
        call("prctl(PR_CAP_AMBIENT_CLEAR_ALL)", PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    except PrivilegeError as err:
        if err.errno != 22:  # EINVAL: a kernel before 4.3 has no ambient set to clear
            raise
    if uid is not None and gid is not None:
        os.setgroups([gid])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    # Empty effective, permitted and inheritable sets (setuid cleared the first two unless the
    # caller was not root; the inheritable set survives setuid).
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    if libc.capset(ctypes.byref(header), ctypes.byref(data)) != 0:
        code = ctypes.get_errno()
        raise PrivilegeError(code, f"capset(0): {os.strerror(code)}")
    call("prctl(PR_SET_NO_NEW_PRIVS, 1)", PR_SET_NO_NEW_PRIVS, 1)
    if uid is not None and (os.getuid() != uid or os.geteuid() != uid or os.getegid() != gid):
        raise PrivilegeError(0, f"still uid {os.geteuid()} gid {os.getegid()} after setuid")
    if uid is not None and (os.getuid() == 0 or os.geteuid() == 0):
        raise PrivilegeError(0, "still root after setuid")
