"""The simulators: the runtime's pure parts driven over simulated time, for `kondor simulate`.

They sit at the top of the core, above everything they drive, and nothing at runtime (the
operator, the agent) imports them:
- `simulate` (`kondor simulate`): where would these jobs land on this machine under this
  policy? The node's startd and the negotiator, one or more cycles.
- `run_timeline` (`kondor_core.sim.timeline`): one machine's policy over simulated time, a
  cooperative simulated agent answering the engine's actions.
- `load_scenario` (`kondor_core.sim.scenario`): the scenario files of `kondor simulate
  --timeline`, validated.
- `replay` (`kondor simulate --timeline`): a scenario replayed with a job queue, the
  negotiator and the node's startd; its COD claims by `kondor_core.sim.codsim`.
"""

from kondor_core.sim.replay import IGNORE_SOFT_KILL, JobStatus, QueuedJob, Replay, replay
from kondor_core.sim.simulate import Placement, Simulation, simulate
from kondor_core.sim.timeline import SimulatedAgent, Timeline, TimelineStep, run_timeline

__all__ = [
    "IGNORE_SOFT_KILL",
    "JobStatus",
    "Placement",
    "QueuedJob",
    "Replay",
    "SimulatedAgent",
    "Simulation",
    "Timeline",
    "TimelineStep",
    "replay",
    "run_timeline",
    "simulate",
]
