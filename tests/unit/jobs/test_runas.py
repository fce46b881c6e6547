"""Who a job runs as: the starter's choice (`JICShadow::initUserPriv`) as a table.

Rows follow the manual's "User Accounts in HTCondor on Unix Platforms" ("the job runs either
as the submitting user or as user nobody"; SLOT<N>_USER and NOBODY_SLOT_USER give slot users
instead of nobody; DEDICATED_EXECUTE_ACCOUNT_REGEXP says which accounts are dedicated) and
the starter's defaults (STARTER_ALLOW_RUNAS_OWNER true on Unix, the job's RunAsOwner true),
with Kondor's two differences: the owner's uid comes from the admin's mapping, never from the
job, and with no slot user configured each slot has its own (base 100000 + 1000 N + M).
"""

from __future__ import annotations

from typing import Any

import classad2
import pytest

from kondor_core.config import compile_policy
from kondor_core.fleet.policy import check_policy
from kondor_core.jobs.runas import (
    AccountError,
    RunAsSettings,
    UnixIds,
    run_as,
    run_as_problems,
    slot_user_ids,
)

BOB = {"KONDOR_USER_ACCOUNTS": "bob=2002:3002, alice=2001"}


def ad(**attributes: Any) -> Any:
    return classad2.ClassAd({"Owner": "bob", **attributes})


@pytest.mark.parametrize(
    ("macros", "owner", "slot", "job", "expected"),
    [
        # No mapping, no slot user: Kondor's own user of the slot (HTCondor: nobody).
        ({}, "bob", "slot1", ad(), ("slot1", 101000, 101000, "slot-user", True)),
        ({}, "bob", "slot1_2", ad(), ("slot1_2", 101002, 101002, "slot-user", True)),
        # The slot ad's Name: the machine after `@` does not count.
        ({}, "bob", "slot1_2@node-a", ad(), ("slot1_2", 101002, 101002, "slot-user", True)),
        ({"SLOT1_2_USER": "7:8"}, "bob", "slot1_2@node-a", ad(),
         ("slot1_2-user", 7, 8, "slot-user", False)),
        ({}, "bob", "slot12_7", ad(), ("slot12_7", 112007, 112007, "slot-user", True)),
        # The admin maps bob: STARTER_ALLOW_RUNAS_OWNER (default true) lets him run as himself.
        (BOB, "bob", "slot1_1", ad(), ("bob", 2002, 3002, "owner", False)),
        (BOB, "alice", "slot1_1", ad(Owner="alice"), ("alice", 2001, 2001, "owner", False)),
        # An owner the mapping does not name runs as the slot user.
        (BOB, "carol", "slot1_1", ad(Owner="carol"),
         ("slot1_1", 101001, 101001, "slot-user", True)),
        # STARTER_ALLOW_RUNAS_OWNER false, or an expression false for this job.
        ({**BOB, "STARTER_ALLOW_RUNAS_OWNER": "False"}, "bob", "slot1", ad(),
         ("slot1", 101000, 101000, "slot-user", True)),
        ({**BOB, "STARTER_ALLOW_RUNAS_OWNER": 'Owner == "alice"'}, "bob", "slot1", ad(),
         ("slot1", 101000, 101000, "slot-user", True)),
        ({**BOB, "STARTER_ALLOW_RUNAS_OWNER": 'Owner == "bob"'}, "bob", "slot1", ad(),
         ("bob", 2002, 3002, "owner", False)),
        # The job may decline (RunAsOwner = false), never claim another uid.
        (BOB, "bob", "slot1", ad(RunAsOwner=False), ("slot1", 101000, 101000, "slot-user", True)),
        (BOB, "bob", "slot1", ad(RunAsOwner=True), ("bob", 2002, 3002, "owner", False)),
        # A job from another UID_DOMAIN does not run as its owner; the same domain does.
        (BOB, "bob", "slot1", ad(UidDomain="elsewhere.org"),
         ("slot1", 101000, 101000, "slot-user", True)),
        ({**BOB, "UID_DOMAIN": "Example.org"}, "bob", "slot1", ad(UidDomain="example.ORG"),
         ("bob", 2002, 3002, "owner", False)),
        # SLOT<N>_USER (the slot's full name for a dynamic slot), then NOBODY_SLOT_USER.
        ({"SLOT1_USER": "condor_slot1"}, "bob", "slot1", ad(),
         ("condor_slot1", None, None, "slot-user", False)),
        ({"SLOT1_USER": "condor_slot1"}, "bob", "slot1_3", ad(),
         ("slot1_3", 101003, 101003, "slot-user", True)),
        ({"SLOT1_3_USER": "5000:6000"}, "bob", "slot1_3", ad(),
         ("slot1_3-user", 5000, 6000, "slot-user", False)),
        ({"NOBODY_SLOT_USER": "nobody"}, "bob", "slot2", ad(),
         ("nobody", None, None, "slot-user", False)),
        ({"NOBODY_SLOT_USER": "nobody", "SLOT2_USER": "slot2"}, "bob", "slot2", ad(),
         ("slot2", 102000, 102000, "slot-user", False)),
        # DEDICATED_EXECUTE_ACCOUNT_REGEXP, else the deprecated EXECUTE_LOGIN_IS_DEDICATED.
        ({"NOBODY_SLOT_USER": "cndrusr1", "DEDICATED_EXECUTE_ACCOUNT_REGEXP": "cndrusr[0-9]+"},
         "bob", "slot1", ad(), ("cndrusr1", None, None, "slot-user", True)),
        ({**BOB, "DEDICATED_EXECUTE_ACCOUNT_REGEXP": "cndrusr[0-9]+"}, "bob", "slot1", ad(),
         ("bob", 2002, 3002, "owner", False)),
        ({**BOB, "EXECUTE_LOGIN_IS_DEDICATED": "true"}, "bob", "slot1", ad(),
         ("bob", 2002, 3002, "owner", True)),
        # KONDOR_SLOT_USER_UID_BASE moves Kondor's slot users.
        ({"KONDOR_SLOT_USER_UID_BASE": "200000"}, "bob", "slot3_4", ad(),
         ("slot3_4", 203004, 203004, "slot-user", True)),
        # No Owner at all (a backfill client, a fetched job before admission): the slot user.
        (BOB, None, "slot1", None, ("slot1", 101000, 101000, "slot-user", True)),
    ],
)  # fmt: skip
def test_who_a_job_runs_as(
    macros: dict[str, str], owner: str | None, slot: str, job: Any, expected: tuple[Any, ...]
) -> None:
    account = run_as(RunAsSettings.from_macros(macros), owner=owner, slot=slot, job_ad=job)
    assert (account.name, account.uid, account.gid, account.how, account.dedicated) == expected
    assert account.reason  # said in the log and the job's status


def test_the_reason_says_why() -> None:
    settings = RunAsSettings.from_macros({**BOB, "STARTER_ALLOW_RUNAS_OWNER": "false"})
    account = run_as(settings, owner="bob", slot="slot1", job_ad=ad())
    assert "STARTER_ALLOW_RUNAS_OWNER = false" in account.reason
    assert "the slot's own user (uid 101000" in account.reason
    account = run_as(RunAsSettings.from_macros(BOB), owner="bob", slot="slot1", job_ad=ad())
    assert "maps bob to uid 2002 gid 3002" in account.reason
    account = run_as(RunAsSettings(), owner="bob", slot="slot1", job_ad=ad())
    assert "maps no uid to bob" in account.reason


@pytest.mark.parametrize(
    ("macros", "message"),
    [
        ({"KONDOR_USER_ACCOUNTS": "bob=0"}, "KONDOR_USER_ACCOUNTS: bob: uid 0 is root"),
        ({"KONDOR_USER_ACCOUNTS": "bob=2002:0"}, "KONDOR_USER_ACCOUNTS: bob: gid 0 is group root"),
        ({"KONDOR_USER_ACCOUNTS": "bob"}, "'bob' is not user=uid[:gid]"),
        ({"KONDOR_USER_ACCOUNTS": "bob=x"}, "'x' is not a uid"),
        ({"KONDOR_USER_ACCOUNTS": "bob=1 bob=2"}, "'bob' appears twice"),
        ({"SLOT1_USER": "root"}, "SLOT1_USER = root: a job never runs as root"),
        ({"SLOT1_2_USER": "0:0"}, "SLOT1_2_USER: uid 0 is root"),
        ({"NOBODY_SLOT_USER": "ROOT"}, "NOBODY_SLOT_USER = root"),
        ({"NOBODY_SLOT_USER": "7:0"}, "NOBODY_SLOT_USER: gid 0 is group root"),
        ({"KONDOR_SLOT_USER_UID_BASE": "0"}, "KONDOR_SLOT_USER_UID_BASE: uid 0 is root"),
        ({"DEDICATED_EXECUTE_ACCOUNT_REGEXP": "("}, "is not a regular expression"),
    ],
)
def test_root_and_bad_values_are_refused_naming_the_knob(
    macros: dict[str, str], message: str
) -> None:
    with pytest.raises(AccountError, match=None) as caught:
        RunAsSettings.from_macros(macros)
    assert message in str(caught.value)
    assert run_as_problems(macros) == [str(caught.value)]


def test_the_decision_refuses_root_even_past_admission() -> None:
    # Settings built in code (not through the knobs' checks) still never give root.
    forged = RunAsSettings(accounts={"bob": UnixIds(0, 0)})
    with pytest.raises(AccountError, match="never runs as root"):
        run_as(forged, owner="bob", slot="slot1", job_ad=ad())
    with pytest.raises(AccountError, match="never runs as root"):
        run_as(
            RunAsSettings(slot_users={"SLOT1_USER": "root"}), owner="x", slot="slot1", job_ad=None
        )
    with pytest.raises(AccountError, match="no slot user"):
        slot_user_ids("slot1_1000")


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"userAccounts": {"bob": {"uid": 0}}},
         "spec.userAccounts.bob.uid: uid 0 is root; a job never runs as root: allowed: 1 to "
         "4294967294"),
        ({"userAccounts": {"bob": {"uid": 2002, "gid": 0}}},
         "spec.userAccounts.bob.gid: gid 0 is group root"),
        ({"userAccounts": {"bob": {"uid": -5}}},
         "spec.userAccounts.bob.uid: uid -5 is out of range"),
        ({"condorConfig": "KONDOR_USER_ACCOUNTS = bob=0\n"},
         "spec.condorConfig: KONDOR_USER_ACCOUNTS: bob: uid 0 is root"),
        ({"condorConfig": "SLOT1_USER = root\n"}, "spec.condorConfig: SLOT1_USER = root"),
        # The knob's uid 0 is refused even where the field maps the same user.
        ({"userAccounts": {"bob": {"uid": 2002}}, "condorConfig": "KONDOR_USER_ACCOUNTS = bob=0\n"},
         "spec.condorConfig: KONDOR_USER_ACCOUNTS: bob: uid 0 is root"),
        ({"userAccounts": {"b ob": {"uid": 2002}}}, "spec.userAccounts: 'b ob' is not a user name"),
    ],
)  # fmt: skip
def test_admission_refuses_root_naming_the_field(spec: dict[str, Any], problem: str) -> None:
    checked = check_policy(spec)
    assert not checked.valid
    assert any(problem in line for line in checked.problems), checked.problems


def test_the_structured_field_wins_over_the_knob_user_by_user() -> None:
    checked = check_policy(
        {
            "userAccounts": {"bob": {"uid": 4004}},
            "condorConfig": "KONDOR_USER_ACCOUNTS = alice=2001 bob=2002\nSLOT1_USER = 7000\n",
        }
    )
    assert checked.valid, checked.problems
    assert not checked.warnings  # every run-as knob is one Kondor reads
    assert checked.spec is not None
    settings = RunAsSettings.from_macros(compile_policy(checked.spec).macros)
    assert settings.accounts == {"alice": UnixIds(2001, 2001), "bob": UnixIds(4004, 4004)}
    assert run_as(settings, owner="carol", slot="slot1", job_ad=None).uid == 7000
