"""Computing On Demand claims on one node's startd, as pure functions (the reference's
"Computing On Demand (COD)").

- Authorisation: a user may hold COD claims only when VALID_COD_USERS names them
  (`valid_cod_user`); the startd checks it at request.
- Request: a slot by name or by a ClassAd constraint on the slot ads (`choose_slot`); the
  claim is created Idle with a claim ID and, when asked, a lease ("The default lease is
  infinitely long").
- The claim's states and the commands that move them (`TRANSITIONS`, `step`): activate
  (Idle -> Running), suspend (Running -> Suspended), resume (Suspended -> Running),
  deactivate (Running or Suspended -> Vacating, or Killing with -fast; -> Idle once the
  application has exited), release (any -> Released, shutting the application down first as
  deactivate does), renew (the lease starts again), and the application's own exit
  (-> Idle). A command the state does not allow is an error with condor_cod's message.
- While a claim on a slot is Running (or its application is being shut down) the slot's
  batch job is suspended (`batch_suspended`); when none is, it resumes.
- The application's job ad: the `<Keyword>_<attribute>` knobs of the configuration and the
  `-jobad` attributes, Owner from the authenticated user (`application`).
- What the slot ad shows: NumCODClaims, CODClaims and, per claim, `<CODn>_ClaimID`,
  `_ClaimState`, `_EnteredCurrentState`, `_RemoteUser`, `_JobKeyword` and `_JobId`, which
  `condor_status -cod` prints (`slot_attributes`).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import classad2

from kondor_core.api.codclaim import APPLICATION_ATTRIBUTES
from kondor_core.classads import ExpressionError, evaluate, parse_ad, parse_expr
from kondor_core.errors import KondorError
from kondor_core.policy.model import Event, ResumeForCod, SlotState, SuspendForCod

#: The knob naming the users who may create and use COD claims.
VALID_COD_USERS = "VALID_COD_USERS"
#: JobUniverse of a COD application: vanilla (5); Java (10) is not carried out.
VANILLA = 5
JAVA = 10
#: How long a graceful shutdown (Vacating) may take before the application is hard-killed;
#: HTCondor's KILLING_TIMEOUT default.
DEFAULT_KILLING_TIMEOUT = 30.0


class CodError(KondorError):
    """A COD request the startd refuses, with the message condor_cod would print."""


class State(StrEnum):
    IDLE = "Idle"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    VACATING = "Vacating"
    KILLING = "Killing"
    RELEASED = "Released"


class Verb(StrEnum):
    """condor_cod's commands, and the events the startd itself sees."""

    ACTIVATE = "activate"
    SUSPEND = "suspend"
    RESUME = "resume"
    RENEW = "renew"
    DEACTIVATE = "deactivate"
    DEACTIVATE_FAST = "deactivate -fast"
    RELEASE = "release"
    RELEASE_FAST = "release -fast"
    #: The application exited (on its own, or after a deactivation's signal).
    EXITED = "exited"
    #: The lease ran out without a renewal: the claim is released.
    LEASE_EXPIRED = "lease expired"
    #: A graceful shutdown outlived the killing timeout: hard-kill it.
    KILLING_TIMEOUT = "killing timeout"


class Act(StrEnum):
    """What the agent does to the application's processes."""

    START = "start"
    FREEZE = "freeze"
    THAW = "thaw"
    SOFT_KILL = "soft-kill"
    HARD_KILL = "hard-kill"


_ANY = tuple(State)
_ACTIVE = (State.RUNNING, State.SUSPENDED)
_SHUTTING = (State.VACATING, State.KILLING)

#: The table of transitions from the reference's "Managing COD Resource Claims":
#: (state, verb) -> (new state, actions). A pair not here is refused (`step`). Release of
#: a claim with an application goes through Vacating/Killing first (`releasing` is set), and
#: reaches Released when the application has exited.
TRANSITIONS: Mapping[tuple[State, Verb], tuple[State, tuple[Act, ...]]] = {
    # "Once a COD application is active on a COD claim, the COD claim will move into the
    # Running state, and any batch HTCondor job on the same resource will be suspended."
    (State.IDLE, Verb.ACTIVATE): (State.RUNNING, (Act.START,)),
    # "In this case, the claim state becomes Suspended."
    (State.RUNNING, Verb.SUSPEND): (State.SUSPENDED, (Act.FREEZE,)),
    # "In this case, the claim state returns to Running."
    (State.SUSPENDED, Verb.RESUME): (State.RUNNING, (Act.THAW,)),
    # "the COD claim goes into the Vacating state and the condor_starter ... will send it
    # the KillSig"; with -fast "the COD claim goes into the Killing state".
    (State.RUNNING, Verb.DEACTIVATE): (State.VACATING, (Act.SOFT_KILL,)),
    (State.SUSPENDED, Verb.DEACTIVATE): (State.VACATING, (Act.SOFT_KILL,)),
    (State.RUNNING, Verb.DEACTIVATE_FAST): (State.KILLING, (Act.HARD_KILL,)),
    (State.SUSPENDED, Verb.DEACTIVATE_FAST): (State.KILLING, (Act.HARD_KILL,)),
    (State.VACATING, Verb.DEACTIVATE_FAST): (State.KILLING, (Act.HARD_KILL,)),
    (State.VACATING, Verb.KILLING_TIMEOUT): (State.KILLING, (Act.HARD_KILL,)),
    # "once the COD job has finally exited, the COD claim will go into the Idle state";
    # an application that exits on its own leaves the claim Idle too.
    (State.RUNNING, Verb.EXITED): (State.IDLE, ()),
    (State.SUSPENDED, Verb.EXITED): (State.IDLE, ()),
    (State.VACATING, Verb.EXITED): (State.IDLE, ()),
    (State.KILLING, Verb.EXITED): (State.IDLE, ()),
    # "If there is a COD job running on the claim, the job will first be shut down (as if
    # condor_cod_deactivate was used), and then the claim itself is removed".
    (State.IDLE, Verb.RELEASE): (State.RELEASED, ()),
    (State.IDLE, Verb.RELEASE_FAST): (State.RELEASED, ()),
    (State.RUNNING, Verb.RELEASE): (State.VACATING, (Act.SOFT_KILL,)),
    (State.SUSPENDED, Verb.RELEASE): (State.VACATING, (Act.SOFT_KILL,)),
    (State.RUNNING, Verb.RELEASE_FAST): (State.KILLING, (Act.HARD_KILL,)),
    (State.SUSPENDED, Verb.RELEASE_FAST): (State.KILLING, (Act.HARD_KILL,)),
    (State.VACATING, Verb.RELEASE): (State.VACATING, ()),
    (State.VACATING, Verb.RELEASE_FAST): (State.KILLING, (Act.HARD_KILL,)),
    (State.KILLING, Verb.RELEASE): (State.KILLING, ()),
    (State.KILLING, Verb.RELEASE_FAST): (State.KILLING, ()),
    # "automatically release the COD claim after the specified number of seconds unless
    # the lease is renewed": as a release.
    (State.IDLE, Verb.LEASE_EXPIRED): (State.RELEASED, ()),
    (State.RUNNING, Verb.LEASE_EXPIRED): (State.VACATING, (Act.SOFT_KILL,)),
    (State.SUSPENDED, Verb.LEASE_EXPIRED): (State.VACATING, (Act.SOFT_KILL,)),
    (State.VACATING, Verb.LEASE_EXPIRED): (State.VACATING, ()),
    (State.KILLING, Verb.LEASE_EXPIRED): (State.KILLING, ()),
    # Renew: "renew the lease on the COD claim for the amount of lease time specified".
    **{(state, Verb.RENEW): (state, ()) for state in _ANY if state is not State.RELEASED},
}

#: condor_cod's messages for a command the claim's state does not allow.
_REFUSALS: Mapping[Verb, str] = {
    Verb.ACTIVATE: "the claim is {state}: only an Idle claim can be activated "
    "(deactivate it first)",
    Verb.SUSPEND: "the claim is {state}: only a Running COD job can be suspended",
    Verb.RESUME: "the claim is {state}: only a Suspended COD job can be resumed",
    Verb.DEACTIVATE: "the claim is {state}: only a Running or Suspended claim can be deactivated",
    Verb.DEACTIVATE_FAST: "the claim is {state}: only a Running or Suspended claim can be "
    "deactivated",
}


@dataclass(frozen=True)
class Claim:
    """One COD claim held by the startd."""

    claim_id: str
    #: Its name in the slot ad: COD1, COD2, ... (unique on the node).
    cod_id: str
    slot: str
    owner: str
    state: State
    entered: float
    #: The lease's duration (s); None: infinitely long.
    lease: float | None = None
    lease_expiry: float | None = None
    #: The last activation started and the last renewal carried out (the spec's counters).
    activation: int = 0
    renewal: int = 0
    keyword: str | None = None
    job_id: str | None = None
    #: Released once its application has exited.
    releasing: bool = False
    #: Why it was released (the lease ran out), for the status.
    reason: str | None = None


@dataclass(frozen=True)
class Step:
    claim: Claim
    actions: tuple[Act, ...] = ()


def request(
    *,
    claim_id: str,
    cod_id: str,
    slot: str,
    owner: str,
    lease: float | None,
    now: float,
) -> Claim:
    """A new claim, Idle, with its lease running from `now`."""
    return Claim(
        claim_id=claim_id,
        cod_id=cod_id,
        slot=slot,
        owner=owner,
        state=State.IDLE,
        entered=now,
        lease=lease,
        lease_expiry=None if lease is None else now + lease,
    )


def step(claim: Claim, verb: Verb, now: float) -> Step:
    """The claim after `verb` at `now` and what to do to its application; CodError when the
    claim's state does not allow it (condor_cod exits with an error message)."""
    if claim.state is State.RELEASED:
        raise CodError(f"claim {claim.claim_id} was released: no COD command can use it")
    found = TRANSITIONS.get((claim.state, verb))
    if found is None:
        template = _REFUSALS.get(verb, "the claim is {state}: cannot " + str(verb))
        raise CodError(template.format(state=claim.state.value))
    state, actions = found
    changes: dict[str, Any] = {}
    if verb is Verb.RENEW and claim.lease is not None:
        changes["lease_expiry"] = now + claim.lease
    if verb in (Verb.RELEASE, Verb.RELEASE_FAST, Verb.LEASE_EXPIRED):
        changes["releasing"] = True
        if verb is Verb.LEASE_EXPIRED:
            changes["reason"] = "the lease expired without a renewal: the claim was released"
    if verb is Verb.EXITED and claim.releasing:
        state = State.RELEASED
    if state is not claim.state:
        changes["state"] = state
        changes["entered"] = now
    return Step(replace(claim, **changes), actions)


def lease_expired(claim: Claim, now: float) -> bool:
    return (
        claim.lease_expiry is not None
        and now >= claim.lease_expiry
        and claim.state is not State.RELEASED
        and not claim.releasing
    )


def batch_suspended(claims: Iterable[Claim], slot: str) -> bool:
    """Whether the slot's batch job is suspended: a COD application on it is running, or
    still shutting down ("once the COD job has finally exited ... the resource would become
    available for batch HTCondor jobs")."""
    return any(
        claim.slot == slot and claim.state in (State.RUNNING, *_SHUTTING) for claim in claims
    )


def engine_events(slots: Iterable[SlotState], suspended: Iterable[str]) -> dict[str, list[Event]]:
    """The policy engine's events that bring each slot's suspension for COD in line with
    `suspended`, the slots where a COD application runs now (`batch_suspended`): SuspendForCod
    where one started (the startd's interactionLogicCODRunning), ResumeForCod where none is
    left (interactionLogicCODStopped). Slots already in line get none."""
    wanted = set(suspended)
    out: dict[str, list[Event]] = {}
    for slot in slots:
        if slot.deleted or (slot.name in wanted) == slot.suspended_for_cod:
            continue
        out[slot.name] = [SuspendForCod() if slot.name in wanted else ResumeForCod()]
    return out


# ---- what the user asks, as commands -----------------------------------------------------


@dataclass(frozen=True)
class Wanted:
    """What a CodClaim's spec asks of the claim (the counters are condor_cod's calls)."""

    state: str = "Idle"
    activation: int = 0
    renewal: int = 0
    fast: bool = False
    #: The object is gone: release.
    released: bool = False


def commands(
    claim: Claim, wanted: Wanted, now: float, *, killing_timeout: float = DEFAULT_KILLING_TIMEOUT
) -> list[Verb]:
    """The commands that take `claim` towards `wanted`, in condor_cod's order: release first,
    then renew, then activate, suspend, resume or deactivate. Nothing for a claim that is
    shutting its application down, but the hard kill a graceful shutdown earns when it
    outlives `killing_timeout`."""
    out: list[Verb] = []
    if claim.state is State.RELEASED:
        return out
    if wanted.released:
        if not claim.releasing or (wanted.fast and claim.state is State.VACATING):
            out.append(Verb.RELEASE_FAST if wanted.fast else Verb.RELEASE)
    elif lease_expired(claim, now) and wanted.renewal <= claim.renewal:
        out.append(Verb.LEASE_EXPIRED)
    if out:
        return out
    if wanted.renewal > claim.renewal:
        out.append(Verb.RENEW)
    if claim.state is State.VACATING and now - claim.entered >= killing_timeout:
        out.append(Verb.KILLING_TIMEOUT)
    if claim.releasing or claim.state in _SHUTTING:
        if claim.state is State.VACATING and wanted.fast and wanted.state == "Idle":
            out.append(Verb.DEACTIVATE_FAST)
        return out
    if wanted.state in ("Running", "Suspended") and wanted.activation > claim.activation:
        if claim.state is State.IDLE:
            out.append(Verb.ACTIVATE)
            if wanted.state == "Suspended":
                out.append(Verb.SUSPEND)
        return out
    if claim.state is State.RUNNING and wanted.state == "Suspended":
        out.append(Verb.SUSPEND)
    elif claim.state is State.SUSPENDED and wanted.state == "Running":
        out.append(Verb.RESUME)
    elif claim.state in _ACTIVE and wanted.state == "Idle":
        out.append(Verb.DEACTIVATE_FAST if wanted.fast else Verb.DEACTIVATE)
    return out


# ---- authorisation and the slot -----------------------------------------------------------


def cod_users(macros: Mapping[str, str]) -> tuple[str, ...]:
    """VALID_COD_USERS as a list (comma or space separated; HTCondor names are case-
    insensitive, its values not)."""
    value = next((v for k, v in macros.items() if k.upper() == VALID_COD_USERS), "")
    return tuple(name for name in re.split(r"[\s,]+", value.strip()) if name)


def valid_cod_user(macros: Mapping[str, str], user: str) -> bool:
    """Whether `user` may create and use COD claims: VALID_COD_USERS names them (`name` or
    `name@domain`), or is `*`. Undefined, it names nobody."""
    return any(name in ("*", user) or name.split("@", 1)[0] == user for name in cod_users(macros))


def refuse_user(macros: Mapping[str, str], user: str) -> str | None:
    """The refusal of a request by `user`, or None when they may request."""
    if valid_cod_user(macros, user):
        return None
    names = ", ".join(cod_users(macros))
    allowed = f"VALID_COD_USERS is {names!r}" if names else "VALID_COD_USERS is not set"
    return f"user {user!r} is not authorized to create COD claims here ({allowed})"


def choose_slot(
    slots: Sequence[tuple[str, Any]], *, name: str | None, requirements: str | None
) -> str:
    """The slot a request claims: the one named (`slot1` or `slot1@node`; a bare slot name
    matches `slot1@anything`), else the first whose ad satisfies `requirements`, else the
    first slot. `slots` are (name, classad2 ad) pairs in the startd's order."""
    candidates = list(slots)
    if name is not None:
        wanted = name.strip()
        candidates = [
            (slot, ad)
            for slot, ad in candidates
            if slot == wanted or slot.split("@", 1)[0] == wanted.split("@", 1)[0]
        ]
        if not candidates:
            known = ", ".join(slot for slot, _ in slots) or "none"
            raise CodError(f"slot: no slot {wanted!r} on this execution point (slots: {known})")
    if requirements is not None:
        try:
            parse_expr(requirements, field="requirements")
        except ExpressionError as err:
            raise CodError(str(err)) from None
        candidates = [
            (slot, ad)
            for slot, ad in candidates
            if evaluate(requirements, my=ad, field="requirements") is True
        ]
        if not candidates:
            raise CodError(f"requirements: no slot here satisfies {requirements!r}")
    if not candidates:
        raise CodError("this execution point has no slots")
    return candidates[0][0]


def parent_slot(name: str) -> str | None:
    """The partitionable slot a dynamic slot was carved from: slot1 for slot1_1@node (None
    for a slot that is not a dynamic one)."""
    slot, at, machine = name.partition("@")
    parent, underscore, number = slot.rpartition("_")
    if not underscore or not number.isdigit() or not parent:
        return None
    return f"{parent}{at}{machine}"


def claim_id(node: str, started: float, sequence: int) -> str:
    """A claim ID in HTCondor's form: `<address>#<startd start time>#<sequence>`."""
    return f"<{node}>#{int(started)}#{sequence}"


def next_cod_id(claims: Iterable[Claim]) -> str:
    """The next COD<n> free on the node."""
    taken = {claim.cod_id for claim in claims}
    number = 1
    while f"COD{number}" in taken:
        number += 1
    return f"COD{number}"


# ---- the application ----------------------------------------------------------------------


@dataclass(frozen=True)
class Application:
    """A COD application, as the starter runs it."""

    cmd: str
    args: tuple[str, ...] = ()
    #: None: the sandbox the agent makes.
    iwd: str | None = None
    input: str = "/dev/null"
    output: str = "/dev/null"
    error: str = "/dev/null"
    env: Mapping[str, str] = field(default_factory=dict)
    kill_sig: str = "SIGTERM"
    cluster_id: int = 1
    proc_id: int = 0
    owner: str = ""
    keyword: str | None = None
    #: The whole job ad, in `attr = value` lines (for _CONDOR_JOB_AD).
    ad_text: str = ""

    @property
    def job_id(self) -> str:
        return f"{self.cluster_id}.{self.proc_id}"


_ATTRIBUTE_NAMES = {name.upper(): name for name in APPLICATION_ATTRIBUTES}


def keyword_knobs(macros: Mapping[str, str], keyword: str) -> dict[str, str]:
    """The `<keyword>_<attribute>` knobs (case-insensitive), by attribute name."""
    prefix = keyword.upper() + "_"
    out: dict[str, str] = {}
    for knob, value in macros.items():
        upper = knob.upper()
        if upper.startswith(prefix) and upper[len(prefix) :] in _ATTRIBUTE_NAMES:
            out[_ATTRIBUTE_NAMES[upper[len(prefix) :]]] = value.strip()
    return out


def application(
    macros: Mapping[str, str],
    *,
    owner: str,
    keyword: str | None = None,
    job_ad: str | None = None,
    cluster_id: int | None = None,
    proc_id: int | None = None,
) -> Application:
    """The application's job ad, as the reference's "Defining a COD Application" builds it:
    the `<Keyword>_<attribute>` knobs, then the `-jobad` attributes (written without a
    prefix; they win over the knobs), then -cluster and -proc. Owner is the claim's owner:
    a `-jobad` naming another is refused, as HTCondor refuses an attribute that "does not
    match the authenticated identity". Cmd is required; a path that is not absolute is
    taken from Iwd."""
    values: dict[str, Any] = {}
    if keyword is not None:
        knobs = keyword_knobs(macros, keyword)
        if not knobs:
            raise CodError(
                f"keyword: no {keyword}_Cmd (or any {keyword}_<attribute>) is defined in the "
                "execution point's configuration"
            )
        for name, text in knobs.items():
            knob = f"{keyword}_{name}"
            try:
                values[name] = evaluate(text, field=knob)
            except ExpressionError as err:
                raise CodError(str(err)) from None
    if job_ad is not None:
        try:
            ad = parse_ad(job_ad, field="jobAd")
        except ExpressionError as err:
            raise CodError(str(err)) from None
        for name in ad:
            values[_ATTRIBUTE_NAMES.get(name.upper(), name)] = ad.eval(name)
    if keyword is None and job_ad is None:
        raise CodError("an activation needs a keyword (-keyword) or a job ad (-jobad)")
    given_owner = values.get("Owner")
    if given_owner is not None and given_owner != owner:
        raise CodError(
            f"jobAd: Owner {given_owner!r} does not match the authenticated user {owner!r}; "
            "leave Owner out, it is set from who you are"
        )
    values["Owner"] = owner
    if cluster_id is not None:
        values["ClusterId"] = cluster_id
    if proc_id is not None:
        values["ProcId"] = proc_id
    values.setdefault("ClusterId", 1)
    values.setdefault("ProcId", 0)
    values.setdefault("JobUniverse", VANILLA)
    if keyword is not None:
        values["JobKeyword"] = keyword
    universe = values["JobUniverse"]
    if universe == JAVA:
        raise CodError("JobUniverse: 10 (java) COD applications are not carried out; use 5")
    if universe != VANILLA:
        raise CodError(f"JobUniverse: {universe!r} is not 5 (vanilla) or 10 (java)")
    cmd = _string(values, "Cmd", required=True) or ""
    iwd = _string(values, "Iwd")
    for name in ("ClusterId", "ProcId"):
        if not isinstance(values[name], int) or isinstance(values[name], bool):
            raise CodError(f"{name}: {values[name]!r} is not an integer")
    return Application(
        cmd=_in_iwd(cmd, iwd),
        args=tuple((_string(values, "Args") or "").split()),
        iwd=iwd,
        input=_in_iwd(_string(values, "In") or "/dev/null", iwd),
        output=_in_iwd(_string(values, "Out") or "/dev/null", iwd),
        error=_in_iwd(_string(values, "Err") or "/dev/null", iwd),
        env=_environment(_string(values, "Env") or ""),
        kill_sig=_kill_sig(values.get("KillSig", "SIGTERM")),
        cluster_id=values["ClusterId"],
        proc_id=values["ProcId"],
        owner=owner,
        keyword=keyword,
        ad_text=_ad_text(values),
    )


def _string(values: Mapping[str, Any], name: str, *, required: bool = False) -> str | None:
    value = values.get(name)
    if value is None or value is classad2.Value.Undefined:
        if required:
            raise CodError(f"{name}: the application's {name} is required and not defined")
        return None
    if not isinstance(value, str):
        raise CodError(f'{name}: {value!r} is not a string; quote it ("...")')
    return value


def _in_iwd(path: str, iwd: str | None) -> str:
    """A path that is not absolute, with IWD prepended ("If any path attribute ... is not a
    full path name, HTCondor automatically prepends the value of IWD"); without IWD it
    stays relative to the sandbox."""
    if path.startswith("/") or iwd is None:
        return path
    return f"{iwd.rstrip('/')}/{path}"


def _environment(text: str) -> dict[str, str]:
    """Env: `NAME=value` pairs separated by semicolons."""
    env: dict[str, str] = {}
    for item in text.split(";"):
        if not item.strip():
            continue
        name, equals, value = item.partition("=")
        if not equals or not name.strip():
            raise CodError(f"Env: {item!r} is not NAME=value (pairs are separated by ';')")
        env[name.strip()] = value
    return env


def _kill_sig(value: Any) -> str:
    """KillSig as a signal name: given by name ("SIGQUIT", "QUIT") or number (3)."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return signal.Signals(value).name
        except ValueError:
            raise CodError(f"KillSig: {value} is not a signal number") from None
    if isinstance(value, str):
        name = value.strip().upper()
        name = name if name.startswith("SIG") else f"SIG{name}"
        if name in signal.Signals.__members__:
            return name
    raise CodError(f"KillSig: {value!r} is not a signal name (SIGTERM) or number (15)")


def _ad_text(values: Mapping[str, Any]) -> str:
    ad = classad2.ClassAd()
    for name, value in values.items():
        ad[name] = value
    return str(ad.printOld())


# ---- the slot ad ---------------------------------------------------------------------------


def slot_attributes(claims: Iterable[Claim]) -> dict[str, dict[str, Any]]:
    """Per slot with COD claims, what its ad shows of them (HTCondor's startd publishes
    these; condor_status -cod lists the slots with NumCODClaims > 0). While a COD job runs
    on a slot (`batch_suspended`) the slot takes no match: Requirements is FALSE, as
    HTCondor's startd makes it unavailable when it suspends the slot for COD."""
    claims = list(claims)
    out: dict[str, dict[str, Any]] = {}
    for slot in {claim.slot for claim in claims}:
        if batch_suspended(claims, slot):
            out[slot] = {"Requirements": False}
    for claim in sorted(claims, key=lambda c: (c.slot, c.cod_id)):
        if claim.state is State.RELEASED:
            continue
        ad = out.setdefault(claim.slot, {})
        ad["NumCODClaims"] = ad.get("NumCODClaims", 0) + 1
        ad.setdefault("CODClaims", "")
        ad["CODClaims"] = ", ".join(filter(None, (ad["CODClaims"], claim.cod_id)))
        prefix = claim.cod_id + "_"
        ad[prefix + "ClaimID"] = claim.claim_id
        ad[prefix + "ClaimState"] = claim.state.value
        ad[prefix + "EnteredCurrentState"] = int(claim.entered)
        ad[prefix + "RemoteUser"] = claim.owner
        if claim.state is not State.IDLE:
            if claim.keyword:
                ad[prefix + "JobKeyword"] = claim.keyword
            if claim.job_id:
                ad[prefix + "JobId"] = claim.job_id
    return out


@dataclass(frozen=True)
class CodRow:
    """One line of condor_status -cod."""

    name: str
    cod_id: str
    state: str
    entered: int
    user: str
    job_id: str
    keyword: str


def cod_rows(slot_ads: Iterable[Mapping[str, Any]]) -> list[CodRow]:
    """condor_status -cod's lines from slot ads: one per COD claim of each slot whose ad has
    NumCODClaims > 0."""
    rows: list[CodRow] = []
    for ad in slot_ads:
        count = ad.get("NumCODClaims")
        if not isinstance(count, int) or count <= 0:
            continue
        for cod_id in (c.strip() for c in str(ad.get("CODClaims", "")).split(",")):
            if not cod_id:
                continue
            entered = ad.get(f"{cod_id}_EnteredCurrentState")
            rows.append(
                CodRow(
                    name=str(ad.get("Name", "")),
                    cod_id=cod_id,
                    state=str(ad.get(f"{cod_id}_ClaimState", "[????????]")),
                    entered=entered if isinstance(entered, int) else 0,
                    user=str(ad.get(f"{cod_id}_RemoteUser", "[?????????]")),
                    job_id=str(ad.get(f"{cod_id}_JobId", "")),
                    keyword=str(ad.get(f"{cod_id}_JobKeyword", "")),
                )
            )
    return rows
