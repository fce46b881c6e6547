"""bench_scale's figures (`bench/bench_scale.py`): the running series, the pool-full time, the
shares before the first end, the fairness gap against 1 / EUP, and whose API writes are whose."""

from __future__ import annotations

import math

import pytest

from bench_scale import (
    batch_job,
    classify,
    execution_job,
    fairness_gap,
    job_path_writes,
    plain_pod,
    running_series,
    shares_before_first_end,
    time_to_reach,
    writes_by_kind,
)

pytestmark = pytest.mark.timeout(5)


def test_the_running_series_counts_starts_up_and_ends_down_an_end_at_a_start_after_it() -> None:
    starts = {"a": 1.0, "b": 2.0, "c": 3.0}
    ends = {"a": 3.0, "b": 5.0}
    assert running_series(starts, ends) == [(1.0, 1), (2.0, 2), (3.0, 3), (3.0, 2), (5.0, 1)]
    series = running_series(starts, ends)
    assert time_to_reach(series, 3) == 3.0
    assert time_to_reach(series, 4) is None
    assert running_series({}, {}) == []


def test_shares_are_taken_just_before_the_first_job_ends() -> None:
    starts = {"a": 1.0, "b": 2.0, "c": 9.0, "d": 2.5}
    ends = {"a": 8.0}
    users = {"a": "u1", "b": "u2", "c": "u1", "d": "u2"}
    assert shares_before_first_end(starts, ends, users) == {"u1": 1, "u2": 2}
    assert shares_before_first_end(starts, {}, users) == {"u1": 2, "u2": 2}


@pytest.mark.parametrize(
    ("running", "weights", "gap"),
    [
        ({"u1": 50, "u2": 50}, {"u1": 1.0, "u2": 1.0}, 0.0),
        ({"u1": 55, "u2": 45}, {"u1": 1.0, "u2": 1.0}, 0.1),
        # EUP 1 against EUP 2: the first is due two thirds.
        ({"u1": 60, "u2": 40}, {"u1": 1.0, "u2": 0.5}, 0.2),
        # A user with a due share and nothing running is 100% off.
        ({"u1": 10}, {"u1": 1.0, "u2": 1.0}, 1.0),
    ],
)
def test_the_fairness_gap_is_the_largest_relative_gap_to_the_due_share(
    running: dict[str, int], weights: dict[str, float], gap: float
) -> None:
    assert fairness_gap(running, weights) == pytest.approx(gap)


def test_no_running_job_has_no_fairness_figure() -> None:
    assert math.isnan(fairness_gap({}, {"u1": 1.0}))


@pytest.mark.parametrize(
    ("verb", "resource", "submitted", "whose"),
    [
        ("POST", "executionjobs", "executionjobs", "submission"),
        ("PATCH", "executionjobs/status", "executionjobs", "system"),
        ("POST", "pods", "executionjobs", "system"),  # the agent's pod
        ("POST", "pods", "pods", "submission"),  # kube-scheduler's phase: the user's pod
        ("POST", "pods/binding", "pods", "system"),
        ("PATCH", "pods/status", "pods", "kubelet"),
        ("PUT", "leases", "jobs", "kubelet"),
        ("PATCH", "nodes/status", "jobs", "kubelet"),
        ("PUT", "workloads/status", "jobs", "system"),
    ],
)
def test_writes_are_the_submissions_the_kubelets_or_the_systems(
    verb: str, resource: str, submitted: str, whose: str
) -> None:
    assert classify(resource, verb, submitted) == whose


def test_writes_by_kind_counts_only_writes_that_happened_in_the_phase() -> None:
    before = {("POST", "pods"): 10.0, ("GET", "pods"): 5.0, ("PUT", "leases"): 100.0}
    after = {
        ("POST", "pods"): 30.0,
        ("GET", "pods"): 500.0,
        ("PUT", "leases"): 130.0,
        ("POST", "pods/binding"): 20.0,
    }
    whose, detail = writes_by_kind(before, after, "pods")
    assert whose == {"submission": 20.0, "kubelet": 30.0, "system": 20.0}
    assert detail == {"PUT leases": 30.0, "POST pods": 20.0, "POST pods/binding": 20.0}


def test_job_path_writes_leave_out_the_submission_the_kubelet_and_the_publication() -> None:
    detail = {
        "POST executionjobs": 10.0,  # the submission
        "PATCH executionjobs/status": 30.0,
        "POST pods": 10.0,
        "PATCH pods/status": 20.0,  # kwok
        "PATCH executionpoints/status": 25.0,  # slot ads
        "POST events": 3.0,
        "PATCH pools/status": 2.0,
    }
    assert job_path_writes(detail, "executionjobs") == 40.0


def test_every_system_gets_the_same_pod_one_core_one_gib_thirty_seconds() -> None:
    pod = plain_pod("ns", "j00001", "user-01")
    job = batch_job("ns", "j00001", "user-01")
    ej = execution_job("ns", "j00001", "user-01")
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert job["spec"]["template"]["spec"] == pod["spec"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "user-01"
    assert (ej["spec"]["requestCpus"], ej["spec"]["requestMemory"]) == (1, "1Gi")
    template = ej["spec"]["pod"]["template"]
    for labels_and_annotations in (template["metadata"], pod["metadata"]):
        assert labels_and_annotations["annotations"] == {"kondor.io/sim-duration": "30s"}
        assert labels_and_annotations["labels"]["bench.kondor.io/user"] == "user-01"


def test_shares_are_taken_when_the_pool_fills_if_that_comes_first() -> None:
    starts = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}
    users = {"a": "u1", "b": "u2", "c": "u1", "d": "u1"}
    assert shares_before_first_end(starts, {"a": 5.0}, users, full_at=2.0) == {"u1": 1, "u2": 1}
    assert shares_before_first_end(starts, {"a": 3.5}, users, full_at=None) == {"u1": 2, "u2": 1}
