"""The machine and live facts of a real node, from `kondor_agent.detect`.

Detection needs what only the API server knows (the Node's labels and allocatable), so the
machine is detected at start and again when those change, checked at most once per
`recheck` seconds: HTCondor's startd also detects its resources at start and reconfig, not
on every poll. Live facts (LoadAvg, KeyboardIdle, the owner's usage, PSI, ...) are sampled on
every poll. Detection and sampling are parameters, so tests pass their own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from kondor_agent.detect import HostFS, Sampler, detect_machine
from kondor_core.api import Machine

Fact = Any


class DetectMachine(Protocol):
    """`kondor_agent.detect.detect_machine`, as far as a node's agent calls it."""

    def __call__(
        self,
        host: HostFS,
        *,
        node_name: str,
        labels: Mapping[str, str],
        allocatable: Mapping[str, str],
        execute_dir: Path,
    ) -> Machine: ...


class LiveSampler(Protocol):
    """`kondor_agent.detect.Sampler`: the live facts at each poll."""

    def poll(self, now: datetime) -> Mapping[str, Fact]: ...


class HostMachine:
    """`read()` gives the detected machine; `live(now)` the live facts at `now`."""

    def __init__(
        self,
        *,
        node_name: str,
        root: Path,
        execute_dir: Path,
        read_node: Callable[[], Mapping[str, Any] | None],
        clock: Callable[[], float],
        recheck: float = 300.0,
        detect: DetectMachine = detect_machine,
        sampler: LiveSampler | None = None,
    ) -> None:
        self.node_name = node_name
        self.host = HostFS(root)
        self.detect = detect
        self.execute_dir = execute_dir
        self.read_node = read_node
        self.clock = clock
        self.recheck = recheck
        self.sampler: LiveSampler = sampler if sampler is not None else Sampler(self.host)
        self._machine: Machine | None = None
        self._node_facts: tuple[dict[str, str], dict[str, str]] | None = None
        self._checked: float | None = None

    def read(self) -> Machine:
        now = self.clock()
        fresh = self._checked is not None and now - self._checked < self.recheck
        if self._machine is not None and fresh:
            return self._machine
        self._checked = now
        node = self.read_node() or {}
        metadata = node.get("metadata") or {}
        labels = dict(metadata.get("labels") or {})
        allocatable = {
            k: str(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()
        }
        if self._machine is not None and self._node_facts == (labels, allocatable):
            return self._machine
        machine = self.detect(
            self.host,
            node_name=self.node_name,
            labels=labels,
            allocatable=allocatable,
            execute_dir=self.execute_dir,
        )
        self._machine, self._node_facts = machine, (labels, allocatable)
        return machine

    def live(self, now: float) -> Mapping[str, Fact]:
        return self.sampler.poll(datetime.fromtimestamp(now).astimezone())
