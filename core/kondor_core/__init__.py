"""Kondor's pure domain: slot layouts, carving, slot ads and startd policy.

Nothing in this package does I/O, reads a clock or talks to Kubernetes; the
operator, the agent and the CLI gather facts and apply what it decides.
"""
