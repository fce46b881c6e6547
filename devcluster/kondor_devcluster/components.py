"""Command lines of the control plane components: pure functions of paths and ports.

The flags follow what controller-runtime's envtest and kwokctl's binary runtime pass, with the
authorizers and admission a real cluster has: Node and RBAC, webhooks on. Everything listens on
127.0.0.1 only, on ports chosen per cluster so that two dev clusters run side by side.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kondor_devcluster.pki import PkiFiles

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
#: The first address of the service range: the `kubernetes` Service, in the serving cert.
KUBERNETES_SERVICE_IP = "10.0.0.1"
POD_CIDR = "10.244.0.0/16"
#: The annotation kwok selects the nodes it manages by.
FRONT_PROXY_CLIENT = "front-proxy-client"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE = "fake"


@dataclass(frozen=True)
class Ports:
    """The loopback ports of one dev cluster; `apiserver` is the user's `--port`."""

    apiserver: int
    etcd_client: int
    etcd_peer: int
    controller_manager: int
    scheduler: int
    kwok: int

    def as_dict(self) -> dict[str, int]:
        return {
            "apiserver": self.apiserver,
            "etcd_client": self.etcd_client,
            "etcd_peer": self.etcd_peer,
            "controller_manager": self.controller_manager,
            "scheduler": self.scheduler,
            "kwok": self.kwok,
        }


@dataclass(frozen=True)
class Layout:
    """Where one dev cluster keeps its files: everything under the state directory."""

    state_dir: Path

    @property
    def pki(self) -> PkiFiles:
        return PkiFiles(self.state_dir / "pki")

    @property
    def etcd_data(self) -> Path:
        return self.state_dir / "etcd"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def config(self) -> Path:
        return self.state_dir / "config"

    @property
    def pids(self) -> Path:
        return self.state_dir / "pids.json"

    @property
    def supervisor(self) -> Path:
        """The `up` process that runs the cluster (`cluster.write_supervisor`)."""
        return self.state_dir / "supervisor.json"

    @property
    def ports(self) -> Path:
        return self.state_dir / "ports.json"

    def component_kubeconfig(self, component: str) -> Path:
        return self.config / f"{component}.kubeconfig"

    @property
    def kwok_config(self) -> Path:
        return self.config / "kwok.yaml"


def etcd_args(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    """etcd: one member, plain HTTP on loopback (only the API server talks to it)."""
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    client = f"http://127.0.0.1:{ports.etcd_client}"
    return [
        str(binary),
        "--name=kondor",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=kondor={peer}",
        # A dev cluster loses nothing on a clean stop without fsync, and writes far faster.
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]


def apiserver_args(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    """kube-apiserver on 127.0.0.1 over TLS, client-certificate authentication, Node and RBAC."""
    pki = layout.pki
    return [
        str(binary),
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        f"--client-ca-file={pki.ca_cert}",
        f"--tls-cert-file={pki.cert('apiserver')}",
        f"--tls-private-key-file={pki.key('apiserver')}",
        f"--cert-dir={layout.config / 'apiserver-certs'}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        f"--service-account-issuer=https://127.0.0.1:{ports.apiserver}",
        f"--service-account-key-file={pki.sa_public}",
        f"--service-account-signing-key-file={pki.sa_private}",
        "--authorization-mode=Node,RBAC",
        # The real node's kubelet (logs, exec): by its address, with a client certificate.
        f"--kubelet-client-certificate={pki.cert('apiserver-kubelet-client')}",
        f"--kubelet-client-key={pki.key('apiserver-kubelet-client')}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        # Front proxy: the controller manager's and scheduler's delegated authentication (and
        # aggregated API servers) read this CA; only the CN front-proxy-client may assert users.
        f"--requestheader-client-ca-file={pki.ca_cert}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki.cert('front-proxy-client')}",
        f"--proxy-client-key-file={pki.key('front-proxy-client')}",
        # Webhooks (and aggregated APIs) behind a Service are called at one of its endpoints, not
        # its cluster IP: there is no kube-proxy, and the real node's pod IPs (its bridge) are
        # reachable from this host. kube-apiserver's buildServiceResolver (cmd/kube-apiserver/
        # app/server.go) gives this resolver to the admission webhooks too.
        "--enable-aggregator-routing=true",
        # The `kubernetes` Service cannot have a loopback endpoint, and nothing in-cluster needs it.
        "--endpoint-reconciler-type=none",
        # The default plugins include MutatingAdmissionWebhook and ValidatingAdmissionWebhook.
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        # A namespace's objects (a benchmark's 10,000 pods) are deleted 8 at a time, not one
        # by one (the default of 1 takes about two minutes for 10,000 pods on 2 cores).
        "--delete-collection-workers=8",
        # /debug/pprof for an admin, on 127.0.0.1: where a benchmark's API server time goes.
        "--profiling=true",
        "--v=1",
    ]


def controller_manager_args(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    """kube-controller-manager: every default controller (garbage collector, namespace...)."""
    kubeconfig = layout.component_kubeconfig("kube-controller-manager")
    pki = layout.pki
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        f"--cert-dir={layout.config / 'kube-controller-manager-certs'}",
        # Not the TTL controller: it tells kubelets how long to cache Secrets and ConfigMaps
        # by cluster size, and re-annotates every Node each time the fleet crosses a size
        # step (100, 500, 1,000 nodes), thousands of patches at this client's 20 per second
        # long after the nodes exist; kwok nodes have no kubelet to read it.
        "--controllers=*,-ttl-controller",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki.sa_private}",
        f"--root-ca-file={pki.ca_cert}",
        f"--cluster-signing-cert-file={pki.ca_cert}",
        f"--cluster-signing-key-file={pki.ca_key}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        # One replica per cluster: leader election would only add lease writes.
        "--leader-elect=false",
        "--v=1",
    ]


def scheduler_args(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    """kube-scheduler with the default profile."""
    kubeconfig = layout.component_kubeconfig("kube-scheduler")
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        f"--cert-dir={layout.config / 'kube-scheduler-certs'}",
        "--leader-elect=false",
        "--v=1",
    ]


def kwok_args(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    """kwok, managing only the nodes annotated `kwok.x-k8s.io/node=fake`, with our pod stages."""
    return [
        str(binary),
        f"--kubeconfig={layout.component_kubeconfig('kwok')}",
        f"--config={layout.kwok_config}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
        "--manage-nodes-with-label-selector=",
        f"--server-address=127.0.0.1:{ports.kwok}",
        "--node-ip=127.0.0.1",
        f"--cidr={POD_CIDR}",
        # Leases renewed every 10 s, as a kubelet does: the node lifecycle controller then
        # never marks a simulated node Unknown between its status reports (5 minutes apart on
        # average, nodes.node_stages).
        "--node-lease-duration-seconds=40",
    ]
