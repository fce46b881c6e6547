"""Run a dev cluster: start the components in order, wait until each is healthy, stop cleanly.

Everything a cluster owns lives in its state directory: the PKI, etcd's data, the component
kubeconfigs and kwok's stages (`config/`), logs (`logs/<component>.log`), the ports it chose
(`ports.json`, reused on restart) and, while it runs, the processes' ids (`pids.json`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

import httpx

from kondor_core.api.crds import all_crds
from kondor_core.jobs.pod import harvest_priority_class
from kondor_devcluster import (
    apptainer,
    build,
    chart,
    components,
    images,
    kondor,
    kubeconfig,
    nodes,
    pki,
    rbac,
    readiness,
    realnode,
    versions,
)
from kondor_devcluster.components import Layout, Ports

FIELD_MANAGER = "kondor-devcluster"
#: The `up` process of a cluster, in `kondor dev-cluster ps` and `running_pids`.
SUPERVISOR = "dev-cluster"
#: Start order; stopping goes the other way.
ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")

_ARGS: dict[str, Callable[[Path, Layout, Ports], list[str]]] = {
    "etcd": components.etcd_args,
    "kube-apiserver": components.apiserver_args,
    "kube-controller-manager": components.controller_manager_args,
    "kube-scheduler": components.scheduler_args,
    "kwok": components.kwok_args,
}


class DevClusterError(RuntimeError):
    """The dev cluster could not start or stop; the message says which component and why."""


@dataclass(frozen=True)
class ClusterSpec:
    """What `kondor dev-cluster up` was asked for."""

    port: int
    kubeconfig: Path
    state_dir: Path
    nodes: tuple[Path, ...] = ()
    cache_dir: Path | None = None
    ready_timeout: float = 120.0
    #: Run the Kondor operator (`python -m kondor_operator.main`) as admin.
    operator: bool = False
    #: Run one Kondor agent per simulated node, on its machine file.
    agents: bool = False
    #: The name of a real node (containerd, runc and a kubelet on this host), if wanted.
    real_node: str | None = None
    #: A machine file whose labels the real node gets (its facts come from the host itself).
    real_node_machine: Path | None = None
    #: An NVML recording the real node's agent answers GPU questions from (its GPUs).
    real_node_nvml: Path | None = None
    #: Where the simulated nodes' agents find GPU device nodes (stand-ins, for tests).
    gpu_devices_root: Path | None = None
    #: OCI image archives imported into the real node's containerd before it is Ready.
    images: tuple[Path, ...] = ()


@dataclass
class _Process:
    name: str
    binary: Path
    popen: subprocess.Popen[bytes]
    log: Path
    #: The cluster stops when an essential process dies; Kondor's own processes are not:
    #: one that exits is reported, and the control plane keeps running.
    essential: bool = True
    reported: bool = False


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:`port` (as Go's do, with SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def choose_ports(api_port: int, previous: Mapping[str, int] | None = None) -> Ports:
    """The cluster's ports: the API server's as asked, the others as before if still free."""
    chosen: dict[str, int] = {"apiserver": api_port}
    taken = {api_port}
    for name in ("etcd_client", "etcd_peer", "controller_manager", "scheduler", "kwok"):
        port = (previous or {}).get(name)
        if port is None or port in taken or not port_is_free(port):
            port = free_port()
            while port in taken:
                port = free_port()
        chosen[name] = port
        taken.add(port)
    return Ports(**chosen)


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _argv0(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


def _process_is(pid: int, binary: str) -> bool:
    """Whether `pid` still runs `binary` (and is not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(cmdline) and cmdline[0].decode(errors="replace") == binary


def _wait_gone(pid: int, binary: str, timeout: float) -> bool:
    """Wait until `pid` no longer runs `binary` (reaping it if it is our child); whether it went."""
    deadline = time.monotonic() + timeout
    while _process_is(pid, binary):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _terminate(pids: Sequence[tuple[str, int, str]], timeout: float = 15.0) -> None:
    """SIGTERM each process in turn, waiting for it; SIGKILL what outlives `timeout`, and
    return only once each is gone (a process SIGKILLed is not gone at once)."""
    for _name, pid, binary in pids:
        if not _process_is(pid, binary):
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not _wait_gone(pid, binary, timeout):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, binary, timeout)


def read_pids(layout: Layout) -> list[tuple[str, int, str]]:
    """The recorded processes of a detached cluster, in start order."""
    try:
        data = json.loads(layout.pids.read_text())
    except FileNotFoundError:
        return []
    return [(name, int(entry["pid"]), str(entry["binary"])) for name, entry in data.items()]


def write_supervisor(layout: Layout) -> None:
    """Record this process as the cluster's `up` (foreground or detached): `down` stops the
    cluster by stopping it, so the components are stopped in order and reaped by their parent."""
    record = {"pid": os.getpid(), "binary": _argv0(os.getpid())}
    layout.supervisor.write_text(json.dumps(record, indent=2) + "\n")


def read_supervisor(layout: Layout) -> tuple[str, int, str] | None:
    """The recorded `up` process of a cluster, as a `read_pids` entry named `dev-cluster`."""
    try:
        data = json.loads(layout.supervisor.read_text())
        return (SUPERVISOR, int(data["pid"]), str(data["binary"]))
    except (FileNotFoundError, ValueError, KeyError):
        return None


def running_pids(layout: Layout) -> list[tuple[str, int, str]]:
    """The cluster's processes that still run: its `up` first, then the components in start
    order (this process left out: an `up` checking whether its cluster already runs)."""
    supervisor = read_supervisor(layout)
    entries = ([] if supervisor is None else [supervisor]) + read_pids(layout)
    return [
        entry for entry in entries if entry[1] != os.getpid() and _process_is(entry[1], entry[2])
    ]


def stop_detached(state_dir: Path, timeout: float = 120.0) -> list[str]:
    """Stop the cluster that runs from `state_dir`, keeping the data; return once every process
    it started is gone (the real node's shims included). Returns the names stopped.

    Its `up` is asked first (SIGTERM): it stops the components in reverse order, waits for each
    and puts the host back. Whatever outlives it (an `up` killed with SIGKILL, a cluster run in
    a test's own process) is stopped here, in the same order.
    """
    layout = Layout(state_dir)
    alive = running_pids(layout)
    names = [name for name, _pid, _binary in alive]
    node = realnode.RealNodeLayout(state_dir)
    # Containerd's shims are nobody's children here: whoever reaps orphans reaps them.
    orphans = [pid for pid, _name in realnode.node_processes(node)]
    _terminate([entry for entry in alive if entry[0] == SUPERVISOR], timeout)
    # Unlink first: a foreground `up` watching this file then stops quietly, as asked.
    layout.pids.unlink(missing_ok=True)
    _terminate([entry for entry in reversed(alive) if entry[0] != SUPERVISOR])
    # Also after a crash: whatever a real node left on the host is recorded in its state.
    if node.host_record.exists():
        realnode.cleanup_host(node, sys.stderr)
        names.append("the real node's pods and host changes")
    # The shims outlive containerd by design, and nothing waits for them but this.
    _terminate([(name, pid, _argv0(pid)) for pid, name in realnode.node_processes(node)], 5.0)
    _wait_reaped(orphans, 15.0)
    return names


def _wait_reaped(pids: Sequence[int], timeout: float) -> None:
    """Wait until none of `pids` is even a zombie (`ps` would still list one)."""
    deadline = time.monotonic() + timeout
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)


@dataclass
class DevCluster:
    """One dev cluster's processes. Use as a context manager, or `start()` and `stop()`."""

    spec: ClusterSpec
    log: TextIO = field(default_factory=lambda: sys.stderr)
    _processes: list[_Process] = field(default_factory=list)
    _ports: Ports | None = None
    _nodes: list[dict[str, Any]] = field(default_factory=list)
    #: Node name -> its machine file, for the agents.
    _machine_files: dict[str, Path] = field(default_factory=dict)
    #: The nodes whose agents this cluster started (their cgroup roots go at `stop`).
    _agent_nodes: set[str] = field(default_factory=set)
    _kubelet: Path | None = None
    _images: Mapping[str, Path] = field(default_factory=dict)
    _node_ip: str = ""
    _real_node_labels: Mapping[str, str] = field(default_factory=dict)
    _watcher: threading.Thread | None = None
    #: The operators' webhook port, shared by every replica.
    _webhook_port: int | None = None
    _stopping: threading.Event = field(default_factory=threading.Event)

    @property
    def layout(self) -> Layout:
        return Layout(self.spec.state_dir)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.spec.port}"

    @property
    def ports(self) -> Ports:
        if self._ports is None:
            raise DevClusterError("the cluster has not been started")
        return self._ports

    def __enter__(self) -> DevCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- start ---------------------------------------------------------------------------

    def _say(self, message: str) -> None:
        self.log.write(message + "\n")
        self.log.flush()

    def _prepare(self) -> Path:
        layout = self.layout
        spec = self.spec
        if spec.images and spec.real_node is None:
            raise DevClusterError(
                f"--image {spec.images[0]}: images are imported into the real node's "
                "containerd (kwok nodes run no containers); add --real-node"
            )
        if running_pids(layout):
            raise DevClusterError(
                f"a dev cluster already runs from {spec.state_dir}; "
                f"stop it first: kondor dev-cluster down --state-dir {spec.state_dir}"
            )
        if not port_is_free(spec.port):
            raise DevClusterError(f"--port {spec.port}: 127.0.0.1:{spec.port} is already in use")
        # Parse the machine files before anything starts, so that a bad one costs nothing.
        self._nodes = []
        for path in spec.nodes:
            manifest = nodes.node_manifest(nodes.load_machine(path))
            self._nodes.append(manifest)
            self._machine_files[manifest["metadata"]["name"]] = path
        bin_dir = build.ensure_built(spec.cache_dir, log=self.log)
        for directory in (layout.state_dir, layout.logs, layout.config):
            directory.mkdir(parents=True, exist_ok=True)
        layout.state_dir.chmod(0o700)
        files = pki.ensure_pki(layout.pki.root, components.KUBERNETES_SERVICE_IP)
        previous: dict[str, int] = {}
        with contextlib.suppress(FileNotFoundError, ValueError):
            previous = {k: int(v) for k, v in json.loads(layout.ports.read_text()).items()}
        self._ports = choose_ports(spec.port, previous)
        layout.ports.write_text(json.dumps(self._ports.as_dict(), indent=2) + "\n")
        ca = files.ca_cert.read_bytes()
        for component in ("kube-controller-manager", "kube-scheduler", "kwok"):
            config = kubeconfig.kubeconfig(
                self.server, ca, {component: files.pair(component)}, component
            )
            kubeconfig.write_kubeconfig(layout.component_kubeconfig(component), config, force=True)
        layout.kwok_config.write_text(nodes.kwok_config_yaml())
        if spec.real_node is not None:
            self._prepare_real_node(spec.real_node, files)
        return bin_dir

    def _prepare_real_node(self, name: str, files: pki.PkiFiles) -> None:
        """Check the host, install and build what is missing, write the node's config."""
        problems = realnode.host_problems()
        if problems:
            raise realnode.RealNodeError(f"--real-node {name}: {'; '.join(problems)}")
        if self.spec.real_node_machine is not None:
            self._real_node_labels = nodes.load_machine(self.spec.real_node_machine).labels
        for archive in self.spec.images:  # a bad archive is refused before anything starts
            realnode.archive_references(archive)
        realnode.ensure_packages(self.log)
        self._kubelet = build.ensure_kubelet(self.spec.cache_dir, log=self.log)
        pause_source = _module_dir() / "build" / "pause" / "linux" / "pause.c"
        cache = versions.cache_root() if self.spec.cache_dir is None else self.spec.cache_dir
        self._images = images.write_images(
            cache / "realnode" / f"images-{versions.KUBERNETES}", _busybox(), pause_source
        )
        node = realnode.RealNodeLayout(self.layout.state_dir)
        realnode.claim_host(node, lambda state: bool(running_pids(Layout(state))))
        realnode.record_host(node)
        credentials = pki.node_credentials(files.root, name)
        config = kubeconfig.kubeconfig(
            self.server, files.ca_cert.read_bytes(), {name: files.pair(credentials)}, name
        )
        kubeconfig.write_kubeconfig(node.kubelet_kubeconfig, config, force=True)
        self._node_ip = realnode.node_ip()
        realnode.write_configs(node, files.ca_cert, self._node_ip, free_port(), free_port())

    def _spawn(self, name: str, bin_dir: Path) -> _Process:
        binary = bin_dir / name
        return self._spawn_command(name, _ARGS[name](binary, self.layout, self.ports))

    def _spawn_command(
        self,
        name: str,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        essential: bool = True,
    ) -> _Process:
        binary = Path(args[0])
        log_path = self.layout.logs / f"{name}.log"
        with log_path.open("ab") as log_file:
            log_file.write(
                f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S%z')} {' '.join(args)}\n".encode()
            )
            log_file.flush()
            popen = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=self.layout.state_dir,
                # Own session: Ctrl-C reaches `up`, which stops the components in order.
                start_new_session=True,
                env=None if env is None else {**os.environ, **env},
            )
        process = _Process(name, binary, popen, log_path, essential=essential)
        self._processes.append(process)
        self._write_pids()
        return process

    def _write_pids(self) -> None:
        data = {p.name: {"pid": p.popen.pid, "binary": str(p.binary)} for p in self._processes}
        self.layout.pids.write_text(json.dumps(data, indent=2) + "\n")

    def _wait_until(
        self, process: _Process, what: str, check: Callable[[], bool], timeout: float
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = process.popen.poll()
            if code is not None:
                raise DevClusterError(
                    f"{process.name} exited with {code} before {what}; "
                    f"last lines of {process.log}:\n{_tail(process.log)}"
                )
            with contextlib.suppress(httpx.HTTPError, OSError, ValueError, KeyError):
                if check():
                    return
            time.sleep(0.2)
        raise DevClusterError(
            f"{process.name}: no {what} within {timeout:.0f}s; "
            f"last lines of {process.log}:\n{_tail(process.log)}"
        )

    def admin_ssl_context(self) -> ssl.SSLContext:
        """TLS settings of a client that trusts the cluster's CA and authenticates as admin."""
        files = self.layout.pki
        context = ssl.create_default_context(cafile=str(files.ca_cert))
        context.load_cert_chain(str(files.cert("admin")), str(files.key("admin")))
        return context

    @contextlib.contextmanager
    def admin_client(self) -> Iterator[httpx.Client]:
        """An HTTP client of the API server authenticated as `admin`."""
        with httpx.Client(
            base_url=self.server, verify=self.admin_ssl_context(), timeout=10
        ) as client:
            yield client

    def start(self) -> None:
        """Start every component and return once the API server is ready and nodes are Ready."""
        started = time.monotonic()
        bin_dir = self._prepare()
        ports = self.ports
        timeout = self.spec.ready_timeout
        try:
            etcd = self._spawn("etcd", bin_dir)
            self._wait_until(
                etcd,
                "health",
                lambda: (
                    httpx.get(f"http://127.0.0.1:{ports.etcd_client}/health", timeout=2)
                    .json()
                    .get("health")
                    == "true"
                ),
                timeout,
            )
            apiserver = self._spawn("kube-apiserver", bin_dir)
            with self.admin_client() as api:
                self._wait_until(
                    apiserver,
                    "/readyz",
                    lambda: api.get("/readyz", timeout=2).status_code == 200,
                    timeout,
                )
                controllers = [
                    self._spawn(name, bin_dir)
                    for name in ("kube-controller-manager", "kube-scheduler", "kwok")
                ]
                self._apply_cluster_objects(api)
                self._write_user_kubeconfig()
                insecure = httpx.Client(verify=False, timeout=2)  # their own self-signed certs
                with insecure:
                    for process, url in zip(
                        controllers,
                        (
                            f"https://127.0.0.1:{ports.controller_manager}/healthz",
                            f"https://127.0.0.1:{ports.scheduler}/healthz",
                            f"http://127.0.0.1:{ports.kwok}/healthz",
                        ),
                        strict=True,
                    ):
                        self._wait_until(
                            process,
                            "/healthz",
                            lambda url=url: insecure.get(url).status_code == 200,  # type: ignore[misc]
                            timeout,
                        )
                self._wait_usable(api, controllers[0], timeout)
                names = [manifest["metadata"]["name"] for manifest in self._nodes]
                self._wait_nodes_ready(api, controllers[-1], names, timeout)
                if self.spec.real_node is not None:
                    self._start_real_node(api, self.spec.real_node, timeout)
                if self.spec.operator or self.spec.agents:
                    self._install_kondor(api, timeout)
            if self.spec.operator:
                self._start_operator()
            if self.spec.agents:
                for name in names:
                    self._start_agent(name, self._machine_files[name])
                if self.spec.real_node is not None:
                    self._start_agent(self.spec.real_node, None)
                self._stopping.clear()
                self._watcher = threading.Thread(
                    target=self._restart_dead_agents, name="agent-watcher", daemon=True
                )
                self._watcher.start()
        except BaseException:
            self.stop()
            raise
        self._say(
            f"dev cluster ready at {self.server} in {time.monotonic() - started:.1f}s "
            f"(kubeconfig {self.spec.kubeconfig}, state {self.spec.state_dir})"
        )

    # -- the real node -------------------------------------------------------------------

    def _start_real_node(self, api: httpx.Client, name: str, timeout: float) -> None:
        """containerd, the local images, then the kubelet; returns once the Node is Ready."""
        started = time.monotonic()
        node = realnode.RealNodeLayout(self.layout.state_dir)
        # The operator's and agents' pods are in-cluster clients of the API server.
        realnode.route_pods_to_apiserver(components.KUBERNETES_SERVICE_IP, self.spec.port)
        containerd = self._spawn_command("containerd", realnode.containerd_args(node))
        version = realnode.ctr_command(node, "version")
        self._wait_until(
            containerd,
            "its socket",
            lambda: subprocess.run(version, capture_output=True, check=False).returncode == 0,
            timeout,
        )
        for image, archive in self._images.items():
            command = realnode.ctr_command(node, "images", "import", str(archive))
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise DevClusterError(f"importing {image} failed: {result.stderr.strip()}")
        for archive in self.spec.images:
            imported = realnode.import_image(node, archive)
            self._say(f"real node: imported {', '.join(imported)} from {archive}")
        assert self._kubelet is not None
        kubelet = self._spawn_command(
            "kubelet", realnode.kubelet_args(self._kubelet, node, name, self._node_ip)
        )

        def ready() -> bool:
            response = api.get(f"/api/v1/nodes/{name}")
            if response.status_code == 404:
                return False
            status = response.json().get("status", {})
            return any(
                c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", [])
            )

        self._wait_until(kubelet, f"a Ready Node {name}", ready, timeout)
        if self._real_node_labels:
            patch = {"metadata": {"labels": dict(self._real_node_labels)}}
            response = api.patch(
                f"/api/v1/nodes/{name}",
                content=json.dumps(patch),
                headers={"Content-Type": "application/merge-patch+json"},
            )
            if response.status_code >= 400:
                raise DevClusterError(f"labelling node {name} failed: {response.text}")
        self._say(f"real node {name} Ready in {time.monotonic() - started:.1f}s")

    # -- Kondor ----------------------------------------------------------------------------

    def _install_kondor(self, api: httpx.Client, timeout: float) -> None:
        """Kondor's CRDs (generated from the models) and the kubeconfig its processes use."""
        base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        names = []
        for crd in all_crds():
            name = crd["metadata"]["name"]
            self._apply(api, f"{base}/{name}", crd)
            names.append(name)

        def established() -> bool:
            for name in names:
                conditions = api.get(f"{base}/{name}").json().get("status", {}).get("conditions")
                if not any(
                    c["type"] == "Established" and c["status"] == "True" for c in conditions or []
                ):
                    return False
            return True

        apiserver = next(p for p in self._processes if p.name == "kube-apiserver")
        self._wait_until(apiserver, "Established Kondor CRDs", established, timeout)
        harvest = harvest_priority_class()
        name = harvest["metadata"]["name"]
        self._apply(api, f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}", harvest)
        self._install_security(api)
        files = self.layout.pki
        identity = kondor.KONDOR_IDENTITY
        config = kubeconfig.kubeconfig(
            self.server, files.ca_cert.read_bytes(), {identity: files.pair(identity)}, identity
        )
        kubeconfig.write_kubeconfig(kondor.kondor_kubeconfig(self.layout), config, force=True)

    def _install_security(self, api: httpx.Client) -> None:
        """What the chart installs for identities, read from the chart itself
        (kondor_devcluster.chart): the agent's and the operator's ServiceAccounts and RBAC (the
        agents run as theirs; the operator process stays admin, its account is there for
        `kubectl auth can-i --as`), and the admission policies."""
        release = kondor.RELEASE
        namespace = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": release.namespace},
        }
        accounts = [
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": release.namespace},
            }
            for name in (release.agent, release.operator)
        ]
        objects = [
            namespace,
            *accounts,
            *chart.agent_rbac(release),
            *chart.operator_rbac(release),
            *chart.admission_policies(release),
        ]
        for manifest in objects:
            self._apply(api, object_path(manifest), manifest)

    def _write_agent_kubeconfig(self, node: str) -> None:
        """A fresh token of the agent ServiceAccount bound to `node`'s Node object."""
        release = kondor.RELEASE
        with self.admin_client() as api:
            found = api.get(f"/api/v1/nodes/{node}")
            if found.status_code >= 400:
                raise DevClusterError(f"node {node}: {found.status_code} {found.text}")
            uid = found.json()["metadata"]["uid"]
            response = api.post(
                f"/api/v1/namespaces/{release.namespace}/serviceaccounts/{release.agent}/token",
                json=kondor.agent_token_request(node, uid),
            )
            if response.status_code >= 400:
                raise DevClusterError(
                    f"a token for {node}'s agent: {response.status_code} {response.text}"
                )
        token = response.json()["status"]["token"]
        config = kubeconfig.token_kubeconfig(
            self.server,
            self.layout.pki.ca_cert.read_bytes(),
            release.user(release.agent),
            token,
        )
        kubeconfig.write_kubeconfig(kondor.agent_kubeconfig(self.layout, node), config, force=True)

    def _start_operator(self, name: str = kondor.OPERATOR) -> None:
        """The operator, if this build has one; a missing or failing one is reported, not fatal.
        Another replica (`start_operator_replica`) serves the webhooks on the same port."""
        why = kondor.operator_available()
        if why is not None:
            self._say(f"not starting the Kondor operator: {why}")
            return
        pki.webhook_credentials(self.layout.pki.root)
        if self._webhook_port is None:
            self._webhook_port = free_port()
        env = kondor.operator_env(self.layout, free_port(), self._webhook_port)
        process = self._spawn_command(
            name, kondor.operator_args(self.layout), env=env, essential=False
        )
        # An operator that cannot run (not built yet, bad kubeconfig) exits at once: say so.
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and process.popen.poll() is None:
            time.sleep(0.1)
        code = process.popen.poll()
        if code is not None:
            process.reported = True
            self._say(
                f"the Kondor operator exited with {code} at start; running without it. "
                f"Last lines of {process.log}:\n{_tail(process.log, 5)}"
            )
        else:
            self._say(f"Kondor operator started (log {process.log})")

    def start_operator_replica(self, name: str) -> None:
        """One more operator process `name` (a second replica: it waits for the Lease and
        serves the webhooks meanwhile). Stop it with `stop_process(name)`."""
        if any(p.name == name for p in self._processes):
            raise DevClusterError(f"a process named {name} already runs")
        self._start_operator(name)

    def _start_agent(self, node: str, machine: Path | None) -> None:
        """An agent for `node`: on its machine file, or (None) reading the real host."""
        self._agent_nodes.add(node)
        # The execute directory is the agent's Disk: it must exist before the agent measures it.
        (kondor.agent_state_dir(self.layout, node) / "execute").mkdir(parents=True, exist_ok=True)
        self._write_agent_kubeconfig(node)
        process = self._spawn_command(
            kondor.agent_name(node),
            kondor.agent_args(
                self.layout,
                node,
                machine,
                nvml=None if machine else self.spec.real_node_nvml,
                gpu_devices=self.spec.gpu_devices_root if machine else None,
            ),
            env=kondor.agent_env(self._apptainer_bin()),
            essential=False,
        )
        self._say(f"Kondor agent for {node} started (log {process.log})")

    def _apptainer_bin(self) -> Path | None:
        """Where the agents find `apptainer`: the built one (`make apptainer`), copied into
        the state directory, which the slot accounts jobs run as can reach; None without."""
        binary = apptainer.built(self.spec.cache_dir)
        if binary is None:
            return None
        return apptainer.relocate(binary, self.layout.state_dir / "apptainer").parent

    def _apply(self, api: httpx.Client, path: str, manifest: Mapping[str, Any]) -> None:
        response = api.patch(
            path,
            params={"fieldManager": FIELD_MANAGER, "force": "true"},
            content=json.dumps(manifest),
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
        if response.status_code >= 400:
            raise DevClusterError(f"applying {path} failed: {response.status_code} {response.text}")

    def _apply_cluster_objects(self, api: httpx.Client) -> None:
        rbac_base = "/apis/rbac.authorization.k8s.io/v1"
        self._apply(api, f"{rbac_base}/clusterroles/{rbac.USER_ROLE}", rbac.user_cluster_role())
        self._apply(
            api,
            f"{rbac_base}/clusterrolebindings/{rbac.USER_ROLE}",
            rbac.user_cluster_role_binding(),
        )
        self._apply_nodes(api, self._nodes)

    def _apply_nodes(self, api: httpx.Client, manifests: Sequence[Mapping[str, Any]]) -> None:
        for manifest in manifests:
            name = manifest["metadata"]["name"]
            self._apply(api, f"/api/v1/nodes/{name}", manifest)
            # Status is a subresource: an apply to the Node itself leaves capacity alone.
            status = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
            status["status"] = manifest["status"]
            self._apply(api, f"/api/v1/nodes/{name}/status", status)

    def _write_user_kubeconfig(self) -> None:
        files = self.layout.pki
        users = {user: files.pair(user) for user in pki.USERS}
        config = kubeconfig.kubeconfig(
            self.server, files.ca_cert.read_bytes(), users, next(iter(pki.USERS))
        )
        kubeconfig.write_kubeconfig(self.spec.kubeconfig, config)

    def _wait_usable(self, api: httpx.Client, controller_manager: _Process, timeout: float) -> None:
        """Until a pod may be applied in every namespace: its `default` ServiceAccount and
        `kube-root-ca.crt` exist (both the controller manager's to make, after it is healthy)."""
        missing: list[str] = []

        def usable() -> bool:
            lists = [
                api.get("/api/v1/namespaces").json()["items"],
                api.get(
                    "/api/v1/serviceaccounts", params={"fieldSelector": "metadata.name=default"}
                ).json()["items"],
                api.get(
                    "/api/v1/configmaps",
                    params={"fieldSelector": "metadata.name=kube-root-ca.crt"},
                ).json()["items"],
            ]
            missing[:] = readiness.missing_for_pods(*lists)
            return not missing

        try:
            self._wait_until(controller_manager, "the objects every pod needs", usable, timeout)
        except DevClusterError as error:
            raise DevClusterError(f"{error}\nstill missing: {'; '.join(missing)}") from None

    def _wait_nodes_ready(
        self, api: httpx.Client, kwok: _Process, names: Sequence[str], timeout: float
    ) -> None:
        def ready() -> bool:
            for name in names:
                node = api.get(f"/api/v1/nodes/{name}").json()
                conditions = node.get("status", {}).get("conditions", [])
                if not any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                    return False
            return True

        if names:
            self._wait_until(kwok, f"Ready nodes {', '.join(names)}", ready, timeout)

    def add_machines(self, paths: Sequence[Path], timeout: float = 30.0) -> list[str]:
        """Add simulated nodes from machine files to the running cluster; wait until Ready."""
        manifests = [nodes.node_manifest(nodes.load_machine(path)) for path in paths]
        kwok = next((p for p in self._processes if p.name == "kwok"), None)
        if kwok is None:
            raise DevClusterError("the cluster is not running (start it first)")
        names = [manifest["metadata"]["name"] for manifest in manifests]
        with self.admin_client() as api:
            self._apply_nodes(api, manifests)
            self._wait_nodes_ready(api, kwok, names, timeout)
        if self.spec.agents:
            for name, path in zip(names, paths, strict=True):
                self._machine_files[name] = Path(path).absolute()
                self._start_agent(name, self._machine_files[name])
        return names

    # -- run and stop --------------------------------------------------------------------

    def dead(self) -> list[tuple[str, int]]:
        """Components that exited, with their exit codes."""
        return [(p.name, code) for p in self._processes if (code := p.popen.poll()) is not None]

    def stop_process(self, name: str, timeout: float = 30.0, *, kill: bool = False) -> bool:
        """Stop the non-essential process `name` (`kondor-operator`) with SIGTERM, then SIGKILL
        after `timeout` (at once with `kill`: a crash, nothing released); the cluster keeps
        running. False if none runs by that name. (An agent stopped so is started again, as
        a DaemonSet would.)"""
        process = next((p for p in self._processes if p.name == name), None)
        if process is None or process.essential or process.popen.poll() is not None:
            return False
        process.reported = True  # stopped on purpose: not a death to report
        if kill:
            process.popen.kill()
        else:
            process.popen.terminate()
        try:
            process.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            process.popen.kill()
            process.popen.wait()
        return True

    def run_until_stopped(self, stop: threading.Event) -> int:
        """Foreground `up`: block until `stop` is set or a component dies, then stop everything."""
        try:
            while not stop.wait(0.5):
                if not self.layout.pids.exists():
                    self._say("stopped by `kondor dev-cluster down`")
                    return 0
                for process in self._processes:
                    code = process.popen.poll()
                    if code is None or process.essential or process.reported:
                        continue
                    process.reported = True
                    self._say(
                        f"{process.name} exited with {code}; the cluster keeps running. "
                        f"Last lines of {process.log}:\n{_tail(process.log, 10)}"
                    )
                died = [
                    (p.name, code)
                    for p in self._processes
                    if p.essential and (code := p.popen.poll()) is not None
                ]
                if died:
                    name, code = died[0]
                    log_path = self.layout.logs / f"{name}.log"
                    self._say(f"{name} exited with {code}; last lines:\n{_tail(log_path)}")
                    return 1
            return 0
        finally:
            self.stop()

    def _restart_dead_agents(self) -> None:
        """As a DaemonSet would: an agent that exits is started again a second later."""
        while not self._stopping.wait(1.0):
            for process in list(self._processes):
                node = kondor.agent_node(process.name)
                if node is None or process.popen.poll() is None or self._stopping.is_set():
                    continue
                self._processes.remove(process)
                self._say(f"{process.name} exited with {process.popen.returncode}; restarting it")
                self._start_agent(node, self._machine_files.get(node))

    def stop(self) -> None:
        """Stop the components in reverse order; the state directory keeps the data."""
        self._stopping.set()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join()
            self._watcher = None
        entries = [(p.name, p.popen.pid, str(p.binary)) for p in reversed(self._processes)]
        for process in reversed(self._processes):
            if process.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.popen.terminate()
                try:
                    process.popen.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.popen.kill()
                    process.popen.wait()
        _terminate(entries)
        self._processes.clear()
        for left in kondor.remove_agent_cgroups(self.layout, sorted(self._agent_nodes)):
            self._say(f"an agent's cgroups stay: {left}")
        self.layout.pids.unlink(missing_ok=True)
        node = realnode.RealNodeLayout(self.layout.state_dir)
        if node.host_record.exists():
            realnode.cleanup_host(node, self.log)


#: The plural of each kind the dev cluster applies from the chart, by apiVersion and kind.
_PLURALS = {
    ("v1", "Namespace"): "namespaces",
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "clusterroles",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "clusterrolebindings",
    ("rbac.authorization.k8s.io/v1", "Role"): "roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebindings",
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): "validatingadmissionpolicies",
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): (
        "validatingadmissionpolicybindings"
    ),
}


def object_path(manifest: Mapping[str, Any]) -> str:
    """The API path of one object (of a kind in `_PLURALS`) for a server-side apply."""
    version, kind = manifest["apiVersion"], manifest["kind"]
    plural = _PLURALS.get((version, kind))
    if plural is None:
        raise DevClusterError(f"the dev cluster does not apply {kind} ({version}) objects")
    base = "/api/v1" if version == "v1" else f"/apis/{version}"
    metadata = manifest["metadata"]
    namespace = metadata.get("namespace")
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"{base}{scope}/{plural}/{metadata['name']}"


def _module_dir() -> Path:
    """The `k8s.io/kubernetes` module's source in the Go module cache (the pause container's)."""
    result = subprocess.run(
        ["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0 or not result.stdout.strip():
        raise DevClusterError("`go env GOMODCACHE` failed; the real node needs Go for its images")
    return Path(result.stdout.strip()) / "k8s.io" / f"kubernetes@{versions.KUBERNETES}"


def _busybox() -> Path:
    found = shutil.which("busybox")
    if found is None:
        raise DevClusterError("busybox is missing (Debian package busybox-static)")
    return Path(found)
