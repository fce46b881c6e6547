"""Where GpuDeviceIsolation hides a job's other GPUs, from the host's cgroup layout (temporary
trees of the files the detection reads) and whether this process may load device programs
(the probe, passed in): v1's devices cgroup, v2's eBPF device program, both, or neither,
said once in the log with the reason."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from kondor_agent.gpu_isolation import NOTHING_HIDDEN, GpuDeviceIsolation
from kondor_core.jobs.gpus import GpuDeviceNode

SELF = "5:devices:/agent\n0::/agent.service\n"
REFUSED = "bpf(2) load of a cgroup device program: Operation not permitted (no CAP_BPF)"


def host(root: Path, *, v1_devices: bool, unified: str | None) -> Path:
    """A cgroup mount: v1 `devices` and/or a v2 hierarchy at the mount or at `unified`."""
    mount = root / "sys" / "fs" / "cgroup"
    mount.mkdir(parents=True)
    if v1_devices:
        (mount / "devices").mkdir()
    if unified is not None:
        (mount / unified).mkdir(exist_ok=True)
        (mount / unified / "cgroup.controllers").write_text("cpu memory pids\n")
    return mount


def allowed() -> str | None:
    return None


def refused() -> str | None:
    return REFUSED


@pytest.mark.parametrize(
    ("v1_devices", "unified", "probe", "devices", "v2"),
    [
        # hybrid: both
        (True, "unified", allowed, "devices/agent/kondor", "unified/agent.service/kondor"),
        # pure v2: the program alone
        (False, ".", allowed, None, "agent.service/kondor"),
        # hybrid where bpf(2) is refused: v1 alone
        (True, "unified", refused, "devices/agent/kondor", None),
        # v1 only
        (True, None, allowed, "devices/agent/kondor", None),
    ],
)
def test_each_version_the_host_has_is_used(
    tmp_path: Path,
    *,
    v1_devices: bool,
    unified: str | None,
    probe: Callable[[], str | None],
    devices: str | None,
    v2: str | None,
) -> None:
    mount = host(tmp_path, v1_devices=v1_devices, unified=unified)
    isolation = GpuDeviceIsolation.open(
        tmp_path,
        root="kondor",
        self_cgroup=SELF,
        bpf_probe=probe,
    )
    assert isolation.devices == (None if devices is None else mount / devices)
    assert isolation.unified == (None if v2 is None else mount / v2)
    if v2 is not None:
        assert isolation.v2_cgroup_dir("slot1_1/job") == mount / v2 / "slot1_1/job"


def test_a_pure_v2_host_refusing_bpf_hides_nothing_and_says_why_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    host(tmp_path, v1_devices=False, unified=".")
    isolation = GpuDeviceIsolation.open(tmp_path, root="/kondor", bpf_probe=refused)
    assert (isolation.devices, isolation.unified) == (None, None)
    assert isolation.reason == f"no v1 devices cgroup; {REFUSED}"
    assert REFUSED in repr(isolation)
    gpu = GpuDeviceNode("GPU-1", 195, 1)
    with caplog.at_level(logging.WARNING, logger="kondor_agent.gpu_isolation"):
        assert isolation.hide("slot1_1/a", [gpu]) == []
        assert isolation.hide("slot1_1/b", [gpu]) == []
    assert [r.getMessage() for r in caplog.records] == [
        f"{NOTHING_HIDDEN} (no v1 devices cgroup; {REFUSED})"
    ]
