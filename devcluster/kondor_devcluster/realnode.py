"""One real node beside the kwok nodes: containerd, runc and a kubelet, so pods really run.

The kubelet is built from the control plane's own Go module (`build.ensure_kubelet`), containerd
and runc come from Debian, images are written locally (`images`). Everything the node keeps is
under `<state>/realnode/`; what it changes on the host (sysctls, a bridge, cgroups, mounts,
iptables chains) is recorded in `host.json` before it starts, so `cleanup_host` puts the host
back as it was, also after a crash of the cluster.

The kubepods cgroups, the bridge and the sysctls belong to the host, not to one cluster: only
one real node runs on a host at a time (`claim_host`).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from kondor_devcluster.images import PAUSE_IMAGE

REAL_NODE_LABEL = "kondor.io/real-node"
BRIDGE = "kondor0"
POD_SUBNET = "10.245.0.0/24"
#: The sysctls the kubelet and the bridge plugin change; put back by `cleanup_host`.
SYSCTLS = (
    "vm.overcommit_memory",
    "kernel.panic",
    "kernel.panic_on_oops",
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.route_localnet",
)
#: The nat chain that takes pods' connections to the `kubernetes` Service to the API server.
APISERVER_CHAIN = "KONDOR-APISERVER"
#: What the real node needs on the host, and the Debian package that brings it.
PACKAGES: Mapping[str, str] = {
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
    "busybox": "busybox-static",
    "iptables": "iptables",
}
CGROUP_ROOT = Path("/sys/fs/cgroup")
NETNS_DIR = Path("/run/netns")
CONTAINER_LOGS = Path("/var/log/containers")
#: Host-wide: which state directory's real node owns this host's kubepods, bridge and sysctls.
HOST_CLAIM = Path("/run/kondor-real-node.json")
_IPTABLES_TABLES = ("filter", "nat", "mangle")
_MAX_SOCKET_PATH = 100


class RealNodeError(RuntimeError):
    """The real node cannot run here, or failed to start; the message says what is missing."""


@dataclass(frozen=True)
class RealNodeLayout:
    """Where the real node keeps its files: everything under `<state>/realnode/`."""

    state_dir: Path

    @property
    def root(self) -> Path:
        return self.state_dir / "realnode"

    @property
    def host_record(self) -> Path:
        return self.root / "host.json"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd.toml"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd-state"

    @property
    def runc_root(self) -> Path:
        return self.root / "runc"

    @property
    def socket(self) -> Path:
        return self.root / "containerd.sock"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni"

    @property
    def ipam_dir(self) -> Path:
        return self.root / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def static_pods(self) -> Path:
        return self.root / "manifests"


# -- what the host must have ------------------------------------------------------------------


def missing_packages(which: Callable[[str], str | None] = shutil.which) -> dict[str, str]:
    """Commands and files the real node needs that are absent, with their Debian package."""
    missing = {}
    for need, package in PACKAGES.items():
        found = Path(need).exists() if need.startswith("/") else which(need) is not None
        if not found:
            missing[need] = package
    return missing


def host_problems(euid: int | None = None, cgroup_root: Path = CGROUP_ROOT) -> list[str]:
    """Why this host cannot run a real node at all (installing packages would not help)."""
    problems = []
    if (os.geteuid() if euid is None else euid) != 0:
        problems.append("it must run as root (containerd, runc and the kubelet manage cgroups)")
    if not (cgroup_root / "cgroup.controllers").exists() and not any(
        (cgroup_root / name / "tasks").exists() for name in ("memory", "cpu,cpuacct", "pids")
    ):
        problems.append(f"no cgroup hierarchy with controllers under {cgroup_root}")
    return problems


def ensure_packages(log: TextIO) -> None:
    """Install what `missing_packages` names with apt-get, or say what to install."""
    missing = missing_packages()
    if not missing:
        return
    packages = sorted(set(missing.values()))
    if shutil.which("apt-get") is None:
        raise RealNodeError(
            f"the real node needs {', '.join(sorted(missing))} (Debian packages "
            f"{' '.join(packages)}) and this machine has no apt-get; install them first"
        )
    log.write(f"real node: installing {' '.join(packages)} with apt-get\n")
    log.flush()
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
    ):
        result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0:
            raise RealNodeError(
                f"`{' '.join(command)}` failed ({result.returncode}):\n{result.stderr[-2000:]}"
            )
    still = missing_packages()
    if still:
        raise RealNodeError(f"installed {' '.join(packages)} but {', '.join(still)} still missing")


def node_ip() -> str:
    """The host's address the kubelet advertises: the kubelet refuses a loopback one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe, contextlib.suppress(OSError):
        probe.connect(("192.0.2.255", 9))  # no packet is sent: this only picks a route
        address = str(probe.getsockname()[0])
        if not address.startswith("127.") and address != "0.0.0.0":
            return address
    result = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"],
        capture_output=True,
        text=True,
        check=False,
    )
    for line in result.stdout.splitlines():
        fields = line.split()
        if "inet" in fields:
            return fields[fields.index("inet") + 1].split("/")[0]
    raise RealNodeError(
        "the host has no non-loopback IPv4 address for the kubelet's --node-ip; add one "
        "(e.g. `ip link add kondor-dummy type dummy && ip addr add 10.254.0.1/32 dev kondor-dummy`)"
    )


# -- configuration: pure functions of the layout ------------------------------------------


def containerd_config(layout: RealNodeLayout) -> str:
    """containerd 1.6's config: everything under the state dir, runc with cgroupfs, our CNI."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return "\n".join(
        [
            "version = 2",
            f'root = "{layout.containerd_root}"',
            f'state = "{layout.containerd_state}"',
            'disabled_plugins = ["io.containerd.snapshotter.v1.aufs", '
            '"io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", '
            '"io.containerd.snapshotter.v1.devmapper"]',
            "[grpc]",
            f'  address = "{layout.socket}"',
            f"[{cri}]",
            f'  sandbox_image = "{PAUSE_IMAGE}"',
            # The host drops CAP_SYS_RESOURCE: a negative oom_score_adj (the pause container's
            # -998) is refused, and runc then fails every sandbox. This keeps it at the parent's.
            "  restrict_oom_score_adj = true",
            f"[{cri}.containerd]",
            '  snapshotter = "overlayfs"',
            '  default_runtime_name = "runc"',
            f"[{cri}.containerd.runtimes.runc]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"[{cri}.containerd.runtimes.runc.options]",
            "  SystemdCgroup = false",
            f'  Root = "{layout.runc_root}"',
            f"[{cri}.cni]",
            '  bin_dir = "/usr/lib/cni"',
            f'  conf_dir = "{layout.cni_conf_dir}"',
            "",
        ]
    )


def cni_config(layout: RealNodeLayout) -> dict[str, Any]:
    """A bridge network for the node's pods, addresses from `POD_SUBNET`, no NAT."""
    return {
        "cniVersion": "0.4.0",
        "name": "kondor",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                # A default route through the bridge, as pods have on any cluster: in-cluster
                # clients reach the `kubernetes` Service's address (apiserver_route_commands).
                "isDefaultGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "dataDir": str(layout.ipam_dir),
                },
            }
        ],
    }


def kubelet_config(
    layout: RealNodeLayout, ca_file: Path, address: str, port: int, healthz_port: int
) -> dict[str, Any]:
    """The KubeletConfiguration: webhook authn/authz, cgroupfs, every path under the state."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": address,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": True,
        # This host is hybrid (v1 controllers); real nodes are usually v2.
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{layout.socket}",
        "staticPodPath": str(layout.static_pods),
        "podLogsDir": str(layout.pod_logs),
        "clusterDomain": "cluster.local",
        "makeIPTablesUtilChains": False,
        "serializeImagePulls": False,
        # The local images are never pulled again: image GC must not remove them.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
        },
        "registerNode": True,
    }


def kubelet_args(binary: Path, layout: RealNodeLayout, name: str, address: str) -> list[str]:
    return [
        str(binary),
        f"--config={layout.kubelet_config}",
        f"--kubeconfig={layout.kubelet_kubeconfig}",
        f"--root-dir={layout.kubelet_root}",
        f"--hostname-override={name}",
        f"--node-ip={address}",
        f"--node-labels={REAL_NODE_LABEL}=true",
        "--v=1",
    ]


def containerd_args(layout: RealNodeLayout) -> list[str]:
    binary = shutil.which("containerd") or "/usr/bin/containerd"
    return [binary, f"--config={layout.containerd_config}"]


def ctr_command(layout: RealNodeLayout, *args: str) -> list[str]:
    return ["ctr", f"--address={layout.socket}", "--namespace=k8s.io", *args]


# -- images the user brings (`--image ARCHIVE`) ----------------------------------------------

#: The annotations an OCI archive's index names its images by: containerd's own, then OCI's.
_IMAGE_NAME_ANNOTATIONS = ("io.containerd.image.name", "org.opencontainers.image.ref.name")


def archive_references(archive: Path) -> list[str]:
    """The full image references an OCI image archive names (`buildah push ... oci-archive:`
    writes `org.opencontainers.image.ref.name`), as `ctr images import` will store them."""
    try:
        with tarfile.open(archive) as tar:
            member = tar.extractfile("index.json")
            if member is None:
                raise KeyError("index.json")
            index = json.loads(member.read())
    except (OSError, tarfile.TarError) as error:
        raise RealNodeError(
            f"--image {archive}: not a readable OCI image archive ({error})"
        ) from error
    except (KeyError, ValueError) as error:
        raise RealNodeError(
            f"--image {archive}: no index.json in it; an OCI image archive is expected "
            "(`make image` writes one)"
        ) from error
    references = []
    for manifest in index.get("manifests", []):
        annotations = manifest.get("annotations") or {}
        name = next((annotations[key] for key in _IMAGE_NAME_ANNOTATIONS if key in annotations), "")
        # A bare tag ("0.1.0") names no repository: the pod could not refer to it.
        if "/" in name and ":" in name.rsplit("/", 1)[-1]:
            references.append(name)
    if not references:
        raise RealNodeError(
            f"--image {archive}: its index names no image with a full reference "
            "(repository:tag in org.opencontainers.image.ref.name); a pod could not refer to it"
        )
    return references


def import_image_command(layout: RealNodeLayout, archive: Path) -> list[str]:
    """`ctr images import` into the kubelet's namespace (k8s.io): containerd 1.6 names the
    image by the archive's full reference, which `import_image` then checks it holds."""
    return ctr_command(layout, "images", "import", str(archive))


def import_image(layout: RealNodeLayout, archive: Path) -> list[str]:
    """Import the OCI archive into the node's containerd; returns the references it holds."""
    references = archive_references(archive)
    result = subprocess.run(
        import_image_command(layout, archive),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RealNodeError(f"--image {archive}: ctr images import failed: {result.stderr.strip()}")
    listed = subprocess.run(
        ctr_command(layout, "images", "ls", "--quiet"), capture_output=True, text=True, check=False
    ).stdout.split()
    missing = [reference for reference in references if reference not in listed]
    if missing:
        raise RealNodeError(
            f"--image {archive}: imported, but containerd holds no {', '.join(missing)} "
            f"(it holds {', '.join(listed) or 'nothing'})"
        )
    return references


def apiserver_route_commands(service_ip: str, api_port: int) -> list[list[str]]:
    """The iptables rules that let pods reach the API server as in-cluster clients do.

    A pod's client (the operator's, the agent's) connects to the `kubernetes` Service,
    KUBERNETES_SERVICE_HOST:443 (the kubelet's environment). There is no kube-proxy, and the API
    server listens on 127.0.0.1 only, so one DNAT does what kube-proxy's rule would: the
    Service's address to the API server on loopback (with `route_localnet`, set by
    `route_pods_to_apiserver`, packets from the bridge may be routed there). The rules are in
    a chain of their own, which `cleanup_host` removes with the jump to it.
    """
    nat = ["iptables", "-w", "-t", "nat"]
    return [
        [*nat, "-F", APISERVER_CHAIN],
        [
            *nat,
            "-A",
            APISERVER_CHAIN,
            "-d",
            f"{service_ip}/32",
            "-p",
            "tcp",
            "--dport",
            "443",
            "-j",
            "DNAT",
            "--to-destination",
            f"127.0.0.1:{api_port}",
        ],
    ]


def route_pods_to_apiserver(service_ip: str, api_port: int) -> None:
    """Install `apiserver_route_commands` (the host's record already holds what they change)."""
    nat = ["iptables", "-w", "-t", "nat"]
    subprocess.run([*nat, "-N", APISERVER_CHAIN], capture_output=True, check=False)  # may exist
    jump = ["PREROUTING", "-j", APISERVER_CHAIN]
    commands = apiserver_route_commands(service_ip, api_port)
    if subprocess.run([*nat, "-C", *jump], capture_output=True, check=False).returncode != 0:
        commands.append([*nat, "-I", *jump])
    for command in commands:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RealNodeError(f"`{' '.join(command)}` failed: {result.stderr.strip()}")
    write_sysctl("net.ipv4.conf.all.route_localnet", "1")


def write_configs(
    layout: RealNodeLayout, ca_file: Path, address: str, port: int, healthz_port: int
) -> None:
    if len(str(layout.socket)) > _MAX_SOCKET_PATH:
        raise RealNodeError(
            f"the state directory {layout.state_dir} is too deep for containerd's socket "
            f"({layout.socket}: over {_MAX_SOCKET_PATH} characters); use a shorter --state-dir"
        )
    for directory in (layout.root, layout.cni_conf_dir, layout.static_pods, layout.pod_logs):
        directory.mkdir(parents=True, exist_ok=True)
    layout.containerd_config.write_text(containerd_config(layout))
    (layout.cni_conf_dir / "10-kondor.conflist").write_text(json.dumps(cni_config(layout)))
    config = kubelet_config(layout, ca_file, address, port, healthz_port)
    layout.kubelet_config.write_text(yaml.safe_dump(config, sort_keys=False))


# -- the host's state: recorded before, put back after ----------------------------------------


def read_sysctl(name: str) -> str | None:
    try:
        return Path("/proc/sys", *name.split(".")).read_text().strip()
    except OSError:
        return None


def write_sysctl(name: str, value: str) -> None:
    Path("/proc/sys", *name.split(".")).write_text(value + "\n")


def iptables_chains() -> dict[str, list[str]]:
    """The iptables chains of each table (empty when iptables is missing)."""
    chains: dict[str, list[str]] = {}
    if shutil.which("iptables") is None:
        return chains
    for table in _IPTABLES_TABLES:
        result = subprocess.run(
            ["iptables", "-w", "-t", table, "-S"], capture_output=True, text=True, check=False
        )
        names = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("-N ")]
        chains[table] = names
    return chains


def _netns_names() -> list[str]:
    with contextlib.suppress(OSError):
        return sorted(entry.name for entry in NETNS_DIR.iterdir())
    return []


def record_host(layout: RealNodeLayout) -> dict[str, Any]:
    """What the real node may change, as it is now; kept from the first start until cleanup."""
    if layout.host_record.exists():
        recorded: dict[str, Any] = json.loads(layout.host_record.read_text())
        return recorded
    record = {
        "sysctls": {name: read_sysctl(name) for name in SYSCTLS},
        "iptables": iptables_chains(),
        "netns": _netns_names(),
        "container_logs_existed": CONTAINER_LOGS.exists(),
    }
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.host_record.write_text(json.dumps(record, indent=2) + "\n")
    return record


def claim_host(layout: RealNodeLayout, alive: Callable[[Path], bool]) -> None:
    """Take the host's real-node slot, or say which cluster holds it."""
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError):
        holder = Path(json.loads(HOST_CLAIM.read_text())["state_dir"])
        if holder != layout.state_dir and alive(holder):
            raise RealNodeError(
                f"a real node already runs on this host, from the dev cluster in {holder}; "
                f"stop it first: kondor dev-cluster down --state-dir {holder}"
            )
    HOST_CLAIM.write_text(json.dumps({"state_dir": str(layout.state_dir)}) + "\n")


def _cgroup_dirs() -> list[Path]:
    """Every `kubepods` cgroup (v1 hierarchies and the v2 tree), deepest first."""
    found: list[Path] = []
    roots = [CGROUP_ROOT] if (CGROUP_ROOT / "cgroup.controllers").exists() else []
    with contextlib.suppress(OSError):
        roots += [entry for entry in CGROUP_ROOT.iterdir() if entry.is_dir()]
    for root in roots:
        for top in (root / "kubepods", root / "kubepods.slice"):
            if top.is_dir():
                found += [Path(path) for path, _dirs, _files in os.walk(top)]
    return sorted(set(found), key=lambda path: len(path.parts), reverse=True)


def _cgroup_pids(directory: Path) -> list[int]:
    for name in ("cgroup.procs", "tasks"):
        with contextlib.suppress(OSError, ValueError):
            return [int(line) for line in (directory / name).read_text().split()]
    return []


def _thaw(directory: Path) -> None:
    with contextlib.suppress(OSError):
        if (directory / "cgroup.freeze").exists():
            (directory / "cgroup.freeze").write_text("0")
        elif (directory / "freezer.state").exists():
            (directory / "freezer.state").write_text("THAWED")


def kill_pod_processes(attempts: int = 50) -> int:
    """SIGKILL every process in the kubepods cgroups, thawing frozen ones (a frozen process
    does not die). Returns how many were signalled."""
    killed = 0
    for _ in range(attempts):
        directories = _cgroup_dirs()
        pids = {pid for directory in directories for pid in _cgroup_pids(directory)}
        if not pids:
            break
        for directory in directories:
            _thaw(directory)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.1)
    return killed


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def node_processes(layout: RealNodeLayout) -> list[tuple[int, str]]:
    """Processes of this real node still running: kubelet, containerd, shims (by their paths)."""
    marker = str(layout.root)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        command = _cmdline(int(entry.name))
        if command and any(marker in part for part in command):
            found.append((int(entry.name), Path(command[0]).name))
    return found


def _mounts_under(paths: Iterable[Path]) -> list[str]:
    prefixes = [str(path) for path in paths]
    mounts = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if any(point == prefix or point.startswith(prefix + "/") for prefix in prefixes):
                mounts.append(point)
    return sorted(set(mounts), key=len, reverse=True)


_libc = ctypes.CDLL(None, use_errno=True)
_MNT_DETACH = 2


def _unmount(point: str) -> None:
    if _libc.umount2(point.encode(), _MNT_DETACH) != 0:
        errno = ctypes.get_errno()
        if errno not in (2, 22):  # ENOENT, EINVAL: already gone or not a mount point
            raise OSError(errno, os.strerror(errno), point)


def _new_netns(record: Mapping[str, Any]) -> list[Path]:
    before = set(record.get("netns", []))
    return [
        NETNS_DIR / name
        for name in _netns_names()
        if name.startswith("cni-") and name not in before
    ]


def leftovers(layout: RealNodeLayout) -> list[str]:
    """What of the real node is still on the host; empty once `cleanup_host` has run."""
    found = [f"process {name} (pid {pid})" for pid, name in node_processes(layout)]
    found += [f"mount {point}" for point in _mounts_under([layout.root])]
    found += [f"cgroup {path}" for path in _cgroup_dirs()]
    if Path("/sys/class/net", BRIDGE).exists():
        found.append(f"network interface {BRIDGE}")
    if layout.host_record.exists():
        record = json.loads(layout.host_record.read_text())
        found += [f"network namespace {path}" for path in _new_netns(record)]
        for name, value in record["sysctls"].items():
            if value is not None and read_sysctl(name) != value:
                found.append(f"sysctl {name} = {read_sysctl(name)} (was {value})")
    return found


def cleanup_host(layout: RealNodeLayout, log: TextIO) -> list[str]:
    """Put the host back as `record_host` found it; safe to run after a crash or twice.

    Kills what runs in the kubepods cgroups (thawed first), the node's shims, containerd and
    kubelet; unmounts what they mounted under the state dir and the pods' network namespaces;
    removes the kubepods cgroups, the bridge, new iptables chains and container log links; puts
    the sysctls back. Returns what it could not undo (empty when the host is clean).
    """
    if not layout.host_record.exists():
        return []
    record = json.loads(layout.host_record.read_text())
    kill_pod_processes()
    for pid, _name in node_processes(layout):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while node_processes(layout) and time.monotonic() < deadline:
        time.sleep(0.05)
    netns = _new_netns(record)
    for point in [*_mounts_under([layout.root]), *map(str, netns)]:
        with contextlib.suppress(OSError):
            _unmount(point)
    for path in netns:
        with contextlib.suppress(OSError):
            path.unlink()
    for directory in _cgroup_dirs():
        with contextlib.suppress(OSError):
            directory.rmdir()
    if Path("/sys/class/net", BRIDGE).exists():
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False)
    _remove_new_chains(record.get("iptables", {}))
    for name, value in record["sysctls"].items():
        if value is not None and read_sysctl(name) != value:
            with contextlib.suppress(OSError):
                write_sysctl(name, value)
    _remove_container_logs(layout, bool(record.get("container_logs_existed", True)))
    shutil.rmtree(layout.ipam_dir, ignore_errors=True)
    problems = leftovers(layout)
    if problems:
        log.write("real node: could not undo " + "; ".join(problems) + "\n")
        return problems
    layout.host_record.unlink()
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError):
        if json.loads(HOST_CLAIM.read_text())["state_dir"] == str(layout.state_dir):
            HOST_CLAIM.unlink()
    return []


def _remove_new_chains(before: Mapping[str, Sequence[str]]) -> None:
    if shutil.which("iptables") is None:
        return
    for table, names in iptables_chains().items():
        new = [name for name in names if name not in set(before.get(table, ()))]
        if not new:
            continue
        # Rules in other chains may jump to the new ones: delete those rules first.
        rules = subprocess.run(
            ["iptables", "-w", "-t", table, "-S"], capture_output=True, text=True, check=False
        ).stdout.splitlines()
        for rule in rules:
            parts = rule.split()
            if parts[:1] == ["-A"] and any(f"-j {name}" in rule for name in new):
                command = ["iptables", "-w", "-t", table, "-D", *parts[1:]]
                subprocess.run(command, capture_output=True, check=False)
        for name in new:
            for flag in ("-F", "-X"):
                command = ["iptables", "-w", "-t", table, flag, name]
                subprocess.run(command, capture_output=True, check=False)


def _remove_container_logs(layout: RealNodeLayout, existed: bool) -> None:
    with contextlib.suppress(OSError):
        for link in CONTAINER_LOGS.iterdir():
            if link.is_symlink() and str(layout.root) in os.readlink(link):
                link.unlink()
        if not existed and not any(CONTAINER_LOGS.iterdir()):
            CONTAINER_LOGS.rmdir()
