"""RUNBENCHMARKS: Mips and KFlops measured by the built-in benchmarks, and the agent carrying
out the engine's run-benchmarks action (Unclaimed/Benchmarking, then BenchmarksDone)."""

from __future__ import annotations

import time
from pathlib import Path

from agent_fakes import FakeAPI, FakeClock, MachineBox, example_machine

from kondor_agent.benchmarks import BenchmarkResult, BenchmarkRunner, measure
from kondor_agent.loop import Agent, AgentConfig
from kondor_agent.services import BenchmarkService


def test_measure_gives_positive_numbers_quickly() -> None:
    started = time.perf_counter()
    result = measure(budget=0.1)
    assert result.mips > 0 and result.kflops > 0
    assert time.perf_counter() - started < 1.0
    assert result.attributes(1_800_000_000.5) == {
        "Mips": result.mips,
        "KFlops": result.kflops,
        "LastBenchmark": 1_800_000_000,
    }


def test_runner_runs_in_a_thread_and_averages_runs() -> None:
    results = iter([BenchmarkResult(100, 1000, 0.1), BenchmarkResult(200, 3000, 0.1)])
    done: list[bool] = []
    runner = BenchmarkRunner(lambda: next(results), on_done=lambda: done.append(True))
    assert runner.poll() is None
    assert runner.start()
    runner.wait(5)
    assert runner.poll() == BenchmarkResult(100, 1000, 0.1)
    assert runner.poll() is None and done == [True]
    runner.start()
    runner.wait(5)
    assert runner.poll() == BenchmarkResult(150, 2000, 0.1)


def test_the_agent_runs_benchmarks_when_the_policy_asks(tmp_path: Path) -> None:
    api, clock = FakeAPI(), FakeClock()
    machines = MachineBox(example_machine("desk.yaml"))
    policy = {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "SlotPolicy",
        "metadata": {"name": "bench"},
        "spec": {"runBenchmarks": "(time() - LastBenchmark) >= 4 * 3600"},
    }
    api.add_policy(policy)
    api.add_execution_point(machines.machine.name, "bench")
    api.clock = clock
    benchmarks = BenchmarkRunner(lambda: BenchmarkResult(42, 4200, 0.01))
    agent = Agent(
        AgentConfig(node_name=machines.machine.name, polling_interval=5.0),
        api,
        machines,
        clock=clock,
        services=[BenchmarkService(benchmarks)],
    )
    agent.step()  # Owner -> Unclaimed/Idle -> Benchmarking: the run starts in a thread
    assert agent.startd is not None
    assert {str(s.activity) for s in agent.startd.state.slots} == {"Benchmarking"}
    benchmarks.wait(5)
    clock.now += 5
    agent.step()  # the result comes back: BenchmarksDone, Idle again
    finished = clock.now
    assert {str(s.activity) for s in agent.startd.state.slots} == {"Idle"}
    clock.now += 1
    agent.step()  # the debounced write
    status = api.status(machines.machine.name)
    machine = status["machine"]
    assert (machine["Mips"], machine["KFlops"]) == (42, 4200)
    assert machine["LastBenchmark"] == int(finished)
    (ad,) = api.slot_ads(machines.machine.name)  # the machine's, in every slot ad
    assert (ad["Mips"], ad["KFlops"]) == (42, 4200)
    assert ad["LastBenchmark"] == int(finished)
