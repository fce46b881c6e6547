"""The negotiator, and the drivers that run it beside a node's startd.

`negotiate` is one cycle of the condor_negotiator as a pure function of the idle jobs and
the published slot ads ("Matchmaking with ClassAds", "The RANK Expression"); `choose`
picks one job's slot. The simulators that drive it with `kondor_core.startd` (`kondor
simulate` and `kondor simulate --timeline`) are in `kondor_core.sim`.
"""

from kondor_core.negotiation.matchmaking import Candidate, Choice, choose
from kondor_core.negotiation.negotiator import Cycle, IdleJob, Matched, negotiate, slot_offer

__all__ = [
    "Candidate",
    "Choice",
    "Cycle",
    "IdleJob",
    "Matched",
    "choose",
    "negotiate",
    "slot_offer",
]
