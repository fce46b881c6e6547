"""kopf handlers, registered on a registry the caller owns. Thin: they index, touch, check.

* `@kopf.index` on Nodes, ExecutionPoints and SlotPolicies: the in-memory view
  the reconciler reads (no change-detecting handlers, so no annotation writes on
  these objects; DESIGN.md, "Scale").
* `@kopf.on.event` on the same kinds: mark what changed for the reconciler.
* `@kopf.on.validate` on SlotPolicies: refuse an invalid policy at `kubectl apply`
  with the field, the value and classad2's message.
* ExecutionJob admission (owner, validity, immutability): `webhook.register_job_admission`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from kondor_core.api import EXECUTION_POINTS, GROUP, SLOT_POLICIES, VERSION
from kondor_core.fleet import NodeFacts, ObservedPolicy, admission_message, check_policy
from kondor_operator.reconciler import (
    ExecutionPointEntry,
    NodeChanges,
    Reconciler,
    execution_point_entry,
    node_entry,
    slot_policy_entry,
)
from kondor_operator.webhook import register_job_admission

logger = logging.getLogger(__name__)

#: Index ids: kopf passes each index to handlers as a keyword argument of this name.
NODES_INDEX = "nodes"
EXECUTION_POINTS_INDEX = "executionpoints"
SLOT_POLICIES_INDEX = "slotpolicies"
#: The admission handler's id; kopf names the webhook `<id>.<configuration name>`.
VALIDATE_ID = "validate-slotpolicy"


def register(
    registry: kopf.OperatorRegistry,
    reconciler: Reconciler,
    *,
    connection: kopf.ConnectionInfo | None = None,
    webhook: bool = True,
    webhook_fails_closed: bool = False,
) -> None:
    """Register the operator's handlers on `registry`.

    `webhook_fails_closed` is the webhook's failurePolicy: Fail refuses every SlotPolicy
    write while the operator is down; Ignore (the default) admits them, and the reconciler
    reports an invalid one in its status and leaves its ExecutionPoints as they were.
    """
    tasks: list[asyncio.Task[None]] = []

    if connection is not None:

        @kopf.on.login(id="login", registry=registry)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return connection

    @kopf.index(group="", version="v1", plural="nodes", id=NODES_INDEX, registry=registry)
    def index_node(body: kopf.Body, **_: Any) -> dict[str, NodeFacts]:
        facts = node_entry(body)
        return {facts.name: facts}

    @kopf.index(GROUP, VERSION, EXECUTION_POINTS, id=EXECUTION_POINTS_INDEX, registry=registry)
    def index_execution_point(body: kopf.Body, **_: Any) -> dict[str, ExecutionPointEntry]:
        entry = execution_point_entry(body)
        return {entry.observed.name: entry}

    @kopf.index(GROUP, VERSION, SLOT_POLICIES, id=SLOT_POLICIES_INDEX, registry=registry)
    def index_slot_policy(body: kopf.Body, **_: Any) -> dict[str, ObservedPolicy]:
        policy = slot_policy_entry(body)
        return {policy.name: policy}

    @kopf.on.startup(id="start-reconciler", registry=registry)
    async def start_reconciler(**kwargs: Any) -> None:
        reconciler.attach(
            kwargs[NODES_INDEX], kwargs[EXECUTION_POINTS_INDEX], kwargs[SLOT_POLICIES_INDEX]
        )
        tasks.append(asyncio.create_task(reconciler.run(), name="kondor reconciler"))

    @kopf.on.cleanup(id="stop-reconciler", registry=registry)
    async def stop_reconciler(**_: Any) -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    node_changes = NodeChanges()

    @kopf.on.event(group="", version="v1", plural="nodes", id="node-changed", registry=registry)
    def node_changed(name: str, body: kopf.Body, type: str | None, **_: Any) -> None:
        if node_changes.matter(name, body, type):
            reconciler.touch(name)

    @kopf.on.event(
        GROUP, VERSION, EXECUTION_POINTS, id="execution-point-changed", registry=registry
    )
    def execution_point_changed(name: str, **_: Any) -> None:
        reconciler.touch(name)

    @kopf.on.event(GROUP, VERSION, SLOT_POLICIES, id="slot-policy-changed", registry=registry)
    def slot_policy_changed(**_: Any) -> None:
        reconciler.touch_all()

    if webhook:

        @kopf.on.validate(
            GROUP,
            VERSION,
            SLOT_POLICIES,
            id=VALIDATE_ID,
            operations=["CREATE", "UPDATE"],
            ignore_failures=not webhook_fails_closed,
            registry=registry,
        )
        def validate_slot_policy(name: str | None, spec: kopf.Spec, **_: Any) -> None:
            checked = check_policy(dict(spec))
            if not checked.valid:
                raise kopf.AdmissionError(admission_message(name or "", checked), code=422)

        register_job_admission(registry, connection=connection, fails_closed=webhook_fails_closed)
