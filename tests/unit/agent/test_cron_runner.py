"""The agent's startd cron runner with real short shell scripts in a temporary hooks directory:
each mode, a failing job, a hung job killed at its period, and refused executables."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kondor_agent.cron import CronRunner, RefusedExecutableError, resolve_executable
from kondor_core.cron import AutoPublish, CronJob, CronMode, CronSettings

SETTINGS = CronSettings(max_job_load=1.0)


def hook(hooks: Path, name: str, body: str) -> str:
    path = hooks / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return name


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def hooks(tmp_path: Path) -> Path:
    directory = tmp_path / "hooks"
    directory.mkdir()
    return directory


@pytest.fixture
def runner(hooks: Path) -> Iterator[CronRunner]:
    runner = CronRunner(hooks, grace=0.5)
    yield runner
    runner.stop()


def runs(runner: CronRunner, job: str) -> int:
    return sum(1 for result in list(runner.results) if result.job == job)


def test_periodic_job_runs_every_period_and_its_ads_are_kept(
    hooks: Path, runner: CronRunner
) -> None:
    counter = hooks / "count"
    body = f'echo x >> {counter}\necho "Runs = $(wc -l < {counter})"\necho "Arg0 = \\"$0\\""\n'
    job = CronJob(name="tick", executable=hook(hooks, "tick.sh", body), period=1, prefix="T_")
    runner.configure([job], SETTINGS)
    wait_for(lambda: runs(runner, "tick") >= 2, timeout=5)
    ads = runner.ads()
    assert ads["tick"].attributes["T_Runs"] in {"2", "3"}
    assert runner.attribute_names() == {"T_Runs", "T_Arg0"}
    assert runner.take_update() is False  # no `- update:true`: goes out with the next write


def test_one_shot_runs_once_and_again_on_reconfig_with_reconfig_rerun(
    hooks: Path, runner: CronRunner
) -> None:
    script = hook(hooks, "once.sh", "echo 'Once = 1'\n")
    job = CronJob(name="once", executable=script, mode=CronMode.ONE_SHOT, reconfig_rerun=True)
    plain = CronJob(name="plain", executable=script, mode=CronMode.ONE_SHOT)
    runner.configure([job, plain], SETTINGS, reconfig=False)
    wait_for(lambda: runs(runner, "once") == 1 and runs(runner, "plain") == 1)
    time.sleep(0.3)
    assert runs(runner, "once") == 1
    runner.configure([job, plain], SETTINGS)  # a new policy generation: reconfig
    wait_for(lambda: runs(runner, "once") == 2)
    time.sleep(0.2)
    assert runs(runner, "plain") == 1


def test_wait_for_exit_streams_ads_and_reruns_period_after_exit(
    hooks: Path, runner: CronRunner
) -> None:
    body = "echo 'Temp = 40'\necho '- update:true'\nsleep 0.3\necho 'Temp = 41'\necho '-'\n"
    woken: list[bool] = []
    runner.on_update = lambda: woken.append(True)
    job = CronJob(
        name="temp", executable=hook(hooks, "temp.sh", body), mode=CronMode.WAIT_FOR_EXIT, period=1
    )
    runner.configure([job], SETTINGS)
    # The first ad is published while the job still runs.
    wait_for(lambda: "temp" in runner.ads())
    assert runner.ads()["temp"].attributes["Temp"] == "40"
    assert runs(runner, "temp") == 0
    assert runner.take_update() is True and woken
    wait_for(lambda: runs(runner, "temp") == 1)
    assert runner.ads()["temp"].attributes["Temp"] == "41"
    ended = time.monotonic()
    wait_for(lambda: runs(runner, "temp") == 2, timeout=5)
    assert time.monotonic() - ended >= 1.0 - 0.05  # restarted a period after it exited


def test_a_failing_job_is_logged_with_its_output(
    hooks: Path, runner: CronRunner, caplog: pytest.LogCaptureFixture
) -> None:
    body = "echo 'Partial = 1'\necho 'no equals sign here'\necho 'disk on fire' >&2\nexit 3\n"
    job = CronJob(name="fails", executable=hook(hooks, "fails.sh", body), mode=CronMode.ONE_SHOT)
    with caplog.at_level(logging.WARNING, logger="kondor_agent.cron"):
        runner.configure([job], CronSettings(log_non_zero_exit=True))
        wait_for(lambda: runs(runner, "fails") == 1)
    text = caplog.text
    assert "startd cron job fails exited with 3" in text
    assert "no equals sign here" in text and "disk on fire" in text
    assert "output line 2 'no equals sign here'" in text
    # What parsed still counts.
    assert runner.ads()["fails"].attributes == {"Partial": "1"}


def test_without_log_non_zero_exit_only_the_exit_code_is_logged(
    hooks: Path, runner: CronRunner, caplog: pytest.LogCaptureFixture
) -> None:
    body = "echo 'secret stderr' >&2\nexit 1\n"
    job = CronJob(name="quiet", executable=hook(hooks, "q.sh", body), mode=CronMode.ONE_SHOT)
    with caplog.at_level(logging.WARNING, logger="kondor_agent.cron"):
        runner.configure([job], CronSettings())
        wait_for(lambda: runs(runner, "quiet") == 1)
    assert "exited with 1" in caplog.text and "secret stderr" not in caplog.text


def test_a_hung_job_is_killed_at_its_period_and_started_again(
    hooks: Path, runner: CronRunner, caplog: pytest.LogCaptureFixture
) -> None:
    # It ignores SIGTERM, so the kill escalates to SIGKILL after the grace period.
    starts = hooks / "starts"
    body = f"echo x >> {starts}\ntrap '' TERM\necho 'Hung = 1'\nsleep 30\n"
    job = CronJob(name="hung", executable=hook(hooks, "hung.sh", body), period=1, kill=True)
    with caplog.at_level(logging.WARNING, logger="kondor_agent.cron"):
        started = time.monotonic()
        runner.configure([job], SETTINGS)
        wait_for(lambda: runs(runner, "hung") >= 1, timeout=5)
    first = runner.results[0]
    assert first.killed and first.exit_code is not None and first.exit_code < 0
    assert 1.0 <= time.monotonic() - started < 5
    assert "still running at its period (1s); killing it" in caplog.text
    assert "hung" not in runner.ads()  # the output of a killed run does not count
    # The new instance started at once.
    wait_for(lambda: starts.exists() and len(starts.read_text().split()) >= 2, timeout=2)


def test_the_max_job_load_holds_a_job_back(hooks: Path, runner: CronRunner) -> None:
    slow = hook(hooks, "slow.sh", "sleep 0.5\necho 'Slow = 1'\n")
    fast = hook(hooks, "fast.sh", "echo 'Fast = 1'\n")
    jobs = [
        CronJob(name="slow", executable=slow, mode=CronMode.ONE_SHOT, job_load=0.1),
        CronJob(name="fast", executable=fast, mode=CronMode.ONE_SHOT, job_load=0.1),
    ]
    runner.configure(jobs, CronSettings(max_job_load=0.1))
    wait_for(lambda: runs(runner, "slow") == 1 and runs(runner, "fast") == 1)
    assert [r.job for r in runner.results] == ["slow", "fast"]


def test_condition_is_evaluated_against_the_machine_ad(hooks: Path, runner: CronRunner) -> None:
    script = hook(hooks, "gpu.sh", "echo 'Gpu = 1'\n")
    runner.machine_ad = lambda: {"TotalGPUs": 0, "Cpus": 4}
    jobs = [
        CronJob(name="gpu", executable=script, mode=CronMode.ONE_SHOT, condition="TotalGPUs > 0"),
        CronJob(name="cpu", executable=script, mode=CronMode.ONE_SHOT, condition="Cpus > 0"),
    ]
    runner.configure(jobs, SETTINGS)
    wait_for(lambda: runs(runner, "cpu") == 1)
    time.sleep(0.2)
    assert runs(runner, "gpu") == 0


def test_autopublish_if_changed_asks_for_an_update_only_on_change(
    hooks: Path, runner: CronRunner
) -> None:
    job = CronJob(name="same", executable=hook(hooks, "s.sh", "echo 'Same = 1'\n"), period=1)
    runner.configure([job], CronSettings(max_job_load=1.0, autopublish=AutoPublish.IF_CHANGED))
    wait_for(lambda: runs(runner, "same") == 1)
    assert runner.take_update() is True
    wait_for(lambda: runs(runner, "same") == 2, timeout=5)
    assert runner.take_update() is False


def test_removed_jobs_stop_and_take_their_ads(hooks: Path, runner: CronRunner) -> None:
    job = CronJob(name="gone", executable=hook(hooks, "g.sh", "echo 'G = 1'\n"), period=1)
    runner.configure([job], SETTINGS)
    wait_for(lambda: "gone" in runner.ads())
    runner.configure([], SETTINGS)
    assert runner.ads() == {}


# -- refused executables ---------------------------------------------------------------------


def test_the_agent_refuses_executables_outside_the_hooks_dir(
    hooks: Path, tmp_path: Path, runner: CronRunner, caplog: pytest.LogCaptureFixture
) -> None:
    outside = tmp_path / "evil.sh"
    outside.write_text("#!/bin/sh\necho 'Evil = 1'\n")
    outside.chmod(0o755)
    (hooks / "link.sh").symlink_to(outside)
    hook(hooks, "noexec.sh", "echo 'X = 1'\n")
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
        runner.configure(jobs, SETTINGS)
        time.sleep(0.3)
    assert runner.results == [] and runner.ads() == {}
    assert "startd cron job link is not run" in caplog.text


def test_run_once_waits_for_each_job_with_a_timeout(hooks: Path) -> None:
    runner = CronRunner(hooks, grace=0.2)
    jobs = [
        CronJob(name="a", executable=hook(hooks, "a.sh", "echo 'A = 1'\n"), period=60),
        CronJob(name="slow", executable=hook(hooks, "z.sh", "sleep 30\n"), period=60),
        CronJob(
            name="w",
            executable=hook(hooks, "w.sh", "echo 'W = 2'\necho -\nsleep 30\n"),
            mode=CronMode.WAIT_FOR_EXIT,
            period=5,
        ),
    ]
    started = time.monotonic()
    runner.run_once(jobs, SETTINGS, timeout=0.5)
    assert time.monotonic() - started < 5
    assert set(runner.ads()) == {"a", "w"}
