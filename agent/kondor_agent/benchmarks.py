"""RUNBENCHMARKS: small, honest measurements of Mips and KFlops, run when the policy asks.

The reference ("condor_startd Policy Configuration", Unclaimed/Benchmarking): while a
slot is Unclaimed and RUNBENCHMARKS is TRUE the startd benchmarks the machine, records
Mips and KFlops and sets LastBenchmark; the engine (`kondor_core.policy`) emits a
`run-benchmarks` action and waits for `BenchmarksDone`. The startd keeps a weighted
average over runs; so does `BenchmarkRunner` (each new run weighs half).

Method. HTCondor's condor_mips is Dhrystone and condor_kflops Linpack, in C. These are
the same kinds of loop in Python, so their numbers measure the interpreter on this CPU
(roughly 50-100 times lower than the C figures) and compare nodes with each other, not
with an HTCondor pool:

- Mips: a Dhrystone-like integer loop (additions, a multiplication, a modulo, a shift,
  an exclusive-or, array loads and stores, a comparison and branch); every one of those
  operations counts as one instruction (`_MIPS_OPS_PER_ITERATION` of them per
  iteration). Mips = instructions / seconds / 1e6.
- KFlops: a Linpack-like DAXPY (`y[i] += a * x[i]`, 2 floating-point operations per
  element) over vectors of 1,000 doubles. KFlops = operations / seconds / 1e3.

Each runs for about `budget` seconds (0.25 s by default, both under 1 s together) and the
best of a few timed repetitions is kept (the usual way to discount preemption by others).
They run in a thread so the agent's loop stays responsive.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

#: Counted operations in one iteration of `_integer_loop`.
_MIPS_OPS_PER_ITERATION = 12
_VECTOR = 1000
_REPEATS = 3


@dataclass(frozen=True)
class BenchmarkResult:
    mips: int
    kflops: int
    #: Wall-clock seconds both took.
    seconds: float

    def attributes(self, now: float) -> dict[str, int]:
        """What the machine ad advertises."""
        return {"Mips": self.mips, "KFlops": self.kflops, "LastBenchmark": int(now)}


def _integer_loop(iterations: int) -> int:
    values = [3, 1, 4, 1, 5, 9, 2, 6]
    a, b, c = 1, 2, 3
    for i in range(iterations):
        a = a + b  # 1: add
        b = (c * 3) & 0xFFFF  # 2, 3: multiply, and
        c = (a ^ i) >> 1  # 4, 5: xor, shift
        j = i & 7  # 6: and
        values[j] = values[j] + c % 7  # 7, 8, 9, 10: load, modulo, add, store
        if a > 1 << 20:  # 11, 12: compare, branch
            a = a - (1 << 20)
    return a + b + c + sum(values)


def _daxpy(x: list[float], y: list[float], a: float) -> None:
    for i in range(len(x)):
        y[i] += a * x[i]


def _timed(run: Callable[[int], object], budget: float) -> tuple[int, float]:
    """(n, best seconds of n units): n grown until one run takes budget / repeats."""
    target = budget / _REPEATS
    units = 1000
    while True:
        started = time.perf_counter()
        run(units)
        elapsed = time.perf_counter() - started
        if elapsed >= target / 4 or units >= 1 << 30:
            break
        units *= 4
    best = elapsed
    for _ in range(_REPEATS - 1):
        started = time.perf_counter()
        run(units)
        best = min(best, time.perf_counter() - started)
    return units, max(best, 1e-9)


def measure_mips(budget: float = 0.25) -> int:
    iterations, seconds = _timed(_integer_loop, budget)
    return max(1, round(iterations * _MIPS_OPS_PER_ITERATION / seconds / 1e6))


def measure_kflops(budget: float = 0.25) -> int:
    x = [float(i % 17) * 0.5 for i in range(_VECTOR)]
    y = [1.0] * _VECTOR

    def passes(count: int) -> None:
        for _ in range(max(1, count // _VECTOR)):
            _daxpy(x, y, 1.000001)

    units, seconds = _timed(passes, budget)
    operations = 2 * _VECTOR * max(1, units // _VECTOR)
    return max(1, round(operations / seconds / 1e3))


def measure(budget: float = 0.25) -> BenchmarkResult:
    """Mips and KFlops, each measured for about `budget` seconds."""
    started = time.perf_counter()
    mips = measure_mips(budget)
    kflops = measure_kflops(budget)
    return BenchmarkResult(mips, kflops, time.perf_counter() - started)


class BenchmarkRunner:
    """Runs `measure` in a thread when asked; `poll` hands back a finished result once.

    Results are averaged with the previous ones (each new run weighs half), as the
    startd keeps "a weighted average of these benchmarking results".
    """

    def __init__(
        self,
        measure_fn: Callable[[], BenchmarkResult] = measure,
        on_done: Callable[[], None] | None = None,
    ) -> None:
        self._measure = measure_fn
        self.on_done = on_done
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._done: BenchmarkResult | None = None
        self.average: BenchmarkResult | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> bool:
        """Start a run unless one is going; whether one was started."""
        with self._lock:
            if self.running:
                return False
            self._thread = threading.Thread(target=self._run, name="benchmarks", daemon=True)
            self._thread.start()
            return True

    def _run(self) -> None:
        result = self._measure()
        with self._lock:
            previous = self.average
            if previous is not None:
                result = BenchmarkResult(
                    round((previous.mips + result.mips) / 2),
                    round((previous.kflops + result.kflops) / 2),
                    result.seconds,
                )
            self.average = self._done = result
        if self.on_done is not None:
            self.on_done()

    def poll(self) -> BenchmarkResult | None:
        """The result of a run that finished since the last poll."""
        with self._lock:
            done, self._done = self._done, None
            return done

    def wait(self, timeout: float | None = None) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
