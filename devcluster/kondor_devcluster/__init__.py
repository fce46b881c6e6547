"""A local development cluster: a real Kubernetes control plane as local processes, kwok nodes.

`kondor dev-cluster up` builds kube-apiserver, etcd, kube-controller-manager, kube-scheduler and
kwok once from the Go modules in `devcluster/controlplane/`, then runs them on loopback with real
TLS identities (admin, alice, bob) under real RBAC. Machine files become kwok-managed Nodes whose
pods kwok's stages move through their phases: a simulation of the kubelet (see the README).

The entry points are `kondor_devcluster.cluster.DevCluster` (in-process, for tests),
`kondor_devcluster.cli` (the command) and `kondor_devcluster.build` (the binaries).
"""

from __future__ import annotations

from kondor_devcluster.versions import ETCD, KUBERNETES, KWOK

__all__ = ["ETCD", "KUBERNETES", "KWOK"]
