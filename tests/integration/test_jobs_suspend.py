"""Suspend in place (the reference's SUSPEND/CONTINUE, "Claimed/Suspended"): when the owner
comes back the running job's cgroup is frozen, not the job killed; when the owner leaves it
is thawed and goes on. The owner is made busy by editing the node's machine file
(KeyboardIdle), which the node's agent re-reads."""

from __future__ import annotations

import time
from collections.abc import Iterator
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

NODE = "desk-0"
POLICY = """POLLING_INTERVAL = 1
WANT_SUSPEND = True
SUSPEND = KeyboardIdle < 60
CONTINUE = KeyboardIdle >= 60
PREEMPT = False
"""


def machine(keyboard_idle: int) -> dict[str, Any]:
    return {
        "name": NODE,
        "cpus": 2,
        "memory": "4Gi",
        "disk": "10Gi",
        "labels": {"kondor.io/pool": "desk"},
        "attributes": {"OpSys": "LINUX", "KeyboardIdle": keyboard_idle},
    }


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path]]:
    reason = skip_reason() or _memory_limits_work()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("suspend")
    machine_file = tmp / f"{NODE}.yaml"
    machine_file.write_text(yaml.safe_dump(machine(3600)))
    policy = slot_policy("desk", {"kondor.io/pool": "desk"}, POLICY)
    with job_cluster(tmp, [machine_file], [policy]) as made:
        yield made, machine_file


def _count(path: Path) -> int:
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text.isdigit() else 0


def test_the_owner_back_freezes_the_job_and_gone_again_thaws_it(
    desk: tuple[Cluster, Path],
) -> None:
    cluster, machine_file = desk
    counter = "i=0; while true; do i=$((i+1)); echo $i > count; sleep 0.05; done"
    cluster.apply(process_job("counter", counter), user="alice")
    execution = eventually(
        lambda: (
            (e := cluster.job("counter")["status"].get("execution", {})).get("state") == "Running"
            and e
        ),
        20,
        "the counter Running",
    )
    count = Path(execution["directory"]) / "scratch" / "count"
    eventually(lambda: _count(count) > 5, 10, "the counter counting")

    machine_file.write_text(yaml.safe_dump(machine(0)))  # the owner is at the keyboard
    eventually(
        lambda: cluster.job("counter")["status"]["jobStatus"] == "Suspended", 20, "Suspended"
    )
    slot = execution["slot"]
    eventually(
        lambda: (
            (slot, "Claimed", "Suspended")
            in [
                (s["name"], s["state"], s["activity"])
                for s in cluster.get("executionpoints", NODE, None)["status"]["slots"]
            ]
        ),
        20,
        "the slot Claimed/Suspended",
    )
    frozen = _count(count)
    time.sleep(1.0)
    assert _count(count) == frozen  # frozen in place, not killed
    assert cluster.job("counter")["status"]["execution"]["state"] == "Suspended"

    machine_file.write_text(yaml.safe_dump(machine(3600)))  # the owner left
    eventually(
        lambda: cluster.job("counter")["status"]["jobStatus"] == "Running", 20, "Running again"
    )
    eventually(lambda: _count(count) > frozen + 5, 10, "the counter going on")
    assert cluster.job("counter")["status"]["numJobStarts"] == 1  # the same run, not a restart
    cluster.kubectl("kondor", "rm", "counter", user="alice")
    eventually(lambda: cluster.job("counter")["status"]["jobStatus"] == "Removed", 20, "Removed")
