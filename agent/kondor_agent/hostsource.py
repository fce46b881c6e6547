"""The machine and live facts of a real node, from `kondor_agent.detect`.

Detection needs what only the API server knows (the Node's labels and allocatable), so the
machine is detected at start and again when those change, checked at most once per
`recheck` seconds: HTCondor's startd also detects its resources at start and reconfig, not
on every poll. Live facts (LoadAvg, KeyboardIdle, the owner's usage, PSI, ...) are sampled on
every poll. The detection module is imported only here and only when used, so a simulated
node (`--machine FILE`) never needs it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from kondor_core.api import Machine

Fact = Any


class DetectionUnavailableError(RuntimeError):
    """Host detection (`kondor_agent.detect`) is not available in this build."""


def detect_module() -> Any:
    """`kondor_agent.detect`, or a DetectionUnavailableError saying what to do instead."""
    try:
        module = importlib.import_module("kondor_agent.detect")
    except ImportError as err:
        raise DetectionUnavailableError(
            f"host detection is not available ({err}); give --machine FILE to run on a "
            "machine description instead"
        ) from None
    for name in ("detect_machine", "HostFS", "Sampler"):
        if not hasattr(module, name):
            raise DetectionUnavailableError(
                f"host detection is not available (kondor_agent.detect has no {name}); give "
                "--machine FILE to run on a machine description instead"
            )
    return module


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
        module: Any = None,
    ) -> None:
        self.detect = module if module is not None else detect_module()
        self.node_name = node_name
        self.host = self.detect.HostFS(root)
        self.execute_dir = execute_dir
        self.read_node = read_node
        self.clock = clock
        self.recheck = recheck
        self.sampler = self.detect.Sampler(self.host)
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
        machine: Machine = self.detect.detect_machine(
            self.host,
            node_name=self.node_name,
            labels=labels,
            allocatable=allocatable,
            execute_dir=self.execute_dir,
        )
        self._machine, self._node_facts = machine, (labels, allocatable)
        return machine

    def live(self, now: float) -> Mapping[str, Fact]:
        facts: Mapping[str, Fact] = self.sampler.poll(datetime.fromtimestamp(now).astimezone())
        return facts
