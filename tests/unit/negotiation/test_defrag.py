"""condor_defrag's policy (kondor_core.negotiation.defrag): the rate arithmetic of
condor_defrag's config() and poll(), the limits, the order, cancel and the Pool's knobs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kondor_core import startd
from kondor_core.api import ExecutionPoint, Machine, PoolSpec, SlotPolicySpec, format_time
from kondor_core.api.defrag import DefragSpec
from kondor_core.config import compile_policy
from kondor_core.negotiation.defrag import (
    DEFRAG_REQUESTER,
    DefragConfigError,
    DrainRate,
    defrag_settings,
    drain_rate,
    drain_request,
    is_draining,
    machines_to_drain,
    plan_defrag,
    prorate,
)

ROOT = Path(__file__).resolve().parents[3]
#: A time on an hour boundary plus 10 minutes (1_800_000_000 is 2027-01-15T08:00:00Z).
NOW = 1_800_000_000.0 + 600


# ---- the rate --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("per_hour", "interval", "expected"),
    [
        (0, 600, DrainRate(0, 0, 0)),  # the default: no draining
        (6, 600, DrainRate(1, 0, 0)),  # one per poll exactly
        (12, 600, DrainRate(2, 0, 0)),
        (1, 600, DrainRate(0, 1, 0)),  # 1/6 per poll: once an hour
        (1.5, 600, DrainRate(0, 1, 12)),  # the half left over: 12 a day
        (7, 600, DrainRate(1, 1, 0)),
        (0.5, 600, DrainRate(0, 0, 12)),
        (1 / 24, 600, DrainRate(0, 0, 1)),  # one a day
        (1200, 3, DrainRate(1, 0, 0)),
        (10, 7200, DrainRate(20, 0, 0)),  # an interval over an hour: no hourly share
    ],
)
def test_the_rate_is_split_per_poll_hour_and_day_as_condor_defrag_does(
    per_hour: float, interval: int, expected: DrainRate
) -> None:
    assert drain_rate(per_hour, interval) == expected


@pytest.mark.parametrize(
    ("n", "remaining", "period", "granularity", "expected"),
    [
        (1, 3000, 3600, 600, 1),  # most of the hour left
        (1, 600, 3600, 600, 0),  # a third: rounds to 0
        (4, 1800, 3600, 600, 3),  # 4 x (0.5 + 0.1667) = 2.67 -> 3
        (12, 86400 - 600, 86400, 600, 12),  # never more than n
        (0, 3000, 3600, 600, 0),
    ],
)
def test_prorate_as_condor_defrag(
    n: int, remaining: int, period: int, granularity: int, expected: int
) -> None:
    assert prorate(n, remaining, period, granularity) == expected


def test_the_hourly_share_comes_once_an_hour_and_the_daily_once_a_day() -> None:
    rate = drain_rate(1.5, 600)  # 0 per poll, 1 an hour, 12 a day
    hour = 1_800_000_000  # an hour boundary, not a day boundary
    assert hour % 3600 == 0 and hour % 86400 != 0
    # condor_defrag prorates by the time since the hour (or day) began: a first poll 50
    # minutes into the hour gets the hourly machine, and the day's share prorated.
    first = machines_to_drain(rate, hour - 86400, hour + 3000, 600)
    assert first == 1 + prorate(12, (hour + 3000) % 86400, 86400, 600)
    # A first poll 1 minute into the hour gets less than one: none.
    assert machines_to_drain(rate, hour - 600, hour + 60, 600) == 0
    # Later polls in the same hour: nothing more.
    assert machines_to_drain(rate, hour + 3000, hour + 3300, 600) == 0
    # The next hour, same day, late in it: the hourly machine only.
    assert machines_to_drain(rate, hour + 3300, hour + 3600 + 3300, 600) == 1


def test_a_whole_number_per_poll_is_drained_every_poll() -> None:
    rate = drain_rate(1200, 3)
    polls = [machines_to_drain(rate, NOW + t - 3, NOW + t, 3) for t in range(3, 60, 3)]
    assert polls == [1] * len(polls)


# ---- the pool's nodes ------------------------------------------------------------------------


def machine(name: str, cpus: int = 4) -> Machine:
    values = yaml.safe_load((ROOT / "examples/machines/kwok-small.yaml").read_text())
    return Machine.model_validate({**values, "name": name, "cpus": cpus})


def node(
    name: str,
    *,
    used: int = 0,
    drain: dict[str, Any] | None = None,
    drain_status: dict[str, Any] | None = None,
    heartbeat: str = "Fresh",
    extra: dict[str, Any] | None = None,
    static: bool = False,
) -> ExecutionPoint:
    """An ExecutionPoint whose agent published a fresh startd, its partitionable slot with
    `used` of its 4 cores given to dynamic slots."""
    policy = {"condorConfig": "SLOT_TYPE_1_PARTITIONABLE = FALSE\n"} if static else {}
    fresh = startd.start(machine(name), compile_policy(SlotPolicySpec.model_validate(policy)), NOW)
    fresh = startd.tick(fresh, {}, NOW).startd
    status = startd.status(fresh, {}, NOW).dump()
    for slot in status["slots"]:
        if slot["type"] == "Partitionable":
            slot["ad"] = {**slot["ad"], "Cpus": 4 - used, **(extra or {})}
            slot["cpus"] = 4 - used
    status["operator"] = {"heartbeat": heartbeat}
    if drain_status is not None:
        status["drain"] = drain_status
    spec: dict[str, Any] = {"nodeName": name}
    if drain is not None:
        spec["drain"] = drain
    return ExecutionPoint.model_validate(
        {"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": spec, "status": status}
    )


def defrag_drain(at: float = NOW - 60) -> dict[str, Any]:
    return drain_request(DefragSpec(), format_time(at))


def settings(**values: Any) -> DefragSpec:
    base: dict[str, Any] = {"interval": 600, "drainingMachinesPerHour": 12}
    return DefragSpec.model_validate({**base, **values})


def test_nothing_drains_with_htcondor_s_defaults() -> None:
    plan = plan_defrag(DefragSpec(), [node("a", used=1)], None, NOW)
    assert plan.drain == ()
    assert plan.why == "Doing nothing, because DEFRAG_DRAINING_MACHINES_PER_HOUR=0"


def test_fragmented_nodes_are_drained_up_to_the_rate_whole_ones_never() -> None:
    nodes = [node("d", used=1), node("c", used=2), node("b"), node("a", used=3)]
    plan = plan_defrag(settings(), nodes, NOW - 600, NOW)  # 2 per poll
    assert plan.drain == ("a", "c")  # by name (DEFRAG_RANK undefined everywhere)
    assert (plan.whole, plan.draining, plan.wanted) == (1, 0, 2)


def test_the_concurrency_limit_counts_nodes_draining_already() -> None:
    nodes = [
        node("a", used=1, drain={"requestedAt": format_time(NOW - 5), "requestedBy": "admin"}),
        node("b", used=1),
        node("c", used=1),
    ]
    plan = plan_defrag(settings(maxConcurrentDraining=2), nodes, NOW - 600, NOW)
    assert plan.drain == ("b",) and plan.draining == 1
    full = plan_defrag(settings(maxConcurrentDraining=1), nodes, NOW - 600, NOW)
    assert full.drain == ()
    assert full.why == (
        "Doing nothing, because DEFRAG_MAX_CONCURRENT_DRAINING=1 and there are 1 draining machines."
    )


def test_a_drain_that_resumed_no_longer_counts_and_a_defrag_one_is_cleared() -> None:
    request = defrag_drain()
    done = {
        "requestedAt": request["requestedAt"],
        "mode": "graceful",
        "state": "Resumed",
        "since": format_time(NOW - 1),
    }
    resumed = node("a", used=1, drain=request, drain_status=done)
    assert not is_draining(resumed)
    plan = plan_defrag(settings(maxConcurrentDraining=1), [resumed], NOW - 600, NOW)
    assert plan.finished == ("a",) and plan.draining == 0


def test_the_whole_machine_limit_stops_draining() -> None:
    nodes = [node("a"), node("b"), node("c", used=1)]
    plan = plan_defrag(settings(maxWholeMachines=2), nodes, NOW - 600, NOW)
    assert plan.drain == ()
    assert plan.why.startswith("Doing nothing, because DEFRAG_MAX_WHOLE_MACHINES=2")
    assert plan_defrag(settings(maxWholeMachines=3), nodes, NOW - 600, NOW).drain == ("c",)


@pytest.mark.parametrize("knob", ["maxConcurrentDraining", "maxWholeMachines"])
def test_a_limit_of_zero_drains_nothing(knob: str) -> None:
    plan = plan_defrag(settings(**{knob: 0}), [node("a", used=1)], NOW - 600, NOW)
    assert plan.drain == () and "=0" in plan.why


def test_requirements_rank_and_unfresh_or_static_nodes() -> None:
    nodes = [
        node("a", used=1, extra={"Rack": 1}),
        node("b", used=1, extra={"Rack": 2}),
        node("c", used=1, extra={"Rack": 3}),
        node("stale", used=1, heartbeat="Stale"),
        node("static", static=True),
    ]
    plan = plan_defrag(settings(rank="Rack"), nodes, NOW - 600, NOW)
    assert plan.drain == ("c", "b")
    plan = plan_defrag(settings(rank="Rack", requirements="Rack < 3"), nodes, NOW - 600, NOW)
    assert plan.drain == ("b", "a")


def test_a_defrag_drain_is_cancelled_once_the_node_is_whole_an_admin_s_never() -> None:
    nodes = [
        node("a", drain=defrag_drain()),  # whole again: DEFRAG_CANCEL_REQUIREMENTS holds
        node("b", used=2, drain=defrag_drain()),  # still has jobs
        node("c", drain={"requestedAt": format_time(NOW), "requestedBy": "admin"}),
    ]
    plan = plan_defrag(settings(), nodes, NOW - 600, NOW)
    assert plan.cancel == ("a",)
    custom = plan_defrag(settings(cancelRequirements="Cpus >= 2"), nodes, NOW - 600, NOW)
    assert custom.cancel == ("a", "b")


def test_draining_start_expr_is_the_graceful_drain_s_start() -> None:
    start = "TARGET.MaxWallTime < 600"
    graceful = drain_request(settings(drainingStartExpr=start), "2027-01-15T08:10:00Z")
    assert graceful["start"] == start
    quick = drain_request(
        settings(drainingStartExpr=start, drainingSchedule="quick"), "2027-01-15T08:10:00Z"
    )
    assert "start" not in quick


def test_the_drain_request_is_condor_defrag_s() -> None:
    request = drain_request(settings(drainingSchedule="quick"), "2027-01-15T08:10:00Z")
    assert request == {
        "mode": "quick",
        "reason": "Defrag",
        "resumeOnCompletion": True,
        "requestedAt": "2027-01-15T08:10:00Z",
        "requestedBy": DEFRAG_REQUESTER,
    }


# ---- the knobs -------------------------------------------------------------------------------


def test_the_defaults_are_htcondor_s() -> None:
    htcondor2 = pytest.importorskip("htcondor2")
    spec = DefragSpec()
    assert spec.interval == int(htcondor2.param["DEFRAG_INTERVAL"])
    assert spec.draining_machines_per_hour == float(
        htcondor2.param["DEFRAG_DRAINING_MACHINES_PER_HOUR"]
    )
    assert spec.max_concurrent_draining == int(htcondor2.param["DEFRAG_MAX_CONCURRENT_DRAINING"])
    assert spec.max_whole_machines == int(htcondor2.param["DEFRAG_MAX_WHOLE_MACHINES"])
    assert spec.whole_machine_expr == htcondor2.param["DEFRAG_WHOLE_MACHINE_EXPR"]
    assert spec.rank == htcondor2.param["DEFRAG_RANK"]
    assert spec.draining_schedule == htcondor2.param["DEFRAG_DRAINING_SCHEDULE"]
    # DEFRAG_CANCEL_REQUIREMENTS defaults to $(DEFRAG_WHOLE_MACHINE_EXPR).
    assert htcondor2.param["DEFRAG_CANCEL_REQUIREMENTS"] == spec.whole_machine_expr


def test_the_pool_s_condor_config_sets_the_knobs_the_spec_leaves_out() -> None:
    pool = PoolSpec.model_validate(
        {
            "defrag": {"interval": 30},
            "condorConfig": "DEFRAG_INTERVAL = 99\n"
            "DEFRAG_DRAINING_MACHINES_PER_HOUR = 2.5\n"
            "DEFRAG_MAX_CONCURRENT_DRAINING = 3\n"
            "DEFRAG_DRAINING_SCHEDULE = Quick\n"
            "WHOLE = Cpus == TotalSlotCpus && Memory == TotalSlotMemory\n"
            "DEFRAG_WHOLE_MACHINE_EXPR = $(WHOLE)\n",
        }
    )
    got = defrag_settings(pool)
    assert got.interval == 30  # the spec wins
    assert got.draining_machines_per_hour == 2.5
    assert got.max_concurrent_draining == 3
    assert got.draining_schedule == "quick"
    assert got.whole_machine_expr == "Cpus == TotalSlotCpus && Memory == TotalSlotMemory"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("DEFRAG_DRAINING_SCHEDULE = slowly", "DEFRAG_DRAINING_SCHEDULE = 'slowly'"),
        ("DEFRAG_MAX_CONCURRENT_DRAINING = -2", "DEFRAG_MAX_CONCURRENT_DRAINING = '-2'"),
        ("DEFRAG_INTERVAL = often", "DEFRAG_INTERVAL = 'often'"),
        ("DEFRAG_RANK = Cpus +", "DEFRAG_RANK"),
    ],
)
def test_a_bad_knob_is_refused_naming_it(line: str, message: str) -> None:
    with pytest.raises(DefragConfigError, match=message.replace("(", r"\(")):
        defrag_settings(PoolSpec.model_validate({"condorConfig": line + "\n"}))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("interval", -1),
        ("drainingMachinesPerHour", -0.5),
        ("maxConcurrentDraining", -2),
        ("maxWholeMachines", "many"),
        ("drainingSchedule", "slow"),
        ("wholeMachineExpr", "Cpus =="),
        ("cancelRequirements", ""),
        ("surprise", 1),
    ],
)
def test_a_bad_spec_field_is_refused_naming_it(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field if field != "surprise" else "surprise"):
        PoolSpec.model_validate({"defrag": {field: value}})


def test_nodes_drained_lately_come_last_among_equals() -> None:
    nodes = [node("a", used=1), node("b", used=1), node("c", used=1)]
    plan = plan_defrag(settings(), nodes, NOW - 600, NOW, {"a": NOW - 600, "b": NOW - 1200})
    assert plan.drain == ("c", "b")
