"""Live facts from recorded counters at t0 and t1 (ten seconds apart), in v2 and in v1 form."""

from __future__ import annotations

import os
import shutil
import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kondor_agent.detect import HostFS, Sample, Sampler, facts, sample
from kondor_agent.detect._idle import INT_MAX

T0 = datetime(2026, 11, 23, 9, 30, 0, tzinfo=UTC)  # a Monday
T1 = T0 + timedelta(seconds=10)
KONDOR_POD = (
    "/kubepods.slice/kubepods-besteffort.slice/"
    "kubepods-besteffort-pod5f0c1a2e_8b7d_4c1e_9a3f_2d6e4b8c0a11.slice"
)
SLOT = "/kondor.slice/slot1_1.scope"
JOBS = (KONDOR_POD, SLOT)


def pair(fixtures: Path, layout: str, jobs: tuple[str, ...] = JOBS) -> tuple[Sample, Sample]:
    live = fixtures / "live" / layout
    return (
        sample(HostFS(live / "t0"), T0, job_cgroups=jobs, console_devices=()),
        sample(HostFS(live / "t1"), T1, job_cgroups=jobs, console_devices=()),
    )


@pytest.mark.parametrize("layout", ["v2", "v1"])
def test_load_owner_and_condor_usage(fixtures: Path, layout: str) -> None:
    got = facts(*pair(fixtures, layout))
    assert got["TotalLoadAvg"] == got["LoadAvg"] == 4.52
    # Kondor: its pod (1 core) and its Apptainer slot (1.5 cores) over the 10 s.
    assert got["TotalCondorLoadAvg"] == got["CondorLoadAvg"] == 2.5
    # The owner: kubepods used 3 cores, 1 of them Kondor's pod.
    assert got["OwnerCpus"] == 2.0
    # Working sets: kubepods 5 GiB, Kondor's pod 1.5 GiB.
    assert got["OwnerMemory"] == 3584
    assert got["ClockMin"] == 9 * 60 + 30
    assert got["ClockDay"] == 1


def test_pressure_where_the_kernel_has_it(fixtures: Path) -> None:
    got = facts(*pair(fixtures, "v2"))
    assert got["CpuPressureSome10"] == 12.5
    assert got["CpuPressureSome60"] == 8.62
    assert got["CpuPressureFull300"] == 0.0
    assert got["MemoryPressureFull10"] == 0.2
    assert "IoPressureSome10" not in got  # no /proc/pressure/io recorded
    assert not any("Pressure" in name for name in facts(*pair(fixtures, "v1")))


def test_condor_load_never_exceeds_the_load_average(fixtures: Path) -> None:
    before, after = pair(fixtures, "v2")
    quiet = Sample(**{**after.__dict__, "load_avg": 1.2})
    assert facts(before, quiet)["CondorLoadAvg"] == 1.2


def test_a_job_that_started_inside_the_window_counts_from_zero(fixtures: Path) -> None:
    before, _ = pair(fixtures, "v2", jobs=(KONDOR_POD,))
    _, after = pair(fixtures, "v2", jobs=(KONDOR_POD, SLOT))
    # The slot's whole 215 s of CPU time fell in 10 s: capped at the load average.
    assert facts(before, after)["CondorLoadAvg"] == 4.52


def test_without_kubepods_the_owner_facts_are_left_out(fixtures: Path, tmp_path: Path) -> None:
    before, after = pair(fixtures, "v2")
    bare = Sample(**{**after.__dict__, "kubepods": None})
    got = facts(before, bare)
    assert "OwnerCpus" not in got and "OwnerMemory" not in got
    empty = sample(HostFS(tmp_path), T0)
    assert "owner: no kubepods cgroup" in empty.problems
    assert "load: /proc/loadavg is missing" in empty.problems


def test_the_first_sample_has_no_rates(fixtures: Path) -> None:
    _, after = pair(fixtures, "v2")
    got = facts(after, after)
    assert "CondorLoadAvg" not in got and "OwnerCpus" not in got
    assert got["LoadAvg"] == 4.52 and got["OwnerMemory"] == 3584


def test_bad_counters_leave_their_fact_out_with_a_reason(fixtures: Path, tmp_path: Path) -> None:
    root = tmp_path / "t1"
    shutil.copytree(fixtures / "live" / "v2" / "t1", root)
    (root / "proc/loadavg").write_text("lots\n")
    (root / "sys/fs/cgroup/kubepods.slice/cpu.stat").write_text("usage_usec ???\n")
    (root / "proc/pressure/cpu").write_text("sometimes avg10=1\n")
    before, _ = pair(fixtures, "v2")
    after = sample(HostFS(root), T1, job_cgroups=JOBS, console_devices=())
    got = facts(before, after)
    assert "LoadAvg" not in got and "OwnerCpus" not in got and "CpuPressureSome10" not in got
    assert got["MemoryPressureSome10"] == 0.35
    assert any("/proc/loadavg: 'lots' does not start with a number" in p for p in after.problems)
    assert any("kubepods.slice/cpu.stat usage_usec" in p for p in after.problems)
    assert any("/proc/pressure/cpu" in p for p in after.problems)


def test_sampler_differences_against_the_oldest_sample_in_its_window(
    fixtures: Path, tmp_path: Path
) -> None:
    live = fixtures / "live" / "v2"
    shutil.copytree(live / "t0", tmp_path, dirs_exist_ok=True)
    sampler = Sampler(HostFS(tmp_path), window=60, console_devices=())
    first = sampler.poll(T0, JOBS)
    assert "OwnerCpus" not in first
    shutil.copytree(live / "t1", tmp_path, dirs_exist_ok=True)  # the counters move on
    assert sampler.poll(T1, JOBS)["OwnerCpus"] == 2.0
    # Counters unchanged for 5 more seconds: the window still starts at t0 (15 s ago).
    assert sampler.poll(T1 + timedelta(seconds=5), JOBS)["OwnerCpus"] == round(20 / 15, 2)
    # Far past the window, t0 is dropped and the newest sample old enough starts it.
    later = sampler.poll(T1 + timedelta(seconds=120), JOBS)
    assert later["OwnerCpus"] == 0.0
    assert sampler.samples[0].time >= (T1 + timedelta(seconds=5)).timestamp()


# -- KeyboardIdle and ConsoleIdle ----------------------------------------------------------

UTMP = struct.Struct("<hxxi32s4s32s256shhii2i4i20s")


def utmp_record(kind: int, line: str, user: str = "alice") -> bytes:
    return UTMP.pack(
        kind, 4242, line.encode(), b"ts/0", user.encode(), b"10.0.0.9", 0, 0, 7, 0, 0, 0, 0, 0, 0,
        0, b"",
    )  # fmt: skip


def device(root: Path, name: str, atime: float) -> None:
    path = root / "dev" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    os.utime(path, (atime, atime))


NOW = T0.timestamp()


def idle(root: Path, **kwargs: object) -> dict[str, float | int]:
    host = HostFS(root)
    return facts(sample(host, T0, **kwargs), sample(host, T0, **kwargs))  # type: ignore[arg-type]


def test_keyboard_idle_from_the_terminals_utmp_lists(tmp_path: Path) -> None:
    device(tmp_path, "pts/0", NOW - 300)
    device(tmp_path, "pts/1", NOW - 5)  # not a login in utmp: does not count
    device(tmp_path, "console", NOW - 7200)
    (tmp_path / "var/run").mkdir(parents=True)
    (tmp_path / "var/run/utmp").write_bytes(
        utmp_record(2, "~", "reboot") + utmp_record(7, "pts/0") + utmp_record(8, "pts/1")
    )
    got = idle(tmp_path, console_devices=("console",))
    assert got["KeyboardIdle"] == 300
    assert got["ConsoleIdle"] == 7200


def test_all_terminals_when_utmp_is_not_trusted(tmp_path: Path) -> None:
    device(tmp_path, "pts/0", NOW - 300)
    device(tmp_path, "pts/1", NOW - 5)
    device(tmp_path, "tty1", NOW - 50)
    got = idle(tmp_path, console_devices=(), trust_utmp=False)
    assert got["KeyboardIdle"] == 5
    assert "ConsoleIdle" not in got


def test_console_activity_counts_for_keyboard_idle_too(tmp_path: Path) -> None:
    device(tmp_path, "input/mice", NOW - 42)
    got = idle(tmp_path)  # HTCondor's console devices plus input/mice
    assert got["ConsoleIdle"] == 42
    assert got["KeyboardIdle"] == 42


def test_no_terminal_and_no_console_means_idle_forever(tmp_path: Path) -> None:
    got = idle(tmp_path, console_devices=())
    assert got["KeyboardIdle"] == INT_MAX
    # Missing console devices count as never used: idle since the epoch, as in HTCondor.
    assert idle(tmp_path)["ConsoleIdle"] == int(NOW)


def test_keyboard_idle_keeps_counting_after_the_last_login_leaves(tmp_path: Path) -> None:
    device(tmp_path, "pts/0", NOW - 60)
    (tmp_path / "var/run").mkdir(parents=True)
    (tmp_path / "var/run/utmp").write_bytes(utmp_record(7, "pts/0"))
    host = HostFS(tmp_path)
    before = sample(host, T0, console_devices=())
    (tmp_path / "var/run/utmp").write_bytes(b"")
    after = sample(host, T0 + timedelta(seconds=30), console_devices=())
    assert after.terminal_activity is None
    assert facts(before, after)["KeyboardIdle"] == 90


def test_access_in_the_future_is_now(tmp_path: Path) -> None:
    device(tmp_path, "console", NOW + 3600)
    assert idle(tmp_path, console_devices=("console",))["ConsoleIdle"] == 0


def test_sampling_this_machine() -> None:
    """For real, against HostFS("/"): only sane things can be asserted."""
    sampler = Sampler(HostFS(Path("/")))
    now = datetime.now().astimezone()
    sampler.poll(now)
    got = sampler.poll(now + timedelta(seconds=1))
    assert got["LoadAvg"] >= 0
    assert 0 <= got["ClockMin"] < 24 * 60 and 0 <= got["ClockDay"] <= 6
    assert got["CondorLoadAvg"] == 0.0  # no job cgroups named
    assert 0 <= got["KeyboardIdle"] <= INT_MAX
