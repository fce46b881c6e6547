"""One job identity: the negotiator's job ad, the startd's START re-check ad, the
`.job.ad` file the job reads and `kondor q -l` are one ad, `kondor_core.jobs.job_ad`.

Built from one state of the job, the four are equal, attribute for attribute. Built at
different moments of its life (unmatched, matched, running) they differ only in
`LIFE_ATTRIBUTES` (JobStatus, EnteredCurrentStatus, NumJobStarts, LastMatchTime, ...);
QDate, ClusterId, GlobalJobId, Owner and the rest are the same in all.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from agent_fakes import EXAMPLES, FakeClock, load_yaml

from kondor_cli import jobs as cli_jobs
from kondor_core import startd
from kondor_core.api import ExecutionJob, Machine, SlotPolicySpec, format_time
from kondor_core.config import compile_policy
from kondor_core.jobs import LIFE_ATTRIBUTES, global_job_id
from kondor_core.policy import Match
from kondor_core.schedd.identity import ad_of
from kondor_core.slots import SlotAd
from kondor_core.startd.claims import schedd_events

from .test_agent_jobs import NODE, FakeLauncher, JobsAPI, _tick, matched, new_agent

ROOT = Path(__file__).resolve().parents[3]
NOW = 1_800_000_000.0
CREATED = format_time(NOW - 600)


def attributes(text: str) -> dict[str, str]:
    """An ad in the old ClassAd form (`.job.ad`, `condor_q -l`), attribute -> expression."""
    pairs = (line.split(" = ", 1) for line in text.splitlines() if " = " in line)
    return {name: value for name, value in pairs}


def job_body(status: dict[str, Any] | None = None) -> dict[str, Any]:
    body = matched("sim", "uid-sim#1", requestCpus=1, requestMemory="512Mi")
    body["metadata"]["creationTimestamp"] = CREATED
    if status is not None:
        body["status"] = status
    return body


def negotiator_view(job: ExecutionJob) -> dict[str, str]:
    """The ad `schedd.plan_cycle` matches the job with."""
    return attributes(ad_of(job).printOld())


def start_view(job: ExecutionJob) -> dict[str, str]:
    """The ad the startd re-checks START and the resources against: the Match event's."""
    values = yaml.safe_load((ROOT / "examples/machines/node-a.yaml").read_text())
    machine = Machine.model_validate({**values, "name": NODE})
    node = startd.start(machine, compile_policy(SlotPolicySpec()), NOW)
    node = startd.tick(node, {}, NOW).startd
    said = schedd_events(node, [job], answered=set(), ended={})
    [match] = [e for events in said.events.values() for e in events if isinstance(e, Match)]
    return attributes(match.job_ad.printOld())


class RecordingLauncher(FakeLauncher):
    """Keeps the `.job.ad` text each job is launched with."""

    def __init__(self) -> None:
        super().__init__()
        self.job_ads: dict[str, str] = {}

    def launch(self, job: ExecutionJob, job_id: str, slot: SlotAd, job_ad_text: str) -> str:
        self.job_ads[job_id] = job_ad_text
        return super().launch(job, job_id, slot, job_ad_text)


def file_view(body: dict[str, Any]) -> dict[str, str]:
    """The `.job.ad` file the agent launches the matched job with."""
    api = JobsAPI()
    clock = FakeClock()
    api.clock = clock
    policy = load_yaml(EXAMPLES / "policies" / "default.yaml")
    api.add_policy(policy)
    api.add_execution_point(NODE, policy["metadata"]["name"])
    launcher = RecordingLauncher()
    agent = new_agent(api, clock, launcher)
    agent.step()
    api.job_objects["default/sim"] = copy.deepcopy(body)
    _tick(agent, clock)
    return attributes(launcher.job_ads["default/sim"])


def q_view(job: ExecutionJob) -> dict[str, str]:
    """`kondor q -l`'s ad of the job."""
    return attributes(cli_jobs.queue_ad(job).printOld())


def test_the_four_views_of_one_job_state_are_one_ad() -> None:
    body = job_body()
    job = ExecutionJob.model_validate(body)
    views = {
        "negotiator": negotiator_view(job),
        "START": start_view(job),
        ".job.ad": file_view(body),
        "q -l": q_view(job),
    }
    first = views["negotiator"]
    for name, view in views.items():
        assert view == first, name
    qdate = int(NOW - 600)
    assert first["QDate"] == str(qdate)
    assert first["ClusterId"] == "7" and first["ProcId"] == "0"
    assert first["GlobalJobId"] == f'"{global_job_id(7, qdate)}"' == f'"default#7.0#{qdate}"'
    assert first["Owner"] == '"alice"'
    assert first["EnteredCurrentStatus"] == str(qdate)  # Idle since it was queued
    assert first["JobStatus"] == "1"


def test_over_the_job_s_life_only_the_life_attributes_change() -> None:
    unmatched = job_body({"jobStatus": "Idle", "clusterId": 7})
    matched_now = job_body()
    running = job_body(
        {
            **matched_now["status"],
            "jobStatus": "Running",
            "enteredCurrentStatus": format_time(NOW),
            "numJobStarts": 1,
            "numJobMatches": 1,
            "matchTime": format_time(NOW - 5),
            "jobStartDate": format_time(NOW),
            "execution": {
                "claimId": "uid-sim#1",
                "state": "Running",
                "slot": f"slot1_1@{NODE}",
                "startTime": format_time(NOW),
                "peakMemory": 12,
            },
        }
    )
    views = {
        "negotiator": negotiator_view(ExecutionJob.model_validate(unmatched)),
        "START": start_view(ExecutionJob.model_validate(matched_now)),
        ".job.ad": file_view(matched_now),
        "q -l": q_view(ExecutionJob.model_validate(running)),
    }
    steady = {
        name: {key: value for key, value in view.items() if key not in LIFE_ATTRIBUTES}
        for name, view in views.items()
    }
    first = steady["negotiator"]
    for name, view in steady.items():
        assert view == first, name
    for key in ("QDate", "ClusterId", "GlobalJobId", "Owner", "RequestMemory", "Cmd"):
        assert key in first
    running_ad = views["q -l"]
    assert running_ad["JobStatus"] == "2" and running_ad["NumJobStarts"] == "1"
    assert running_ad["RemoteHost"] == f'"slot1_1@{NODE}"'
    assert running_ad["EnteredCurrentStatus"] == str(int(NOW))
    assert views["negotiator"]["EnteredCurrentStatus"] == str(int(NOW - 600))
