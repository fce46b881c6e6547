"""The agent's Prometheus metrics, in a registry of its own (so tests can read a fresh one)."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from kondor_core.policy import Action


class AgentMetrics:
    """Slots by state and activity, evaluation time, API writes by result, and the actions
    that wait for a launcher."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.slots = Gauge(
            "kondor_agent_slots",
            "Slots of this node by state and activity",
            ["state", "activity"],
            registry=self.registry,
        )
        self.evaluation = Histogram(
            "kondor_agent_evaluation_seconds",
            "Time to evaluate the startd policy of every slot once (one polling cycle)",
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
        self.api_writes = Counter(
            "kondor_agent_api_writes",
            "Writes of the ExecutionPoint status, by result (ok, error, not-found)",
            ["result"],
            registry=self.registry,
        )
        self.actions = Counter(
            "kondor_agent_actions_not_carried_out",
            "Policy actions decided but not carried out: this agent has no job launcher yet",
            ["kind"],
            registry=self.registry,
        )
        self._seen: set[tuple[str, str]] = set()

    def set_slots(self, pairs: Iterable[tuple[str, str]]) -> None:
        counts = Tally(pairs)
        for key in self._seen - set(counts):
            self.slots.labels(*key).set(0)
        for key, count in counts.items():
            self.slots.labels(*key).set(count)
        self._seen |= set(counts)

    def not_carried_out(self, actions: Iterable[Action]) -> None:
        for action in actions:
            self.actions.labels(str(action.kind)).inc()

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value (0 when absent): for tests and the loop's own checks."""
        found = self.registry.get_sample_value(name, labels)
        return 0.0 if found is None else float(found)

    def serve(self, port: int) -> None:
        """Serve /metrics on `port` (all interfaces, as a DaemonSet's metrics port is)."""
        start_http_server(port, registry=self.registry)
