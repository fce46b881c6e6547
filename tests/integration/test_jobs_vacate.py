"""PREEMPT vacates (the reference's "Claimed/Preempting/Vacating", MachineMaxVacateTime): when
the owner comes back to desk-0 its running jobs get their KillSig; the one that traps it writes
a marker and exits, the one that ignores it is killed when MachineMaxVacateTime runs out.
Either way nothing of the job is left on desk-0 (no process, no cgroup), and the job is Idle
again and runs to completion on desk-1, where the owner has left. A job that double-forks a
daemon and exits leaves nothing running either."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import skip_reason
from .test_jobs_end_to_end import (
    Cluster,
    _memory_limits_work,
    eventually,
    job_cluster,
    process_job,
    slot_policy,
)

VACATE_TIME = 3
POLICY = f"""POLLING_INTERVAL = 1
START = KeyboardIdle >= 60
WANT_SUSPEND = False
WANT_VACATE = True
PREEMPT = KeyboardIdle < 60
KILL = False
MAXJOBRETIREMENTTIME = 0
MachineMaxVacateTime = {VACATE_TIME}
"""
#: Trapping the KillSig: a marker, then a clean exit; left alone it ends by itself. The marker
#: goes to a directory of the test's: desk-0 deletes the job's directory once it is matched away.
TRAPPER = "trap 'echo vacated > {witness}/marker; exit 0' TERM; sleep 8 & wait $!; echo done"
#: Ignoring it (as its children do): only the hard kill ends it.
IGNORER = "trap '' TERM; sleep 8; echo done"
#: A daemon in a session of its own, its parent gone: only the cgroup still holds it.
DAEMON = "(setsid sh -c 'echo $$ > daemon.pid; exec sleep 300' &); sleep 0.5; echo started"


def machine(name: str, keyboard_idle: int) -> dict[str, Any]:
    return {
        "name": name,
        "cpus": 2,
        "memory": "4Gi",
        "disk": "10Gi",
        "labels": {"kondor.io/pool": "vacate"},
        "attributes": {"OpSys": "LINUX", "KeyboardIdle": keyboard_idle},
    }


Desks = tuple[Cluster, dict[str, Path], Path]


@pytest.fixture(scope="module")
def desks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desks]:
    reason = skip_reason() or _memory_limits_work()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("vacate")
    files = {name: tmp / f"{name}.yaml" for name in ("desk-0", "desk-1")}
    owner_away(files["desk-0"])
    owner_back(files["desk-1"])
    policy = slot_policy("vacate", {"kondor.io/pool": "vacate"}, POLICY)
    with job_cluster(tmp, list(files.values()), [policy]) as made:
        yield made, files, tmp


def owner_away(path: Path) -> None:
    path.write_text(yaml.safe_dump(machine(path.stem, 3600)))


def owner_back(path: Path) -> None:
    path.write_text(yaml.safe_dump(machine(path.stem, 0)))


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


@dataclass(frozen=True)
class OnNode:
    """What a running job has on its node: its processes and its cgroup in each hierarchy."""

    pids: tuple[int, ...]
    cgroups: tuple[Path, ...]

    @classmethod
    def of(cls, directory: Path) -> OnNode:
        spec = json.loads((directory / "spec.json").read_text())
        cgroups = tuple(Path(path).parent for path in spec["job_procs"])
        pids = {int(w) for path in spec["job_procs"] for w in Path(path).read_text().split()}
        return cls(tuple(sorted(pids)), cgroups)

    def left(self) -> list[str]:
        """What is still there: live processes, cgroups."""
        gone = [f"cgroup {d}" for d in self.cgroups if d.exists()]
        return gone + [f"process {pid}" for pid in self.pids if not _gone(pid)]


def _running(cluster: Cluster, name: str) -> tuple[dict[str, Any], OnNode]:
    """The job's execution once it runs, and what it has on the node (its shell and sleep)."""
    found: dict[str, Any] = eventually(
        lambda: (
            (e := cluster.job(name)["status"].get("execution", {})).get("state") == "Running"
            and len(OnNode.of(Path(e["directory"])).pids) >= 2
            and e
        ),
        30,
        f"{name} Running",
    )
    return found, OnNode.of(Path(found["directory"]))


def _vacated(cluster: Cluster, name: str, claim_id: str) -> dict[str, Any] | None:
    """The execution of `claim_id` once it ended Killed (vacated), else None."""
    execution: dict[str, Any] = cluster.job(name)["status"].get("execution", {})
    if execution.get("claimId") == claim_id and execution.get("state") == "Killed":
        return execution
    return None


def _completed(cluster: Cluster, name: str) -> dict[str, Any] | None:
    job = cluster.job(name)
    return job if job["status"]["jobStatus"] == "Completed" else None


def _nothing_left(on_node: OnNode) -> bool:
    return not on_node.left()


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_a_double_forked_daemon_dies_with_its_job(desks: Desks) -> None:
    cluster, _files, _tmp = desks
    cluster.apply(process_job("daemon", DAEMON), user="alice")
    done = eventually(
        lambda: (j := cluster.job("daemon"))["status"]["jobStatus"] == "Completed" and j,
        30,
        "the daemon's job Completed",
    )
    directory = Path(done["status"]["execution"]["directory"])
    assert (directory / "scratch" / "out.txt").read_text() == "started\n"
    daemon = int((directory / "scratch" / "daemon.pid").read_text())
    spec = json.loads((directory / "spec.json").read_text())
    left = OnNode((daemon,), tuple(Path(path).parent for path in spec["job_procs"]))
    eventually(lambda: left.left() == [], 10, "nothing of the job left")


def test_preempt_vacates_with_killsig_then_kills_after_machine_max_vacate_time(
    desks: Desks,
) -> None:
    cluster, files, tmp = desks
    witness = tmp / "witness"
    witness.mkdir()
    witness.chmod(0o1777)  # the job, never root (its slot's user), writes its marker here
    cluster.apply(process_job("trapper", TRAPPER.format(witness=witness)), user="alice")
    cluster.apply(process_job("ignorer", IGNORER), user="alice")
    running = {name: _running(cluster, name) for name in ("trapper", "ignorer")}
    first = {name: execution for name, (execution, _) in running.items()}
    assert {cluster.job(n)["status"]["executionPoint"] for n in first} == {"desk-0"}

    owner_back(files["desk-0"])  # PREEMPT on desk-0
    owner_away(files["desk-1"])  # and START on desk-1
    back = time.time()
    ended = {
        name: eventually(partial(_vacated, cluster, name, execution["claimId"]), 30, name)
        for name, execution in first.items()
    }
    assert (witness / "marker").read_text() == "vacated\n"
    assert (ended["trapper"].get("exitCode"), ended["trapper"].get("exitSignal")) == (0, None)
    assert ended["ignorer"]["exitSignal"] == 9
    # Hard-killed only once MachineMaxVacateTime ran out (times are whole seconds).
    assert _epoch(ended["ignorer"]["endTime"]) >= back + VACATE_TIME - 1.5
    assert _epoch(ended["trapper"]["endTime"]) < back + VACATE_TIME
    for name, (_, on_node) in running.items():
        eventually(partial(_nothing_left, on_node), 10, f"nothing of {name} left")

    for name in first:
        done = eventually(partial(_completed, cluster, name), 40, f"{name} Completed elsewhere")
        status = done["status"]
        assert status["executionPoint"] == "desk-1"
        assert status["exitCode"] == 0
        assert status["numJobStarts"] == 2
        out = Path(status["execution"]["directory"]) / "scratch" / "out.txt"
        assert out.read_text() == "done\n"
