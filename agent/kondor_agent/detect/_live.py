"""Live facts every polling interval: a sampler that only reads, and a pure computation.

`sample(host, now)` reads counters (load average, cgroup CPU time and memory, PSI,
terminal access times) into a `Sample`; `facts(previous, current)` turns two samples
into the numbers the policy sees. Tests feed recorded files at t0 and t1.

The facts (machine-wide; splitting the owner's load among slots is the core's):

- `TotalLoadAvg`, `LoadAvg`: the 1-minute load average (`/proc/loadavg`), 2 decimals
  (HTCondor's TotalLoadAvg; LoadAvg here is the machine's, one slot's share is the core's).
- `TotalCondorLoadAvg`, `CondorLoadAvg`: cores used by Kondor's jobs (their cgroups' CPU
  time over the window), scaled and capped as condor_startd's compute_condor_usage:
  `usage / ncpus * max(ncpus, load)`, never more than the load.
- `OwnerCpus` (Kondor): cores used by the machine owner's pods, the kubepods cgroup's
  CPU time over the window minus that of Kondor's job cgroups inside it.
- `OwnerMemory` (Kondor): MiB of working set (usage minus inactive page cache, as the
  kubelet counts it) of the owner's pods, likewise.
- `CpuPressureSome10` ... `IoPressureFull300` (Kondor): `/proc/pressure/{cpu,memory,io}`,
  percent of time some/all tasks stalled over 10, 60 and 300 s, where the kernel has PSI.
- `KeyboardIdle`, `ConsoleIdle`: seconds since the newest access to a login terminal or
  console device, and to a console device (see `_idle`), as HTCondor.
- `ClockMin`, `ClockDay`: minutes since local midnight; day of the week, Sunday = 0.

A fact whose inputs are missing (no kubepods cgroup, no PSI, the first sample) is
left out rather than guessed, and the reason is in `Sample.problems`. The window is
the time between the two samples; `Sampler` keeps samples for `window` seconds (60
by default, HTCondor's one-minute load window) and differences against the oldest.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import TypeVar

from kondor_agent.detect._cgroups import CgroupFS
from kondor_agent.detect._hostfs import DetectionError, HostFS
from kondor_agent.detect._idle import (
    CONSOLE_DEVICES,
    console_activity,
    idle_seconds,
    terminal_activity,
)
from kondor_agent.detect._machine import online_cpus

Fact = int | float
T = TypeVar("T")

_PSI_RESOURCES = {"cpu": "Cpu", "memory": "Memory", "io": "Io"}


@dataclass(frozen=True)
class CgroupReading:
    """One cgroup's counters at one instant (None where the file is absent)."""

    cpu_usec: int | None
    memory_bytes: int | None


@dataclass(frozen=True)
class Sample:
    """What the host's counters said at one instant."""

    time: float
    clock_min: int
    clock_day: int
    ncpus: int | None = None
    load_avg: float | None = None
    kubepods: CgroupReading | None = None
    #: Kondor's job cgroups by path, and whether each lies inside kubepods.
    jobs: Mapping[str, CgroupReading] = field(default_factory=dict)
    jobs_in_kubepods: frozenset[str] = frozenset()
    pressure: Mapping[str, float] = field(default_factory=dict)
    terminal_activity: float | None = None
    console_activity: float | None = None
    problems: tuple[str, ...] = ()


def parse_loadavg(text: str) -> float:
    fields = text.split()
    try:
        return float(fields[0])
    except (IndexError, ValueError):
        raise DetectionError(
            f"/proc/loadavg: {text.strip()!r} does not start with a number"
        ) from None


def parse_pressure(text: str, resource: str) -> dict[str, float]:
    """`some avg10=0.12 avg60=... total=...` lines as `CpuPressureSome10` and so on."""
    name = _PSI_RESOURCES[resource]
    values: dict[str, float] = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        kind = fields[0]
        if kind not in ("some", "full"):
            raise DetectionError(f"/proc/pressure/{resource}: {line!r} is not a some/full line")
        for item in fields[1:]:
            key, _, value = item.partition("=")
            if not key.startswith("avg"):
                continue
            try:
                number = float(value)
            except ValueError:
                raise DetectionError(
                    f"/proc/pressure/{resource}: {item!r} is not avgN=<percent>"
                ) from None
            values[f"{name}Pressure{kind.capitalize()}{key[3:]}"] = number
    return values


def _attempt(problems: list[str], what: str, read: Callable[[], T]) -> T | None:
    """`read()`, or None with the reason added to `problems` when a file is bad."""
    try:
        return read()
    except DetectionError as err:
        problems.append(f"{what}: {err}")
        return None


def _reading(cgroups: CgroupFS, cgroup: str) -> CgroupReading:
    return CgroupReading(cgroups.cpu_usage_usec(cgroup), cgroups.memory_working_set(cgroup))


def _inside(path: str, parent: str) -> bool:
    parent = parent.rstrip("/")
    return path == parent or path.startswith(parent + "/")


def sample(
    host: HostFS,
    now: datetime,
    *,
    cgroups: CgroupFS | None = None,
    job_cgroups: Iterable[str] = (),
    kubepods: str | None = None,
    console_devices: Sequence[str] = CONSOLE_DEVICES,
    trust_utmp: bool = True,
) -> Sample:
    """Read the host's counters at `now` (an aware local time: `datetime.now().astimezone()`).

    `job_cgroups` are the cgroups of Kondor's jobs (pods' cgroups under kubepods and
    the agent's own per-slot cgroups); `kubepods` defaults to the one CgroupFS finds.
    A file that is missing or unreadable leaves its fact out and adds a problem.
    """
    cgroups = cgroups if cgroups is not None else CgroupFS(host)
    problems: list[str] = []
    ncpus = _attempt(problems, "ncpus", lambda: online_cpus(host))
    load_text = _attempt(problems, "load", lambda: host.read_optional("/proc/loadavg"))
    load = None
    if load_text is None:
        problems.append("load: /proc/loadavg is missing")
    else:
        load = _attempt(problems, "load", lambda: parse_loadavg(load_text))

    pods = kubepods or cgroups.kubepods()
    pods_reading = None
    if pods is None:
        problems.append("owner: no kubepods cgroup")
    else:
        pods_reading = _attempt(problems, "kubepods", lambda: _reading(cgroups, pods))
    jobs: dict[str, CgroupReading] = {}
    for job in job_cgroups:
        reading = _attempt(problems, f"job {job}", partial(_reading, cgroups, job))
        if reading is not None and reading.cpu_usec is not None:
            jobs[job] = reading
    pressure: dict[str, float] = {}
    for resource in _PSI_RESOURCES:
        psi = f"/proc/pressure/{resource}"
        text = _attempt(problems, "pressure", partial(host.read_optional, psi))
        if text is not None:
            parsed = _attempt(problems, "pressure", partial(parse_pressure, text, resource))
            pressure.update(parsed or {})
    return Sample(
        time=now.timestamp(),
        clock_min=now.hour * 60 + now.minute,
        clock_day=now.isoweekday() % 7,
        ncpus=ncpus,
        load_avg=load,
        kubepods=pods_reading,
        jobs=jobs,
        jobs_in_kubepods=frozenset(j for j in jobs if pods and _inside(j, pods)),
        pressure=pressure,
        terminal_activity=terminal_activity(host, trust_utmp=trust_utmp),
        console_activity=console_activity(host, console_devices) if console_devices else None,
        problems=tuple(problems),
    )


def carry(previous: Sample, current: Sample) -> Sample:
    """`current`, remembering the last terminal activity when no terminal is left.

    HTCondor keeps counting KeyboardIdle from the last terminal activity it saw once
    the logins are gone, instead of jumping to "idle forever".
    """
    if current.terminal_activity is None and previous.terminal_activity is not None:
        return replace(current, terminal_activity=previous.terminal_activity)
    return current


def _cpu_delta(
    previous: Mapping[str, CgroupReading],
    current: Mapping[str, CgroupReading],
    names: Iterable[str],
) -> int:
    """CPU microseconds used by `names` between the samples; a new cgroup counts from 0."""
    total = 0
    for name in names:
        now = current[name].cpu_usec
        before = previous[name].cpu_usec if name in previous else 0
        if now is not None and before is not None:
            total += max(0, now - before)
    return total


def _round2(value: float) -> float:
    return round(value, 2)


def facts(previous: Sample, current: Sample) -> dict[str, Fact]:
    """The live facts over the window from `previous` to `current` (see the module doc)."""
    current = carry(previous, current)
    out: dict[str, Fact] = {"ClockMin": current.clock_min, "ClockDay": current.clock_day}
    elapsed = current.time - previous.time
    load = current.load_avg
    if load is not None:
        out["TotalLoadAvg"] = out["LoadAvg"] = _round2(load)
    if elapsed > 0 and load is not None:
        used = _cpu_delta(previous.jobs, current.jobs, current.jobs) / 1e6 / elapsed
        ncpus = current.ncpus or 1
        # condor_startd's compute_condor_usage: a share of the machine, capped at the load.
        condor = min(used / ncpus * max(ncpus, load), load)
        out["TotalCondorLoadAvg"] = out["CondorLoadAvg"] = _round2(condor)
    pods_now, pods_before = current.kubepods, previous.kubepods
    if (
        elapsed > 0
        and pods_now is not None
        and pods_before is not None
        and pods_now.cpu_usec is not None
        and pods_before.cpu_usec is not None
    ):
        pods_used = max(0, pods_now.cpu_usec - pods_before.cpu_usec)
        kondor_used = _cpu_delta(previous.jobs, current.jobs, current.jobs_in_kubepods)
        out["OwnerCpus"] = _round2(max(0, pods_used - kondor_used) / 1e6 / elapsed)
    if pods_now is not None and pods_now.memory_bytes is not None:
        kondor_memory = sum(current.jobs[job].memory_bytes or 0 for job in current.jobs_in_kubepods)
        out["OwnerMemory"] = max(0, pods_now.memory_bytes - kondor_memory) // (1024 * 1024)
    out.update({name: _round2(value) for name, value in current.pressure.items()})
    console = current.console_activity
    keyboard = idle_seconds(current.time, current.terminal_activity)
    if console is not None:
        out["ConsoleIdle"] = idle_seconds(current.time, console)
        keyboard = min(keyboard, int(out["ConsoleIdle"]))
    out["KeyboardIdle"] = keyboard
    return out


class Sampler:
    """Takes a sample per poll and returns the facts over the last `window` seconds.

    The only state is the recent samples; everything it computes is `facts`.
    """

    def __init__(
        self,
        host: HostFS,
        *,
        window: float = 60.0,
        cgroups: CgroupFS | None = None,
        console_devices: Sequence[str] = CONSOLE_DEVICES,
        trust_utmp: bool = True,
    ) -> None:
        self.host = host
        self.window = window
        self.cgroups = cgroups if cgroups is not None else CgroupFS(host)
        self.console_devices = tuple(console_devices)
        self.trust_utmp = trust_utmp
        self.samples: deque[Sample] = deque()
        self.problems: tuple[str, ...] = ()

    def poll(self, now: datetime, job_cgroups: Iterable[str] = ()) -> dict[str, Fact]:
        current = sample(
            self.host,
            now,
            cgroups=self.cgroups,
            job_cgroups=job_cgroups,
            console_devices=self.console_devices,
            trust_utmp=self.trust_utmp,
        )
        if self.samples:
            current = carry(self.samples[-1], current)
        # Keep the newest sample at least `window` old as the start of the window.
        while len(self.samples) > 1 and current.time - self.samples[1].time >= self.window:
            self.samples.popleft()
        previous = self.samples[0] if self.samples else current
        self.samples.append(current)
        self.problems = current.problems
        return facts(previous, current)
