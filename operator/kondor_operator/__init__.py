"""The Kondor operator (kopf): one ExecutionPoint per selected node, SlotPolicy status, webhook.

What it does (DESIGN.md, "Node to ExecutionPoint"):

* reads SlotPolicies through `@kopf.index` (no change-detecting handlers, so no
  annotations are written on them), Node metadata through a watch of its own
  (`kondor_operator.nodewatch`: PartialObjectMetadata, so Node status heartbeats
  cost nothing) and ExecutionPoints through another (`kondor_operator.epwatch`:
  each parsed once, one table for the reconciler, the negotiator and power
  management, so an agent's heartbeat is no kopf handler call) and, in one
  reconciler task, applies what `kondor_core.fleet` plans, on a bounded pool of
  writer threads paced by `--kube-qps`/`--kube-burst`: an
  ExecutionPoint per node that a valid SlotPolicy selects (owned by the Node,
  spec pinning the winning policy's name, generation and hash), deleted when no
  policy selects the node; SlotPolicy status (Valid, Ready, observedGeneration,
  selectedNodes, governedNodes, hash, warnings); the ExecutionPoint's
  `status.operator` subtree (policy tie, agent heartbeat freshness) by merge
  patch, leaving the agent's fields alone; an Event for every change (past an
  allowance of 25, then one a second, a bulk change is summarised on its SlotPolicy).
* refuses invalid SlotPolicies at admission (`kondor_operator.webhook`).
* runs as one active replica under a Lease (`kondor_operator.leader`) and
  exports Prometheus metrics (`kondor_operator.metrics`).

Permissions it needs (for the chart's ClusterRole): nodes get/list/watch/patch (patch:
the cluster autoscaler's scale-down annotations, `kondor_operator.power`);
executionpoints get/list/watch/create/patch/delete and executionpoints/status
patch; slotpolicies get/list/watch and slotpolicies/status patch; events create
in `default`; leases get/create/patch in its namespace; when kopf manages the
webhook configuration, validatingwebhookconfigurations get/list/watch/create/
patch; customresourcedefinitions get/list/watch (kopf discovers the kinds); for the
negotiator, executionjobs get/list/watch/patch and executionjobs/status get/patch, pools
get/list/watch/create and pools/status get/patch (the accountant in the Pool's status).

Run it with `kondor-operator --help`; `main` is the entry point.
"""
