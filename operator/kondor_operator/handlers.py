"""kopf handlers, registered on a registry the caller owns. Thin: they index, touch, check.

* `@kopf.index` on SlotPolicies: the in-memory view the reconciler reads (no
  change-detecting handlers, so no annotation writes on them; DESIGN.md, "Scale").
* Nodes are not kopf's: their metadata is watched by `kondor_operator.nodewatch`
  (status heartbeats cost nothing), started with the reconciler, which is attached
  once every Node has been listed.
* ExecutionPoints are not kopf's either: the operator's own watch
  (`kondor_operator.epwatch`) parses each once, keeps the table the reconciler reads
  and touches it for what changed (an agent's heartbeat is no kopf handler call).
* `@kopf.on.event` on SlotPolicies: mark what changed for the reconciler.
* `@kopf.on.validate` on SlotPolicies: refuse an invalid policy at `kubectl apply`
  with the field, the value and classad2's message.
* ExecutionJob admission (owner, validity, immutability): `webhook.register_job_admission`.
* CodClaim admission (owner, label, who may act): `webhook.register_cod_admission`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import kopf

from kondor_core.api import GROUP, SLOT_POLICIES, VERSION
from kondor_core.fleet import NodeFacts, ObservedPolicy, admission_message, check_policy
from kondor_operator.nodewatch import NodeChanges, NodeSource, NodeWatch
from kondor_operator.reconciler import ExecutionPointEntries, Reconciler, slot_policy_entry
from kondor_operator.webhook import (
    PodSecurityCeiling,
    Reviewer,
    Reviewers,
    admit_slot_policy,
    hook_checks,
    register_cod_admission,
    register_job_admission,
)

logger = logging.getLogger(__name__)

#: Index ids: kopf passes each index to handlers as a keyword argument of this name.
SLOT_POLICIES_INDEX = "slotpolicies"
#: The admission handler's id; kopf names the webhook `<id>.<configuration name>`.
VALIDATE_ID = "validate-slotpolicy"


def register(
    registry: kopf.OperatorRegistry,
    reconciler: Reconciler,
    nodes: NodeSource,
    execution_points: ExecutionPointEntries,
    *,
    connection: kopf.ConnectionInfo | None = None,
    webhook: bool = True,
    webhook_fails_closed: bool = False,
    reviewers: Reviewers | None = None,
    slot_policies: Callable[[], Sequence[Mapping[str, Any]]] | None = None,
) -> None:
    """Register the operator's handlers on `registry`.

    `nodes` lists and watches Node metadata (kondor_operator.kube.Kube); `execution_points`
    is the operator's ExecutionPoint watch, filled from its first listing before kopf starts
    (kondor_operator.main), which touches the reconciler itself.
    `webhook_fails_closed` is the webhook's failurePolicy: Fail refuses every SlotPolicy
    write while the operator is down; Ignore (the default) admits them, and the reconciler
    reports an invalid one in its status and leaves its ExecutionPoints as they were.
    The ExecutionJob and CodClaim webhooks go into `reviewers` too: the server answers them.
    `slot_policies` lists the cluster's SlotPolicies: a pod job may ask for what the most
    permissive of them allows (`PodSecurityCeiling`); without it, Pod Security restricted.
    """
    tasks: list[asyncio.Task[None]] = []
    stop_watch = threading.Event()
    #: Node name -> its facts, in kopf's index shape; written on the event loop only.
    node_index: dict[str, tuple[NodeFacts]] = {}

    if connection is not None:

        @kopf.on.login(id="login", registry=registry)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return connection

    @kopf.index(GROUP, VERSION, SLOT_POLICIES, id=SLOT_POLICIES_INDEX, registry=registry)
    async def index_slot_policy(body: kopf.Body, **_: Any) -> dict[str, ObservedPolicy]:
        policy = slot_policy_entry(body)
        return {policy.name: policy}

    @kopf.on.startup(id="start-reconciler", registry=registry)
    async def start_reconciler(**kwargs: Any) -> None:
        loop = asyncio.get_running_loop()

        def nodes_changed(changes: NodeChanges) -> None:  # on the event loop
            for name, facts in changes.items():
                if facts is None:
                    node_index.pop(name, None)
                else:
                    node_index[name] = (facts,)
                reconciler.touch_node(name)

        def from_watch(changes: NodeChanges) -> None:  # on the watch's thread
            loop.call_soon_threadsafe(nodes_changed, dict(changes))

        watch = NodeWatch(nodes, from_watch)
        watch.start(stop_watch)
        # The first pass must see every Node: one missing would lose its ExecutionPoint.
        while not await asyncio.to_thread(watch.synced.wait, 1.0):
            pass
        await asyncio.sleep(0)  # the listing's changes, queued before `synced`, are applied
        reconciler.attach(node_index, execution_points, kwargs[SLOT_POLICIES_INDEX])
        tasks.append(asyncio.create_task(reconciler.run(), name="kondor reconciler"))

    @kopf.on.cleanup(id="stop-reconciler", registry=registry)
    async def stop_reconciler(**_: Any) -> None:
        stop_watch.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        reconciler.close()

    @kopf.on.event(GROUP, VERSION, SLOT_POLICIES, id="slot-policy-changed", registry=registry)
    async def slot_policy_changed(**_: Any) -> None:
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
            checked = check_policy(dict(spec), **hook_checks(os.environ))
            if not checked.valid:
                raise kopf.AdmissionError(admission_message(name or "", checked), code=422)

        # The same decision, answered by the server itself (in every replica, leading or not).
        checks = hook_checks(os.environ)
        if reviewers is not None:
            reviewers[VALIDATE_ID] = Reviewer(
                functools.partial(admit_slot_policy, checks=checks), mutating=False
            )

        register_job_admission(
            registry,
            reviewers,
            connection=connection,
            fails_closed=webhook_fails_closed,
            pod_security=PodSecurityCeiling(slot_policies) if slot_policies else None,
        )
        register_cod_admission(
            registry, reviewers, connection=connection, fails_closed=webhook_fails_closed
        )
