"""A SlotPolicy's `backfill` section: what runs on a slot in the Backfill state ("Configuring
HTCondor for Running Backfill Jobs"; HTCondor's BACKFILL_SYSTEM is BOINC, Kondor's is this
command).

As the state machine says: an Unclaimed slot whose START_BACKFILL is true (with
ENABLE_BACKFILL) enters Backfill/Idle and the agent starts one backfill process for it
(Backfill/Busy); EVICT_BACKFILL, a match, a drain or a shutdown kills it (Backfill/Killing)
and the slot goes on once the process is gone. One backfill process per slot; a partitionable
slot runs one for all its free resources.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from kondor_core.api.base import Model


class BackfillSpec(Model):
    """The backfill client: a process the agent starts in the slot's backfill directory
    (`<execute dir>/backfill/<slot>`), in a cgroup of its own where the node has them, and
    kills (SIGKILL, the whole cgroup or process group) when the slot leaves Backfill."""

    executable: Annotated[str, Field(min_length=1)] = Field(
        description="An absolute path on the node (BOINC's client, or any program)"
    )
    arguments: list[str] = Field(default_factory=list)
    environment: dict[str, str] = Field(
        default_factory=dict,
        description="Added to a minimal environment; _CONDOR_SLOT is set to the slot's name",
    )

    @field_validator("executable")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"executable {value!r} must be an absolute path on the node")
        return value
