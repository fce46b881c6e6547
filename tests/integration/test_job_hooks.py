"""Job hooks on the dev cluster (the reference's "Job Hooks That Modify and Monitor
Execution"): a SlotPolicy names PREPARE_JOB, UPDATE_JOB_INFO and JOB_EXIT under a keyword,
jobs choose it with their HookKeyword, and the node's agent runs the scripts from its hooks
directory (`--hooks-dir`, `<state>/hooks` for every agent of the dev cluster)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kondor_core.classads import parse_ad
from kondor_devcluster import kondor
from kondor_devcluster.components import Layout

from .conftest import MACHINES, skip_reason
from .test_jobs_end_to_end import Cluster, eventually, job_cluster, process_job, slot_policy

NODE = "kwok-small-0"
POLICY = """POLLING_INTERVAL = 1
STARTER_INITIAL_UPDATE_INTERVAL = 1
STARTER_UPDATE_INTERVAL = 1
TEST_HOOK_PREPARE_JOB = prepare.sh
TEST_HOOK_UPDATE_JOB_INFO = update.sh
TEST_HOOK_JOB_EXIT = exit.sh
"""

PREPARE = """#!/bin/sh
ad=$(cat)
case "$ad" in
*"HoldMe = true"*)
    echo 'HookStatusCode = 150'
    echo 'HookStatusMessage = "no licence for this job"'
    ;;
*"RequeueOnce = true"*)
    # The first time, back to Idle (300); the next claim runs it.
    # The hook runs as the job's user (never root): its mark goes where that user may write.
    if [ -e "@MARKS@/requeued" ]; then
        echo "Arguments = \\"-c 'echo second try'\\""
    else
        touch "@MARKS@/requeued"
        echo 'HookStatusCode = 300'
        echo 'HookStatusMessage = "not now"'
    fi
    ;;
*)
    echo "Arguments = \\"-c 'echo rewritten; sleep 2.5'\\""
    ;;
esac
"""
UPDATE = '#!/bin/sh\ncat > "$_CONDOR_SCRATCH_DIR/update-$(date +%s%N)"\n'
EXIT = (
    '#!/bin/sh\necho "$1" > "$_CONDOR_SCRATCH_DIR/exit-how"\ncat > "$_CONDOR_SCRATCH_DIR/exit-ad"\n'
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("hooks")
    hooks = kondor.hooks_dir(Layout(tmp / "state"))
    hooks.mkdir(parents=True)
    marks = tmp / "hook-marks"
    marks.mkdir()
    marks.chmod(0o1777)
    for name, text in (("prepare.sh", PREPARE), ("update.sh", UPDATE), ("exit.sh", EXIT)):
        (hooks / name).write_text(text.replace("@MARKS@", str(marks)))
        (hooks / name).chmod(0o755)
    policy = slot_policy("hooks", {"kondor.io/pool": "cpu"}, POLICY)
    with job_cluster(tmp, [MACHINES / "kwok-small.yaml"], [policy]) as made:
        yield made


def test_hooks_prepare_update_and_see_the_exit_of_a_job(cluster: Cluster) -> None:
    job = process_job("hooked", "echo original", attributes={"HookKeyword": '"TEST"'})
    cluster.apply(job, user="alice")
    done = eventually(
        lambda: (j := cluster.job("hooked"))["status"]["jobStatus"] == "Completed" and j,
        40,
        "the hooked job Completed",
    )
    scratch = Path(done["status"]["execution"]["directory"]) / "scratch"
    # PREPARE_JOB's Arguments changed what ran.
    assert (scratch / "out.txt").read_text() == "rewritten\n"
    # UPDATE_JOB_INFO ran after 1 s and then every second of the 2.5 s job.
    updates = sorted(scratch.glob("update-*"))
    assert len(updates) >= 2, updates
    ad = parse_ad(updates[0].read_text(), field="update")
    assert ad["JobState"] == "Running" and ad["NumPids"] >= 1 and ad["JobPid"] > 0
    for attribute in ("JobStartDate", "RemoteSysCpu", "RemoteUserCpu", "ImageSize"):
        assert attribute in ad, attribute
    # STARTER_INITIAL_UPDATE_INTERVAL (1 s) after the start, then every STARTER_UPDATE_INTERVAL
    # (1 s): the hook's own clock (its file names) against JobStartDate (whole seconds).
    times = [int(path.name.removeprefix("update-")) / 1e9 for path in updates]
    assert 0.0 <= times[0] - ad["JobStartDate"] < 3.0, (times[0], ad["JobStartDate"])
    # A late run does not move the schedule: the mean gap is the interval.
    mean = (times[-1] - times[0]) / (len(times) - 1)
    assert 0.7 < mean < 1.6, times
    # JOB_EXIT saw the exit.
    assert (scratch / "exit-how").read_text() == "exit\n"
    exit_ad = parse_ad((scratch / "exit-ad").read_text(), field="exit")
    assert exit_ad["ExitCode"] == 0 and exit_ad["ExitBySignal"] is False


def test_prepare_job_status_150_holds_the_job_with_its_message(cluster: Cluster) -> None:
    job = process_job(
        "hook-held", "touch ran", attributes={"HookKeyword": '"TEST"', "HoldMe": "true"}
    )
    cluster.apply(job, user="alice")
    held = eventually(
        lambda: (j := cluster.job("hook-held"))["status"]["jobStatus"] == "Held" and j,
        30,
        "the job Held by PREPARE_JOB",
    )
    assert held["status"]["holdReason"] == "no licence for this job"
    assert held["status"]["holdReasonCode"] == 19
    scratch = Path(held["status"]["execution"]["directory"]) / "scratch"
    assert not (scratch / "ran").exists()
    # The hook's failure is an Event on the ExecutionPoint too.
    selector = f"involvedObject.name={NODE},reason=PrepareJobFailed"

    def events() -> list[dict[str, Any]]:
        listed = cluster.kubectl("get", "events", "-n", "default", "--field-selector", selector,
                                 "-o", "json")  # fmt: skip
        found: list[dict[str, Any]] = json.loads(listed)["items"]
        return found

    event = eventually(events, 15, "a PrepareJobFailed Event")[0]
    assert event["involvedObject"]["kind"] == "ExecutionPoint" and event["type"] == "Warning"
    assert event["message"] == "default/hook-held: no licence for this job"


@pytest.mark.parametrize(("field", "how"), [("remove", "remove"), ("hold", "hold")])
def test_job_exit_is_told_why_the_agent_ended_the_job(
    cluster: Cluster, field: str, how: str
) -> None:
    name = f"hooked-{field}"
    job = process_job(name, "exec sleep 300", attributes={"HookKeyword": '"TEST"'})
    cluster.apply(job, user="alice")
    execution = eventually(
        lambda: (
            (e := cluster.job(name)["status"].get("execution", {})).get("state") == "Running" and e
        ),
        30,
        f"{name} Running",
    )
    scratch = Path(execution["directory"]) / "scratch"
    # Running after PREPARE_JOB: its first update has come.
    eventually(lambda: list(scratch.glob("update-*")), 15, "an UPDATE_JOB_INFO")
    patch = f'{{"spec": {{"{field}": true}}}}'
    cluster.kubectl(
        "patch",
        "executionjob",
        name,
        "-n",
        "default",
        "--type",
        "merge",
        "-p",
        patch,
        user="alice",
    )
    # The supervisor records the result only once JOB_EXIT has returned.
    eventually((scratch.parent / "exit.json").exists, 30, "the job's result")
    assert (scratch / "exit-how").read_text() == f"{how}\n"
    exit_ad = parse_ad((scratch / "exit-ad").read_text(), field="exit")
    assert exit_ad["ExitBySignal"] is True and exit_ad["ExitSignal"] in (9, 15)


def test_prepare_job_status_300_returns_the_job_to_idle_and_it_runs_again(
    cluster: Cluster,
) -> None:
    attributes = {"HookKeyword": '"TEST"', "RequeueOnce": "true"}
    job = process_job("hook-requeued", "echo original", attributes=attributes)
    cluster.apply(job, user="alice")
    done = eventually(
        lambda: (j := cluster.job("hook-requeued"))["status"]["jobStatus"] == "Completed" and j,
        40,
        "the requeued job Completed on its next claim",
    )
    status = done["status"]
    assert status.get("holdReason") is None
    scratch = Path(status["execution"]["directory"]) / "scratch"
    assert (scratch / "out.txt").read_text() == "second try\n"
    # Its first claim's run went back to Idle: the job was vacated once (LastVacateTime).
    assert status.get("lastVacateTime")


BAD_CRONTABS = [
    ("minute-61", "cronMinute", 61, "cronMinute '61': 61 is outside 0-59"),
    ("step-0", "cronMinute", "*/0", "a step must be 1 or more"),
    ("empty-entry", "cronHour", "1,,2", "empty list entry"),
]


@pytest.mark.parametrize(
    ("case", "field", "value", "says"), BAD_CRONTABS, ids=[c[0] for c in BAD_CRONTABS]
)
def test_a_bad_crontab_is_refused_at_apply_naming_field_and_value(
    cluster: Cluster, case: str, field: str, value: object, says: str
) -> None:
    job = process_job(f"bad-cron-{case}", "true", **{field: value})
    with pytest.raises(AssertionError) as refused:
        cluster.apply(job, user="alice")
    assert "denied the request" in str(refused.value)
    assert says in str(refused.value)
    with pytest.raises(AssertionError, match="NotFound"):
        cluster.job(f"bad-cron-{case}")
