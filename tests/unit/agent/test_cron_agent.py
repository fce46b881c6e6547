"""Startd cron through the agent: `kondor-agent --oneshot --no-publish --hooks-dir` shows the
jobs' attributes in the slot ads, and the loop publishes them (at once on `- update:true`,
with the next heartbeat otherwise) and lets the policy use them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from agent_fakes import EXAMPLES, FakeAPI, FakeClock, MachineBox, example_machine
from cron_fakes import FakeClock as FakeCronClock
from cron_fakes import FakeSpawner, hooks_with, prints, run_until

from kondor_agent.cron import CronRunner
from kondor_agent.loop import Agent, AgentConfig
from kondor_agent.main import main
from kondor_agent.services import CronService


def _policy(tmp_path: Path, spec: dict[str, Any]) -> Path:
    path = tmp_path / "policy.yaml"
    manifest = {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "SlotPolicy",
        "metadata": {"name": "cron"},
        "spec": spec,
    }
    path.write_text(yaml.safe_dump(manifest))
    return path


def test_oneshot_cli_shows_cron_attributes_in_the_slot_ads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hooks = tmp_path / "hooks"
    shutil.copytree(EXAMPLES / "hooks", hooks)
    argv = [
        "--machine",
        str(EXAMPLES / "machines" / "node-a.yaml"),
        "--policy",
        str(hooks / "policy.yaml"),
        "--hooks-dir",
        str(hooks),
        "--cron-timeout",
        "0.5",
        "--oneshot",
        "--no-publish",
    ]
    assert main(argv) == 0
    slots = json.loads(capsys.readouterr().out)["slots"]
    assert [ad["Colour"] for ad in slots] == ["red", "green", "blue", "blue"]
    for ad in slots:
        assert isinstance(ad["NodeHealthy"], bool)
        assert isinstance(ad["NodeCpuTemperature"], int)  # the prefix applied
        # RUNBENCHMARKS ran once (LastBenchmark was 0) and the slots are Idle again.
        assert ad["Mips"] > 0 and ad["KFlops"] > 0 and ad["LastBenchmark"] > 0
        assert (ad["State"], ad["Activity"]) == ("Unclaimed", "Idle")


def test_oneshot_cli_with_a_job_outside_the_hooks_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    policy = _policy(
        tmp_path, {"cron": [{"name": "x", "executable": "/bin/echo", "mode": "OneShot"}]}
    )
    argv = ["--machine", str(EXAMPLES / "machines" / "desk.yaml"), "--policy", str(policy)]
    assert main([*argv, "--hooks-dir", str(hooks), "--oneshot", "--no-publish"]) == 0
    assert "outside the hooks directory" in caplog.text
    assert all("x" not in ad for ad in json.loads(capsys.readouterr().out)["slots"])


def test_the_loop_publishes_cron_ads_and_the_policy_reads_them(tmp_path: Path) -> None:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    hooks_with(hooks, ["health", "urgent"])
    healthy = [False]
    spec = {
        "start": "Healthy =?= True",
        "isOwner": "Healthy =!= True",
        "cron": [{"name": "health", "executable": "health", "period": 1}],
    }
    api, clock = FakeAPI(), FakeClock()
    machines = MachineBox(example_machine("desk.yaml"))
    api.add_policy(
        {
            "apiVersion": "kondor.io/v1alpha1",
            "kind": "SlotPolicy",
            "metadata": {"name": "cron"},
            "spec": spec,
        }
    )
    api.add_execution_point(machines.machine.name, "cron")
    api.clock = clock
    # The cron runner on its own fake (monotonic) time, its jobs fake processes.
    cron_clock = FakeCronClock(0.0)
    spawner = FakeSpawner(
        cron_clock,
        {
            "health": lambda _launch: prints(f"Healthy = {healthy[0]}"),
            "urgent": prints("Urgent = 1", "- update:true"),
        },
    )
    cron = CronRunner(hooks, clock=cron_clock, spawner=spawner, background=False)
    agent = Agent(
        AgentConfig(node_name=machines.machine.name, polling_interval=5.0, update_interval=300),
        api,
        machines,
        clock=clock,
        services=[CronService(cron)],
    )
    try:
        agent.step()
        run_until(cron, spawner, 0.0)
        assert "health" in cron.ads()
        clock.now += 5
        agent.step()
        clock.now += 1
        agent.step()
        (slot,) = api.status(machines.machine.name)["slots"]
        # Cron output alone goes out with the next heartbeat (UPDATE_INTERVAL), as HTCondor's
        # goes with the next update; the policy uses it at once.
        assert "Healthy" not in slot["ad"]
        assert slot["state"] == "Owner"
        assert agent.startd is not None
        assert agent.startd.layout_ads[0].attributes["Healthy"] is False
        writes = len(api.patches)
        # The node turns healthy: the policy sees it at the next tick and the slot leaves
        # Owner, a state change written at once (with the cron attributes).
        healthy[0] = True
        run_until(cron, spawner, 1.0)
        assert cron.ads()["health"].attributes["Healthy"] == "True"
        clock.now += 5
        agent.step()
        clock.now += 1
        agent.step()
        (slot,) = api.status(machines.machine.name)["slots"]
        assert (slot["state"], slot["ad"]["Healthy"]) == ("Unclaimed", True)
        assert len(api.patches) == writes + 1
        # A job saying `- update:true` is written at once, without a state change.
        spec["cron"].append({"name": "urgent", "executable": "urgent", "mode": "OneShot"})
        api.add_policy(
            {
                "apiVersion": "kondor.io/v1alpha1",
                "kind": "SlotPolicy",
                "metadata": {"name": "cron"},
                "spec": spec,
            },
            generation=2,
        )
        clock.now += 5
        agent.step()  # re-carved with generation 2 (the agent follows it); the new job starts
        run_until(cron, spawner, 1.5)
        assert "urgent" in cron.ads()
        clock.now += 5
        agent.step()
        clock.now += 1
        agent.step()
        (slot,) = api.status(machines.machine.name)["slots"]
        assert slot["ad"]["Urgent"] == 1
    finally:
        cron.stop()
