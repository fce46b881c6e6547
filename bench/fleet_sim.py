"""Many agents in one process, for benchmarks (`bench_fleet.py`): each agent's loop is an asyncio
task and its steps run on a small shared thread pool, so that a thousand simulated nodes need
neither a thousand threads (`Agent.run` blocks one) nor a thousand processes.

A real node runs one agent (`kondor-agent`, one per node from the DaemonSet); this only packs
many `Agent`s, unchanged, into one event loop. The agents' API objects are the caller's: give
them one shared client (one connection pool) and, for reads of their ExecutionPoints, one
shared watch that calls `Fleet.wake` when an ExecutionPoint's spec changes.

Benchmark support, not part of the agent: it lives beside the benchmarks, which import it as
`fleet_sim` (a script's own directory is on its path; the tests add `bench/` to theirs).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from kondor_agent.loop import Agent

log = logging.getLogger("kondor_agent")

#: After a step raised (a bug, not a failed API call: the loop handles those), try again after
#: this long rather than spin.
RETRY_AFTER_ERROR = 5.0


class Fleet:
    """Runs `agents` concurrently until stopped. Steps of one agent never overlap; at most
    `workers` steps run at once. The first steps are spread over `stagger` seconds (a fleet
    of nodes does not boot in the same millisecond), which also spreads their heartbeats."""

    def __init__(self, agents: Iterable[Agent], *, workers: int = 4, stagger: float = 0.0) -> None:
        self.agents: dict[str, Agent] = {}
        for agent in agents:
            if agent.name in self.agents:
                raise ValueError(f"agents: node {agent.name!r} twice; one agent per node")
            self.agents[agent.name] = agent
        if workers < 1:
            raise ValueError(f"workers: {workers} must be at least 1")
        if stagger < 0:
            raise ValueError(f"stagger: {stagger} must not be negative")
        self.workers = workers
        self.stagger = stagger
        self._woken: dict[str, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def wake(self, name: str) -> None:
        """Have agent `name` evaluate now (its ExecutionPoint changed). Safe from any thread;
        a name the fleet does not run is ignored."""
        agent = self.agents.get(name)
        loop = self._loop
        if agent is None or loop is None:
            return
        agent.wake()
        event = self._woken.get(name)
        if event is not None:
            loop.call_soon_threadsafe(event.set)

    async def run(self, stop: asyncio.Event) -> None:
        """Step every agent when it asks to be stepped (or is woken) until `stop` is set;
        return once the steps under way have finished."""
        self._loop = asyncio.get_running_loop()
        self._woken = {name: asyncio.Event() for name in self.agents}
        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="kondor-fleet")
        count = len(self.agents)
        tasks = [
            asyncio.create_task(
                self._loop_one(agent, pool, self.stagger * index / count), name=agent.name
            )
            for index, agent in enumerate(self.agents.values())
        ]
        try:
            await stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.get_running_loop().run_in_executor(None, pool.shutdown)
            self._loop = None

    async def _loop_one(self, agent: Agent, pool: ThreadPoolExecutor, delay: float) -> None:
        loop = asyncio.get_running_loop()
        woken = self._woken[agent.name]
        await self._sleep(woken, delay)
        while True:
            woken.clear()  # before the step: a wake during it asks for another one
            try:
                wake_at = await loop.run_in_executor(pool, agent.step)
            except Exception:
                log.exception("agent %s: step failed; trying again shortly", agent.name)
                wake_at = agent.clock() + RETRY_AFTER_ERROR
            await self._sleep(woken, wake_at - agent.clock())

    @staticmethod
    async def _sleep(woken: asyncio.Event, seconds: float) -> None:
        """Sleep `seconds`, or less if woken. A timer handle, not a task: cheap by the thousand."""
        if woken.is_set() or seconds <= 0:
            return
        timer = asyncio.get_running_loop().call_later(seconds, woken.set)
        try:
            await woken.wait()
        finally:
            timer.cancel()
