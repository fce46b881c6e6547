"""The accounts jobs run as, as a SlotPolicy's snippet spells them: parsing only.

HTCondor's starter chooses a job's Unix account from the knobs of the manual's "User Accounts
in HTCondor on Unix Platforms" (STARTER_ALLOW_RUNAS_OWNER, UID_DOMAIN, SLOT<N>_USER,
NOBODY_SLOT_USER, DEDICATED_EXECUTE_ACCOUNT_REGEXP); the decision is
`kondor_core.jobs.runas`. On Kubernetes the owners' uids come from the admin, never from the
job: the SlotPolicy's `userAccounts` field or the `KONDOR_USER_ACCOUNTS` knob, parsed here:

    KONDOR_USER_ACCOUNTS = alice=2001:2001, bob=2002

(`user=uid[:gid]`, separated by commas or white space; the gid defaults to the uid). A uid
or gid of 0 is refused: no job runs as root, whatever the mapping says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kondor_core.api.slotpolicy import MAX_ID
from kondor_core.errors import KondorError

#: The knob that maps authenticated users to uid[:gid] (Kondor's own).
USER_ACCOUNTS_KNOB = "KONDOR_USER_ACCOUNTS"
#: The first uid of Kondor's per-slot users (Kondor's own knob; see `jobs.runas`).
SLOT_UID_BASE_KNOB = "KONDOR_SLOT_USER_UID_BASE"

_ENTRY = re.compile(r"(?P<user>[^=\s,]+)=(?P<uid>[^:\s,]+)(?::(?P<gid>[^\s,]+))?")
_SEPARATORS = re.compile(r"[\s,]+")


class AccountError(KondorError):
    """An account mapping or slot user Kondor refuses (uid 0 among them)."""


@dataclass(frozen=True)
class UnixIds:
    """A uid and gid, never 0."""

    uid: int
    gid: int


def check_id(value: object, *, field: str, what: str = "uid") -> int:
    """`value` as a uid or gid from 1 to 4294967294; uid 0 (root) and gid 0 are refused."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise AccountError(f"{field}: {value!r} is not a {what}; give a number from 1 to {MAX_ID}")
    try:
        number = int(value)
    except ValueError:
        raise AccountError(
            f"{field}: {value!r} is not a {what}; give a number from 1 to {MAX_ID}"
        ) from None
    if number == 0:
        group = "group root" if what == "gid" else "root"
        raise AccountError(
            f"{field}: {what} 0 is {group}; a job never runs as root: give a {what} from 1 "
            f"to {MAX_ID}"
        )
    if not 1 <= number <= MAX_ID:
        raise AccountError(f"{field}: {what} {number} is out of range; allowed: 1 to {MAX_ID}")
    return number


def parse_user_accounts(text: str, *, field: str = USER_ACCOUNTS_KNOB) -> dict[str, UnixIds]:
    """KONDOR_USER_ACCOUNTS: `user=uid[:gid]` entries; raises AccountError naming the entry."""
    accounts: dict[str, UnixIds] = {}
    for entry in _SEPARATORS.split(text.strip()):
        if not entry:
            continue
        match = _ENTRY.fullmatch(entry)
        if match is None:
            raise AccountError(
                f"{field}: {entry!r} is not user=uid[:gid] (for example bob=2002:2002)"
            )
        user = match["user"]
        where = f"{field}: {user}"
        uid = check_id(match["uid"], field=where, what="uid")
        gid = check_id(match["gid"], field=where, what="gid") if match["gid"] else uid
        if user in accounts:
            raise AccountError(f"{field}: {user!r} appears twice; each user has one account")
        accounts[user] = UnixIds(uid, gid)
    return accounts


def merge_user_accounts(text: str, accounts: dict[str, tuple[int, int | None]]) -> str:
    """KONDOR_USER_ACCOUNTS's entries with `accounts` (the SlotPolicy's userAccounts) over
    them, user by user, written back as the knob's text. The snippet's entries are checked
    (uid 0 refused, naming condorConfig); a user name that the knob's syntax cannot hold
    (white space, a comma or an equals sign) is refused."""
    # The knob's own entries are checked first: a uid 0 there is refused even where the
    # field maps the same user.
    parse_user_accounts(text, field=f"condorConfig: {USER_ACCOUNTS_KNOB}")
    entries = {}
    for entry in _SEPARATORS.split(text.strip()):
        if entry:
            entries[entry.partition("=")[0]] = entry
    for user, (uid, gid) in accounts.items():
        if not user or _SEPARATORS.search(user) or "=" in user:
            raise AccountError(
                f"spec.userAccounts: {user!r} is not a user name Kondor can map (no white "
                "space, commas or equals signs)"
            )
        entries[user] = f"{user}={uid}:{uid if gid is None else gid}"
    return ", ".join(entries.values())


def parse_uid_base(text: str | None, default: int) -> int:
    """KONDOR_SLOT_USER_UID_BASE: a positive uid (the slot users are base + 1000*N + M)."""
    if text is None or not text.strip():
        return default
    return check_id(text.strip(), field=SLOT_UID_BASE_KNOB, what="uid")
