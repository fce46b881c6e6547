"""Where the kubelet puts a pod's cgroup, and freezing it there.

The kubelet names a pod's cgroup after its QoS class and UID (pkg/kubelet/cm in Kubernetes):

* cgroupfs driver: `kubepods/pod<uid>` (Guaranteed), `kubepods/burstable/pod<uid>`,
  `kubepods/besteffort/pod<uid>`;
* systemd driver: `kubepods.slice/kubepods-pod<u>.slice` (Guaranteed),
  `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<u>.slice`, and the same
  with `besteffort`,

where `<u>` is the UID with `-` replaced by `_` (systemd unit names). Under cgroup v2 the path is
below the one tree (`/sys/fs/cgroup/<path>`); under v1 below each controller's hierarchy
(`/sys/fs/cgroup/freezer/<path>`, ...). The node's driver and version are not asked: every
candidate is looked for, so the same agent works on any node.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path, PurePosixPath

CGROUP_ROOT = Path("/sys/fs/cgroup")
QOS_CLASSES = ("Guaranteed", "Burstable", "BestEffort")


def pod_cgroup_paths(uid: str, qos: str) -> tuple[PurePosixPath, PurePosixPath]:
    """The pod's cgroup under the cgroupfs driver and under the systemd driver."""
    if qos not in QOS_CLASSES:
        raise ValueError(f"qosClass {qos!r}: expected one of {', '.join(QOS_CLASSES)}")
    unit = uid.replace("-", "_")
    if qos == "Guaranteed":
        return (
            PurePosixPath("kubepods", f"pod{uid}"),
            PurePosixPath("kubepods.slice", f"kubepods-pod{unit}.slice"),
        )
    tier = qos.lower()
    return (
        PurePosixPath("kubepods", tier, f"pod{uid}"),
        PurePosixPath(
            "kubepods.slice", f"kubepods-{tier}.slice", f"kubepods-{tier}-pod{unit}.slice"
        ),
    )


def find_pod_cgroups(uid: str, qos: str, root: Path = CGROUP_ROOT) -> list[Path]:
    """Every existing directory of the pod's cgroup: the v2 one, or one per v1 hierarchy."""
    relative = pod_cgroup_paths(uid, qos)
    bases = [root]
    with contextlib.suppress(OSError):
        bases += sorted(entry for entry in root.iterdir() if entry.is_dir())
    return [base / path for base in bases for path in relative if (base / path).is_dir()]


def freezer(uid: str, qos: str, root: Path = CGROUP_ROOT) -> Path | None:
    """The cgroup whose freezer stops the whole pod: v2's `cgroup.freeze` where the pod's v2
    cgroup has one (v1 controllers may still be mounted beside it), else v1's freezer."""
    found = find_pod_cgroups(uid, qos, root)
    for directory in found:
        if (directory / "cgroup.freeze").exists():
            return directory
    for directory in found:
        if (directory / "freezer.state").exists():
            return directory
    return None


def set_frozen(directory: Path, frozen: bool) -> None:
    """Freeze or thaw one cgroup (and everything under it)."""
    if (directory / "cgroup.freeze").exists():
        (directory / "cgroup.freeze").write_text("1" if frozen else "0")
    else:
        (directory / "freezer.state").write_text("FROZEN" if frozen else "THAWED")


def is_frozen(directory: Path) -> bool:
    """Whether the cgroup is frozen now (v2: `frozen 1` in cgroup.events; v1: FROZEN)."""
    if (directory / "cgroup.freeze").exists():
        events = (directory / "cgroup.events").read_text().split()
        return "frozen" in events and events[events.index("frozen") + 1] == "1"
    return (directory / "freezer.state").read_text().strip() == "FROZEN"


def freeze(directory: Path, timeout: float = 5.0) -> bool:
    """Freeze and wait until the kernel says every task stopped (v1 passes through FREEZING)."""
    set_frozen(directory, True)
    deadline = time.monotonic() + timeout
    while not is_frozen(directory):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
        if (directory / "freezer.state").exists():
            set_frozen(directory, True)  # v1: a write retries tasks that were not yet stopped
    return True


def pod_processes(uid: str, qos: str, root: Path = CGROUP_ROOT) -> list[int]:
    """The pids in the pod's cgroups (every container's, the sandbox's pause included)."""
    pids: set[int] = set()
    for directory in find_pod_cgroups(uid, qos, root):
        for path, _dirs, files in os.walk(directory):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError, ValueError):
                    pids.update(int(p) for p in Path(path, "cgroup.procs").read_text().split())
    return sorted(pids)


def is_pause(pid: int) -> bool:
    """Whether `pid` is the pod sandbox's pause process (signalling it would end the pod)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "pause"
    except OSError:
        return False
