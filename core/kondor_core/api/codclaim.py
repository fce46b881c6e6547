"""CodClaim: a Computing On Demand claim on one slot, and the application it runs.

The reference's "Computing On Demand (COD)": a user in the execution point's VALID_COD_USERS
requests a claim on a slot (condor_cod_request -name, -requirements, -lease), activates an
application on it (condor_cod_activate -keyword or -jobad, -cluster, -proc), suspends and
resumes it, renews the lease, deactivates it and releases the claim (each with -fast where
condor_cod has it). Here the user writes `spec` (`kubectl kondor cod ...` does it as
condor_cod's verbs), the admission webhook stamps `spec.owner` with the authenticated user
and refuses anyone else's changes, and the node's agent (its startd) carries the claim out
and writes `status`. Deleting the object releases the claim.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from kondor_core.api.base import IN_CLASSAD_RANGE, ClassAdExpr, Model
from kondor_core.api.manifest import ObjectMeta

#: The plural of the kind: the path segment of `/apis/kondor.io/v1alpha1/<plural>`.
COD_CLAIMS = "codclaims"

#: What the user asks of the claim's application: none (Idle), running or suspended.
DesiredCodState = Literal["Idle", "Running", "Suspended"]

#: A COD claim's state (the reference's "Managing COD Resource Claims"): Idle, Running,
#: Suspended, and Vacating or Killing while a deactivation lasts; Kondor adds Refused (the
#: startd refused the request: the claim was never created) and Released (the claim is
#: destroyed: released by a lease that expired, or on its way out after a release).
CodState = Literal["Idle", "Running", "Suspended", "Vacating", "Killing", "Refused", "Released"]

#: The application's job ad attributes: what `<Keyword>_<attr>` knobs and `-jobad` may set.
APPLICATION_ATTRIBUTES = (
    "Cmd",
    "Args",
    "Iwd",
    "In",
    "Out",
    "Err",
    "Env",
    "KillSig",
    "JobUniverse",
    "Owner",
    "ClusterId",
    "ProcId",
    "JarFiles",
    "StarterUserLog",
    "StarterUserLogUseXML",
)


class CodClaimSpec(Model):
    """spec of a CodClaim (kondor.io/v1alpha1), written by its owner."""

    owner: str | None = Field(
        default=None,
        description="The user the claim belongs to: set at admission to the authenticated "
        "user; only a cluster admin may name another",
    )
    execution_point: Annotated[str, Field(min_length=1)] = Field(
        description="The execution point (node) to claim on: condor_cod_request -name"
    )
    slot: str | None = Field(
        default=None,
        description="The slot by name (slot1, slot1_1): -name slot1@host; else any slot "
        "that matches requirements",
    )
    requirements: ClassAdExpr | None = Field(
        default=None,
        description="condor_cod_request -requirements: a ClassAd constraint on the slot ads",
    )
    lease: Annotated[int, Field(ge=1), IN_CLASSAD_RANGE] | None = Field(
        default=None,
        description="condor_cod_request -lease: seconds until the claim is released unless "
        "renewed; none: infinitely long (the reference's default)",
    )
    state: DesiredCodState = Field(
        default="Idle",
        description="What the application should be: Idle (deactivated), Running or Suspended",
    )
    keyword: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = Field(
        default=None,
        description="condor_cod_activate -keyword: the <Keyword>_Cmd, _Args, ... knobs of the "
        "SlotPolicy define the application",
    )
    job_ad: str | None = Field(
        default=None,
        description="condor_cod_activate -jobad: the application's attributes as ClassAd text, "
        "without a keyword prefix; Owner is the claim's owner (another is refused)",
    )
    cluster_id: Annotated[int, Field(ge=0), IN_CLASSAD_RANGE] | None = Field(
        default=None, description="condor_cod_activate -cluster (ClusterId; default 1)"
    )
    proc_id: Annotated[int, Field(ge=0), IN_CLASSAD_RANGE] | None = Field(
        default=None, description="condor_cod_activate -proc (ProcId; default 0)"
    )
    activation: Annotated[int, Field(ge=0), IN_CLASSAD_RANGE] = Field(
        default=0,
        description="Counts condor_cod_activate calls: a higher one than status.activation "
        "starts the application (once)",
    )
    renewal: Annotated[int, Field(ge=0), IN_CLASSAD_RANGE] = Field(
        default=0,
        description="Counts condor_cod_renew calls: a higher one than status.renewal renews "
        "the lease for its duration",
    )
    fast: bool = Field(
        default=False,
        description="-fast: a deactivation or release hard-kills the application (SIGKILL) "
        "instead of sending its KillSig",
    )

    @model_validator(mode="after")
    def _slot_named(self) -> CodClaimSpec:
        if self.slot is not None and not self.slot.strip():
            raise ValueError("slot: an empty slot name; give one such as slot1 or leave it out")
        return self


class CodClaimStatus(Model):
    """status of a CodClaim, written by the agent of its execution point."""

    claim_id: str | None = Field(default=None, description="The claim ID")
    cod_id: str | None = Field(
        default=None, description="The claim's name in the slot ad (COD1, COD2, ...)"
    )
    execution_point: str | None = None
    slot: str | None = None
    state: CodState | None = Field(default=None, description="The COD claim's state")
    entered_current_state: int | None = Field(
        default=None, description="EnteredCurrentState (seconds since the epoch)"
    )
    lease_expiry: str | None = Field(default=None, description="When the lease runs out")
    activation: int = Field(default=0, description="The last activation started")
    renewal: int = Field(default=0, description="The last renewal carried out")
    keyword: str | None = None
    job_id: str | None = Field(default=None, description="ClusterId.ProcId of the application")
    pid: int | None = Field(default=None, description="The application's process")
    directory: str | None = Field(default=None, description="The application's directory")
    exit_code: int | None = Field(default=None, description="The application's exit code")
    exit_signal: int | None = Field(default=None, description="The signal that ended it")
    exit_time: str | None = None
    reason: str | None = Field(default=None, description="Why refused, released or failed")


class CodClaim(Model):
    """A CodClaim object, as read from the API server."""

    api_version: Literal["kondor.io/v1alpha1"] = "kondor.io/v1alpha1"
    kind: Literal["CodClaim"] = "CodClaim"
    metadata: ObjectMeta
    spec: CodClaimSpec
    status: CodClaimStatus | None = None
