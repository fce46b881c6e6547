"""The condor_negotiator's accountant: user priorities with half-life decay, as pure functions.

"User Priorities and Negotiation" and "Job Scheduling" (User priority) in the reference:

- every submitter starts with the best real user priority, 0.5 (`MIN_PRIORITY`);
- the real priority moves toward the resources the submitter uses (weighted by SLOT_WEIGHT)
  with PRIORITY_HALFLIFE: after `t` seconds at `used` it is
  `old * 0.5**(t / halflife) + used * (1 - 0.5**(t / halflife))`, never below 0.5. So 100
  cores for a long time make it about 100; one half-life after stopping, 50; two, 25;
- the effective priority is real x the submitter's priority factor (DEFAULT_PRIO_FACTOR, a
  per-user factor from condor_userprio -setfactor, or NICE_USER_PRIO_FACTOR for nice-user
  jobs, accounted as the submitter `nice-user.<owner>` as HTCondor does); lower is better;
- a user's fair share of the pool is inversely proportional to the effective priority (a
  user with priority 5 gets ten times the resources of one with 50): `pie`.

The accountant is the Pool's status (`PoolStatus`): `update` ages it to `now` from the usage
measured at `now`, so an operator that restarts reads it back and loses at most the usage of
the cycles it did not run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from kondor_core.api import format_time, parse_time
from kondor_core.api.pool import MIN_PRIORITY, PoolSpec, PoolStatus, UserPriority

#: The submitter name prefix of nice-user jobs (HTCondor's `nice-user.<owner>`).
NICE_USER_PREFIX = "nice-user."


def submitter(owner: str | None, *, nice_user: bool = False) -> str:
    """The accounting name of a job's submitter: its owner, or `nice-user.<owner>`."""
    name = owner or "unknown"
    return f"{NICE_USER_PREFIX}{name}" if nice_user else name


def aged(real: float, used: float, elapsed: float, halflife: float) -> float:
    """The real priority `elapsed` seconds later at `used` weighted resources, never below
    MIN_PRIORITY (HTCondor's accountant: priority = old * b + used * (1 - b), b =
    0.5^(elapsed/halflife))."""
    if elapsed <= 0:
        return max(MIN_PRIORITY, real)
    beta = math.pow(0.5, elapsed / halflife)
    return max(MIN_PRIORITY, real * beta + used * (1.0 - beta))


def priority_factor(name: str, spec: PoolSpec) -> float:
    """The submitter's priority factor: its own (spec.priorityFactors), else
    NICE_USER_PRIO_FACTOR for a nice-user submitter, else DEFAULT_PRIO_FACTOR."""
    if name in spec.priority_factors:
        return spec.priority_factors[name]
    if name.startswith(NICE_USER_PREFIX):
        return spec.nice_user_prio_factor
    return spec.default_prio_factor


def effective_priorities(
    status: PoolStatus | None, spec: PoolSpec, names: set[str] | frozenset[str] = frozenset()
) -> dict[str, float]:
    """Effective priority by submitter: those the accountant knows, and `names` (new ones
    start at MIN_PRIORITY). The factor is always the spec's current one."""
    real = {user.name: user.real_priority for user in (status.users if status else [])}
    out = {name: value * priority_factor(name, spec) for name, value in real.items()}
    for name in names:
        out.setdefault(name, MIN_PRIORITY * priority_factor(name, spec))
    return out


def update(
    status: PoolStatus | None, usage: Mapping[str, float], now: float, spec: PoolSpec
) -> PoolStatus:
    """The accountant at `now`: every known submitter and every one in `usage` (weighted
    resources in use now) aged by the time since `status.lastUpdate`, usage accumulated over
    that time, usage resets of spec.usageResets carried out once each, and the factors and
    effective priorities of `spec`."""
    status = status or PoolStatus()
    last = parse_time(status.last_update or "")
    elapsed = max(0.0, now - last.timestamp()) if last is not None else 0.0
    stamp = format_time(now)
    known = {user.name: user for user in status.users}
    users: list[UserPriority] = []
    for name in sorted(set(known) | {n for n, used in usage.items() if used > 0}):
        before = known.get(name) or UserPriority(name=name)
        used = max(0.0, float(usage.get(name, 0.0)))
        real = aged(before.real_priority, used, elapsed, spec.priority_halflife)
        accumulated = before.accumulated_usage + used * elapsed
        reset = spec.usage_resets.get(name)
        last_reset = before.last_reset
        if reset is not None and reset != before.last_reset:
            real, accumulated, last_reset = MIN_PRIORITY, 0.0, reset
        factor = priority_factor(name, spec)
        users.append(
            before.model_copy(
                update={
                    "real_priority": real,
                    "priority_factor": factor,
                    "effective_priority": real * factor,
                    "resources_used": used,
                    "accumulated_usage": accumulated,
                    "begin_usage_time": before.begin_usage_time or (stamp if used else None),
                    "last_usage_time": stamp if used else before.last_usage_time,
                    "last_reset": last_reset,
                }
            )
        )
    return status.model_copy(update={"last_update": stamp, "users": users})


def pie(priorities: Mapping[str, float], size: float) -> dict[str, float]:
    """Each submitter's slice of `size` weighted resources, inversely proportional to its
    effective priority (the negotiator's pie)."""
    if not priorities or size <= 0:
        return {name: 0.0 for name in priorities}
    inverse = {name: 1.0 / max(value, 1e-300) for name, value in priorities.items()}
    total = sum(inverse.values())
    return {name: size * value / total for name, value in inverse.items()}
