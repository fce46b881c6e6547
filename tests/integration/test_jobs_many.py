"""Forty one-core jobs from alice onto three nodes with eight one-core slots in all (issue 10):
never more than eight run at once, none runs twice, all end Completed; a job whose
Requirements no slot meets stays Idle; a job a slot's START refuses never runs there. The jobs
are real processes that log their start and end, so the overlap is measured, not assumed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .conftest import skip_reason
from .test_jobs_end_to_end import Cluster, eventually, job_cluster, process_job, slot_policy

# The module's cluster (operator, agent, policies) starts within the first test's time, and on a
# loaded machine (pytest -n) start and forty jobs have taken over 60 s.
pytestmark = pytest.mark.timeout(180)

SLOTS = 8
POLICY = "SLOT_TYPE_1 = cpus=1\nNUM_SLOTS_TYPE_1 = $(NUM_CPUS)\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("many")
    machines = []
    for name, cpus, pool in (("b-0", 4, "picky"), ("b-1", 2, "batch"), ("b-2", 2, "batch")):
        path = tmp / f"{name}.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "name": name,
                    "cpus": cpus,
                    "memory": "8Gi",
                    "disk": "20Gi",
                    "labels": {"kondor.io/pool": pool},
                    "attributes": {"OpSys": "LINUX"},
                }
            )
        )
        machines.append(path)
    policies = [
        slot_policy("batch", {"kondor.io/pool": "batch"}, POLICY),
        slot_policy("picky", {"kondor.io/pool": "picky"}, POLICY + 'START = Owner != "bob"\n'),
    ]
    with job_cluster(tmp, machines, policies) as made:
        published = [made.get("executionpoints", n, None)["status"] for n in ("b-0", "b-1", "b-2")]
        assert sum(len(status["slots"]) for status in published) == SLOTS
        yield made


def test_forty_jobs_on_eight_slots(cluster: Cluster, tmp_path: Path) -> None:
    # The jobs run as their slots' users (never root): one log they may all append to.
    tmp_path.chmod(0o711)
    log = tmp_path / "runs.log"
    log.touch()
    log.chmod(0o666)
    names = [f"job-{i:02d}" for i in range(40)]
    script = (
        f'echo "start $0 $(date +%s.%N)" >> {log}; sleep 1; echo "end $0 $(date +%s.%N)" >> {log}'
    )
    manifests = []
    for name in names:
        manifest = process_job(name, script)
        manifest["spec"]["process"]["arguments"] = ["-c", script, name]
        manifests.append(manifest)
    never = process_job("never", "exit 0", requirements='OpSys == "WINDOWS"')
    bobs = process_job("bobs", "exit 0")
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        user="alice",
        stdin=yaml.safe_dump_all([*manifests, never]),
    )
    cluster.apply(bobs, user="bob")

    def all_completed() -> bool:
        jobs = cluster.kubectl(
            "get",
            "executionjobs",
            "-n",
            "default",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.jobStatus}{'\\n'}{end}",
        )
        states = dict(line.split("=", 1) for line in jobs.split())
        return all(states.get(name) == "Completed" for name in [*names, "bobs"])

    eventually(all_completed, 240, "all 40 jobs and bob's Completed")

    events: list[tuple[float, int, str]] = []
    for line in log.read_text().splitlines():
        what, name, when = line.split()
        events.append((float(when), 1 if what == "start" else -1, name))
    starts = [name for _, step, name in events if step == 1]
    assert sorted(starts) == names  # each ran exactly once
    running = peak = 0
    for _, step, _name in sorted(events, key=lambda e: (e[0], e[1])):
        running += step
        peak = max(peak, running)
    assert peak <= SLOTS
    for name in names:
        status = cluster.job(name)["status"]
        assert status["exitCode"] == 0 and status["numJobStarts"] == 1

    never_status = cluster.job("never")["status"]
    assert never_status["jobStatus"] == "Idle"
    assert "Requirements" in never_status["lastRejMatchReason"]
    bob = cluster.job("bobs")["status"]
    assert bob["executionPoint"] in ("b-1", "b-2")  # the picky node's START refuses bob
    print(f"peak concurrency {peak} of {SLOTS} slots; {len(starts)} runs")
