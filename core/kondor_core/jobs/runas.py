"""Who a job runs as: HTCondor's starter's choice of a Unix account, as a pure function.

The manual's "User Accounts in HTCondor on Unix Platforms": "On the machine where the job
executes, the job runs either as the submitting user or as user nobody". The starter
(`JICShadow::initUserPriv`) decides, in this order:

1. Run as the owner only when STARTER_ALLOW_RUNAS_OWNER (default True on Unix; evaluated
   against the job ad) holds, the job does not ask otherwise (`RunAsOwner = False`), and the
   job comes from this UID_DOMAIN. On Kubernetes the API server authenticated the job's
   Owner (admission sets `spec.owner`), and the admin's mapping of users to uids
   (SlotPolicy `userAccounts`, KONDOR_USER_ACCOUNTS) is the domain's password file: an
   owner it names runs as that uid; an owner it does not name runs as the slot user (where
   HTCondor, with SOFT_UID_DOMAIN False, would refuse the job). A job that names a UidDomain
   of its own other than UID_DOMAIN is from another domain, as in HTCondor; the job's ad
   never supplies a uid. TRUST_UID_DOMAIN (HTCondor's check of the submit host's name) has
   nothing to check: no submit host is involved.
2. Otherwise the slot user: `<SLOT NAME>_USER` (SLOT1_USER, SLOT1_2_USER for a dynamic
   slot), else NOBODY_SLOT_USER, else HTCondor's `nobody`. Kondor's default differs on
   purpose: with neither knob set each slot gets its own unprivileged user (what the
   manual recommends with `NOBODY_SLOT_USER = $(STARTER_SLOT_NAME)`, so jobs cannot
   interfere with each other), a numeric uid and gid `KONDOR_SLOT_USER_UID_BASE` (100000)
   + 1000 x N + M for slotN_M (slot1 101000, slot1_2 101002, slot2 102000).
3. The account is dedicated to jobs (HTCondor tracks and cleans up its processes by uid)
   when DEDICATED_EXECUTE_ACCOUNT_REGEXP matches its name, else when the deprecated
   EXECUTE_LOGIN_IS_DEDICATED is true; Kondor's own slot users always are.

Root is never chosen: HTCondor ignores `SLOT<N>_USER = root`; Kondor refuses uid or gid 0
and the name root wherever they come from (admission refuses them first), so a policy
that got past admission holds the job instead of running it as root.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kondor_core.classads import evaluate, is_error, is_undefined
from kondor_core.config.accounts import (
    SLOT_UID_BASE_KNOB,
    USER_ACCOUNTS_KNOB,
    AccountError,
    UnixIds,
    check_id,
    parse_uid_base,
    parse_user_accounts,
)
from kondor_core.errors import KondorError

__all__ = [
    "DEFAULT_SLOT_UID_BASE",
    "SLOT_UID_STRIDE",
    "Account",
    "AccountError",
    "RunAsSettings",
    "UnixIds",
    "run_as",
    "run_as_problems",
    "slot_user_ids",
]

#: The first uid of Kondor's slot users: above the 16-bit range and systemd's dynamic users
#: (61184-65519), below the ranges container runtimes give user namespaces.
DEFAULT_SLOT_UID_BASE = 100000
#: Room for the dynamic slots of one slot: slotN_M is base + 1000 x N + M (M < 1000).
SLOT_UID_STRIDE = 1000

#: SLOT<N>_USER and SLOT<N>_<M>_USER.
SLOT_USER_KNOB = re.compile(r"SLOT(\d+)(?:_(\d+))?_USER", re.IGNORECASE)
_SLOT_NAME = re.compile(r"slot(\d+)(?:_(\d+))?", re.IGNORECASE)
_TRUE = {"true", "yes", "1", "t"}
_FALSE = {"false", "no", "0", "f"}
#: HTCondor's nobody user, which `SLOT<N>_USER = root` falls back to.
NOBODY = "nobody"

How = Literal["owner", "slot-user"]


@dataclass(frozen=True)
class Account:
    """The account a job runs as, and why (for the agent's log and the job's status).

    `uid`/`gid` are None for an account named by a user name (SLOT1_USER = condor_slot1):
    the node's agent looks the name up in its password file and refuses one that is root.
    """

    name: str
    uid: int | None
    gid: int | None
    how: How
    reason: str
    dedicated: bool = False


@dataclass(frozen=True)
class RunAsSettings:
    """The run-as knobs of a SlotPolicy (its macros, HTCondor's defaults where unset) and
    the admin's user accounts (the `userAccounts` field wins over KONDOR_USER_ACCOUNTS)."""

    allow_runas_owner: str = "true"
    uid_domain: str | None = None
    slot_users: Mapping[str, str] | None = None
    nobody_slot_user: str | None = None
    dedicated_regexp: str | None = None
    execute_login_is_dedicated: bool = False
    accounts: Mapping[str, UnixIds] | None = None
    slot_uid_base: int = DEFAULT_SLOT_UID_BASE

    @classmethod
    def from_macros(
        cls,
        macros: Mapping[str, str] | None = None,
        accounts: Mapping[str, Mapping[str, int | None]] | None = None,
    ) -> RunAsSettings:
        """The settings of a policy's macros and its `userAccounts`; raises AccountError
        naming the knob or field of a value refused (uid 0 among them)."""
        upper = {name.upper(): value for name, value in (macros or {}).items()}
        mapped = dict(parse_user_accounts(upper.get(USER_ACCOUNTS_KNOB, "")))
        for user, ids in (accounts or {}).items():
            where = f"userAccounts.{user}"
            uid = check_id(ids.get("uid"), field=f"{where}.uid", what="uid")
            gid_value = ids.get("gid")
            gid = (
                uid if gid_value is None else check_id(gid_value, field=f"{where}.gid", what="gid")
            )
            mapped[user] = UnixIds(uid, gid)
        slot_users = {}
        for name, value in upper.items():
            if SLOT_USER_KNOB.fullmatch(name):
                _check_user_name(value, field=name)
                slot_users[name] = value.strip()
        nobody = upper.get("NOBODY_SLOT_USER")
        if nobody is not None:
            _check_user_name(nobody, field="NOBODY_SLOT_USER")
        regexp = upper.get("DEDICATED_EXECUTE_ACCOUNT_REGEXP") or None
        if regexp is not None:
            try:
                re.compile(regexp)
            except re.error as err:
                raise AccountError(
                    f"DEDICATED_EXECUTE_ACCOUNT_REGEXP: {regexp!r} is not a regular expression "
                    f"({err})"
                ) from None
        return cls(
            allow_runas_owner=(upper.get("STARTER_ALLOW_RUNAS_OWNER") or "true").strip(),
            uid_domain=(upper.get("UID_DOMAIN") or "").strip() or None,
            slot_users=slot_users,
            nobody_slot_user=nobody.strip() if nobody and nobody.strip() else None,
            dedicated_regexp=regexp,
            execute_login_is_dedicated=_word(upper.get("EXECUTE_LOGIN_IS_DEDICATED")) is True,
            accounts=mapped,
            slot_uid_base=parse_uid_base(upper.get(SLOT_UID_BASE_KNOB), DEFAULT_SLOT_UID_BASE),
        )


def run_as_problems(
    macros: Mapping[str, str], accounts: Mapping[str, Mapping[str, int | None]] | None = None
) -> list[str]:
    """What admission refuses in a policy's run-as settings (each names the knob or field)."""
    try:
        RunAsSettings.from_macros(macros, accounts)
    except AccountError as err:
        return [str(err)]
    return []


def slot_user_ids(slot: str, base: int = DEFAULT_SLOT_UID_BASE) -> UnixIds:
    """The uid and gid of Kondor's own user for `slot` (slotN or slotN_M): base + 1000 x N
    + M (`@machine` after the name is ignored). The pod-job side calls this too, so a pod
    and a process in one slot share a uid."""
    slot = slot.split("@", 1)[0]
    match = _SLOT_NAME.fullmatch(slot)
    if match is None:
        raise AccountError(f"{slot!r} is not a slot name (slotN or slotN_M)")
    number, child = int(match[1]), int(match[2] or 0)
    if child >= SLOT_UID_STRIDE:
        raise AccountError(
            f"{slot}: dynamic slot {child} has no slot user (Kondor's slot users go up to "
            f"slot{number}_{SLOT_UID_STRIDE - 1})"
        )
    uid = base + SLOT_UID_STRIDE * number + child
    return UnixIds(check_id(uid, field=slot), check_id(uid, field=slot, what="gid"))


def run_as(settings: RunAsSettings, *, owner: str | None, slot: str, job_ad: Any) -> Account:
    """The account the job with `job_ad` (owned by the authenticated `owner`) runs as in
    `slot` (its name: slot1, slot1_2, with or without `@machine`), following the starter's
    order; raises AccountError rather than choosing root."""
    slot = slot.split("@", 1)[0]
    refused = _runas_owner_refused(settings, owner, job_ad)
    if refused is None:
        assert owner is not None
        ids = (settings.accounts or {})[owner]
        _refuse_root(ids.uid, ids.gid, where=f"the account of {owner}")
        return Account(
            name=owner,
            uid=ids.uid,
            gid=ids.gid,
            how="owner",
            reason=(
                f"STARTER_ALLOW_RUNAS_OWNER allows it and the admin maps {owner} to uid "
                f"{ids.uid} gid {ids.gid}: the job runs as its owner"
            ),
            dedicated=_dedicated(settings, owner),
        )
    knob = f"{slot.upper()}_USER"
    named = (settings.slot_users or {}).get(knob)
    source = knob
    if named is None and settings.nobody_slot_user is not None:
        named, source = settings.nobody_slot_user, "NOBODY_SLOT_USER"
    if named is not None:
        if named.lower() == "root":
            raise AccountError(f"{source} = root: a job never runs as root")
        name = named
        uid = gid = None
        numeric = _numeric(named, field=source)
        if numeric is not None:
            uid, gid = numeric.uid, numeric.gid
            name = f"{slot}-user" if ":" in named or named.isdigit() else named
        elif _SLOT_NAME.fullmatch(named):
            # $(STARTER_SLOT_NAME) or a slot's name: Kondor's own user for that slot.
            ids = slot_user_ids(named, settings.slot_uid_base)
            uid, gid = ids.uid, ids.gid
        return Account(
            name=name,
            uid=uid,
            gid=gid,
            how="slot-user",
            reason=f"{refused}; {source} = {named}",
            dedicated=_dedicated(settings, name),
        )
    ids = slot_user_ids(slot, settings.slot_uid_base)
    return Account(
        name=slot,
        uid=ids.uid,
        gid=ids.gid,
        how="slot-user",
        reason=(
            f"{refused}; neither {knob} nor NOBODY_SLOT_USER is set: the slot's own user "
            f"(uid {ids.uid} = {SLOT_UID_BASE_KNOB} {settings.slot_uid_base} + slot number)"
        ),
        dedicated=True,
    )


def _runas_owner_refused(settings: RunAsSettings, owner: str | None, job_ad: Any) -> str | None:
    """Why the job does not run as its owner, None when it does."""
    if not owner:
        return "the job has no Owner"
    if not _allowed(settings.allow_runas_owner, job_ad):
        return f"STARTER_ALLOW_RUNAS_OWNER = {settings.allow_runas_owner} is not true for the job"
    if job_ad is not None and job_ad.get("RunAsOwner") is False:
        return "the job asks not to run as its owner (RunAsOwner = false)"
    domain = job_ad.get("UidDomain") if job_ad is not None else None
    if isinstance(domain, str) and domain.lower() != (settings.uid_domain or "").lower():
        return (
            f"the job's UidDomain {domain!r} is not this UID_DOMAIN "
            f"{settings.uid_domain or '(unset)'!r}"
        )
    if owner not in (settings.accounts or {}):
        return f"the admin maps no uid to {owner} (SlotPolicy userAccounts, {USER_ACCOUNTS_KNOB})"
    return None


def _allowed(text: str, job_ad: Any) -> bool:
    """`param_boolean(STARTER_ALLOW_RUNAS_OWNER, ..., job_ad)`: a word, else the expression
    over the job ad; false unless it is true."""
    word = _word(text)
    if word is not None:
        return word
    try:
        value = evaluate(text, my=job_ad, field="STARTER_ALLOW_RUNAS_OWNER")
    except KondorError:
        return False
    if is_undefined(value) or is_error(value):
        return False
    return value is True


def _dedicated(settings: RunAsSettings, name: str) -> bool:
    """checkDedicatedExecuteAccounts: the regexp when set, else EXECUTE_LOGIN_IS_DEDICATED."""
    if settings.dedicated_regexp:
        return re.fullmatch(settings.dedicated_regexp, name) is not None
    return settings.execute_login_is_dedicated


def _numeric(text: str, *, field: str) -> UnixIds | None:
    """`uid` or `uid:gid` written as numbers (a node needs no password entry for them)."""
    uid_text, _, gid_text = text.strip().partition(":")
    if not uid_text.isdigit():
        return None
    uid = check_id(uid_text, field=field)
    gid = check_id(gid_text, field=field, what="gid") if gid_text else uid
    return UnixIds(uid, gid)


def _check_user_name(value: str, *, field: str) -> None:
    text = value.strip()
    if not text:
        raise AccountError(f"{field}: empty; give a user name, uid or uid:gid")
    if text.lower() == "root":
        raise AccountError(f"{field} = root: a job never runs as root; give another user")
    _numeric(text, field=field)


def _refuse_root(uid: int | None, gid: int | None, *, where: str) -> None:
    if uid == 0 or gid == 0:
        raise AccountError(f"{where}: uid {uid} gid {gid}: a job never runs as root")


def _word(text: str | None) -> bool | None:
    if text is None:
        return None
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    return None
