"""A real node's machine: detected at start and again when the Node's labels or allocatable
change (checked once per recheck interval), live facts on every poll."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kondor_agent.hostsource import HostMachine
from kondor_core.api import Machine


class _Detect:
    """Stands in for kondor_agent.detect: records what detection was given."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.polls: list[datetime] = []
        outer = self

        class Sampler:
            def __init__(self, host: Any) -> None:
                self.host = host

            def poll(self, now: datetime) -> dict[str, Any]:
                outer.polls.append(now)
                return {"LoadAvg": 0.5}

        self.Sampler = Sampler
        self.HostFS = lambda root: SimpleNamespace(root=root)

    def detect_machine(self, host: Any, **kwargs: Any) -> Machine:
        self.calls.append(kwargs)
        cpus = int(kwargs["allocatable"].get("cpu", "1"))
        return Machine(name=kwargs["node_name"], cpus=cpus, memory="1Gi")


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
        module=detect,
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


def test_live_facts_are_sampled_at_the_given_time() -> None:
    detect = _Detect()
    host = HostMachine(
        node_name="n",
        root=Path("/"),
        execute_dir=Path("/x"),
        read_node=lambda: None,
        clock=lambda: 0.0,
        module=detect,
    )
    facts: Mapping[str, Any] = host.live(1_800_000_000.0)
    assert facts == {"LoadAvg": 0.5}
    assert detect.polls[0].timestamp() == 1_800_000_000.0
