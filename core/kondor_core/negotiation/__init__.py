"""The negotiator, and the drivers that run it beside a node's startd.

`negotiate` is one cycle of the condor_negotiator as a pure function of the idle jobs and
the published slot ads ("Matchmaking with ClassAds", "The RANK Expression"); `choose`
picks one job's slot. `simulate` (`kondor simulate --request`) and `replay` (`kondor
simulate --timeline`) drive it with `kondor_core.startd`, as the operator and the agent do.
"""

from kondor_core.negotiation.matchmaking import Candidate, Choice, choose
from kondor_core.negotiation.negotiator import Cycle, IdleJob, Matched, negotiate, slot_offer
from kondor_core.negotiation.replay import IGNORE_SOFT_KILL, JobStatus, QueuedJob, Replay, replay
from kondor_core.negotiation.simulate import Placement, Simulation, simulate

__all__ = [
    "IGNORE_SOFT_KILL",
    "Candidate",
    "Choice",
    "Cycle",
    "IdleJob",
    "JobStatus",
    "Matched",
    "Placement",
    "QueuedJob",
    "Replay",
    "Simulation",
    "choose",
    "negotiate",
    "replay",
    "simulate",
    "slot_offer",
]
