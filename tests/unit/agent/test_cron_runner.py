"""The agent's startd cron runner: each mode, a failing job, a hung job killed at its period,
the load cap, conditions, reconfiguration and refused executables, in fake time with fake
processes (`cron_fakes`); and two runs of real processes, the edge the fakes stand for."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cron_fakes import FakeClock, FakeSpawner, Script, ScriptFor, hooks_with, prints, run_until

from kondor_agent.cron import CronRunner, Launch, resolve_executable
from kondor_agent.execute.hookpath import RefusedExecutableError
from kondor_core.cron import AutoPublish, CronJob, CronMode, CronSettings

SETTINGS = CronSettings(max_job_load=1.0)
GRACE = 0.5
T0 = 1000.0


@pytest.fixture
def hooks(tmp_path: Path) -> Path:
    directory = tmp_path / "hooks"
    directory.mkdir()
    return directory


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


class Harness:
    """A runner on fake time whose jobs run fake scripts."""

    def __init__(self, hooks: Path, clock: FakeClock) -> None:
        self.hooks = hooks
        self.clock = clock
        self.spawner = FakeSpawner(clock, {})
        self.runner = CronRunner(
            hooks, grace=GRACE, clock=clock, spawner=self.spawner, background=False
        )

    def job(self, name: str, script: ScriptFor, **fields: Any) -> CronJob:
        hooks_with(self.hooks, [name])
        self.spawner.scripts[name] = script
        return CronJob(name=name, executable=name, **fields)

    def until(self, seconds: float) -> None:
        """Run to `seconds` after T0."""
        run_until(self.runner, self.spawner, T0 + seconds)

    def starts(self, job: str) -> list[float]:
        return [at - T0 for at in self.spawner.starts(job)]

    def runs(self, job: str) -> int:
        return sum(1 for result in self.runner.results if result.job == job)


@pytest.fixture
def cron(hooks: Path, clock: FakeClock) -> Iterator[Harness]:
    harness = Harness(hooks, clock)
    yield harness
    harness.runner.stop()


def test_periodic_job_runs_every_period_and_its_ads_are_kept(cron: Harness) -> None:
    count = iter(range(1, 100))

    def tick(launch: Launch) -> Script:
        return prints(f"Runs = {next(count)}", f'Arg0 = "{launch.argv[0]}"', exits=0.2)

    job = cron.job("tick", tick, period=1, prefix="T_", args=("a b",), env={"K": "v"})
    cron.runner.configure([job], SETTINGS)
    cron.until(2.5)
    assert cron.starts("tick") == [0, 1, 2]
    launch = cron.spawner.last("tick").launch
    assert launch.argv == ("tick", "a b")  # argv[0] is the job's name, as HTCondor passes it
    assert (launch.cwd, launch.env) == (str(cron.hooks), {"K": "v"})
    assert launch.executable == (cron.hooks / "tick").resolve()
    assert cron.runner.ads()["tick"].attributes["T_Runs"] == "3"
    assert cron.runner.attribute_names() == {"T_Runs", "T_Arg0"}
    assert cron.runner.take_update() is False  # no `- update:true`: goes out with the next write


def test_one_shot_runs_once_and_again_on_reconfig_with_reconfig_rerun(cron: Harness) -> None:
    job = cron.job("once", prints("Once = 1"), mode=CronMode.ONE_SHOT, reconfig_rerun=True)
    plain = cron.job("plain", prints("Plain = 1"), mode=CronMode.ONE_SHOT)
    cron.runner.configure([job, plain], SETTINGS, reconfig=False)
    cron.until(100)
    assert (cron.runs("once"), cron.runs("plain")) == (1, 1)
    cron.runner.configure([job, plain], SETTINGS)  # a new policy generation: reconfig
    cron.until(200)
    assert cron.starts("once") == [0, 100]
    assert cron.starts("plain") == [0]


def test_reconfig_sends_sighup_to_a_running_job(cron: Harness) -> None:
    job = cron.job("hup", Script(exits=None), mode=CronMode.WAIT_FOR_EXIT, period=1, reconfig=True)
    cron.runner.configure([job], SETTINGS)
    cron.until(1)
    cron.runner.configure([job], SETTINGS)
    assert cron.spawner.last("hup").signals == [signal.SIGHUP]


def test_wait_for_exit_streams_ads_and_reruns_period_after_exit(cron: Harness) -> None:
    script = Script(
        ((0, "Temp = 40"), (0, "- update:true"), (0.3, "Temp = 41"), (0.3, "-")), exits=0.3
    )
    woken: list[bool] = []
    cron.runner.on_update = lambda: woken.append(True)
    job = cron.job("temp", script, mode=CronMode.WAIT_FOR_EXIT, period=1)
    cron.runner.configure([job], SETTINGS)
    cron.until(0)
    # The first ad is published while the job still runs.
    assert cron.runner.ads()["temp"].attributes["Temp"] == "40"
    assert cron.runs("temp") == 0
    assert cron.runner.take_update() is True and woken
    cron.until(0.3)
    assert cron.runs("temp") == 1
    assert cron.runner.ads()["temp"].attributes["Temp"] == "41"
    cron.until(2)
    assert cron.starts("temp") == pytest.approx([0, 1.3])  # restarted a period after it exited


def test_a_failing_job_is_logged_with_its_output(
    cron: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    script = prints("Partial = 1", "no equals sign here", code=3, stderr="disk on fire\n")
    job = cron.job("fails", script, mode=CronMode.ONE_SHOT)
    with caplog.at_level(logging.WARNING, logger="kondor_agent.cron"):
        cron.runner.configure([job], CronSettings(log_non_zero_exit=True))
        cron.until(0)
    text = caplog.text
    assert "startd cron job fails exited with 3" in text
    assert "no equals sign here" in text and "disk on fire" in text
    assert "output line 2 'no equals sign here'" in text
    # What parsed still counts.
    assert cron.runner.ads()["fails"].attributes == {"Partial": "1"}


def test_without_log_non_zero_exit_only_the_exit_code_is_logged(
    cron: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    job = cron.job("quiet", prints(code=1, stderr="secret stderr"), mode=CronMode.ONE_SHOT)
    with caplog.at_level(logging.WARNING, logger="kondor_agent.cron"):
        cron.runner.configure([job], CronSettings())
        cron.until(0)
    assert "exited with 1" in caplog.text and "secret stderr" not in caplog.text


def test_a_hung_job_is_killed_at_its_period_and_started_again(
    cron: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    # It ignores SIGTERM, so the kill escalates to SIGKILL after the grace period.
    hung = Script(((0, "Hung = 1"),), exits=None, ignores_term=True)
    job = cron.job("hung", hung, period=1, kill=True)
    with caplog.at_level(logging.WARNING, logger="kondor_agent.cron"):
        cron.runner.configure([job], SETTINGS)
        cron.until(1 + GRACE)
    first = cron.runner.results[0]
    assert first.killed and first.exit_code == -signal.SIGKILL
    assert cron.spawner.processes[0].signals == [signal.SIGTERM, signal.SIGKILL]
    assert "still running at its period (1s); killing it" in caplog.text
    assert "hung" not in cron.runner.ads()  # the output of a killed run does not count
    assert cron.starts("hung") == [0, 1 + GRACE]  # the new instance started at once


def test_a_periodic_job_without_kill_runs_on_and_restarts_at_the_next_period(
    cron: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    job = cron.job("slow", prints("Slow = 1", exits=2.5), period=1)
    with caplog.at_level(logging.WARNING, logger="kondor_agent.cron"):
        cron.runner.configure([job], SETTINGS)
        cron.until(3.5)
    assert cron.starts("slow") == [0, 3]
    assert cron.spawner.processes[0].signals == []
    assert cron.runner.ads()["slow"].attributes == {"Slow": "1"}
    assert caplog.text.count("it is not started again until it exits (kill is false)") == 1


def test_the_max_job_load_holds_a_job_back(cron: Harness) -> None:
    jobs = [
        cron.job("slow", prints("Slow = 1", exits=0.5), mode=CronMode.ONE_SHOT, job_load=0.1),
        cron.job("fast", prints("Fast = 1"), mode=CronMode.ONE_SHOT, job_load=0.1),
    ]
    cron.runner.configure(jobs, CronSettings(max_job_load=0.1))
    cron.until(5)
    assert [r.job for r in cron.runner.results] == ["slow", "fast"]
    assert cron.starts("fast") == [1.0]  # held back at 0, tried again a second later


def test_condition_is_evaluated_against_the_machine_ad(cron: Harness) -> None:
    cron.runner.machine_ad = lambda: {"TotalGPUs": 0, "Cpus": 4}
    jobs = [
        cron.job("gpu", prints("Gpu = 1"), mode=CronMode.ONE_SHOT, condition="TotalGPUs > 0"),
        cron.job("cpu", prints("Cpu = 1"), mode=CronMode.ONE_SHOT, condition="Cpus > 0"),
    ]
    cron.runner.configure(jobs, SETTINGS)
    cron.until(3)
    assert cron.runs("cpu") == 1 and cron.runs("gpu") == 0
    cron.runner.machine_ad = lambda: {"TotalGPUs": 1, "Cpus": 4}
    cron.until(5)
    assert cron.starts("gpu") == [4]  # the condition is checked again every second


def test_autopublish_if_changed_asks_for_an_update_only_on_change(cron: Harness) -> None:
    job = cron.job("same", prints("Same = 1"), period=1)
    cron.runner.configure([job], CronSettings(max_job_load=1.0, autopublish=AutoPublish.IF_CHANGED))
    cron.until(0)
    assert cron.runner.take_update() is True
    cron.until(1)
    assert cron.runs("same") == 2
    assert cron.runner.take_update() is False


def test_removed_jobs_are_killed_and_take_their_ads(cron: Harness) -> None:
    gone = cron.job("gone", prints("G = 1"), period=1)
    hung = cron.job("hung", Script(exits=None, ignores_term=True), mode=CronMode.WAIT_FOR_EXIT)
    cron.runner.configure([gone, hung], SETTINGS)
    cron.until(0.5)
    assert "gone" in cron.runner.ads()
    cron.runner.configure([], SETTINGS)
    assert cron.runner.ads() == {}
    cron.until(0.5 + GRACE)
    assert cron.spawner.last("hung").signals == [signal.SIGTERM, signal.SIGKILL]
    assert cron.runner.results[-1].killed
    cron.until(10)
    assert cron.starts("gone") == [0] and cron.starts("hung") == [0]


def test_a_changed_job_is_restarted(cron: Harness) -> None:
    job = cron.job("j", Script(exits=None), mode=CronMode.WAIT_FOR_EXIT, period=5)
    cron.runner.configure([job], SETTINGS)
    cron.until(1)
    cron.runner.configure([CronJob(name="j", executable="j", period=5)], SETTINGS)
    cron.until(1)
    assert cron.spawner.processes[0].signals == [signal.SIGTERM]
    assert cron.starts("j") == [0, 1]


def test_a_job_that_cannot_start_is_logged_and_tried_at_its_next_period(
    cron: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    job = cron.job("broken", OSError(8, "Exec format error"), period=10)
    with caplog.at_level(logging.ERROR, logger="kondor_agent.cron"):
        cron.runner.configure([job], SETTINGS)
        cron.until(0)
    assert "startd cron job broken cannot start" in caplog.text
    cron.spawner.scripts["broken"] = prints("Fixed = 1")
    cron.until(10)
    assert cron.runner.ads()["broken"].attributes == {"Fixed": "1"}


def test_stop_kills_what_runs(cron: Harness) -> None:
    job = cron.job("hung", Script(exits=None, ignores_term=True), period=60)
    cron.runner.configure([job], SETTINGS)
    cron.until(1)
    cron.runner.stop()
    assert cron.spawner.last("hung").signals == [signal.SIGTERM, signal.SIGKILL]
    assert cron.clock.now == pytest.approx(T0 + 1 + GRACE)


# -- refused executables ---------------------------------------------------------------------


def test_the_agent_refuses_executables_outside_the_hooks_dir(
    hooks: Path, tmp_path: Path, cron: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    outside = tmp_path / "evil.sh"
    outside.write_text("#!/bin/sh\necho 'Evil = 1'\n")
    outside.chmod(0o755)
    (hooks / "link.sh").symlink_to(outside)
    hooks_with(hooks, ["noexec.sh"])
    (hooks / "noexec.sh").chmod(0o644)
    cases = {
        "abs": (str(outside), "outside the hooks directory"),
        "dots": ("../evil.sh", "outside the hooks directory"),
        "link": ("link.sh", "a symlink leads out of it"),
        "missing": ("missing.sh", "does not exist"),
        "noexec": ("noexec.sh", "is not executable"),
    }
    for name, (executable, message) in cases.items():
        job = CronJob(name=name, executable=executable, mode=CronMode.ONE_SHOT)
        with pytest.raises(RefusedExecutableError, match=message):
            resolve_executable(job, hooks)
    jobs = [CronJob(name=n, executable=e, mode=CronMode.ONE_SHOT) for n, (e, _) in cases.items()]
    with caplog.at_level(logging.ERROR, logger="kondor_agent.cron"):
        cron.runner.configure(jobs, SETTINGS)
        cron.until(5)
    assert cron.spawner.processes == []
    assert cron.runner.results == [] and cron.runner.ads() == {}
    assert "startd cron job link is not run" in caplog.text


def test_run_once_waits_for_each_job_with_a_timeout(cron: Harness) -> None:
    jobs = [
        cron.job("a", prints("A = 1"), period=60),
        cron.job("slow", Script(exits=None), period=60),
        cron.job(
            "w", prints("W = 2", "-", "W = 3", exits=None), mode=CronMode.WAIT_FOR_EXIT, period=5
        ),
    ]
    cron.runner.run_once(jobs, SETTINGS, timeout=0.5)
    assert cron.clock.now == T0 + 1.0  # `a` at once, then 0.5 s each for the two that hang
    assert set(cron.runner.ads()) == {"a", "w"}
    # A streamed ad counts; what was left unfinished at the kill does not.
    assert cron.runner.ads()["w"].attributes == {"W": "2"}
    assert [r.killed for r in cron.runner.results] == [False, True, True]


# -- real processes --------------------------------------------------------------------------


def _hook(hooks: Path, name: str, body: str) -> str:
    path = hooks / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return name


def _wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_real_process_runs_in_the_background_with_its_name_dir_and_env(hooks: Path) -> None:
    body = (
        'echo "Args = \\"$*\\""\necho "Dir = \\"$(pwd)\\""\n'
        'echo "Env = \\"$KONDOR_TEST\\""\necho oops >&2\nexit 2\n'
    )
    job = CronJob(
        name="real",
        executable=_hook(hooks, "real.sh", body),
        mode=CronMode.ONE_SHOT,
        args=("x", "y"),
        env={"KONDOR_TEST": "yes"},
    )
    runner = CronRunner(hooks, grace=0.2)
    try:
        runner.configure([job], SETTINGS)
        _wait_for(lambda: bool(runner.results))
    finally:
        runner.stop()
    [result] = runner.results
    assert (result.exit_code, result.killed, result.stderr) == (2, False, "oops\n")
    assert runner.ads()["real"].attributes == {
        "Args": '"x y"',
        "Dir": f'"{hooks.resolve()}"',
        "Env": '"yes"',
    }


def test_a_real_hung_process_group_is_killed(hooks: Path) -> None:
    """SIGTERM is ignored, so SIGKILL after the grace period; it reaches the job's children."""
    child = hooks / "child.pid"
    body = f"trap '' TERM\necho 'W = 1'\necho -\nsleep 30 &\necho $! > {child}\nwait\n"
    job = CronJob(
        name="hung", executable=_hook(hooks, "hung.sh", body), mode=CronMode.WAIT_FOR_EXIT, period=5
    )
    runner = CronRunner(hooks, grace=0.1)
    started = time.monotonic()
    runner.run_once([job], SETTINGS, timeout=0.2)
    assert time.monotonic() - started < 3
    [result] = runner.results
    assert result.killed and result.exit_code == -signal.SIGKILL
    assert runner.ads()["hung"].attributes == {"W": "1"}
    pid = int(child.read_text())
    _wait_for(lambda: not _alive(pid), timeout=2)


def _alive(pid: int) -> bool:
    """Running (a killed orphan is a zombie until init reaps it: that counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"
