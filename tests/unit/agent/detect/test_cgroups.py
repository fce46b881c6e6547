"""CgroupFS over recorded v1, v2 and hybrid trees: one interface, whatever the layout."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from kondor_agent.detect import CgroupFS, CgroupVersion, DetectionError, HostFS, pod_cgroup
from kondor_agent.detect._cgroups import ancestors, parse_cpu_list

GiB = 1 << 30


@pytest.mark.parametrize(
    ("tree", "version", "kubepods", "quota", "cpuset", "memory"),
    [
        ("v2-debian12", CgroupVersion.V2, "/kubepods.slice", None, 16, 65844048 * 1024 - GiB),
        ("v2-limited-ubuntu2204-arm64", CgroupVersion.V2, "/kubepods.slice", 4.0, 8, 8 * GiB),
        ("v1-rhel9", CgroupVersion.V1, "/kubepods.slice", None, 32, None),
        ("v1-limited-rocky9", CgroupVersion.V1, "/kubepods", 6.0, 8, 12 * GiB),
        ("hybrid-debian12", CgroupVersion.HYBRID, "/kubepods", None, 8, None),
    ],
)
def test_layout_and_limits_of_kubepods(
    recorded: Callable[[str], HostFS],
    *,
    tree: str,
    version: CgroupVersion,
    kubepods: str,
    quota: float | None,
    cpuset: int,
    memory: int | None,
) -> None:
    cgroups = CgroupFS(recorded(tree))
    assert cgroups.version is version
    assert cgroups.kubepods() == kubepods
    assert cgroups.cpu_limit(kubepods) == quota
    found = cgroups.cpuset(kubepods)
    assert found is not None and len(found) == cpuset
    assert cgroups.memory_limit(kubepods) == memory


def test_a_child_cannot_exceed_its_parents_quota(recorded: Callable[[str], HostFS]) -> None:
    # kubepods-burstable.slice asks for 2.5 cores, but kubepods.slice allows 4: 2.5 holds;
    # its memory.max is "max", so the parent's 8 GiB applies.
    cgroups = CgroupFS(recorded("v2-limited-ubuntu2204-arm64"))
    child = "/kubepods.slice/kubepods-burstable.slice"
    assert cgroups.cpu_limit(child) == 2.5
    assert cgroups.memory_limit(child) == 8 * GiB
    # The nearest effective cpuset is the parent's.
    assert cgroups.cpuset(child) == frozenset(range(8))


@pytest.mark.parametrize(
    ("tree", "cgroup", "usage_usec", "working_set"),
    [
        ("v2-debian12", "/kubepods.slice", 12345678901, 5 * GiB),
        ("v1-rhel9", "/kubepods.slice", 123456789012, 16 * GiB),
        ("hybrid-debian12", "/kubepods", 3333333333, 3 * GiB),
    ],
)
def test_usage_reads_the_same_in_every_layout(
    recorded: Callable[[str], HostFS], tree: str, cgroup: str, usage_usec: int, working_set: int
) -> None:
    cgroups = CgroupFS(recorded(tree))
    assert cgroups.cpu_usage_usec(cgroup) == usage_usec
    assert cgroups.memory_working_set(cgroup) == working_set


def test_hybrid_reads_cpu_time_from_v1_cpuacct_not_the_empty_unified_tree(
    recorded: Callable[[str], HostFS],
) -> None:
    # unified/cpu.stat says 7777777777 µs for the root; cpuacct.usage says the same in ns.
    cgroups = CgroupFS(recorded("hybrid-debian12"))
    assert cgroups.cpu_usage_usec("/") == 7777777777


def test_no_cgroup_file_system_means_no_limits(tmp_path: Path) -> None:
    cgroups = CgroupFS(HostFS(tmp_path))
    assert cgroups.version is CgroupVersion.NONE
    assert cgroups.kubepods() is None
    assert cgroups.cpu_limit("/") is None
    assert cgroups.memory_limit("/") is None
    assert cgroups.cpuset("/") is None
    assert cgroups.cpu_usage_usec("/") is None


def test_pure_v2_without_a_cpu_controller_still_accounts_cpu_time(
    host_tree: Callable[[str], Path],
) -> None:
    root = host_tree("v2-debian12")
    (root / "sys/fs/cgroup/cgroup.controllers").write_text("memory pids\n")
    cgroups = CgroupFS(HostFS(root))
    assert cgroups.cpu_limit("/kubepods.slice") is None
    assert cgroups.cpu_usage_usec("/kubepods.slice") == 12345678901


@pytest.mark.parametrize(
    ("path", "text", "message"),
    [
        ("kubepods.slice/cpu.max", "lots 100000\n", "'lots' is not a quota"),
        ("kubepods.slice/cpu.max", "1 2 3\n", "is not '<quota|max> [period]'"),
        ("kubepods.slice/cpu.max", "50000 0\n", "must be positive"),
        ("kubepods.slice/memory.max", "8G\n", "'8G' is not a number of bytes or 'max'"),
        ("kubepods.slice/cpuset.cpus.effective", "0-3,x\n", "is not a CPU list"),
        ("kubepods.slice/cpu.stat", "usage_usec twelve\n", "is not an integer"),
    ],
)
def test_garbage_in_a_cgroup_file_is_a_clear_error(
    host_tree: Callable[[str], Path], path: str, text: str, message: str
) -> None:
    root = host_tree("v2-debian12")
    (root / "sys/fs/cgroup" / path).write_text(text)
    cgroups = CgroupFS(HostFS(root))
    with pytest.raises(DetectionError, match=re.escape(message)) as caught:
        cgroups.cpu_limit("/kubepods.slice")
        cgroups.memory_limit("/kubepods.slice")
        cgroups.cpuset("/kubepods.slice")
        cgroups.cpu_usage_usec("/kubepods.slice")
    assert f"/sys/fs/cgroup/{path}" in str(caught.value)


def test_an_unreadable_limit_is_an_error_not_no_limit(host_tree: Callable[[str], Path]) -> None:
    root = host_tree("v1-limited-rocky9")
    quota = root / "sys/fs/cgroup/cpu,cpuacct/kubepods/cpu.cfs_quota_us"
    quota.unlink()
    quota.mkdir()  # reading a directory fails the way an unreadable file does
    with pytest.raises(DetectionError, match=r"cpu\.cfs_quota_us: cannot read it"):
        CgroupFS(HostFS(root)).cpu_limit("/kubepods")


def test_v1_quota_without_its_period_is_an_error(host_tree: Callable[[str], Path]) -> None:
    root = host_tree("v1-limited-rocky9")
    (root / "sys/fs/cgroup/cpu,cpuacct/kubepods/cpu.cfs_period_us").unlink()
    with pytest.raises(DetectionError, match=r"cpu\.cfs_period_us: missing"):
        CgroupFS(HostFS(root)).cpu_limit("/kubepods")


def test_helpers() -> None:
    assert ancestors("/a/b/") == ["/", "/a", "/a/b"]
    assert ancestors("/") == ["/"]
    assert parse_cpu_list("0-3,8,10-11\n", what="x") == frozenset({0, 1, 2, 3, 8, 10, 11})
    assert parse_cpu_list("", what="x") == frozenset()
    with pytest.raises(DetectionError, match="backwards"):
        parse_cpu_list("3-1", what="x")


@pytest.mark.parametrize(
    ("kubepods", "qos", "cgroup"),
    [
        (
            "/kubepods.slice",
            "BestEffort",
            "/kubepods.slice/kubepods-besteffort.slice/"
            "kubepods-besteffort-pod5f0c1a2e_8b7d_4c1e_9a3f_2d6e4b8c0a11.slice",
        ),
        (
            "/kubepods.slice",
            "Guaranteed",
            "/kubepods.slice/kubepods-pod5f0c1a2e_8b7d_4c1e_9a3f_2d6e4b8c0a11.slice",
        ),
        ("/kubepods", "Burstable", "/kubepods/burstable/pod5f0c1a2e-8b7d-4c1e-9a3f-2d6e4b8c0a11"),
        ("/kubepods", "Guaranteed", "/kubepods/pod5f0c1a2e-8b7d-4c1e-9a3f-2d6e4b8c0a11"),
    ],
)
def test_pod_cgroups_for_both_drivers(kubepods: str, qos: str, cgroup: str) -> None:
    assert pod_cgroup(kubepods, "5f0c1a2e-8b7d-4c1e-9a3f-2d6e4b8c0a11", qos) == cgroup


def test_pod_cgroup_of_the_recorded_kondor_pod_exists(fixtures: Path) -> None:
    cgroups = CgroupFS(HostFS(fixtures / "live" / "v2" / "t0"))
    pod = pod_cgroup("/kubepods.slice", "5f0c1a2e-8b7d-4c1e-9a3f-2d6e4b8c0a11", "BestEffort")
    assert cgroups.exists(pod)
    with pytest.raises(ValueError, match="qosClass: 'Gold'"):
        pod_cgroup("/kubepods.slice", "x", "Gold")
