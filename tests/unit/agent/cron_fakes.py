"""Fake time and fake processes for the startd cron runner (`kondor_agent.cron`).

A `Script` says what one run prints, when, and how it ends, in seconds after its start; the
`FakeSpawner` starts a `FakeProcess` for it on the `FakeClock`, which only moves when a test
(or the runner, waiting) moves it. Nothing here sleeps.
"""

from __future__ import annotations

import math
import signal
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kondor_agent.cron import CronRunner, Launch


class FakeClock:
    """Monotonic fake time. `wait` returns at once when the event is set; otherwise time
    moves on to the earlier of the timeout and the next alarm (a fake process printing or
    exiting), as if the runner had slept until then."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.alarms: list[float] = []

    def __call__(self) -> float:
        return self.now

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        if event.is_set():
            return True
        upcoming = [at for at in self.alarms if at > self.now]
        if timeout is not None:
            upcoming.append(self.now + timeout)
        assert upcoming, "the runner would wait forever: nothing is due in fake time"
        self.now = min(upcoming)
        return event.is_set()


@dataclass(frozen=True)
class Script:
    """One fake run: `lines` printed at (seconds after start, text), then it exits with
    `code` `exits` seconds after its start (None: it runs until killed). With `ignores_term`
    SIGTERM does nothing (SIGKILL still does)."""

    lines: tuple[tuple[float, str], ...] = ()
    exits: float | None = 0.0
    code: int = 0
    stderr: str = ""
    ignores_term: bool = False


def prints(*lines: str, exits: float | None = 0.0, code: int = 0, stderr: str = "") -> Script:
    """A run printing `lines` as it starts."""
    return Script(tuple((0.0, line) for line in lines), exits=exits, code=code, stderr=stderr)


class FakeProcess:
    def __init__(
        self, clock: FakeClock, launch: Launch, script: Script, notify: Callable[[], None]
    ) -> None:
        self.clock = clock
        self.launch = launch
        self.script = script
        self.notify = notify
        self.started = clock()
        self.signals: list[signal.Signals] = []
        self._read = 0
        self._died: tuple[float, int] | None = None
        clock.alarms.extend(self.started + at for at, _ in script.lines)
        if script.exits is not None:
            clock.alarms.append(self.started + script.exits)

    def _end(self) -> float:
        """When it ended or ends (inf: not yet known)."""
        if self._died is not None:
            return self._died[0]
        return math.inf if self.script.exits is None else self.started + self.script.exits

    def read(self) -> list[str]:
        now, end = self.clock(), self._end()
        printed = [
            text + "\n"
            for at, text in self.script.lines
            if self.started + at <= min(now, end) and not (self._died and self.started + at > end)
        ]
        new, self._read = printed[self._read :], len(printed)
        return new

    def exit_code(self) -> int | None:
        if self._died is not None:
            return self._died[1]
        if self.clock() >= self._end():
            return self.script.code
        return None

    def stderr(self) -> str:
        return self.script.stderr

    def failure(self) -> str | None:
        return None

    def signal(self, sig: signal.Signals) -> None:
        self.signals.append(sig)
        if self.exit_code() is not None:
            return
        if sig is signal.SIGKILL or (sig is signal.SIGTERM and not self.script.ignores_term):
            self._died = (self.clock(), -int(sig))
            self.notify()

    @property
    def running(self) -> bool:
        return self.exit_code() is None


ScriptFor = Script | OSError | Callable[[Launch], Script]


class FakeSpawner:
    """Starts the script given for each job name (argv[0]); records every start."""

    def __init__(self, clock: FakeClock, scripts: Mapping[str, ScriptFor]) -> None:
        self.clock = clock
        self.scripts = dict(scripts)
        self.processes: list[FakeProcess] = []
        #: How often a process woke the runner (a kill ending it).
        self.notified = 0

    def __call__(self, launch: Launch, notify: Callable[[], None]) -> FakeProcess:
        script = self.scripts[launch.argv[0]]
        if isinstance(script, OSError):
            raise script
        if not isinstance(script, Script):
            script = script(launch)

        def wake() -> None:
            self.notified += 1
            notify()

        process = FakeProcess(self.clock, launch, script, wake)
        self.processes.append(process)
        return process

    def starts(self, job: str) -> list[float]:
        """When each run of `job` started."""
        return [p.started for p in self.processes if p.launch.argv[0] == job]

    def last(self, job: str) -> FakeProcess:
        return [p for p in self.processes if p.launch.argv[0] == job][-1]


def hooks_with(hooks: Path, names: Iterable[str]) -> None:
    """Executables of these names in `hooks` (what they hold never runs: the spawner is fake)."""
    for name in names:
        path = hooks / name
        path.write_text("#!/bin/sh\nexit 99\n")
        path.chmod(0o755)


def run_until(runner: CronRunner, spawner: FakeSpawner, end: float) -> None:
    """Drive `runner` as its thread would, in fake time: steps at every time something is due
    or a fake process prints or exits, up to and including `end`. At each time it steps again
    after a step that started a process or made one exit, as the thread would be woken."""
    clock = spawner.clock
    while True:
        wake = _settle(runner, spawner)
        if clock.now >= end:
            return
        upcoming = [at for at in (*clock.alarms, wake) if at is not None and at > clock.now]
        clock.now = min([*upcoming, end])


def _settle(runner: CronRunner, spawner: FakeSpawner) -> float | None:
    while True:
        before = (len(spawner.processes), spawner.notified)
        wake = runner.step()
        if (len(spawner.processes), spawner.notified) == before:
            return wake
