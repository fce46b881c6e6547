"""A nice_user job's MaxJobRetirementTime, as condor_submit gives it ("Configuration Macros",
MAXJOBRETIREMENTTIME: "For convenience, nice_user jobs are submitted with a default
retirement time of 0, so they will never wait in retirement unless the user overrides the
default"; condor_submit's max_job_retirement_time: "Any jobs running with nice_user priority
have a default max_job_retirement_time of 0 ... In all other cases, no default value is
provided")."""

from __future__ import annotations

from typing import Any

import pytest

from kondor_core import startd
from kondor_core.api import ExecutionJobSpec
from kondor_core.jobs import submit_ad
from kondor_core.policy import ActivateClaim, Match

from ..negotiation.test_negotiator import node, offers


def ad(**spec: Any) -> Any:
    return submit_ad(ExecutionJobSpec.model_validate({"owner": "carol", **spec}), "j")


@pytest.mark.parametrize(
    ("spec", "retirement"),
    [
        # nice_user = true, no max_job_retirement_time: 0.
        ({"niceUser": True}, 0),
        ({"niceUser": True, "maxJobRetirementTime": "600"}, 600),
        ({"attributes": {"NiceUser": "true"}}, 0),
        ({"attributes": {"NiceUser": "1"}}, 0),
        # "unless the user overrides the default": the job's own, as a field or attribute.
        ({"attributes": {"NiceUser": "true"}, "maxJobRetirementTime": "600"}, 600),
        ({"attributes": {"NiceUser": "true", "MaxJobRetirementTime": "60 * 5"}}, 300),
        # Not a nice-user job: "no default value is provided".
        ({}, None),
        ({"attributes": {"NiceUser": "false"}}, None),
        ({"attributes": {"NiceUser": "0"}}, None),
        ({"attributes": {"NiceUser": "Undefined"}}, None),
        ({"attributes": {"NiceUser": "SomethingElse"}}, None),
        ({"maxJobRetirementTime": "600"}, 600),
    ],
)
def test_a_nice_user_job_has_max_job_retirement_time_0_unless_it_gives_one(
    spec: dict[str, Any], retirement: int | None
) -> None:
    job = ad(**spec)
    if retirement is None:
        assert "MaxJobRetirementTime" not in job
    else:
        assert job.eval("MaxJobRetirementTime") == retirement


def test_a_nice_user_job_never_waits_in_retirement_on_a_slot_that_offers_it() -> None:
    # The startd grants 3600 s (MAXJOBRETIREMENTTIME); the job takes less, never more: the
    # nice-user job's claim has none left, the other job's has its hour less the 100 s run.
    of = node("NUM_SLOTS = 2\nNUM_CPUS = 2\nMAXJOBRETIREMENTTIME = 3600", cpus=2)
    jobs = [ad(attributes={"NiceUser": "true"}), ad()]
    for i, job in enumerate(jobs):
        claim = Match(f"c{i}", job, job_id=f"j{i}")
        of = startd.tick(of, {}, 0, slot_events={f"slot{i + 1}@n": [claim, ActivateClaim()]}).startd
    nice, other = offers(of, now=100)
    assert (nice["State"], other["State"]) == ("Claimed", "Claimed")
    assert nice.eval("RetirementTimeRemaining") == 0
    assert other.eval("RetirementTimeRemaining") == 3500


def test_the_spec_s_nice_user_is_the_job_s_nice_user_attribute() -> None:
    assert ad(niceUser=True).eval("NiceUser") is True
    assert "NiceUser" not in ad()
    # condor_submit's +NiceUser after nice_user: the extra attribute has the last word.
    assert ad(niceUser=True, attributes={"NiceUser": "false"}).eval("NiceUser") is False


def test_a_nice_user_that_is_not_a_boolean_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="niceUser"):
        ExecutionJobSpec.model_validate({"owner": "carol", "niceUser": "sometimes"})
