"""Jobs survive the agent (DESIGN "Running a job on the node"): `kill -9` of a node's agent
during a 20 s job leaves the job running under its detached supervisor; the restarted agent
takes it back (the same run: one start, one directory), and it completes with its exit code;
a job that finished while no agent ran is reported when the agent is back. The dev cluster
restarts a dead agent as a DaemonSet would."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kondor_devcluster.cluster import running_pids
from kondor_devcluster.components import Layout
from kondor_devcluster.kondor import agent_name

from .conftest import skip_reason
from .test_jobs_end_to_end import Cluster, eventually, job_cluster, process_job, slot_policy

NODE = "survivor-0"
MACHINE = {
    "name": NODE,
    "cpus": 2,
    "memory": "4Gi",
    "disk": "10Gi",
    "labels": {"kondor.io/pool": "survivor"},
    "attributes": {"OpSys": "LINUX"},
}

Survivor = tuple[Cluster, Path, Path]


@pytest.fixture(scope="module")
def survivor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Survivor]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("survive")
    machine = tmp / f"{NODE}.yaml"
    machine.write_text(yaml.safe_dump(MACHINE))
    policy = slot_policy("survivor", {"kondor.io/pool": "survivor"}, "POLLING_INTERVAL = 1\n")
    with job_cluster(tmp, [machine], [policy]) as made:
        yield made, tmp / "state", machine


def _agent_pid(state: Path) -> int | None:
    for name, pid, _binary in running_pids(Layout(state)):
        if name == agent_name(NODE):
            return pid
    return None


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _restarted(state: Path, killed: int) -> int | None:
    pid = _agent_pid(state)
    return pid if pid is not None and pid != killed else None


def _job(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.job(name)


def _running(cluster: Cluster, name: str) -> dict[str, Any] | None:
    execution: dict[str, Any] = _job(cluster, name)["status"].get("execution", {})
    if execution.get("state") != "Running":
        return None
    return execution if (Path(execution["directory"]) / "job.pid").exists() else None


def _completed(cluster: Cluster, name: str) -> dict[str, Any] | None:
    job = _job(cluster, name)
    return job if job["status"]["jobStatus"] == "Completed" else None


def test_kill_9_of_the_agent_leaves_the_job_running_and_its_exit_reported_once(
    survivor: Survivor,
) -> None:
    cluster, state, _machine = survivor
    go = state.parent / "go"
    cluster.apply(process_job("long", "echo start; sleep 20; echo done; exit 7"), user="alice")
    # Ends when told: while no agent runs.
    short_job = f"while [ ! -e {go} ]; do sleep 0.05; done; echo short; exit 5"
    cluster.apply(process_job("short", short_job), user="alice")
    long = eventually(lambda: _running(cluster, "long"), 30, "the 20 s job Running")
    short_run = eventually(lambda: _running(cluster, "short"), 30, "the short job Running")
    short_dir = Path(short_run["directory"])
    job_pid = int((Path(long["directory"]) / "job.pid").read_text())

    agent = _agent_pid(state)
    assert agent is not None
    os.kill(agent, signal.SIGKILL)
    eventually(lambda: not _alive(agent), 5, "the agent gone")
    go.touch()  # the short job ends now, before a new agent has even imported its modules
    eventually((short_dir / "exit.json").exists, 5, "the short job ended")
    # Nobody said otherwise: the agent's last word is still Running (the operator may not have
    # followed it to jobStatus Running yet, but nothing says the job ended).
    status = _job(cluster, "short")["status"]
    assert status["execution"]["state"] == "Running" and status["jobStatus"] != "Completed"
    assert _alive(job_pid), "the job died with its agent"

    eventually(lambda: _restarted(state, agent), 20, "a new agent")
    short = eventually(lambda: _completed(cluster, "short"), 30, "the short job reported")
    assert short["status"]["exitCode"] == 5
    assert short["status"]["numJobStarts"] == 1
    assert _alive(job_pid)
    taken_back = eventually(lambda: _running(cluster, "long"), 20, "the long job taken back")
    assert taken_back["directory"] == long["directory"]
    done = eventually(lambda: _completed(cluster, "long"), 40, "the long job Completed")
    status = done["status"]
    assert status["exitCode"] == 7
    assert status["numJobStarts"] == 1  # the same run: never started twice
    assert status["execution"]["directory"] == long["directory"]
    scratch = Path(long["directory"]) / "scratch"
    assert (scratch / "out.txt").read_text() == "start\ndone\n"
    assert sorted(p.name for p in Path(long["directory"]).parent.iterdir()) == [
        "default.long.1",
        "default.short.1",
    ]
