"""The Kondor operator (kopf): SlotPolicy and ExecutionPoint reconcilers, negotiator, webhooks."""
