"""condor_defrag on the dev cluster: four 4-core nodes, each fragmented by a 1-core job, and a
waiting 4-core job. With DEFRAG_DRAINING_MACHINES_PER_HOUR giving one drain per
DEFRAG_INTERVAL and DEFRAG_MAX_CONCURRENT_DRAINING 1, the operator's defrag controller drains
nodes (never more than 1 at once, though a drain lasts longer than an interval; never two in
one interval), a drained node resumes whole,
and the whole-node job runs on it."""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kondor_core.api import parse_time

from .conftest import skip_reason
from .test_jobs_end_to_end import (
    Cluster,
    eventually,
    job_cluster,
    kwok_machines,
    process_job,
    slot_policy,
)

pytestmark = pytest.mark.timeout(180)  # four agents to start on a shared machine

NODES = [f"defrag-{i}" for i in range(4)]
LABELS = {"kondor.io/pool": "cpu"}
INTERVAL = 3  # DEFRAG_INTERVAL, seconds
PER_HOUR = 1200  # one drain per 3 s poll
MAX_DRAINING = 1
#: A graceful drain lets the jobs retire until 20 s after they started: the first drain lasts
#: several intervals, so the concurrency limit binds.
POLICY = """POLLING_INTERVAL = 1
UPDATE_INTERVAL = 5
MAXJOBRETIREMENTTIME = 20
MachineMaxVacateTime = 1
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("defrag")
    policy = slot_policy("defrag", LABELS, POLICY)
    with job_cluster(
        tmp, kwok_machines(tmp, NODES, cpus=4, memory="8Gi", labels=LABELS), [policy]
    ) as made:
        yield made
        # The fragmenting jobs sleep for minutes and would outlive their agents (as jobs
        # outlive an agent's restart): removed, their processes killed, before the stop.
        with contextlib.suppress(AssertionError):
            made.kubectl("delete", "executionjobs", "--all", "-n", "default", "--wait=false")

            def none_running() -> bool:
                listed = json.loads(
                    made.kubectl("get", "executionjobs", "-n", "default", "-o", "json")
                )
                return not listed["items"]

            eventually(none_running, 30, "every job gone")


class Watcher:
    """Samples every node's drain request while the test runs: the most draining at once and
    the time each defrag drain was asked."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.most = 0
        self.requests: dict[tuple[str, str], float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def sample(self) -> None:
        found: list[dict[str, Any]] = yaml.safe_load(
            self.cluster.kubectl("get", "executionpoints", "-o", "yaml")
        )["items"]
        draining = 0
        for ep in found:
            request = (ep.get("spec") or {}).get("drain")
            if not request:
                continue
            done = (ep.get("status") or {}).get("drain") or {}
            resumed = done.get("requestedAt") == request["requestedAt"] and done.get("state") == (
                "Resumed"
            )
            draining += 0 if resumed else 1
            if request.get("requestedBy") == "condor_defrag":
                key = (ep["metadata"]["name"], request["requestedAt"])
                at = parse_time(request["requestedAt"])
                assert at is not None
                self.requests.setdefault(key, at.timestamp())
        self.most = max(self.most, draining)

    def run(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(AssertionError):  # a kubectl failed under load
                self.sample()
            self.stop.wait(0.3)


def test_defrag_drains_within_its_limits_and_the_whole_node_job_runs(cluster: Cluster) -> None:
    for name in NODES:
        job = process_job(f"frag-{name}", "sleep 600", requirements=f'Machine == "{name}"')
        cluster.apply(job, user="alice")

    def running() -> bool:
        return all(
            cluster.job(f"frag-{name}")["status"].get("jobStatus") == "Running" for name in NODES
        )

    eventually(running, 60, "every fragmenting job Running")
    cluster.apply(process_job("whole", "sleep 1; echo whole", requestCpus=4, priority=10), "alice")
    time.sleep(3)  # a negotiation cycle or two: no node has 4 cores free
    assert cluster.job("whole")["status"].get("jobStatus") == "Idle"

    watcher = Watcher(cluster)
    watcher.thread.start()
    try:
        cluster.kubectl(
            "patch",
            "pool",
            "default",
            "--type=merge",
            "-p",
            json.dumps(
                {
                    "spec": {
                        "defrag": {
                            "interval": INTERVAL,
                            "drainingMachinesPerHour": PER_HOUR,
                            "maxConcurrentDraining": MAX_DRAINING,
                        }
                    }
                }
            ),
        )
        done = eventually(
            lambda: (job := cluster.job("whole"))["status"].get("jobStatus") == "Completed" and job,
            60,
            "the whole-node job Completed",
        )
        assert done["status"]["exitCode"] == 0
    finally:
        watcher.stop.set()
        watcher.thread.join(5)

    drained_at = sorted(watcher.requests.values())
    assert drained_at, "no defrag drain was seen"
    assert watcher.most <= MAX_DRAINING
    # One drain per interval: two drains are at least one interval apart (RFC 3339 seconds,
    # so one second less).
    gaps = [b - a for a, b in itertools.pairwise(drained_at)]
    assert all(gap >= INTERVAL - 1 for gap in gaps), gaps
    events = cluster.kubectl(
        "get", "events", "-A", "--field-selector", "reason=DefragDrain", "-o", "name"
    ).split()
    assert len(events) >= len(drained_at)
