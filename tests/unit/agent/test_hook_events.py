"""The failures of a running job's UPDATE_JOB_INFO and JOB_EXIT hooks reach the ExecutionPoint
as Events: the launcher says them (`ReportingHooks`: the supervisor's `hook-failures` file for a
process job, the hooks' thread for a pod job), the agent's JobRunner passes each on once, named
after the job, to `on_hook_failure` (the fetch-work Event poster, rationed), while the job runs
and once it has ended; a PREPARE_JOB hold is one too."""

from __future__ import annotations

from typing import Any

from agent_fakes import EXAMPLES, load_yaml
from test_agent_jobs import NODE, FakeLauncher, JobsAPI, _tick, matched, start_node

from kondor_agent.jobs import Outcome, RuntimeLaunchers
from kondor_agent.services import JobService
from kondor_core.api import ExecutionJob
from kondor_core.slots import SlotAd


class ReportingLauncher(FakeLauncher):
    def __init__(self) -> None:
        super().__init__()
        self.failures: dict[str, list[tuple[str, str]]] = {}

    def hook_failures(self, handle: str) -> list[tuple[str, str]]:
        return self.failures.pop(handle, [])


def _node() -> tuple[JobsAPI, Any, ReportingLauncher, Any, list[tuple[str, str]]]:
    api, clock, _plain, agent = start_node(load_yaml(EXAMPLES / "policies" / "default.yaml"))
    launcher = ReportingLauncher()
    jobs = agent.service(JobService)
    assert jobs is not None
    jobs.runner.launcher = launcher
    said: list[tuple[str, str]] = []
    jobs.runner.on_hook_failure = lambda reason, message: said.append((reason, message))
    return api, clock, launcher, agent, said


def test_hook_failures_become_events_named_after_the_job_once_each() -> None:
    api, clock, launcher, agent, said = _node()
    api.job_objects["default/hello"] = matched("hello", "uid-hello#1")
    _tick(agent, clock)
    assert launcher.launched
    launcher.failures["default/hello"] = [("UpdateJobInfoFailed", "X_HOOK_UPDATE_JOB_INFO exited")]
    _tick(agent, clock)
    _tick(agent, clock)
    assert said == [("UpdateJobInfoFailed", "default/hello: X_HOOK_UPDATE_JOB_INFO exited")]
    # JOB_EXIT's failure is recorded before the end: reported with it.
    launcher.failures["default/hello"] = [("JobExitFailed", "X_HOOK_JOB_EXIT ran too long")]
    launcher.outcomes["default/hello"] = Outcome(exit_code=0)
    clock.now += 0.2
    agent.step()
    assert said[-1] == ("JobExitFailed", "default/hello: X_HOOK_JOB_EXIT ran too long")
    assert api.execution("hello")["state"] == "Exited"


def test_a_prepare_job_hold_is_an_event_too() -> None:
    api, clock, launcher, agent, said = _node()
    api.job_objects["default/held"] = matched("held", "uid-held#1")
    _tick(agent, clock)
    launcher.outcomes["default/held"] = Outcome(hold_reason="no licence", hold_reason_code=19)
    clock.now += 0.2
    agent.step()
    assert said == [("PrepareJobFailed", "default/held: no licence")]
    assert api.execution("held")["holdReasonCode"] == 19


def test_runtime_launchers_ask_the_launcher_that_ran_the_job() -> None:
    launcher = ReportingLauncher()
    launcher.failures["default/p"] = [("JobExitFailed", "m")]
    both = RuntimeLaunchers(process=FakeLauncher(), pod=launcher)
    job = ExecutionJob.model_validate(
        {"metadata": {"name": "p", "namespace": "default"}, "spec": {"pod": {"template": {}}}}
    )
    handle = both.launch(job, "default/p", SlotAd(f"slot1@{NODE}", {}, frozenset()),
                         "JobUniverse = 5")  # fmt: skip
    handle_of_process = both.launch(
        ExecutionJob.model_validate(matched("q", "c")), "default/q", SlotAd("s", {}, frozenset()),
        "JobUniverse = 5",
    )  # fmt: skip
    assert both.hook_failures(handle) == [("JobExitFailed", "m")]
    assert both.hook_failures(handle) == []
    assert both.hook_failures(handle_of_process) == []  # a launcher that says none
