"""The agent claims, runs and reports the jobs matched to its node (docs/jobs.md): a fake API
holds the ExecutionJobs and records the status patches, a fake launcher stands in for the
processes (`kondor_agent.execute` is tested with real ones)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest
from agent_fakes import EXAMPLES, FakeAPI, FakeClock, MachineBox, example_machine, load_yaml

from kondor_agent.execute.limits import ExecuteSettings, MemoryLimitPolicy
from kondor_agent.jobs import JobRunner, Outcome, Usage
from kondor_agent.kube import ConflictError
from kondor_agent.loop import Agent, AgentConfig
from kondor_agent.services import JobService
from kondor_core.api import ExecutionJob, JobExecution, PoolSpec
from kondor_core.api.meta import apply_merge_patch
from kondor_core.schedd.follow import follow
from kondor_core.slots import SlotAd

NODE = "node-a"


class JobsAPI(FakeAPI):
    """FakeAPI plus the node's ExecutionJobs."""

    synced = True

    def __init__(self) -> None:
        super().__init__()
        self.job_objects: dict[str, dict[str, Any]] = {}
        self.job_patches: list[tuple[str, dict[str, Any]]] = []
        self.version = 100
        self.conflicts = 0

    def jobs(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(job) for job in self.job_objects.values()]

    def patch_job_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        # As the API server: a patch naming a resourceVersion the job no longer has is
        # refused (409), and every write gives the job a new one.
        body = self.job_objects[f"{namespace}/{name}"]
        metadata = body.setdefault("metadata", {})
        guard = (patch.get("metadata") or {}).get("resourceVersion")
        if guard is not None and guard != metadata.get("resourceVersion"):
            self.conflicts += 1
            raise ConflictError(f"{name} changed meanwhile")
        body["status"] = apply_merge_patch(body.get("status", {}), patch.get("status", {}))
        self.version += 1
        metadata["resourceVersion"] = str(self.version)
        self.job_patches.append((name, copy.deepcopy(dict(patch))))

    def execution(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.job_objects[f"default/{name}"]["status"].get("execution", {})
        return found


class FakeLauncher:
    def __init__(self) -> None:
        self.launched: list[tuple[str, str, SlotAd]] = []
        self.outcomes: dict[str, Outcome] = {}
        self.signals: list[tuple[str, str]] = []
        self.removed: list[str] = []
        self.cleared = 0
        self.frozen: set[str] = set()
        self.configured: list[dict[str, str]] = []

    def configure(self, macros: Mapping[str, str]) -> None:
        self.configured.append(dict(macros))

    def launch(self, job: ExecutionJob, job_id: str, slot: SlotAd, job_ad_text: str) -> str:
        assert "JobUniverse = 5" in job_ad_text
        self.launched.append((job_id, slot.name, slot))
        return job_id

    def poll(self, handle: str) -> Outcome | None:
        return self.outcomes.pop(handle, None)

    def ended(self, handle: str) -> bool:
        return handle in self.outcomes

    def directory(self, handle: str) -> str:
        return f"/var/lib/kondor/execute/{handle.replace('/', '_')}"

    def soft_kill(self, handle: str, signal: str) -> None:
        self.signals.append((handle, signal))
        self.outcomes[handle] = Outcome(exit_signal=15)

    def hard_kill(self, handle: str) -> None:
        self.signals.append((handle, "SIGKILL"))
        self.outcomes[handle] = Outcome(exit_signal=9)

    def suspend(self, handle: str) -> None:
        self.signals.append((handle, "freeze"))
        self.frozen.add(handle)

    def resume(self, handle: str) -> None:
        self.signals.append((handle, "thaw"))
        self.frozen.discard(handle)

    def is_suspended(self, handle: str) -> bool:
        return handle in self.frozen

    def remove(self, handle: str) -> None:
        self.removed.append(handle)

    def clear(self) -> int:
        self.cleared += 1
        return 0


def matched(name: str, claim: str, slot: str = f"slot1@{NODE}", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionJob",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "resourceVersion": "1",
        },
        "spec": {
            "owner": "alice",
            "requestCpus": 1,
            "process": {"executable": "/bin/true"},
            **spec,
        },
        "status": {
            "jobStatus": "Idle",
            "clusterId": 7,
            "executionPoint": NODE,
            "slot": slot,
            "claimId": claim,
        },
    }


Node = tuple[JobsAPI, FakeClock, FakeLauncher, Agent]


def policy(name: str, condor_config: str) -> dict[str, Any]:
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "SlotPolicy",
        "metadata": {"name": name},
        "spec": {"condorConfig": condor_config},
    }


def start_node(slot_policy: dict[str, Any], machines: MachineBox | None = None) -> Node:
    """node-a under `slot_policy` with its agent, the fake API and launcher; slots Unclaimed."""
    api = JobsAPI()
    clock = FakeClock()
    api.clock = clock
    api.add_policy(slot_policy)
    api.add_execution_point(NODE, slot_policy["metadata"]["name"])
    launcher = FakeLauncher()
    agent = new_agent(api, clock, launcher, machines)
    agent.step()  # Owner -> Unclaimed
    return api, clock, launcher, agent


def new_agent(
    api: JobsAPI, clock: FakeClock, launcher: FakeLauncher, machines: MachineBox | None = None
) -> Agent:
    return Agent(
        AgentConfig(node_name=NODE, polling_interval=5.0),
        api,
        machines or MachineBox(example_machine("node-a.yaml")),
        live=lambda _now: {},
        clock=clock,
        services=[JobService(JobRunner(api, launcher, clock))],
    )


@pytest.fixture
def node() -> Node:
    return start_node(load_yaml(EXAMPLES / "policies" / "default.yaml"))


def _tick(agent: Agent, clock: FakeClock, seconds: float = 5.0) -> None:
    clock.now += seconds
    agent.wake()
    agent.step()


def _slots(api: JobsAPI) -> dict[str, tuple[str, str, int]]:
    return {
        s["name"].split("@")[0]: (s["state"], s["activity"], s["cpus"])
        for s in api.status(NODE)["slots"]
    }


def test_a_match_is_claimed_run_and_reported_until_it_exits(node: Any) -> None:
    api, clock, launcher, agent = node
    api.job_objects["default/hello"] = matched("hello", "uid-hello#1")
    _tick(agent, clock)
    assert [(j, s) for j, s, _ in launcher.launched] == [("default/hello", f"slot1_1@{NODE}")]
    running = api.execution("hello")
    assert running["state"] == "Running" and running["claimId"] == "uid-hello#1"
    assert running["slot"] == f"slot1_1@{NODE}"
    clock.now += 1
    agent.step()
    assert _slots(api)["slot1_1"][:2] == ("Claimed", "Busy")
    assert _slots(api)["slot1"][2] == 7  # one core carved out

    launcher.outcomes["default/hello"] = Outcome(exit_code=3, user_cpu=0.5, peak_memory_mib=12)
    clock.now += 0.2
    agent.step()  # the end is seen between polling ticks
    done = api.execution("hello")
    assert (done["state"], done["exitCode"], done["remoteUserCpu"]) == ("Exited", 3, 0.5)
    clock.now += 1
    agent.step()
    slots = _slots(api)
    assert "slot1_1" not in slots and slots["slot1"] == ("Unclaimed", "Idle", 8)
    assert launcher.removed == []  # the output stays until the job is deleted
    del api.job_objects["default/hello"]
    _tick(agent, clock)
    assert launcher.removed == ["default/hello"]


def test_the_agent_writes_its_answer_alone_and_the_schedd_follows_it(node: Any) -> None:
    # One writer per field: the agent reports (status.execution, nothing else,
    # no resourceVersion guard: no one else writes it); the operator's follow makes the
    # schedd's fields of each answer (JobStatus, NumJobStarts, ExitCode, ...).
    api, clock, launcher, agent = node
    api.job_objects["default/hello"] = matched("hello", "uid-hello#1")
    _tick(agent, clock)
    launcher.outcomes["default/hello"] = Outcome(exit_code=3)
    clock.now += 0.2
    agent.step()
    [(_, running), (_, exited)] = api.job_patches
    assert running == {"status": {"execution": running["status"]["execution"]}}
    assert running["status"]["execution"]["state"] == "Running"
    assert list(exited) == ["status"] and list(exited["status"]) == ["execution"]
    job = ExecutionJob.model_validate(api.job_objects["default/hello"])
    assert job.status is not None and job.status.job_status == "Idle"  # not the agent's
    change = follow(job, clock.now, PoolSpec())
    assert change is not None
    assert (change.status.job_status, change.status.exit_code) == ("Completed", 3)
    assert change.status.num_job_starts == 1


def test_the_startd_has_the_last_word(node: Any) -> None:
    api, clock, launcher, agent = node
    api.job_objects["default/big"] = matched("big", "uid-big#1", requestCpus=64)
    api.job_objects["default/lost"] = matched("lost", "uid-lost#1", slot="slot9@node-a")
    _tick(agent, clock)
    assert launcher.launched == []
    big = api.execution("big")
    assert big["state"] == "Rejected" and "not enough Cpus" in big["reason"]
    assert "no slot slot9@node-a" in api.execution("lost")["reason"]
    writes = len(api.job_patches)
    _tick(agent, clock)
    assert len(api.job_patches) == writes  # an answered claim is not tried again


def test_hold_releases_the_claim_and_kills_the_process(node: Any) -> None:
    api, clock, launcher, agent = node
    api.job_objects["default/hello"] = matched("hello", "uid-hello#1")
    _tick(agent, clock)
    api.job_objects["default/hello"]["spec"]["hold"] = True
    _tick(agent, clock)
    assert launcher.signals == [("default/hello", "SIGTERM")]
    clock.now += 0.2
    agent.step()
    assert api.execution("hello")["state"] == "Killed"
    _tick(agent, clock)
    assert _slots(api)["slot1"] == ("Unclaimed", "Idle", 8)


def test_a_deleted_job_is_killed_and_its_slot_freed(node: Any) -> None:
    api, clock, launcher, agent = node
    api.job_objects["default/hello"] = matched("hello", "uid-hello#1")
    _tick(agent, clock)
    del api.job_objects["default/hello"]
    _tick(agent, clock)
    assert launcher.signals == [("default/hello", "SIGTERM")]
    clock.now += 0.2
    agent.step()
    _tick(agent, clock)
    assert _slots(api)["slot1"] == ("Unclaimed", "Idle", 8)


def test_a_restarted_agent_vacates_the_jobs_it_no_longer_holds(node: Any) -> None:
    api, clock, launcher, _first = node
    assert launcher.cleared == 1  # what a previous agent left running is killed first
    running = matched("old", "uid-old#1")
    running["status"]["jobStatus"] = "Running"
    running["status"]["execution"] = {"claimId": "uid-old#1", "state": "Running"}
    finished = matched("done", "uid-done#1")
    finished["status"]["execution"] = {"claimId": "uid-done#1", "state": "Exited"}  # not yet
    # followed by the operator: still Idle, but its claim was answered
    api.job_objects["default/old"] = running
    api.job_objects["default/done"] = finished
    restarted = new_agent(api, clock, launcher)
    restarted.step()
    vacated = api.execution("old")
    assert (vacated["state"], vacated["reason"]) == (
        "Killed",
        "vacated: the node's agent restarted",
    )
    assert api.execution("done")["state"] == "Exited"  # ended jobs are left as they are
    assert launcher.launched == []  # an answered claim is not started again


def test_rank_preemption_kills_the_running_job_and_starts_the_preferred_one() -> None:
    """ "The RANK Expression": a Claimed slot whose RANK prefers a new job is preempted; the
    new claim waits until the old job is gone, then is activated (transition 23)."""
    api, clock, launcher, agent = start_node(
        policy("jones-first", 'NUM_SLOTS = 1\nNUM_CPUS = 1\nRANK = Owner == "jones"')
    )
    garrison = matched("garrison", "uid-garrison#1", owner="garrison")
    api.job_objects["default/garrison"] = garrison
    _tick(agent, clock)
    assert [j for j, _, _ in launcher.launched] == ["default/garrison"]
    garrison["status"]["jobStatus"] = "Running"  # as the operator follows it
    api.job_objects["default/jones"] = matched("jones", "uid-jones#1", owner="jones")
    for _ in range(4):
        _tick(agent, clock)
        clock.now += 0.2
        agent.step()
    assert ("default/garrison", "SIGTERM") in launcher.signals
    assert api.execution("garrison")["state"] == "Killed"
    assert [j for j, _, _ in launcher.launched] == ["default/garrison", "default/jones"]
    assert api.execution("jones")["state"] == "Running"


def test_a_suspended_job_thawed_behind_the_startd_s_back_is_frozen_again() -> None:
    """SUSPEND freezes; a freeze is re-checked every cycle (runtimes thaw cgroups during
    their own updates), and CONTINUE thaws for good."""
    desk = example_machine("node-a.yaml")  # KeyboardIdle 3600 among its facts
    machines = MachineBox(desk)

    def keyboard_idle(seconds: int) -> None:  # the machine file edited, as on the dev cluster
        facts = {**desk.attributes, "KeyboardIdle": seconds}
        machines.machine = desk.model_copy(update={"attributes": facts})

    suspending = "WANT_SUSPEND = True\nSUSPEND = KeyboardIdle < 60\n"
    suspending += "CONTINUE = KeyboardIdle >= 60\nPREEMPT = False\n"
    api, clock, launcher, agent = start_node(policy("desk", suspending), machines)
    api.job_objects["default/hello"] = matched("hello", "uid-hello#1")
    _tick(agent, clock)
    keyboard_idle(0)
    _tick(agent, clock)
    assert api.execution("hello")["state"] == "Suspended"
    assert launcher.signals == [("default/hello", "freeze")]
    launcher.frozen.clear()  # thawed by someone else
    _tick(agent, clock)
    assert launcher.signals[-1] == ("default/hello", "freeze")
    keyboard_idle(3600)
    _tick(agent, clock)
    assert api.execution("hello")["state"] == "Running"
    assert launcher.signals[-1] == ("default/hello", "thaw")
    _tick(agent, clock)
    assert launcher.signals[-1] == ("default/hello", "thaw")  # thawed for good


def test_the_policys_cgroup_knobs_reach_the_launcher_without_a_warning() -> None:
    """CGROUP_MEMORY_LIMIT_POLICY and DISABLE_SWAP_FOR_JOB, with HTCondor's names, are the
    launcher's settings when it starts a job; the compiler knows them (no warning)."""
    knobs = "CGROUP_MEMORY_LIMIT_POLICY = soft\nDISABLE_SWAP_FOR_JOB = True\n"
    knobs += "KONDOR_JOB_PIDS_MAX = 512\n"
    api, clock, launcher, agent = start_node(policy("limits", knobs))
    assert agent.startd is not None
    assert not [w for w in agent.startd.warnings if "CGROUP" in w or "SWAP" in w or "PIDS" in w]
    api.job_objects["default/hello"] = matched("hello", "uid-hello#1")
    _tick(agent, clock)
    assert [j for j, _, _ in launcher.launched] == ["default/hello"]
    configured = launcher.configured[-1]
    assert ExecuteSettings.from_macros(configured) == ExecuteSettings(
        memory_policy=MemoryLimitPolicy.SOFT, disable_swap=True, pids_max=512
    )


class AdoptingLauncher(FakeLauncher):
    """A launcher whose runs outlive the agent: it takes back the run a job's execution names."""

    def __init__(self) -> None:
        super().__init__()
        self.alive: set[str] = set()

    def adopt(self, job: ExecutionJob, execution: JobExecution) -> str | None:
        handle = f"{job.metadata.namespace}/{job.metadata.name}"
        return handle if handle in self.alive else None

    def clear(self) -> int:
        self.cleared += 1
        return 0


def test_a_restarted_agent_takes_back_running_jobs_and_reports_their_exit_once() -> None:
    """Jobs survive the agent: the restarted startd claims their slots anew and the launcher's
    handle is taken back, never launched again; an exit while it was down is reported once."""
    api = JobsAPI()
    clock = FakeClock()
    api.clock = clock
    api.add_policy(load_yaml(EXAMPLES / "policies" / "default.yaml"))
    api.add_execution_point(NODE, "default")
    launcher = AdoptingLauncher()
    for name in ("long", "ended", "unknown"):
        job = matched(name, f"uid-{name}#1")
        job["status"]["jobStatus"] = "Running"
        job["status"]["execution"] = {
            "claimId": f"uid-{name}#1",
            "state": "Running",
            "slot": f"slot1_1@{NODE}",
            "directory": f"/var/lib/kondor/execute/default.{name}.1",
            "startTime": "2026-01-01T00:00:00Z",
        }
        api.job_objects[f"default/{name}"] = job
    launcher.alive = {"default/long", "default/ended"}
    launcher.outcomes["default/ended"] = Outcome(exit_code=3)  # it ended while no agent ran
    agent = new_agent(api, clock, launcher)
    agent.step()
    clock.now += 0.2
    agent.step()  # the exit seen at once (the job-watch interval)
    assert launcher.launched == []  # never started twice
    assert api.execution("long")["state"] == "Running"
    assert api.execution("long")["startTime"] == "2026-01-01T00:00:00Z"
    assert (api.execution("ended")["state"], api.execution("ended")["exitCode"]) == ("Exited", 3)
    # No record of its run: vacated, as before.
    assert api.execution("unknown")["state"] == "Killed"
    patches = [name for name, _ in api.job_patches if name == "ended"]
    for _ in range(3):
        _tick(agent, clock)
    busy = [s for s in _slots(api).values() if s[:2] == ("Claimed", "Busy")]
    assert len(busy) == 1  # the long job's slot, claimed anew; the ended one's released
    assert [name for name, _ in api.job_patches if name == "ended"] == patches  # once
    launcher.outcomes["default/long"] = Outcome(exit_code=0)
    _tick(agent, clock)
    assert api.execution("long")["state"] == "Exited"
    assert launcher.launched == []


class MeasuringLauncher(FakeLauncher):
    def usage(self, handle: str) -> Usage | None:
        # The GPU figures as GpuWatch measures them from the recorded H100 under load
        # (tests/unit/agent/test_gpu_usage.py).
        gpus = {"GPUsUsage": 0.42, "GPUsMemoryUsage": 7108, "DeviceGPUsAverageUsage": 1.0}
        return Usage(
            user_cpu=1.5, sys_cpu=0.25, memory_mib=40, peak_memory_mib=64, num_pids=3, gpus=gpus
        )


class BusyLauncher(FakeLauncher):
    """A job that uses half a core: 2.5 CPU seconds more at every 5 s polling tick."""

    def __init__(self, clock: Any) -> None:
        super().__init__()
        self.clock = clock

    def usage(self, handle: str) -> Usage | None:
        cpu = (self.clock.now - 1000.0) * 0.5
        return Usage(user_cpu=cpu * 0.8, sys_cpu=cpu * 0.2, memory_mib=40, peak_memory_mib=64)


def test_a_busy_slots_ad_has_its_jobs_load_and_usage_as_htcondor_names_them(node: Any) -> None:
    """CondorLoadAvg of a slot is the load of its job's cgroup (cores over the last polling
    interval), with the job's RemoteUserCpu, RemoteSysCpu, ImageSize, MemoryUsage and
    ResidentSetSize; an idle slot has none of them."""
    api, clock, _launcher, _agent = node
    clock.now = 1000.0
    agent = Agent(
        AgentConfig(node_name=NODE, polling_interval=5.0),
        api,
        MachineBox(example_machine("node-a.yaml")),
        live=lambda _now: {"CondorLoadAvg": 0.0, "LoadAvg": 0.5},
        clock=clock,
        services=[JobService(JobRunner(api, BusyLauncher(clock), clock))],
    )
    agent.step()
    api.job_objects["default/hello"] = matched("hello", "uid-hello#1")
    _tick(agent, clock)
    _tick(agent, clock)
    _tick(agent, clock, 301)  # the usage is volatile: written with the next update (300 s)
    ads = {ad["Name"].split("@")[0]: ad for ad in api.slot_ads(NODE)}
    busy = ads["slot1_1"]
    assert busy["CondorLoadAvg"] == 0.5
    cpu = (clock.now - 1000.0) * 0.5
    assert (busy["RemoteUserCpu"], busy["RemoteSysCpu"]) == (
        round(cpu * 0.8, 2),
        round(cpu * 0.2, 2),
    )
    assert (busy["ImageSize"], busy["MemoryUsage"], busy["ResidentSetSize"]) == (
        64 * 1024,
        40,
        40 * 1024,
    )
    idle = [ad for name, ad in ads.items() if name != "slot1_1"]
    assert idle and all("RemoteUserCpu" not in ad for ad in idle)
    assert all(ad.get("CondorLoadAvg") == 0.0 for ad in idle)


def test_a_running_jobs_usage_is_written_every_usage_interval_with_htcondors_names(
    node: Any,
) -> None:
    api, clock, _launcher, _agent = node
    launcher = MeasuringLauncher()
    agent = Agent(
        AgentConfig(node_name=NODE, polling_interval=5.0),
        api,
        MachineBox(example_machine("node-a.yaml")),
        live=lambda _now: {},
        clock=clock,
        services=[JobService(JobRunner(api, launcher, clock, usage_interval=30.0))],
    )
    agent.step()
    api.job_objects["default/hello"] = matched("hello", "uid-hello#1")
    _tick(agent, clock)
    started = api.execution("hello")
    assert started["state"] == "Running" and "numPids" not in started
    assert started["jobCurrentStartExecutingDate"] == int(clock.now)
    _tick(agent, clock, 10)
    assert "numPids" not in api.execution("hello")  # not yet: every 30 s
    _tick(agent, clock, 25)
    measured = api.execution("hello")
    assert {k: measured[k] for k in ("remoteUserCpu", "remoteSysCpu", "numPids")} == {
        "remoteUserCpu": 1.5,
        "remoteSysCpu": 0.25,
        "numPids": 3,
    }
    assert (measured["memoryUsage"], measured["residentSetSize"], measured["imageSize"]) == (
        40,
        40 * 1024,
        64 * 1024,
    )
    assert (measured["gpusUsage"], measured["gpusMemoryUsage"]) == (0.42, 7108)
    assert measured["usageTime"]
