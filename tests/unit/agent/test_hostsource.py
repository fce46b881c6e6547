"""A real node's machine: detected at start and again when the Node's labels or allocatable
change (checked once per recheck interval), live facts on every poll."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from kondor_agent.detect import HostFS
from kondor_agent.hostsource import HostMachine
from kondor_core.api import Machine


class _Detect:
    """Stands in for kondor_agent.detect's `detect_machine` and `Sampler`: records what they
    were given."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.polls: list[datetime] = []

    def detect_machine(self, host: HostFS, **kwargs: Any) -> Machine:
        self.calls.append({"host": host, **kwargs})
        cpus = int(kwargs["allocatable"].get("cpu", "1"))
        return Machine(name=kwargs["node_name"], cpus=cpus, memory="1Gi")

    def poll(self, now: datetime) -> dict[str, Any]:
        self.polls.append(now)
        return {"LoadAvg": 0.5}


def test_redetects_only_when_the_node_changes() -> None:
    detect = _Detect()
    node: dict[str, Any] = {
        "metadata": {"labels": {"a": "1"}},
        "status": {"allocatable": {"cpu": "2"}},
    }
    now = [1000.0]
    host = HostMachine(
        node_name="n",
        root=Path("/host"),
        execute_dir=Path("/x"),
        read_node=lambda: node,
        clock=lambda: now[0],
        recheck=60,
        detect=detect.detect_machine,
        sampler=detect,
    )
    assert host.read().cpus == 2
    now[0] += 30
    node["status"]["allocatable"]["cpu"] = "4"
    assert host.read().cpus == 2  # not checked again yet
    now[0] += 31
    assert host.read().cpus == 4
    now[0] += 61
    assert host.read().cpus == 4
    assert len(detect.calls) == 2
    assert detect.calls[0]["labels"] == {"a": "1"}
    assert detect.calls[0]["execute_dir"] == Path("/x")
    assert detect.calls[0]["host"].root == Path("/host")


def test_live_facts_are_sampled_at_the_given_time() -> None:
    detect = _Detect()
    host = HostMachine(
        node_name="n",
        root=Path("/"),
        execute_dir=Path("/x"),
        read_node=lambda: None,
        clock=lambda: 0.0,
        detect=detect.detect_machine,
        sampler=detect,
    )
    facts: Mapping[str, Any] = host.live(1_800_000_000.0)
    assert facts == {"LoadAvg": 0.5}
    assert detect.polls[0].timestamp() == 1_800_000_000.0
