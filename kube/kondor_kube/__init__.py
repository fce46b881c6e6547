"""Kondor's one door to the Kubernetes API: the only package that imports `kubernetes`.

It loads the client configuration (kubeconfig or in-cluster), runs list-watch reflectors
(bookmarks, 410 relist, back-off), and offers typed reads and patches with the API's errors
mapped once. The operator, the agent, the CLI and the benchmarks use it; it imports none of
them.
"""
