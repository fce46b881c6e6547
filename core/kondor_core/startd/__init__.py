"""One node's condor_startd as a pure model, driven alike by the agent, `kondor simulate` and
`kondor simulate --timeline`: layout, slot states, claims, dynamic-slot carving and release,
and the published slot ads (`kondor_core.startd.node`); the ExecutionPoint status built from
them (`kondor_core.startd.status`); startd cron ads merged into the slot ads
(`kondor_core.startd.cron_ads`)."""

from kondor_core.startd.cron_ads import merge_into_slots, selects
from kondor_core.startd.node import (
    CLOCK_ATTRIBUTES,
    Startd,
    Tick,
    machine_ad,
    published_ads,
    start,
    tick,
    whole_seconds,
    with_benchmarks,
    with_cron_ads,
    with_machine,
)
from kondor_core.startd.status import slot_status, status, summary

__all__ = [
    "CLOCK_ATTRIBUTES",
    "Startd",
    "Tick",
    "machine_ad",
    "merge_into_slots",
    "published_ads",
    "selects",
    "slot_status",
    "start",
    "status",
    "summary",
    "tick",
    "whole_seconds",
    "with_benchmarks",
    "with_cron_ads",
    "with_machine",
]
