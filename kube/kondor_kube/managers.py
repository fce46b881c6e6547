"""The field managers Kondor's writers name on every write (`metadata.managedFields`).

Each writer of an API object names itself, so `managedFields` says which component owns
which field, and server-side apply conflicts name the component that set a field. One name
per distinct writer; a write without one of these is a bug.
"""

from __future__ import annotations

from typing import Final

RECONCILER: Final = "kondor-reconciler"
"""The operator's reconciler: the ExecutionPoints it creates, patches and deletes, the
ExecutionPoint and SlotPolicy status it derives, its Events; also the operator's power
marker (Node annotations) and its cordon drains (spec.drain of a cordoned node's point)."""

NEGOTIATOR: Final = "kondor-negotiator"
"""The operator's negotiator (the schedd side): a job's schedd fields, its match, the holds
it decides, the Pool's negotiation counters."""

DEFRAG: Final = "kondor-defrag"
"""The operator's defragmenter (condor_defrag): the drains it starts and ends on points."""

WEBHOOKS: Final = "kondor-operator"
"""The operator's admission webhook configurations (server-side apply by every replica);
the name they were applied with before the managers were split, so that an upgraded
operator keeps owning the same fields."""

LEADER: Final = "kondor-leader"
"""The operator's leader election: the coordination.k8s.io Lease it holds and renews."""

AGENT: Final = "kondor-agent"
"""The node agent: its ExecutionPoint's status, its jobs' run fields, the Pods it launches,
the Events it records, its fetch-work ConfigMaps and backfill objects."""

CLI: Final = "kondor-cli"
"""`kubectl kondor` commands a user runs: submit, hold/release/remove, drain, cod, userprio."""

DEVCLUSTER: Final = "kondor-devcluster"
"""The development cluster's setup: the objects it creates for a local control plane."""

BENCH: Final = "kondor-bench"
"""The benchmarks (bench/): the fake fleets and jobs they create and patch."""

ALL: Final = (RECONCILER, NEGOTIATOR, DEFRAG, WEBHOOKS, LEADER, AGENT, CLI, DEVCLUSTER, BENCH)
"""Every field manager, for tests that check `managedFields` names only Kondor's writers."""
