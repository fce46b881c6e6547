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

from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from kondor_core.api.base import Model


class BackfillSpec(Model):
    """The backfill client, one of: a process the agent starts in the slot's backfill
    directory (`<execute dir>/backfill/<slot>`), in a cgroup of its own where the node has
    them, and kills (SIGKILL, the whole cgroup or process group) when the slot leaves
    Backfill; or a pod from `pod` (a PodTemplateSpec) bound to the node in `namespace`,
    deleted at once (no grace period) when the slot leaves Backfill."""

    executable: Annotated[str, Field(min_length=1)] | None = Field(
        default=None, description="An absolute path on the node (BOINC's client, or any program)"
    )
    arguments: list[str] = Field(default_factory=list)
    environment: dict[str, str] = Field(
        default_factory=dict,
        description="Added to a minimal environment; _CONDOR_SLOT is set to the slot's name",
    )

    pod: dict[str, Any] | None = Field(
        default=None,
        description="A PodTemplateSpec (metadata and spec) run as the backfill client, bound "
        "to the node; the process fields must then be left out",
    )
    namespace: Annotated[str, Field(min_length=1, max_length=63)] = Field(
        default="default", description="Where the backfill pod is created"
    )

    @field_validator("executable")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"executable {value!r} must be an absolute path on the node")
        return value

    @model_validator(mode="after")
    def _one_client(self) -> BackfillSpec:
        if (self.executable is None) == (self.pod is None):
            raise ValueError("backfill: give either executable (a process) or pod, not both")
        if self.pod is not None and (self.arguments or self.environment):
            raise ValueError("backfill: arguments and environment go with executable, not pod")
        if self.pod is not None and not isinstance(self.pod.get("spec"), dict):
            raise ValueError("backfill.pod: a PodTemplateSpec needs a spec (its containers)")
        return self
