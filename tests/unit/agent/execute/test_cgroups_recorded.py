"""JobCgroups on recorded v1, v2 and hybrid trees: which file each operation writes."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from execute_fakes import Kills, hybrid_tree, v1_tree, v2_tree

from kondor_agent.detect import CgroupVersion
from kondor_agent.execute.cgroups import CgroupError, JobCgroups, parse_self_cgroup
from kondor_agent.execute.limits import (
    CgroupLimits,
    ExecuteSettings,
    MemoryLimitPolicy,
    slot_limits,
)

CG = "sys/fs/cgroup"


def test_v2_creates_the_leaf_under_its_slot_enables_controllers_and_writes_limits(
    tmp_path: Path,
) -> None:
    cgroups = JobCgroups.open(v2_tree(tmp_path))
    assert cgroups.version is CgroupVersion.V2
    assert (tmp_path / CG / "kondor/supervisors").is_dir()
    leaf = JobCgroups.job_cgroup("slot1_1", "job-7")
    settings = ExecuteSettings(disable_swap=True, cpu_hard_limit=True, pids_max=100)
    cgroups.create(leaf, slot_limits(2, 512, settings=settings))
    d = tmp_path / CG / "kondor/slot1_1/job-7"
    assert (d / "memory.max").read_text() == str(512 << 20)
    # The soft limit (90% of the slot under the hard policy) is v2's memory.low.
    assert (d / "memory.low").read_text() == str(int((512 << 20) * 0.9))
    assert (d / "memory.swap.max").read_text() == "0"
    assert (d / "pids.max").read_text() == "100"
    assert (d / "cpu.weight").read_text() == "200"
    assert (d / "cpu.max").read_text() == "200000 100000"
    # Every ancestor of the leaf hands memory, cpu and pids down.
    for parent in ("kondor", "kondor/slot1_1"):
        control = (tmp_path / CG / parent / "cgroup.subtree_control").read_text()
        assert control == "+memory +cpu +pids", parent
    # Already enabled at the top: not written again.
    assert (tmp_path / CG / "cgroup.subtree_control").read_text() == "cpuset cpu io memory pids\n"
    assert cgroups.limits(leaf) == CgroupLimits(
        memory_bytes=512 << 20,
        memory_soft_bytes=int((512 << 20) * 0.9),
        swap_bytes=0,
        cpu_weight_cpus=2,
        cpu_quota_cpus=2,
        pids_max=100,
    )


def test_v1_writes_limit_in_bytes_shares_and_cfs_quota_in_the_comounted_hierarchy(
    tmp_path: Path,
) -> None:
    cgroups = JobCgroups.open(v1_tree(tmp_path))
    assert cgroups.version is CgroupVersion.V1
    leaf = JobCgroups.job_cgroup("slot1_2", "j")
    cgroups.create(leaf, slot_limits(0.5, 100))
    mem = tmp_path / CG / "memory/kondor/slot1_2/j"
    cpu = tmp_path / CG / "cpu,cpuacct/kondor/slot1_2/j"
    assert (mem / "memory.limit_in_bytes").read_text() == str(100 << 20)
    assert (mem / "memory.soft_limit_in_bytes").read_text() == str(90 << 20)
    assert not (mem / "memory.memsw.limit_in_bytes").exists()  # swap allowed by default
    # HTCondor's Cpus * 100.
    assert (cpu / "cpu.shares").read_text() == "50"
    assert (cpu / "cpu.cfs_quota_us").read_text() == "-1"
    assert (tmp_path / CG / "freezer/kondor/slot1_2/j").is_dir()
    assert cgroups.limits(leaf) == CgroupLimits(
        memory_bytes=100 << 20, memory_soft_bytes=90 << 20, cpu_weight_cpus=0.5
    )


@pytest.mark.parametrize(
    ("settings", "files"),
    [
        (
            ExecuteSettings(memory_policy=MemoryLimitPolicy.SOFT, disable_swap=True),
            {
                "memory/memory.limit_in_bytes": str(4096 << 20),
                "memory/memory.soft_limit_in_bytes": str(100 << 20),
                "memory/memory.memsw.limit_in_bytes": str(4096 << 20),
            },
        ),
        (
            ExecuteSettings(memory_policy=MemoryLimitPolicy.NONE, disable_swap=True),
            {},
        ),
        (
            ExecuteSettings(disable_swap=True, pids_max=32),
            {
                "memory/memory.limit_in_bytes": str(100 << 20),
                "memory/memory.soft_limit_in_bytes": str(90 << 20),
                "memory/memory.memsw.limit_in_bytes": str(100 << 20),
                "pids/pids.max": "32",
            },
        ),
    ],
)
def test_v1_memory_policies_swap_and_pids(
    tmp_path: Path, settings: ExecuteSettings, files: dict[str, str]
) -> None:
    tree = v1_tree(tmp_path)
    (tmp_path / CG / "memory/memory.memsw.limit_in_bytes").write_text("9223372036854771712\n")
    cgroups = JobCgroups.open(tree)
    leaf = JobCgroups.job_cgroup("slot1_1", "j")
    cgroups.create(leaf, slot_limits(1, 100, settings=settings, machine_memory_mib=4096))
    written = {
        f"{path.relative_to(tmp_path / CG).parts[0]}/{path.name}": path.read_text()
        for hierarchy in ("memory", "pids")
        for path in (tmp_path / CG / hierarchy / "kondor/slot1_1/j").glob("*.*")
        if path.name not in ("cgroup.procs",)
    }
    assert written == files


def test_hybrid_limits_in_v1_and_freezes_and_kills_through_the_unified_tree(
    tmp_path: Path,
) -> None:
    fake = Kills()
    cgroups = JobCgroups.open(hybrid_tree(tmp_path), kill=fake)
    assert cgroups.version is CgroupVersion.HYBRID
    assert "freezer=v2" in cgroups.describe() and "kill=cgroup.kill" in cgroups.describe()
    leaf = JobCgroups.job_cgroup("slot1", "j")
    cgroups.create(leaf, slot_limits(1, 64))
    unified = tmp_path / CG / "unified/kondor/slot1/j"
    cgroups.freeze(leaf)
    assert (unified / "cgroup.freeze").read_text() == "1"
    cgroups.thaw(leaf)
    assert (unified / "cgroup.freeze").read_text() == "0"
    cgroups.kill(leaf)
    assert (unified / "cgroup.kill").read_text() == "1"
    assert fake.sent == []
    # A member joins every hierarchy used: memory, cpu, pids, (v1 freezer unused) and unified.
    joined = {p.relative_to(tmp_path / CG).parts[0] for p in cgroups.procs_files(leaf)}
    assert joined == {"memory", "cpu", "pids", "unified"}


def test_a_supervisor_also_leaves_the_v1_devices_and_freezer_cgroups_runc_kills_through(
    tmp_path: Path,
) -> None:
    # runc 1.1 kills what is left of a dead container through its v1 `devices` cgroup (and
    # freezes it through `freezer`): a supervisor still there would die with the agent's pod.
    cgroups = JobCgroups.open(hybrid_tree(tmp_path))
    supervisors = {
        p.relative_to(tmp_path / CG).parts[0] for p in cgroups.procs_files("supervisors")
    }
    assert supervisors == {"memory", "cpu", "pids", "unified", "devices", "freezer"}
    assert (tmp_path / CG / "devices/kondor/supervisors").is_dir()
    # A job inherits its supervisor's place there: its own cgroup exists only where it is limited.
    leaf = JobCgroups.job_cgroup("slot1", "j")
    cgroups.create(leaf)
    assert not (tmp_path / CG / "devices/kondor/slot1").exists()
    cgroups.remove(leaf)
    cgroups.remove_root()
    assert not (tmp_path / CG / "devices/kondor").exists()


def test_v1_kill_freezes_signals_every_pid_then_thaws(tmp_path: Path) -> None:
    fake = Kills()
    cgroups = JobCgroups.open(v1_tree(tmp_path), kill=fake)
    leaf = JobCgroups.job_cgroup("slot1", "j")
    cgroups.create(leaf)
    freezer = tmp_path / CG / "freezer/kondor/slot1/j"
    (freezer / "cgroup.procs").write_text("101\n102\n")
    states: list[str] = []
    fake.on_kill = lambda _pid: states.append((freezer / "freezer.state").read_text())
    cgroups.kill(leaf)
    assert fake.sent == [(101, signal.SIGKILL), (102, signal.SIGKILL)]
    assert states == ["FROZEN", "FROZEN"]
    assert (freezer / "freezer.state").read_text() == "THAWED"


def test_usage_from_v2_cpu_stat_and_memory_peak(tmp_path: Path) -> None:
    cgroups = JobCgroups.open(v2_tree(tmp_path))
    leaf = JobCgroups.job_cgroup("slot1", "j")
    cgroups.create(leaf)
    d = tmp_path / CG / "kondor/slot1/j"
    (d / "cpu.stat").write_text(
        "usage_usec 3500000\nuser_usec 3000000\nsystem_usec 500000\nnr_periods 0\n"
    )
    (d / "memory.peak").write_text(str(300 << 20))
    (d / "memory.current").write_text(str(200 << 20))
    usage = cgroups.usage(leaf)
    assert (usage.user_cpu_seconds, usage.sys_cpu_seconds) == (3.0, 0.5)
    assert (usage.peak_memory_bytes, usage.memory_bytes) == (300 << 20, 200 << 20)
    assert cgroups.peak_memory_file(leaf) == d / "memory.peak"


def test_usage_from_v1_cpuacct_and_max_usage(tmp_path: Path) -> None:
    cgroups = JobCgroups.open(v1_tree(tmp_path))
    leaf = JobCgroups.job_cgroup("slot1", "j")
    cgroups.create(leaf)
    (tmp_path / CG / "cpu,cpuacct/kondor/slot1/j/cpuacct.usage_user").write_text("2000000000\n")
    (tmp_path / CG / "cpu,cpuacct/kondor/slot1/j/cpuacct.usage_sys").write_text("250000000\n")
    mem = tmp_path / CG / "memory/kondor/slot1/j"
    (mem / "memory.max_usage_in_bytes").write_text(str(70 << 20))
    usage = cgroups.usage(leaf)
    assert (usage.user_cpu_seconds, usage.sys_cpu_seconds) == (2.0, 0.25)
    assert usage.peak_memory_bytes == 70 << 20


def test_v1_freeze_writes_freezer_state_and_reads_it_back(tmp_path: Path) -> None:
    cgroups = JobCgroups.open(v1_tree(tmp_path))
    leaf = JobCgroups.job_cgroup("slot1", "j")
    cgroups.create(leaf)
    cgroups.freeze(leaf)
    assert cgroups.frozen(leaf)
    cgroups.thaw(leaf)
    assert not cgroups.frozen(leaf)


def test_remove_deletes_the_leaf_and_remove_root_the_rest(tmp_path: Path) -> None:
    cgroups = JobCgroups.open(v2_tree(tmp_path))
    leaf = JobCgroups.job_cgroup("slot1", "j")
    cgroups.create(leaf, slot_limits(1, 64))
    assert cgroups.exists(leaf)
    cgroups.remove(leaf)
    assert not cgroups.exists(leaf)
    cgroups.remove(leaf)  # already gone: fine
    cgroups.remove_root()
    assert not (tmp_path / CG / "kondor").exists()


def test_a_relative_root_is_inside_this_processs_own_cgroup_of_each_hierarchy(
    tmp_path: Path,
) -> None:
    own = "4:memory:/agent.service\n3:cpu,cpuacct:/\n2:freezer:/\n0::/agent.service\n"
    hybrid_tree(tmp_path)
    (tmp_path / CG / "unified/agent.service/kondor/cgroup.freeze").parent.mkdir(parents=True)
    (tmp_path / CG / "unified/agent.service/kondor/cgroup.freeze").write_text("0")
    cgroups = JobCgroups.open(tmp_path, root="kondor", self_cgroup=own)
    assert (tmp_path / CG / "memory/agent.service/kondor/supervisors").is_dir()
    assert (tmp_path / CG / "cpu,cpuacct/kondor/supervisors").is_dir()
    assert cgroups.can_freeze and "freezer=v2" in cgroups.describe()


def test_parse_self_cgroup() -> None:
    text = "9:name=systemd:/user.slice\n4:cpu,cpuacct:/a\n0::/b\n"
    assert parse_self_cgroup(text) == {
        "systemd": "/user.slice",
        "cpu": "/a",
        "cpuacct": "/a",
        "": "/b",
    }


def test_no_cgroup_fs_means_disabled_and_freezing_says_why(tmp_path: Path) -> None:
    (tmp_path / CG).mkdir(parents=True)
    cgroups = JobCgroups.open(tmp_path)
    assert not cgroups.enabled and cgroups.procs_files("slot1/j") == []
    with pytest.raises(CgroupError, match="no freezer"):
        cgroups.freeze("slot1/j")


@pytest.mark.parametrize(
    ("slot", "job"), [("", "j"), ("slot1", "a/b"), ("..", "j"), ("supervisors", "j")]
)
def test_names_that_cannot_be_a_cgroup_are_refused(slot: str, job: str) -> None:
    with pytest.raises(ValueError, match=r"slot|job"):
        JobCgroups.job_cgroup(slot, job)


def test_an_unwritable_limit_names_the_file(tmp_path: Path) -> None:
    cgroups = JobCgroups.open(v2_tree(tmp_path))
    leaf = JobCgroups.job_cgroup("slot1", "j")
    cgroups.create(leaf)
    (tmp_path / CG / "kondor/slot1/j/memory.max").mkdir()
    with pytest.raises(CgroupError, match=r"memory\.max: cannot write"):
        cgroups.set_limits(leaf, CgroupLimits(memory_bytes=1 << 20))
