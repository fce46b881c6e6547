"""Pool: the cluster-scoped singleton `default` holding the negotiator's settings.

The operator reads it (a missing Pool means the defaults below). The accountant's user
priorities and usage will live in its status; nothing writes a status yet.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from kondor_core.api.base import Model

#: The plural of the Pool kind (`/apis/kondor.io/v1alpha1/pools`).
POOLS = "pools"
#: The one Pool the operator reads; a Pool of another name is ignored.
DEFAULT_POOL = "default"
#: HTCondor's NEGOTIATOR_INTERVAL default (seconds).
DEFAULT_NEGOTIATOR_INTERVAL = 20
#: HTCondor's MATCH_TIMEOUT default (seconds).
DEFAULT_MATCH_TIMEOUT = 120


class PoolSpec(Model):
    """spec of the Pool `default` (kondor.io/v1alpha1): the negotiator's knobs, with
    HTCondor's names and defaults ("Configuration Macros": condor_negotiator)."""

    negotiator_interval: Annotated[int, Field(ge=1)] = Field(
        default=DEFAULT_NEGOTIATOR_INTERVAL,
        description="NEGOTIATOR_INTERVAL: seconds between negotiation cycles (a new job or a "
        "freed slot also starts one soon)",
    )
    match_timeout: Annotated[int, Field(ge=1)] = Field(
        default=DEFAULT_MATCH_TIMEOUT,
        description="MATCH_TIMEOUT: seconds a match may wait for the execution point's answer "
        "before the job is Idle again",
    )
