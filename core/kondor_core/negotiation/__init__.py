"""Matchmaking, and replaying a node's policy with a job queue over simulated time.

`choose` picks a slot for a job as the condor_negotiator does ("Matchmaking with
ClassAds", "The RANK Expression"); `replay` drives a scenario (`kondor simulate
--timeline`): the queue and the negotiator here, the startd's policy in
`kondor_core.policy`, the slots' resources in `kondor_core.slots`.
"""

from kondor_core.negotiation.matchmaking import Candidate, Choice, choose
from kondor_core.negotiation.replay import IGNORE_SOFT_KILL, JobStatus, QueuedJob, Replay, replay

__all__ = [
    "IGNORE_SOFT_KILL",
    "Candidate",
    "Choice",
    "JobStatus",
    "QueuedJob",
    "Replay",
    "choose",
    "replay",
]
