"""Prometheus metrics of the operator, on their own registry (served with `--metrics-port`)."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

PREFIX = "kondor_operator"


class Metrics:
    """What the operator counts. One instance per process; tests make their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.reconciles = Counter(
            f"{PREFIX}_reconciles",
            "Reconciles by kind (ExecutionPoint, SlotPolicy) and result (ok, error)",
            ["kind", "result"],
            registry=self.registry,
        )
        self.changes = Counter(
            f"{PREFIX}_changes",
            "Writes by kind and action (create, update, delete, status)",
            ["kind", "action"],
            registry=self.registry,
        )
        self.events = Counter(
            f"{PREFIX}_events",
            "Events about ExecutionPoints and SlotPolicies: posted one per change, or "
            "summarised (the changes a summary stands for) when a bulk change is over the "
            "Event allowance",
            ["delivery"],
            registry=self.registry,
        )
        self.execution_points = Gauge(
            f"{PREFIX}_execution_points",
            "ExecutionPoints by whether the agent's heartbeat is fresh (Fresh, Stale, Unknown)",
            ["heartbeat"],
            registry=self.registry,
        )
        self.slots = Gauge(
            f"{PREFIX}_slots",
            "Slots of all ExecutionPoints by HTCondor state and activity",
            ["state", "activity"],
            registry=self.registry,
        )
        self.slot_policies = Gauge(
            f"{PREFIX}_slot_policies",
            "SlotPolicies by validity",
            ["valid"],
            registry=self.registry,
        )
        self.leader = Gauge(
            f"{PREFIX}_leader",
            "1 while this replica holds the leader Lease (or runs without election)",
            registry=self.registry,
        )

        self.negotiation_cycle = Histogram(
            f"{PREFIX}_negotiation_cycle_seconds",
            "Duration of one negotiation cycle (matchmaking and its writes)",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.matches = Counter(
            f"{PREFIX}_negotiation_matches",
            "Jobs matched to a slot by the negotiator (written to the job's status)",
            registry=self.registry,
        )
        self.idle_jobs = Gauge(
            f"{PREFIX}_idle_jobs",
            "Idle jobs the last negotiation cycle negotiated for",
            registry=self.registry,
        )
        self.job_writes = Counter(
            f"{PREFIX}_job_writes",
            "ExecutionJob writes by what (status, label) and result (ok, conflict, error)",
            ["what", "result"],
            registry=self.registry,
        )

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Serve /metrics on `port` from a background thread."""
        start_http_server(port, addr=addr, registry=self.registry)

    def set_leader(self, leading: bool) -> None:
        self.leader.set(1 if leading else 0)

    def observe_fleet(
        self,
        heartbeats: Iterable[str],
        slots: Iterable[tuple[str, str]],
        policies_valid: Mapping[str, bool],
    ) -> None:
        """Replace the gauges with the fleet as it is now."""
        self.set_fleet(Tally(heartbeats), Tally(slots), policies_valid)

    def set_fleet(
        self,
        heartbeats: Mapping[str, int],
        slots: Mapping[tuple[str, str], int],
        policies_valid: Mapping[str, bool],
    ) -> None:
        """Replace the gauges with these counts (ExecutionPoints by heartbeat, slots by
        state and activity)."""
        self.execution_points.clear()
        for state in ("Fresh", "Stale", "Unknown"):
            self.execution_points.labels(state).set(0)
        for state, count in heartbeats.items():
            if count:
                self.execution_points.labels(state).set(count)
        self.slots.clear()
        for (state, activity), count in slots.items():
            if count:
                self.slots.labels(state, activity).set(count)
        valid = sum(policies_valid.values())
        self.slot_policies.labels("true").set(valid)
        self.slot_policies.labels("false").set(len(policies_valid) - valid)
