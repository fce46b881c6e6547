"""Startd cron ads kept between runs (the reference's "Startd Cron"): an ad replaces the
earlier ad of its full name (job name joined with its tag); a job removed from the policy
takes its ads with it. Merging them into slot ads is the startd's (`kondor_core.startd`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from kondor_core.cron.output import CronAd

CronAds = Mapping[str, CronAd]


def record(current: CronAds, ads: Iterable[CronAd]) -> dict[str, CronAd]:
    """`current` with each of `ads` replacing the ad of its full name (new names appended)."""
    out = dict(current)
    for ad in ads:
        out[ad.full_name] = ad
    return out


def retain(current: CronAds, jobs: Iterable[str]) -> dict[str, CronAd]:
    """Only the ads of `jobs` (a job removed from the policy takes its ads with it)."""
    kept = set(jobs)
    return {name: ad for name, ad in current.items() if ad.job in kept}


def merge_order(current: CronAds, jobs: Sequence[str] = ()) -> list[CronAd]:
    """The ads in merge order: per job (in `jobs` order, then any other), its own ad, then
    its named ads as they first appeared."""
    rank = {job: index for index, job in enumerate(jobs)}
    ads = list(current.values())
    return sorted(
        ads,
        key=lambda ad: (rank.get(ad.job, len(rank)), ad.tag != "", ads.index(ad)),
    )


def attribute_names(current: CronAds) -> frozenset[str]:
    """Every attribute the cron ads set (what the agent treats as volatile)."""
    return frozenset(name for ad in current.values() for name in ad.attributes)
