"""Startd cron jobs compiled from a SlotPolicy (spec.cron and STARTD_CRON_* in condorConfig),
their validation, and the hooks directory at admission."""

from __future__ import annotations

from typing import Any

import pytest

from kondor_core.api import SlotPolicySpec
from kondor_core.config import PolicyError, compile_policy, policy_hash, render_policy
from kondor_core.cron import AutoPublish, CronError, CronMode, parse_args, parse_env, parse_period
from kondor_core.fleet import check_policy

#: The reference's "complete configuration example" (its startd part), $(MODULES) dropped:
#: relative executables are taken from the hooks directory.
REFERENCE = """
STARTD_CRON_MAX_JOB_LOAD = 0.2
STARTD_CRON_JOBLIST =
STARTD_CRON_LOG_NON_ZERO_EXIT = true

STARTD_CRON_JOBLIST = $(STARTD_CRON_JOBLIST) test
STARTD_CRON_TEST_MODE = OneShot
STARTD_CRON_TEST_RECONFIG_RERUN = True
STARTD_CRON_TEST_PREFIX = test_
STARTD_CRON_TEST_EXECUTABLE = test
STARTD_CRON_TEST_KILL = True
STARTD_CRON_TEST_ARGS = abc 123
STARTD_CRON_TEST_SLOTS = 1
STARTD_CRON_TEST_JOB_LOAD = 0.01

STARTD_CRON_JOBLIST = $(STARTD_CRON_JOBLIST) date
STARTD_CRON_DATE_MODE = Periodic
STARTD_CRON_DATE_EXECUTABLE = date
STARTD_CRON_DATE_PERIOD = 15s
STARTD_CRON_DATE_JOB_LOAD = 0.01

STARTD_CRON_JOBLIST = $(STARTD_CRON_JOBLIST) foo
STARTD_CRON_FOO_EXECUTABLE = foo
STARTD_CRON_FOO_PREFIX = Foo
STARTD_CRON_FOO_MODE = Periodic
STARTD_CRON_FOO_PERIOD = 10m
STARTD_CRON_FOO_JOB_LOAD = 0.2
"""


_A = "STARTD_CRON_JOBLIST = a\nSTARTD_CRON_A_EXECUTABLE = a\n"


def _compile(snippet: str = "", **spec: Any) -> Any:
    return compile_policy(SlotPolicySpec.model_validate({"condorConfig": snippet, **spec}))


def test_the_references_configuration_example() -> None:
    policy = _compile(REFERENCE)
    test, date, foo = policy.cron_jobs
    assert (test.name, test.mode, test.period, test.prefix) == (
        "test",
        CronMode.ONE_SHOT,
        0,
        "test_",
    )
    assert (test.args, test.slots, test.kill, test.reconfig_rerun) == (
        ("abc", "123"),
        (1,),
        True,
        True,
    )
    assert (date.mode, date.period, date.job_load) == (CronMode.PERIODIC, 15, 0.01)
    assert (foo.prefix, foo.period, foo.job_load) == ("Foo", 600, 0.2)
    assert (policy.cron.max_job_load, policy.cron.log_non_zero_exit) == (0.2, True)
    assert not [w for w in policy.warnings if "STARTD_CRON" in w]
    assert render_policy(policy)["cron"][2]["period"] == 600


def test_structured_jobs_win_over_the_snippet_by_name() -> None:
    policy = _compile(
        REFERENCE,
        cron=[
            {"name": "date", "executable": "date.sh", "period": "1m", "env": {"TZ": "UTC"}},
            {"name": "temp", "executable": "temp.sh", "mode": "WaitForExit", "period": 5},
        ],
    )
    names = [job.name for job in policy.cron_jobs]
    assert names == ["test", "date", "foo", "temp"]
    date = policy.cron_jobs[1]
    assert (date.executable, date.period, dict(date.env)) == ("date.sh", 60, {"TZ": "UTC"})
    assert any(w.startswith("spec.cron[0] overrides") for w in policy.warnings)


def test_a_policy_without_cron_keeps_its_hash() -> None:
    assert "cron" not in render_policy(_compile())
    assert policy_hash(_compile()) != policy_hash(_compile(REFERENCE))


@pytest.mark.parametrize(
    ("snippet", "spec", "message"),
    [
        ("STARTD_CRON_JOBLIST = a\n", {}, "no STARTD_CRON_A_EXECUTABLE"),
        (
            "STARTD_CRON_JOBLIST = a\nSTARTD_CRON_A_EXECUTABLE = a\n",
            {},
            "needs STARTD_CRON_A_PERIOD",
        ),
        (
            "STARTD_CRON_JOBLIST = a\nSTARTD_CRON_A_EXECUTABLE = a\nSTARTD_CRON_A_PERIOD = 5d\n",
            {},
            "condorConfig line 3 (STARTD_CRON_A_PERIOD): '5d' is not a period",
        ),
        (
            _A + "STARTD_CRON_A_MODE = Sometimes\n",
            {},
            "'Sometimes' is not a mode; use Periodic, WaitForExit or OneShot",
        ),
        (
            _A + "STARTD_CRON_A_MODE = OnDemand\n",
            {},
            "OnDemand is the benchmark mechanism's mode",
        ),
        (
            "STARTD_CRON_JOBLIST = a\nSTARTD_CRON_A_EXECUTABLE = a\nSTARTD_CRON_A_PERIOD = 0\n",
            {},
            "shorter than the minimum period of 1 second",
        ),
        (
            "STARTD_CRON_JOBLIST = a\nSTARTD_CRON_A_EXECUTABLE = a\nSTARTD_CRON_A_MODE = OneShot\n"
            "STARTD_CRON_A_PREFIX = my-prefix\n",
            {},
            "'my-prefix' is not a prefix",
        ),
        (
            "STARTD_CRON_JOBLIST = a\nSTARTD_CRON_A_EXECUTABLE = a\nSTARTD_CRON_A_MODE = OneShot\n"
            "STARTD_CRON_A_CONDITION = TotalGPUs >\n",
            {},
            "STARTD_CRON_A_CONDITION",
        ),
        (
            "",
            {"cron": [{"name": "a", "executable": "a"}]},
            "spec.cron[0].period: a Periodic job needs",
        ),
        (
            "",
            {"cron": [{"name": "a", "executable": "a", "period": "10x"}]},
            "spec.cron[0].period: '10x' is not a period",
        ),
        ("STARTD_CRON_AUTOPUBLISH = Sometimes\n", {}, "is not Never, Always or If_Changed"),
    ],
)
def test_bad_jobs_are_refused_naming_the_field(
    snippet: str, spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(PolicyError) as raised:
        _compile(snippet, **spec)
    assert message in str(raised.value)


def test_knobs_without_effect_are_reported() -> None:
    policy = _compile(
        "STARTD_CRON_JOBLIST = a\nSTARTD_CRON_A_EXECUTABLE = a\nSTARTD_CRON_A_MODE = OneShot\n"
        "STARTD_CRON_A_PERIOD = 5m\nSTARTD_CRON_B_PERIOD = 5m\nSTARTD_CRON_CONFIG_VAL = x\n"
        "STARTD_CRON_AUTOPUBLISH = If_Changed\n"
    )
    assert policy.cron.autopublish is AutoPublish.IF_CHANGED
    warnings = "\n".join(policy.warnings)
    assert "line 4 (STARTD_CRON_A_PERIOD): a OneShot job has no period; ignored" in warnings
    assert "STARTD_CRON_B_PERIOD: it is not a knob of a job in STARTD_CRON_JOBLIST" in warnings
    assert "STARTD_CRON_CONFIG_VAL: there is no condor_config_val" in warnings


def test_the_gpus_feature_monitor_is_reported_and_not_run() -> None:
    policy = _compile("use feature : GPUs\n")
    assert policy.cron_jobs == ()
    assert any("use feature : GPUs" in w and "resource monitor" in w for w in policy.warnings)


def test_startd_cron_name_renames_the_knobs() -> None:
    policy = _compile(
        "STARTD_CRON_NAME = Hawkeye\nHAWKEYE_JOBLIST = n\nHAWKEYE_N_EXECUTABLE = n.sh\n"
        "HAWKEYE_N_PERIOD = 2h\n"
    )
    (job,) = policy.cron_jobs
    assert (job.name, job.period) == ("n", 7200)
    assert any("no longer supports STARTD_CRON_NAME" in w for w in policy.warnings)


@pytest.mark.parametrize(
    ("text", "seconds"), [("15s", 15), ("10m", 600), ("2h", 7200), ("30", 30), (" 5M ", 300)]
)
def test_periods(text: str, seconds: int) -> None:
    assert parse_period(text, field="p") == seconds


@pytest.mark.parametrize(
    ("text", "args"),
    [
        ("abc 123", ("abc", "123")),
        ("\"one 'two three' 'it''s'\"", ("one", "two three", "it's")),
        ('""', ()),
    ],
)
def test_arguments_v1_and_v2(text: str, args: tuple[str, ...]) -> None:
    assert parse_args(text, field="a") == args


def test_environment_v1_and_v2() -> None:
    assert parse_env("A=1;B=two", field="e") == {"A": "1", "B": "two"}
    assert parse_env("\"A=1 B='two words'\"", field="e") == {"A": "1", "B": "two words"}
    with pytest.raises(CronError, match="'oops' is not NAME=value"):
        parse_env("oops", field="e")


# -- the hooks directory at admission ------------------------------------------------------


@pytest.mark.parametrize(
    ("executable", "allowed"),
    [
        ("temp.sh", True),
        ("sensors/temp.sh", True),
        ("/etc/kondor/hooks/temp.sh", True),
        ("/usr/bin/date", False),
        ("../temp.sh", False),
        ("sensors/../../etc/passwd", False),
        ("/etc/kondor/hooks", False),
        ("/etc/kondor/hooks-other/x", False),
    ],
)
def test_admission_refuses_executables_outside_the_hooks_dir(
    executable: str, allowed: bool
) -> None:
    checked = check_policy({"cron": [{"name": "t", "executable": executable, "mode": "OneShot"}]})
    assert checked.valid is allowed
    if not allowed:
        (problem,) = checked.problems
        assert problem.startswith("spec.cron[0].executable: ")
        assert "outside the hooks directory /etc/kondor/hooks" in problem


def test_admission_names_the_snippet_line_and_takes_another_hooks_dir() -> None:
    spec = {"condorConfig": REFERENCE.replace("= date\n", "= /opt/bin/date\n")}
    (problem,) = check_policy(spec).problems
    assert problem.startswith("spec.condorConfig line 18 (STARTD_CRON_DATE_EXECUTABLE)")
    assert check_policy({"condorConfig": REFERENCE}).valid
    absolute = {"condorConfig": REFERENCE.replace("= date\n", "= /etc/kondor/hooks/date\n")}
    assert check_policy(absolute).valid
    assert not check_policy(absolute, hooks_dir="/srv/hooks").valid
