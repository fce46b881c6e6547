"""Job hooks in the core: the keyword's precedence, the hooks it names, and what PREPARE_JOB's
answer does (the reference's "Hooks")."""

from __future__ import annotations

from typing import Any

import pytest

from kondor_core.api.slotpolicy import SlotPolicySpec
from kondor_core.config import compile_policy
from kondor_core.fleet.policy import check_policy
from kondor_core.jobs.hooks import (
    HookSettingsError,
    JobHooks,
    job_hook_keyword,
    job_hooks,
    prepare_outcome,
    startd_hook_keyword,
    update_times,
)

# Hooks defined for the keywords the tables use, so that a job's HookKeyword is valid.
_DEFINED = {
    "JAVA5_HOOK_PREPARE_JOB": "java5_prepare",
    "DATABASE_HOOK_JOB_EXIT": "db_exit",
    "WEB_HOOK_UPDATE_JOB_INFO": "web_update",
}


@pytest.mark.parametrize(
    ("knobs", "slot", "job", "fetched", "expected"),
    [
        # Nothing set: no hooks.
        ({}, 1, None, False, None),
        # The job's HookKeyword, when hooks are defined for it (the manual's JAVA5 example).
        ({}, 1, "JAVA5", False, "JAVA5"),
        # A keyword with no hooks is invalid: the default is used, else none.
        ({}, 1, "NOSUCH", False, None),
        ({"STARTER_DEFAULT_JOB_HOOK_KEYWORD": "WEB"}, 1, "NOSUCH", False, "WEB"),
        ({"STARTER_DEFAULT_JOB_HOOK_KEYWORD": "WEB"}, 1, None, False, "WEB"),
        ({"STARTER_DEFAULT_JOB_HOOK_KEYWORD": "WEB"}, 1, "JAVA5", False, "JAVA5"),
        # STARTER_JOB_HOOK_KEYWORD wins over the job's keyword and the default.
        (
            {"STARTER_JOB_HOOK_KEYWORD": "DATABASE", "STARTER_DEFAULT_JOB_HOOK_KEYWORD": "WEB"},
            1,
            "JAVA5",
            False,
            "DATABASE",
        ),
        # The startd's keywords choose nothing for a job the schedd sent...
        ({"STARTD_JOB_HOOK_KEYWORD": "DATABASE"}, 1, None, False, None),
        # ...and are the fetched job's HookKeyword: SLOT<N> before STARTD (the manual's example).
        (
            {"STARTD_JOB_HOOK_KEYWORD": "DATABASE", "SLOT4_JOB_HOOK_KEYWORD": "WEB"},
            1,
            None,
            True,
            "DATABASE",
        ),
        (
            {"STARTD_JOB_HOOK_KEYWORD": "DATABASE", "SLOT4_JOB_HOOK_KEYWORD": "WEB"},
            4,
            "JAVA5",
            True,
            "WEB",
        ),
        # Even for fetched work, STARTER_JOB_HOOK_KEYWORD forces the starter's keyword.
        (
            {"STARTD_JOB_HOOK_KEYWORD": "DATABASE", "STARTER_JOB_HOOK_KEYWORD": "JAVA5"},
            1,
            None,
            True,
            "JAVA5",
        ),
        # Names are case-insensitive; an empty value is unset.
        ({"starter_job_hook_keyword": "  "}, 1, "JAVA5", False, "JAVA5"),
    ],
)
def test_keyword_precedence(
    knobs: dict[str, str], slot: int, job: str | None, fetched: bool, expected: str | None
) -> None:
    macros = {**_DEFINED, **knobs}
    got = job_hook_keyword(macros, slot_id=slot, job_hook_keyword=job, fetched=fetched)
    assert got == expected


def test_startd_keyword_slot_first() -> None:
    macros = {"STARTD_JOB_HOOK_KEYWORD": "DATABASE", "SLOT4_JOB_HOOK_KEYWORD": "WEB"}
    assert [startd_hook_keyword(macros, n) for n in (1, 2, 3, 4)] == [
        "DATABASE",
        "DATABASE",
        "DATABASE",
        "WEB",
    ]


def test_hooks_of_the_keyword_with_intervals() -> None:
    macros = {
        **_DEFINED,
        "JAVA5_HOOK_UPDATE_JOB_INFO": "java5_update",
        "STARTER_INITIAL_UPDATE_INTERVAL": "2",
        "STARTER_UPDATE_INTERVAL": "3",
    }
    hooks = job_hooks(macros, slot_id=1, hook_keyword="JAVA5")
    assert hooks == JobHooks(
        keyword="JAVA5",
        programs={
            "JAVA5_HOOK_PREPARE_JOB": "java5_prepare",
            "JAVA5_HOOK_UPDATE_JOB_INFO": "java5_update",
        },
        initial_update_interval=2.0,
        update_interval=3.0,
    )
    assert hooks.program("JOB_EXIT") is None
    # The manual's defaults: 8 s, then every 300 s.
    defaults = job_hooks(_DEFINED, slot_id=1, hook_keyword="JAVA5")
    assert defaults is not None
    assert (defaults.initial_update_interval, defaults.update_interval) == (8.0, 300.0)
    assert job_hooks(_DEFINED, slot_id=1, hook_keyword=None) is None


def test_bad_interval_names_the_knob() -> None:
    with pytest.raises(HookSettingsError, match="STARTER_UPDATE_INTERVAL = soon"):
        job_hooks({**_DEFINED, "STARTER_UPDATE_INTERVAL": "soon"}, slot_id=1, hook_keyword="WEB")


_HELD_150 = {"HookStatusCode": 150, "HookStatusMessage": "no licence"}


@pytest.mark.parametrize(
    ("code", "sig", "output", "expected"),
    [
        (0, None, {}, ("run", 0, "")),
        # A non-zero exit fails: held (1-255 are all below 300).
        (1, None, {}, ("hold", 1, "K failed (status 1)")),
        # HookStatusCode replaces the exit status, both ways.
        (0, None, _HELD_150, ("hold", 150, "no licence")),
        (3, None, {"HookStatusCode": 0}, ("run", 0, "")),
        (0, None, {"HookStatusCode": 299}, ("hold", 299, "K failed (status 299)")),
        (0, None, {"HookStatusCode": 300, "HookStatusMessage": "later"}, ("idle", 300, "later")),
        (0, None, {"HookStatusCode": 999}, ("idle", 999, "K failed (status 999)")),
        # A negative HookStatusCode is not used.
        (2, None, {"HookStatusCode": -5}, ("hold", 2, "K failed (status 2)")),
        (0, None, {"HookStatusCode": -5}, ("run", 0, "")),
        # A hook killed by a signal fails whatever it printed.
        (None, 9, {"HookStatusCode": 0}, ("hold", 9, "K was killed by signal 9")),
    ],
)
def test_prepare_outcome(
    code: int | None, sig: int | None, output: dict[str, Any], expected: tuple[str, int, str]
) -> None:
    got = prepare_outcome(code, sig, output, knob="K")
    assert (got.action, got.status, got.message) == expected


def test_update_times_follow_the_intervals() -> None:
    assert update_times(100.0, 8, 300, 1000.0) == [108.0, 408.0, 708.0]
    assert update_times(100.0, 8, 300, 107.0) == []


def test_snippet_keeps_hook_knobs_without_warnings() -> None:
    config = """
STARTD_JOB_HOOK_KEYWORD = DATABASE
SLOT4_JOB_HOOK_KEYWORD = WEB
STARTER_JOB_HOOK_KEYWORD = JAVA5
STARTER_DEFAULT_JOB_HOOK_KEYWORD = WEB
STARTER_INITIAL_UPDATE_INTERVAL = 2
STARTER_UPDATE_INTERVAL = 5
JAVA5_HOOK_PREPARE_JOB = prepare.sh
JAVA5_HOOK_UPDATE_JOB_INFO = update.sh
JAVA5_HOOK_JOB_EXIT = exit.sh
"""
    policy = compile_policy(SlotPolicySpec.model_validate({"condorConfig": config}))
    assert not policy.warnings
    hooks = job_hooks(policy.macros, slot_id=4, hook_keyword=None)
    assert hooks is not None
    assert hooks.keyword == "JAVA5"
    assert hooks.program("PREPARE_JOB") == "prepare.sh"
    assert (hooks.initial_update_interval, hooks.update_interval) == (2.0, 5.0)
    assert policy.macros["SLOT4_JOB_HOOK_KEYWORD"] == "WEB"


def test_admission_refuses_a_hook_outside_the_hooks_directory_naming_the_knob() -> None:
    config = (
        "TEST_HOOK_PREPARE_JOB = /usr/bin/evil\n"
        "TEST_HOOK_JOB_EXIT = ../../bin/escape\n"
        "TEST_HOOK_UPDATE_JOB_INFO = update.sh\n"
        "STARTER_UPDATE_INTERVAL = often\n"
    )
    checked = check_policy({"condorConfig": config}, hooks_dir="/etc/kondor/hooks")
    assert not checked.valid
    assert checked.problems == (
        "spec.condorConfig: TEST_HOOK_PREPARE_JOB = /usr/bin/evil: '/usr/bin/evil' is outside "
        "the hooks directory /etc/kondor/hooks; startd cron executables and job hooks must be "
        "in it (a relative path is taken from it)",
        "spec.condorConfig: TEST_HOOK_JOB_EXIT = ../../bin/escape: '../../bin/escape' is "
        "outside the hooks directory /etc/kondor/hooks; startd cron executables and job hooks "
        "must be in it (a relative path is taken from it)",
        "spec.condorConfig: STARTER_UPDATE_INTERVAL = often: expected a number of seconds",
    )
    fine = check_policy(
        {"condorConfig": "TEST_HOOK_PREPARE_JOB = /etc/kondor/hooks/prepare.sh\n"},
        hooks_dir="/etc/kondor/hooks",
    )
    assert fine.valid and not fine.warnings
