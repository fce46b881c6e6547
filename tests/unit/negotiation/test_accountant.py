"""The accountant against the manual's numbers ("Job Scheduling": User priority; "User
Priorities and Negotiation"): half-life decay, factors, nice users, the pie."""

from __future__ import annotations

import pytest

from kondor_core.api import format_time
from kondor_core.api.pool import PoolSpec, PoolStatus
from kondor_core.negotiation.accountant import (
    aged,
    effective_priorities,
    pie,
    priority_factor,
    submitter,
    update,
)

DAY = 86400.0
NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("what", "real", "used", "elapsed", "expected"),
    [
        ("every user starts with the best priority", 0.5, 0.0, 0.0, 0.5),
        ("never better than 0.5", 0.5, 0.0, 10 * DAY, 0.5),
        ("100 cores for a long time make about 100", 0.5, 100.0, 30 * DAY, 100.0),
        ("all jobs removed: one day later, 50", 100.0, 0.0, DAY, 50.0),
        ("two days later, 25", 100.0, 0.0, 2 * DAY, 25.0),
        ("a RUP of 10 with no jobs is 5 one day later", 10.0, 0.0, DAY, 5.0),
        ("and 2.5 two days later", 10.0, 0.0, 2 * DAY, 2.5),
        ("ten cores for long: the RUP approaches ten", 0.5, 10.0, 20 * DAY, 10.0),
        ("one half-life at 10 from 0.5: half way", 0.5, 10.0, DAY, 5.25),
    ],
)
def test_real_priority_follows_the_manual(
    what: str, real: float, used: float, elapsed: float, expected: float
) -> None:
    assert aged(real, used, elapsed, DAY) == pytest.approx(expected, rel=1e-4), what


def test_decay_in_steps_equals_decay_at_once() -> None:
    # The operator ages the accountant every cycle: many short steps must give one long one.
    stepped = 100.0
    for _ in range(86400 // 20):
        stepped = aged(stepped, 0.0, 20.0, DAY)
    assert stepped == pytest.approx(50.0, rel=1e-9)


@pytest.mark.parametrize(
    ("priorities", "size", "expected"),
    [
        # "a user with priority 5 will be allocated 10 times the resources as ... 50"
        ({"a": 5.0, "b": 50.0}, 11.0, {"a": 10.0, "b": 1.0}),
        # "a user with a priority of 10 will get twice as many machines as ... 20"
        ({"a": 10.0, "b": 20.0}, 9.0, {"a": 6.0, "b": 3.0}),
        ({"alice": 500.0, "bob": 500.0}, 8.0, {"alice": 4.0, "bob": 4.0}),
        ({"alice": 500.0, "bob": 1500.0}, 8.0, {"alice": 6.0, "bob": 2.0}),
    ],
)
def test_shares_are_inversely_proportional_to_priority(
    priorities: dict[str, float], size: float, expected: dict[str, float]
) -> None:
    assert pie(priorities, size) == pytest.approx(expected)


def test_factors_defaults_and_nice_users() -> None:
    spec = PoolSpec(priority_factors={"bob": 3000.0})
    assert PoolSpec().priority_halflife == 86400.0  # PRIORITY_HALFLIFE
    assert priority_factor("alice", spec) == 1000.0  # DEFAULT_PRIO_FACTOR
    assert priority_factor("bob", spec) == 3000.0  # condor_userprio -setfactor
    assert submitter("carol", nice_user=True) == "nice-user.carol"
    assert priority_factor("nice-user.carol", spec) == 1e10  # NICE_USER_PRIO_FACTOR
    eup = effective_priorities(None, spec, {"alice", "bob", "nice-user.carol"})
    assert eup == {"alice": 500.0, "bob": 1500.0, "nice-user.carol": 5e9}
    # The nice user's slice of a 1,000-core pool is less than a core.
    assert pie(eup, 1000.0)["nice-user.carol"] < 1e-4


def test_the_accountant_ages_accumulates_and_survives_a_round_trip() -> None:
    spec = PoolSpec()
    first = update(None, {"alice": 100.0}, NOW, spec)
    [alice] = first.users
    assert alice.real_priority == 0.5 and alice.resources_used == 100.0
    assert alice.effective_priority == 500.0
    assert alice.begin_usage_time == format_time(NOW)
    # Persisted as the Pool's status and read back (an operator restart).
    restored = PoolStatus.model_validate(first.dump())
    later = update(restored, {"alice": 100.0}, NOW + DAY, spec)
    [alice] = later.users
    assert alice.real_priority == pytest.approx(50.25)
    assert alice.accumulated_usage == pytest.approx(100.0 * DAY)
    assert alice.last_usage_time == format_time(NOW + DAY)
    stopped = update(later, {}, NOW + 2 * DAY, spec)
    assert stopped.users[0].real_priority == pytest.approx(50.25 / 2)
    assert stopped.users[0].resources_used == 0.0
    assert stopped.users[0].last_usage_time == format_time(NOW + DAY)


def test_resetusage_is_carried_out_once_per_request() -> None:
    busy = update(update(None, {"bob": 8.0}, NOW, PoolSpec()), {"bob": 8.0}, NOW + DAY, PoolSpec())
    assert busy.users[0].real_priority > 4
    reset = PoolSpec(usage_resets={"bob": format_time(NOW + DAY)})
    after = update(busy, {}, NOW + DAY + 1, reset)
    assert after.users[0].real_priority == 0.5 and after.users[0].accumulated_usage == 0.0
    # The same request again does nothing: usage accrues from there.
    again = update(after, {"bob": 8.0}, NOW + 2 * DAY, reset)
    assert again.users[0].real_priority > 4


def test_the_knobs_are_accepted_as_a_condor_config_snippet() -> None:
    from kondor_core.negotiation.poolconfig import PoolConfigError, pool_settings

    spec = PoolSpec.model_validate(
        {
            "priorityHalflife": 7200,
            "condorConfig": "HOUR = 3600\nPRIORITY_HALFLIFE = $(HOUR)\n"
            "DEFAULT_PRIO_FACTOR = 10\nNEGOTIATOR_CONSIDER_PREEMPTION = False\n"
            "SLOT_WEIGHT = Cpus + GPUs\nSTART = True\n",
        }
    )
    settings = pool_settings(spec)
    assert settings.priority_halflife == 7200  # the spec's own field wins
    assert settings.default_prio_factor == 10
    assert settings.negotiator_consider_preemption is False
    assert settings.slot_weight == "Cpus + GPUs"
    with pytest.raises(PoolConfigError, match="PRIORITY_HALFLIFE"):
        pool_settings(PoolSpec(condor_config="PRIORITY_HALFLIFE = -1"))
    with pytest.raises(PoolConfigError, match="SLOT_WEIGHT"):
        pool_settings(PoolSpec(condor_config="SLOT_WEIGHT = Cpus +"))
