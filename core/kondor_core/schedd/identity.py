"""Who a job is in the schedd: its submission order, its job ad (`ad_of`:
`kondor_core.jobs.job_ad`, built once per version of the job and kept), with its submitter
and the SLOT_WEIGHT of what it requests. Its key is `kondor_core.jobs.job_id`, everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import classad2

from kondor_core.api import (
    ExecutionJob,
    parse_time,
)
from kondor_core.jobs import job_ad, job_id
from kondor_core.negotiation.accountant import submitter
from kondor_core.negotiation.fairshare import (
    request_weight,
)


def submission_key(job: ExecutionJob) -> tuple[float, int, str]:
    """Submission order: creationTimestamp, then ClusterId (then the name, for equal ones)."""
    created = parse_time(job.metadata.creation_timestamp or "")
    status = job.status
    cluster = status.cluster_id if status is not None and status.cluster_id is not None else 0
    return (created.timestamp() if created else math.inf, cluster, job_id(job))


#: Job ads already built, and the (submitter, SLOT_WEIGHT) of each, by what they are built
#: from: the spec (a new generation), the status (a new resourceVersion; a job followed in a
#: pass but not yet written keeps its resourceVersion, hence its ClusterId, DeferralTime and
#: JobStatus in the key too). A waiting job is written only when the kind of its
#: LastRejMatchReason changes, so a queue of 10,000 jobs is not turned into ClassAds again
#: every cycle (issue 16).
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
        meta.resource_version,
        status.cluster_id if status is not None else None,
        status.deferral_time if status is not None else None,
        status.job_status if status is not None else None,
    )


def remember(cache: dict[tuple[Any, ...], Any], key: tuple[Any, ...], value: Any) -> None:
    if len(cache) >= CACHE_SIZE:
        cache.clear()
    cache[key] = value


def ad_of(job: ExecutionJob) -> Any:
    """The job's ad (`kondor_core.jobs.job_ad`), from the cache when built before."""
    key = ad_key(job)
    if key is not None and (found := _ADS.get(key)) is not None:
        return found
    ad = job_ad(job)
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


# ---- ClusterIds --------------------------------------------------------------------------------

#: The Pool's status field holding the last ClusterId given (`PoolStatus.last_cluster_id`).
LAST_CLUSTER_ID = "lastClusterId"


def cluster_id_of(job: ExecutionJob) -> int:
    """The job's ClusterId, 0 while it has none."""
    status = job.status
    return status.cluster_id if status is not None and status.cluster_id is not None else 0


def needs_cluster_id(job: ExecutionJob) -> bool:
    """A job new to the queue: no ClusterId yet, and not being deleted."""
    return cluster_id_of(job) == 0 and not job.metadata.deletion_timestamp


def stored_cluster_id(pool: Mapping[str, Any] | None) -> int:
    """The last ClusterId the Pool's counter gave (0: none yet, or no Pool)."""
    value = ((pool or {}).get("status") or {}).get(LAST_CLUSTER_ID)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def reserve_cluster_ids(last: int, seen: int, count: int) -> tuple[int, int]:
    """The first of `count` new ClusterIds and the counter's new value: one past the larger
    of the counter (`last`) and the largest ClusterId a job has (`seen`: jobs given theirs
    before the counter existed), so that no ClusterId is given twice, whichever jobs were
    deleted since."""
    first = max(last, seen) + 1
    return first, first + count - 1
