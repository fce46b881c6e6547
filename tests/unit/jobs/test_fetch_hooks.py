"""Fetch-work hooks in the core (`kondor_core.jobs.fetchwork`), from the reference's "Job Hooks
That Fetch Work": which slots fetch, FetchWorkDelay, whether a fetched job is taken, the
ExecutionJob it becomes, and which hook targets admission refuses."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from kondor_core.api import ExecutionJob
from kondor_core.classads import parse_ad
from kondor_core.cron import HookPathError
from kondor_core.fleet.policy import check_policy
from kondor_core.jobs.fetchwork import (
    DEFAULT_FETCH_WORK_DELAY,
    FetchedJobError,
    check_hook_target,
    fetch_decision,
    fetch_due,
    fetch_hooks,
    fetch_work_delay,
    fetched_job,
    fetched_keyword,
    reply_input,
)
from kondor_core.jobs.hooks import hook_timeout, job_hook_keyword
from kondor_operator.webhook import hook_checks

#: The manual's example: most slots use DATABASE, slot 4 uses WEB.
MANUAL = {
    "STARTD_JOB_HOOK_KEYWORD": "DATABASE",
    "SLOT4_JOB_HOOK_KEYWORD": "WEB",
    "DATABASE_HOOK_FETCH_WORK": "/usr/local/condor/fetch/database/fetch_work.php",
    "DATABASE_HOOK_REPLY_FETCH": "/usr/local/condor/fetch/database/reply_fetch.php",
    "WEB_HOOK_FETCH_WORK": "/usr/local/condor/fetch/web/fetch_work.php",
}


def ad(text: str) -> Any:
    return parse_ad(text, field="test")


def test_the_manuals_keywords_pick_each_slots_fetch_hooks() -> None:
    slot1 = fetch_hooks(MANUAL, 1, timeout=60)
    assert slot1 is not None and slot1.keyword == "DATABASE"
    assert set(slot1.programs) == {"FETCH_WORK", "REPLY_FETCH"}
    assert slot1.knob("REPLY_FETCH") == "DATABASE_HOOK_REPLY_FETCH"
    slot4 = fetch_hooks(MANUAL, 4, timeout=60)
    assert slot4 is not None and slot4.keyword == "WEB"
    assert slot4.program("REPLY_FETCH") is None  # "The web system only needs to fetch work."
    # The keyword is put in the job as HookKeyword: the starter's hooks follow it.
    assert job_hook_keyword(MANUAL, slot_id=4, job_hook_keyword=None, fetched=True) == "WEB"


def test_without_fetch_work_no_startd_hook_runs() -> None:
    # "the only hook that must be defined for any of the other condor_startd hooks to operate"
    macros = {"STARTD_JOB_HOOK_KEYWORD": "DB", "DB_HOOK_REPLY_FETCH": "reply.sh"}
    assert fetch_hooks(macros, 1, timeout=60) is None
    assert fetch_hooks({"DB_HOOK_FETCH_WORK": "fetch.sh"}, 1, timeout=60) is None  # no keyword


def test_a_hook_timeout_is_its_own_else_the_global_one() -> None:
    macros = {"KONDOR_JOB_HOOK_TIMEOUT": "30", "WEB_HOOK_FETCH_WORK_TIMEOUT": "5"}
    assert hook_timeout(macros, "WEB_HOOK_FETCH_WORK") == 5
    assert hook_timeout(macros, "WEB_HOOK_REPLY_FETCH") == 30
    assert hook_timeout({}, "WEB_HOOK_REPLY_FETCH") == 60


CLAIMED_IDLE = '[State = "Claimed"; Activity = "Idle"]'
MANUAL_DELAY = 'ifThenElse(State == "Claimed" && Activity == "Idle", 0, 300)'


@pytest.mark.parametrize(
    ("expression", "slot", "job", "seconds"),
    [
        (None, CLAIMED_IDLE, None, DEFAULT_FETCH_WORK_DELAY),  # "default to ... 300 second"
        ("", CLAIMED_IDLE, None, 300),
        (MANUAL_DELAY, CLAIMED_IDLE, None, 0),  # the manual's example
        (MANUAL_DELAY, '[State = "Claimed"; Activity = "Busy"]', None, 300),
        (MANUAL_DELAY, '[State = "Unclaimed"; Activity = "Idle"]', None, 300),
        # Against the running job too (TARGET).
        ("ifThenElse(TARGET.Short =?= true, 5, 60)", CLAIMED_IDLE, "[Short = true]", 5),
        ("ifThenElse(TARGET.Short =?= true, 5, 60)", CLAIMED_IDLE, None, 60),
        # No number of seconds: the default.
        ('"soon"', CLAIMED_IDLE, None, 300),
        ("-4", CLAIMED_IDLE, None, 300),
        ("NoSuchAttribute", CLAIMED_IDLE, None, 300),
    ],
)
def test_fetch_work_delay(
    expression: str | None, slot: str, job: str | None, seconds: float
) -> None:
    assert fetch_work_delay(expression, ad(slot), None if job is None else ad(job)) == seconds


def test_a_fetch_is_due_once_the_delay_has_passed_since_the_last_one() -> None:
    assert fetch_due(None, 300, 0)
    assert not fetch_due(100, 300, 399)
    assert fetch_due(100, 300, 400)


SLOT = """State = "{state}"
Activity = "{activity}"
Cpus = 1
Memory = 1024
Start = TARGET.Kind =!= "forbidden"
Rank = ifThenElse(TARGET.Urgent =?= true, 10, 0)
CurrentRank = {rank}
Machine = "node-0"
"""


def slot(state: str, activity: str = "Idle", rank: float = 0) -> Any:
    return ad(SLOT.format(state=state, activity=activity, rank=rank))


@pytest.mark.parametrize(
    ("the_slot", "job", "accept", "preempts", "why"),
    [
        (slot("Unclaimed"), "RequestCpus = 1", True, False, "Unclaimed and START"),
        (slot("Unclaimed"), 'Kind = "forbidden"', False, False, "START is not true"),
        (slot("Unclaimed"), "Requirements = TARGET.Cpus > 4", False, False, "Requirements"),
        (slot("Unclaimed"), "RequestCpus = 2", False, False, "RequestCpus 2 is more"),
        (slot("Unclaimed"), "RequestMemory = 4096", False, False, "RequestMemory 4096"),
        # Claimed: the slot's RANK of the fetched job against the running job's.
        (slot("Claimed", "Busy", 0), "Urgent = true", True, True, "(10) is above"),
        (slot("Claimed", "Busy", 0), "Urgent = false", False, False, "(0) is not above"),
        (slot("Claimed", "Busy", 10), "Urgent = true", False, False, "(10) is not above"),
        # "If the slot is unavailable for whatever reason, the condor_startd will refuse".
        (slot("Owner"), "RequestCpus = 1", False, False, "Owner/Idle"),
        (slot("Preempting", "Vacating"), "Urgent = true", False, False, "Preempting"),
        (slot("Drained", "Retiring"), "RequestCpus = 1", False, False, "Drained"),
        (slot("Claimed", "Suspended", 0), "Urgent = true", False, False, "Suspended"),
    ],
)
def test_fetch_decision(the_slot: Any, job: str, accept: bool, preempts: bool, why: str) -> None:
    decision = fetch_decision(the_slot, ad(job))
    assert (decision.accept, decision.preempts) == (accept, preempts)
    assert why in decision.reason
    assert decision.reply == ("accept" if accept else "reject")


def test_reply_fetch_gets_the_job_and_the_slot_separated_by_dashes() -> None:
    text = reply_input("WorkId = 1\n", 'Machine = "n"\n')
    job, slot_text = text.split("\n-----\n")
    assert ad(job)["WorkId"] == 1 and ad(slot_text)["Machine"] == "n"


FETCHED = """Cmd = "/bin/sh"
Arguments = "-c 'echo hi; sleep 1'"
Env = "A=1;B=two words"
Iwd = "/tmp"
Out = "out.txt"
Err = "err.txt"
RequestCpus = 2
RequestMemory = 64
RequestDisk = 10
Requirements = TARGET.Cpus >= 2
Rank = TARGET.Mips
JobPrio = 3
KillSig = 3
Owner = "mallory"
ClusterId = 99
WorkId = 7
Colour = "blue"
"""


def manifest(text: str = FETCHED, **kw: Any) -> dict[str, Any]:
    return fetched_job(ad(text), node="node-0", keyword="WEB", name="fetched-web-1", **kw)


def test_a_fetched_job_becomes_an_execution_job_pinned_to_its_node() -> None:
    made = manifest(execution_point_uid="uid-1", namespace="work")
    job = ExecutionJob.model_validate(made)  # the CRD's own model accepts it
    spec = job.spec
    assert spec.process is not None
    assert spec.process.executable == "/bin/sh"
    assert spec.process.arguments == ["-c", "echo hi; sleep 1"]
    assert spec.process.environment == {"A": "1", "B": "two words"}
    assert (spec.process.working_directory, spec.process.output, spec.process.error) == (
        "/tmp",
        "out.txt",
        "err.txt",
    )
    assert spec.request_cpus == 2
    assert spec.request_memory_mib == 64
    assert spec.request_disk_kib == 10 * 1024  # the manual: RequestDisk in Megabytes
    assert spec.requirements == '(Machine == "node-0") && (TARGET.Cpus >= 2)'
    assert (spec.rank, spec.priority, spec.kill_sig) == ("TARGET.Mips", 3, "SIGQUIT")
    # Other attributes kept; the schedd's (Owner, ClusterId) are not the hook's to set.
    assert spec.attributes == {"WorkId": "7", "Colour": '"blue"', "HookKeyword": '"WEB"'}
    assert job.metadata.namespace == "work"
    assert fetched_keyword(job.metadata.labels) == "WEB"
    assert job.metadata.labels["kondor.io/fetched-by"] == "node-0"
    owner = made["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("ExecutionPoint", "node-0", "uid-1")


def test_a_fetched_job_without_requirements_is_only_pinned() -> None:
    spec = manifest('Cmd = "/bin/true"')["spec"]
    assert spec["requirements"] == 'Machine == "node-0"'
    assert spec["process"] == {"executable": "/bin/true", "arguments": []}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("RequestCpus = 1", "Cmd: the job ad has no Cmd"),
        ('Cmd = "/bin/true"\nJobUniverse = 10', "JobUniverse = 10: Kondor runs vanilla (5)"),
        ("Cmd = 42", "Cmd = 42: expected a string"),
        ('Cmd = "/bin/true"\nRequestCpus = "two"', 'RequestCpus = "two": expected a number'),
        ('Cmd = "/bin/true"\nRequestMemory = -1', "RequestMemory = -1: expected a number"),
        ('Cmd = "/bin/true"\nEnv = "NOEQUALS"', "Env: 'NOEQUALS' is not NAME=value"),
        ('Cmd = "/bin/true"\nKillSig = 99', "KillSig = 99: not a signal number"),
        ('Cmd = "/bin/true"\nJobPrio = 1.5', "JobPrio = 1.5: expected an integer"),
        ('Cmd = "/bin/true"\nArguments = "a \'b"', "Arguments"),
    ],
)
def test_a_fetched_job_kondor_cannot_run_is_refused_naming_the_attribute(
    text: str, message: str
) -> None:
    with pytest.raises(FetchedJobError, match=None) as refused:
        manifest(text)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    "target",
    ["fetch.sh", "sub/fetch.sh", "/etc/kondor/hooks/fetch.sh", "http://work:8080/fetch",
     "https://work.example/fetch?pool=a", "HTTPS://work.example/x"],
)  # fmt: skip
def test_hook_targets_a_program_in_the_hooks_directory_or_an_http_url(target: str) -> None:
    check_hook_target(target, "/etc/kondor/hooks", field="K")


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("/usr/bin/fetch", "outside the hooks directory"),
        ("../fetch.sh", "outside the hooks directory"),
        ("ftp://work.example/fetch", "is a ftp:// URL"),
        ("file:///etc/passwd", "is a file:// URL"),
        ("gopher://x/", "is a gopher:// URL"),
        ("http:///fetch", "names no host"),
        ("", "the executable is empty"),
    ],
)
def test_bad_hook_targets_are_refused_naming_the_knob(target: str, message: str) -> None:
    with pytest.raises(HookPathError) as refused:
        check_hook_target(target, "/etc/kondor/hooks", field="WEB_HOOK_FETCH_WORK")
    assert str(refused.value).startswith("WEB_HOOK_FETCH_WORK")
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ("W_HOOK_FETCH_WORK = /usr/bin/fetch", "W_HOOK_FETCH_WORK = /usr/bin/fetch: '/usr/bin"),
        ("W_HOOK_EVICT_CLAIM = ftp://x/evict", "W_HOOK_EVICT_CLAIM = ftp://x/evict: 'ftp://x"),
        ("W_HOOK_PREPARE_JOB = http://x/prep", "W_HOOK_PREPARE_JOB = http://x/prep: a URL"),
        ("W_HOOK_FETCH_WORK_TIMEOUT = soon", "W_HOOK_FETCH_WORK_TIMEOUT = soon: expected"),
        ("FetchWorkDelay = 1 +", "FetchWorkDelay"),
    ],
)
def test_a_slot_policy_with_a_bad_fetch_hook_is_refused(config: str, problem: str) -> None:
    checked = check_policy({"nodeSelector": {}, "condorConfig": config})
    assert not checked.valid
    assert any(problem in p for p in checked.problems), checked.problems


def test_a_slot_policy_with_fetch_hooks_is_valid_without_warnings() -> None:
    config = (
        "STARTD_JOB_HOOK_KEYWORD = WEB\nWEB_HOOK_FETCH_WORK = https://work.example/fetch\n"
        "WEB_HOOK_REPLY_FETCH = reply.sh\nWEB_HOOK_EVICT_CLAIM = evict.sh\n"
        "WEB_HOOK_FETCH_WORK_TIMEOUT = 5\nFetchWorkDelay = " + MANUAL_DELAY + "\n"
        "KONDOR_FETCH_WORK_NAMESPACE = work\nKONDOR_HOOK_CA_FILE = /etc/kondor/ca.pem\n"
    )
    checked = check_policy({"nodeSelector": {}, "condorConfig": config})
    assert checked.valid, checked.problems
    assert checked.warnings == ()


def test_with_the_hooks_directory_at_hand_a_symlink_out_of_it_is_refused(tmp_path: Path) -> None:
    hooks, outside = tmp_path / "hooks", tmp_path / "outside"
    hooks.mkdir()
    outside.mkdir()
    (outside / "fetch.sh").write_text("#!/bin/sh\n")
    (hooks / "escape.sh").symlink_to(outside / "fetch.sh")
    (hooks / "fetch.sh").write_text("#!/bin/sh\n")
    (hooks / "inner.sh").symlink_to(hooks / "fetch.sh")  # a link that stays inside is fine
    checks = hook_checks({"KONDOR_HOOKS_DIR": str(hooks)})
    assert checks == {"hooks_dir": str(hooks), "resolve": os.path.realpath}
    config = (
        "W_HOOK_FETCH_WORK = inner.sh\nW_HOOK_EVICT_CLAIM = escape.sh\n"
        "W_HOOK_JOB_EXIT = escape.sh\nW_HOOK_REPLY_FETCH = not-there-yet.sh\n"
    )
    checked = check_policy({"nodeSelector": {}, "condorConfig": config}, **checks)
    assert sorted(checked.problems) == [
        f"spec.condorConfig: W_HOOK_EVICT_CLAIM = escape.sh: 'escape.sh' resolves to "
        f"{outside / 'fetch.sh'}, outside the hooks directory {hooks} (a symlink leads out of it)",
        f"spec.condorConfig: W_HOOK_JOB_EXIT = escape.sh: 'escape.sh' resolves to "
        f"{outside / 'fetch.sh'}, outside the hooks directory {hooks} (a symlink leads out of it)",
    ]
    # Without the directory at hand (no KONDOR_HOOKS_DIR) the check is lexical: the agent
    # refuses the symlink when it runs the hook.
    assert hook_checks({}) == {}
    assert check_policy({"nodeSelector": {}, "condorConfig": config}).valid


def test_the_example_fetch_work_policy_is_valid() -> None:
    path = Path(__file__).resolve().parents[3] / "examples" / "hooks" / "fetch-work.yaml"
    manifest = yaml.safe_load(path.read_text())
    checked = check_policy(manifest["spec"])
    assert checked.valid, checked.problems
    assert checked.warnings == ()
