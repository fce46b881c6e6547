"""Who a job is in the schedd: its key in a cycle (`job_key`), its submission order, and its
job ad (`ad_of`, built once per spec generation and kept), with its submitter and the
SLOT_WEIGHT of what it requests.
"""

from __future__ import annotations

import math
from typing import Any

import classad2

from kondor_core.api import (
    ExecutionJob,
    parse_time,
)
from kondor_core.jobs import job_ad
from kondor_core.negotiation.accountant import submitter
from kondor_core.negotiation.fairshare import (
    request_weight,
)


def job_key(job: ExecutionJob) -> str:
    """The job's id in a cycle: namespace/name."""
    return f"{job.metadata.namespace or ''}/{job.metadata.name}"


def submission_key(job: ExecutionJob) -> tuple[float, int, str]:
    """Submission order: creationTimestamp, then ClusterId (then the name, for equal ones)."""
    created = parse_time(job.metadata.creation_timestamp or "")
    status = job.status
    cluster = status.cluster_id if status is not None and status.cluster_id is not None else 0
    return (created.timestamp() if created else math.inf, cluster, job_key(job))


#: Job ads already built, and the (submitter, SLOT_WEIGHT) of each, by what they are built
#: from. A job's spec cannot change after submission but by a new generation (admission),
#: so a queue of 10,000 jobs is not turned into ClassAds again every cycle (issue 16).
#: Only jobs read from the API server (with a uid and a generation) are kept; the cache is
#: emptied when full. The ads are never modified once built.
_ADS: dict[tuple[Any, ...], Any] = {}
_WEIGHTS: dict[tuple[Any, ...], tuple[str, float]] = {}
CACHE_SIZE = 100_000


def ad_key(job: ExecutionJob) -> tuple[Any, ...] | None:
    meta, status = job.metadata, job.status
    if meta.uid is None or meta.generation is None:
        return None
    return (
        meta.uid,
        meta.generation,
        meta.creation_timestamp,
        status.cluster_id if status is not None else None,
        status.deferral_time if status is not None else None,
    )


def remember(cache: dict[tuple[Any, ...], Any], key: tuple[Any, ...], value: Any) -> None:
    if len(cache) >= CACHE_SIZE:
        cache.clear()
    cache[key] = value


def ad_of(job: ExecutionJob) -> Any:
    key = ad_key(job)
    if key is not None and (found := _ADS.get(key)) is not None:
        return found
    status = job.status
    created = parse_time(job.metadata.creation_timestamp or "")
    ad = job_ad(
        job.spec,
        job_key(job),
        cluster_id=status.cluster_id if status is not None else None,
        qdate=math.floor(created.timestamp()) if created is not None else None,
        deferral_time=status.deferral_time if status is not None else None,
    )
    if key is not None:
        remember(_ADS, key, ad)
    return ad


def submitter_weight(job: ExecutionJob, ad: Any, slot_weight: str) -> tuple[str, float]:
    """The job's submitter (its owner, or nice-user.<owner>) and SLOT_WEIGHT of what it
    requests."""
    key = ad_key(job)
    if key is not None and (found := _WEIGHTS.get((*key, slot_weight))) is not None:
        return found
    facts = (submitter(job.spec.owner, nice_user=is_nice(ad)), request_weight(slot_weight, ad))
    if key is not None:
        remember(_WEIGHTS, (*key, slot_weight), facts)
    return facts


def is_nice(ad: Any) -> bool:
    """A nice-user job: NiceUser TRUE in its ad (condor_submit's nice_user; an ExecutionJob
    sets it with `attributes: {NiceUser: "true"}`)."""
    value = ad.get("NiceUser")
    # classad2's Undefined and Error are IntEnum members: not a number that is TRUE.
    plain = isinstance(value, int) and not isinstance(value, bool | classad2.Value)
    return value is True or (plain and value != 0)
