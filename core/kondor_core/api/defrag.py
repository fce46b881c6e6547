"""The Pool's `defrag` section: condor_defrag's knobs, by HTCondor's names and defaults
("Defrag Daemon Configuration Options"; the defaults are HTCondor's param table's).

The operator's defrag controller (kondor_operator.defrag) drains partitionable nodes, a few
at a time, so that jobs which need a whole node get one. Nothing drains until
`drainingMachinesPerHour` is above 0, as in HTCondor.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kondor_core.api.base import ClassAdExpr, Model

#: DEFRAG_INTERVAL's default (seconds).
DEFAULT_DEFRAG_INTERVAL = 600
#: DEFRAG_WHOLE_MACHINE_EXPR's default.
DEFAULT_WHOLE_MACHINE_EXPR = "Cpus == TotalSlotCpus"
#: DEFRAG_RANK's default.
DEFAULT_DEFRAG_RANK = "-ExpectedMachineGracefulDrainingBadput"


class DefragSpec(Model):
    """condor_defrag's knobs. The expressions are evaluated in each partitionable slot's ad
    as its node publishes it; a node is counted (whole, eligible, to cancel) when one of its
    partitionable slots makes the expression true."""

    interval: Annotated[int, Field(ge=0)] = Field(
        default=DEFAULT_DEFRAG_INTERVAL,
        description="DEFRAG_INTERVAL: seconds between evaluations of the defragmentation "
        "policy; 0 turns defragmentation off",
    )
    draining_machines_per_hour: Annotated[float, Field(ge=0)] = Field(
        default=0.0,
        description="DEFRAG_DRAINING_MACHINES_PER_HOUR: how many nodes to drain per hour "
        "(0: none). Per interval, the whole part of rate x interval; the remainder is drained "
        "once an hour and once a day, as condor_defrag does",
    )
    max_concurrent_draining: Annotated[int, Field(ge=-1)] = Field(
        default=-1,
        description="DEFRAG_MAX_CONCURRENT_DRAINING: the most nodes draining at once (-1: no "
        "limit, 0: no draining)",
    )
    max_whole_machines: Annotated[int, Field(ge=-1)] = Field(
        default=-1,
        description="DEFRAG_MAX_WHOLE_MACHINES: no draining while this many nodes are whole "
        "(-1: no limit, 0: no draining)",
    )
    requirements: ClassAdExpr | None = Field(
        default=None,
        description="DEFRAG_REQUIREMENTS: which nodes may be drained (none: every node with a "
        "partitionable slot that is not draining nor whole already)",
    )
    whole_machine_expr: ClassAdExpr = Field(
        default=DEFAULT_WHOLE_MACHINE_EXPR,
        description="DEFRAG_WHOLE_MACHINE_EXPR: which nodes are whole already",
    )
    rank: ClassAdExpr | None = Field(
        default=DEFAULT_DEFRAG_RANK,
        description="DEFRAG_RANK: nodes of higher rank are drained first (undefined counts as "
        "0; Kondor publishes no ExpectedMachineGracefulDrainingBadput, so by default the "
        "nodes are taken by name)",
    )
    draining_schedule: Literal["graceful", "quick", "fast"] = Field(
        default="graceful",
        description="DEFRAG_DRAINING_SCHEDULE: how the nodes are drained (condor_drain's "
        "-graceful, -quick, -fast); always with -resume-on-completion",
    )
    draining_start_expr: ClassAdExpr | None = Field(
        default=None,
        description="DEFRAG_DRAINING_START_EXPR: the START expression of the nodes it drains "
        "(condor_drain -start, graceful drains only); none: they accept no job while "
        "draining, as HTCondor's default FALSE",
    )
    cancel_requirements: ClassAdExpr | None = Field(
        default=None,
        description="DEFRAG_CANCEL_REQUIREMENTS: a drain this controller started is cancelled "
        "once it holds (none: DEFRAG_WHOLE_MACHINE_EXPR, HTCondor's default)",
    )
