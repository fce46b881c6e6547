"""The ExecutionJob watch outside kopf (issue 16): one parsed table, an event at a version
already read dropped unparsed, a job that does not parse kept out of the table (and not
parsed again at the same version), deletions and relists reported to the negotiator."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kondor_operator import jobwatch
from kondor_operator.jobwatch import JobTable, JobWatch

pytestmark = pytest.mark.timeout(10)


def job(name: str, version: str, *, namespace: str = "ns", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": version,
            "managedFields": [{"manager": "kubectl", "operation": "Update"}],
        },
        "spec": {"owner": "alice", "process": {"executable": "/bin/true"}, **spec},
    }


def test_a_listing_fills_the_table_parsed_once_without_managed_fields() -> None:
    table = JobTable()
    assert table.relist([job("a", "1"), job("b", "2", namespace="other")]) == {
        "ns/a": "ADDED",
        "other/b": "ADDED",
    }
    jobs = table.jobs()
    assert sorted(jobs) == ["ns/a", "other/b"]
    assert jobs["ns/a"].resource_version == "1"
    assert "managedFields" not in (jobs["ns/a"].job.metadata.model_extra or {})
    # The same listing again: nothing changed, nothing parsed again.
    parsed = jobs["ns/a"]
    assert table.relist([job("a", "1"), job("b", "2", namespace="other")]) == {}
    assert table.jobs()["ns/a"] is parsed


def test_events_change_the_table_and_a_version_already_read_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = JobTable()
    table.relist([job("a", "1")])
    parsed: list[str] = []
    real = jobwatch.read_job

    def counting(obj: Any) -> Any:
        parsed.append(obj["metadata"]["resourceVersion"])
        return real(obj)

    monkeypatch.setattr(jobwatch, "read_job", counting)
    assert table.apply("MODIFIED", job("a", "1")) is False
    assert parsed == []
    assert table.apply("MODIFIED", job("a", "2", requestCpus=2)) is True
    assert table.jobs()["ns/a"].job.spec.request_cpus == 2
    assert table.apply("DELETED", job("a", "3")) is True
    assert table.jobs() == {}
    assert table.apply("DELETED", job("a", "3")) is False
    assert parsed == ["2"]


def test_a_job_that_does_not_parse_is_left_out_and_not_parsed_again() -> None:
    table = JobTable()
    bad = job("bad", "5", requestCpus="lots")
    assert table.relist([bad, job("good", "6")]) == {"ns/bad": "ADDED", "ns/good": "ADDED"}
    assert sorted(table.jobs()) == ["ns/good"]
    assert table.apply("MODIFIED", bad) is False  # same version: not read again
    assert table.apply("MODIFIED", job("bad", "7")) is True  # fixed: in the table
    assert sorted(table.jobs()) == ["ns/bad", "ns/good"]


def test_a_relist_reports_the_jobs_gone_meanwhile() -> None:
    table = JobTable()
    table.relist([job("a", "1"), job("b", "2")])
    assert table.relist([job("b", "3")]) == {"ns/a": "DELETED", "ns/b": "ADDED"}
    assert sorted(table.jobs()) == ["ns/b"]


class Source:
    def __init__(self, listed: list[dict[str, Any]], events: list[dict[str, Any]]) -> None:
        self.listed, self.events = listed, events

    def list_execution_jobs(self) -> tuple[list[dict[str, Any]], str]:
        return self.listed, "10"

    def watch_execution_jobs(
        self, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        yield from self.events


def test_the_watch_reports_each_change_to_its_listener() -> None:
    heard: list[dict[str, str]] = []
    source = Source(
        [job("a", "1")],
        [
            {"type": "MODIFIED", "object": job("a", "1")},  # already read
            {"type": "ADDED", "object": job("b", "11")},
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
            {"type": "DELETED", "object": job("a", "13")},
        ],
    )
    watch = JobWatch(source, lambda changes: heard.append(dict(changes)))
    watch.step()
    assert watch.synced.is_set()
    assert heard == [{"ns/a": "ADDED"}, {"ns/b": "ADDED"}, {"ns/a": "DELETED"}]
    assert sorted(watch.jobs()) == ["ns/b"]
    assert watch.version == "13"
