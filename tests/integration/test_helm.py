"""The product as users install it: `helm install` of the real chart on the dev cluster, the
operator and the agent run from the image `make image` built, on the real node, and the demo
through them.

The dev cluster has the real node (containerd, runc, a kubelet on this host) with the image
imported into its containerd (`--image`), and one kwok node: the agent DaemonSet is kept to the
real node (examples/demo/helm-values.yaml), since a pod on a kwok node only pretends to run.
The API server calls the webhook at its Service's endpoint (`--enable-aggregator-routing`): the
operator pod's address on the real node's bridge. One module, one cluster, the steps in order:
install, the demo, `helm upgrade` to the agent that carries jobs out, freeze and thaw, `kill -9`
of the agent, the logs, `helm uninstall`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kondor_devcluster.cluster import free_port

from .conftest import ROOT, real_node_skip_reason
from .test_chart import _helm_binary
from .waiting import eventually

pytestmark = pytest.mark.timeout(900)

RELEASE = "kondor"
NAMESPACE = "kondor-system"
CHART = ROOT / "helm" / "kondor"
VALUES = ROOT / "examples" / "demo" / "helm-values.yaml"
REAL_NODE = "kondor-real-0"
KWOK_NODE = "kwok-small-0"
IMAGE = "kondor:0.1.0"
#: Only the chart's agent runs with this argument (the dev cluster's own agents do not).
AGENT_MARK = "--host-root=/host"


def _image_archive() -> Path:
    """The image `make image` builds (cached: seconds when nothing changed)."""
    tool = ROOT / "tools" / "build_image.py"
    if not tool.exists():
        pytest.skip("tools/build_image.py is not here yet (make image)")
    result = subprocess.run(
        [sys.executable, str(tool)], capture_output=True, text=True, timeout=1200, check=False
    )
    assert result.returncode == 0, f"make image failed:\n{result.stderr[-3000:]}"
    return Path(result.stdout.strip().splitlines()[-1])


@dataclass
class Release:
    kubeconfig: Path
    state: Path
    helm_bin: Path
    kubectl_bin: str
    host: Path
    cgroup_root: str
    notes: str = ""

    def run(self, args: list[str], *, check: bool = True, stdin: str | None = None) -> str:
        result = subprocess.run(
            args, capture_output=True, text=True, timeout=300, check=False, input=stdin
        )
        assert not check or result.returncode == 0, f"{' '.join(args)}:\n{result.stderr}"
        return result.stdout + ("" if check else result.stderr)

    def kubectl(self, *args: str, user: str = "admin", check: bool = True) -> str:
        base = [self.kubectl_bin, f"--kubeconfig={self.kubeconfig}", f"--context={user}"]
        return self.run([*base, *args], check=check)

    def upgrade(self, *values: str) -> None:
        """`helm upgrade` of the release to this test's values and `values`, waiting for it."""
        self.helm(
            "upgrade",
            RELEASE,
            str(CHART),
            "-n",
            NAMESPACE,
            *self.values(*values),
            "--wait",
            "--timeout=240s",
        )

    def helm(self, *args: str) -> str:
        base = [str(self.helm_bin), f"--kubeconfig={self.kubeconfig}", "--kube-context=admin"]
        return self.run([*base, *args])

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get("pods", "-n", NAMESPACE)["items"]
        return items

    def values(self, *extra: str) -> list[str]:
        """The dev cluster's values, the host directories of this test's own, and `extra`."""
        paths = {
            "stateDir": self.host / "state",
            "executeDir": self.host / "execute",
            "hooksDir": self.host / "hooks",
        }
        sets = [f"agent.hostPaths.{key}={value}" for key, value in paths.items()]
        sets.append(f"agent.execution.cgroupRoot={self.cgroup_root}")
        return ["-f", str(VALUES), *(f"--set={s}" for s in [*sets, *extra])]

    def job(self, name: str, namespace: str = "default") -> dict[str, Any]:
        job: dict[str, Any] = self.get("executionjob", name, "-n", namespace)
        return job


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return pod["status"].get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conditions
    )


def _component(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["labels"]["app.kubernetes.io/component"])


def _all_ready(release: Release, exclude: Collection[str] = ()) -> list[dict[str, Any]] | None:
    """The operator's and the agent's pods, once there is one of each and both are Ready."""
    pods = [p for p in release.pods() if p["metadata"]["uid"] not in exclude]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    components = sorted(_component(p) for p in live)
    if components == ["agent", "operator"] and all(_ready(p) for p in live):
        return live
    return None


def _cgroup_dirs(root: str) -> list[Path]:
    found = []
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        top = hierarchy / root.strip("/")
        if top.is_dir():
            found += [Path(path) for path, _dirs, _files in os.walk(top)]
    return sorted(found, key=lambda path: len(path.parts), reverse=True)


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory, kubectl_bin: str) -> Iterator[Release]:
    reason = real_node_skip_reason()
    if reason:
        pytest.skip(reason)
    helm_bin = _helm_binary()
    archive = _image_archive()
    tmp = tmp_path_factory.mktemp("helm")
    state = tmp / "state"
    kubeconfig = tmp / "kubeconfig"
    cli = [sys.executable, "-m", "kondor_devcluster", "dev-cluster"]
    up = [
        *cli,
        "up",
        "--port",
        str(free_port()),
        "--kubeconfig",
        str(kubeconfig),
        "--state-dir",
        str(state),
        "--nodes",
        str(ROOT / "examples" / "machines" / "kwok-small.yaml"),
        "--real-node",
        REAL_NODE,
        "--real-node-machine",
        str(ROOT / "examples" / "machines" / "real-node.yaml"),
        "--image",
        str(archive),
        "--detach",
    ]
    started = subprocess.run(up, capture_output=True, text=True, timeout=600, check=False)
    cgroup_root = f"/kondor-helm-{os.getpid()}"
    host = tmp / "host"
    found = Release(kubeconfig, state, helm_bin, kubectl_bin, host, cgroup_root)
    try:
        assert started.returncode == 0, f"dev-cluster up:\n{started.stderr[-3000:]}"
        found.notes = found.helm(
            "install",
            RELEASE,
            str(CHART),
            "-n",
            NAMESPACE,
            "--create-namespace",
            *found.values(),
            "--wait",
            "--timeout=240s",
        )
        yield found
    finally:
        found.run(
            [str(helm_bin), f"--kubeconfig={kubeconfig}", "uninstall", RELEASE, "-n", NAMESPACE],
            check=False,
        )
        subprocess.run([*cli, "down", "--state-dir", str(state)], timeout=300, check=False)
        for directory in _cgroup_dirs(cgroup_root):
            directory.rmdir()


def test_helm_install_runs_the_operator_and_the_agent_from_the_image_on_the_real_node(
    release: Release,
) -> None:
    pods = eventually(lambda: _all_ready(release), 120, "the operator and agent pods Ready")
    for pod in pods:
        assert pod["spec"]["nodeName"] == REAL_NODE, pod["metadata"]["name"]
        for container in pod["spec"]["containers"]:
            assert container["image"] == IMAGE
            assert container["imagePullPolicy"] == "IfNotPresent"
        for status in pod["status"]["containerStatuses"]:
            assert status["image"] == f"docker.io/library/{IMAGE}"
            assert status["ready"] and status["restartCount"] == 0, status
    # The kwok node gets no agent: nothing pretends to run Kondor there.
    daemonset = release.get("daemonset", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=agent")
    assert [ds["status"]["desiredNumberScheduled"] for ds in daemonset["items"]] == [1]
    # NOTES.txt's first command shows what it says it shows.
    assert f"kubectl -n {NAMESPACE} get pods -l app.kubernetes.io/instance={RELEASE}" in (
        release.notes
    )
    listed = release.kubectl(
        "-n", NAMESPACE, "get", "pods", f"-l=app.kubernetes.io/instance={RELEASE}"
    )
    assert listed.count("Running") == 2, listed


def test_the_api_server_reaches_the_webhook_through_its_service(release: Release) -> None:
    operator = next(p for p in release.pods() if _component(p) == "operator")
    endpoints = release.get("endpoints", "-n", NAMESPACE, f"{RELEASE}-webhook")
    addresses = [a["ip"] for s in endpoints.get("subsets", []) for a in s.get("addresses", [])]
    assert addresses == [operator["status"]["podIP"]]
    bad = {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "SlotPolicy",
        "metadata": {"name": "bad"},
        "spec": {"start": "Cpus >"},
    }
    refused = release.run(
        [
            release.kubectl_bin,
            f"--kubeconfig={release.kubeconfig}",
            "--context=admin",
            "apply",
            "-f",
            "-",
        ],
        check=False,
        stdin=json.dumps(bad),
    )
    assert 'admission webhook "validate-slotpolicy.kondor.io" denied the request' in refused
    assert "spec.start" in refused


def test_the_demo_policies_give_execution_points_the_in_cluster_agent_publishes(
    release: Release,
) -> None:
    release.kubectl("apply", "-f", str(ROOT / "examples" / "demo" / "policies"))

    def published() -> dict[str, Any] | None:
        out = release.kubectl("get", "executionpoint", REAL_NODE, "-o", "json", check=False)
        if not out.startswith("{"):
            return None
        point: dict[str, Any] = json.loads(out)
        conditions = point.get("status", {}).get("conditions", [])
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return point if ready and point["status"].get("slots") else None

    point = eventually(published, 120, f"ExecutionPoint {REAL_NODE} Ready with slots")
    assert point["status"]["machine"]["Machine"] == REAL_NODE
    # The kwok node's ExecutionPoint (the `everyone` policy selects it) has no agent to publish.
    kwok = release.kubectl("get", "executionpoint", KWOK_NODE, "-o", "json", check=False)
    if kwok.startswith("{"):
        assert not json.loads(kwok).get("status", {}).get("slots")


def _completed(release: Release, name: str, namespace: str = "default") -> dict[str, Any] | None:
    job = release.job(name, namespace)
    return job if job.get("status", {}).get("jobStatus") == "Completed" else None


def _wait_completed(release: Release, name: str, timeout: float) -> dict[str, Any]:
    try:
        job: dict[str, Any] = eventually(lambda: _completed(release, name), timeout, name)
    except AssertionError as error:
        status = release.job(name).get("status")
        raise AssertionError(f"{error}; its status: {status}") from None
    return job


def test_alices_job_runs_and_completes_with_its_exit_code(release: Release) -> None:
    release.kubectl(
        "apply", "-f", str(ROOT / "examples" / "demo" / "jobs" / "hello.yaml"), user="alice"
    )
    job = _wait_completed(release, "hello", 120)
    assert job["spec"]["owner"] == "alice"  # set by the mutating webhook, through the Service
    assert job["status"]["exitCode"] == 3
    assert job["status"]["executionPoint"] == REAL_NODE


EXECUTING = ("agent.execution.enabled=true", "operator.verbose=true")


def test_helm_upgrade_with_a_changed_value_rolls_the_pods(release: Release) -> None:
    before = {p["metadata"]["uid"] for p in release.pods()}
    release.upgrade(*EXECUTING)
    pods = eventually(lambda: _all_ready(release, before), 180, "new operator and agent pods")
    agent = next(p for p in pods if _component(p) == "agent")
    assert agent["spec"]["hostPID"] is True
    assert agent["spec"]["containers"][0]["securityContext"]["privileged"] is True
    operator = next(p for p in pods if _component(p) == "operator")
    assert "--verbose" in operator["spec"]["containers"][0]["args"]


def _agent_pids() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [w.decode(errors="replace") for w in argv]
        if AGENT_MARK in words and any(w.endswith("kondor-agent") for w in words[:2]):
            found.append(int(entry.name))
    return found


def _process_job(name: str, script: str) -> dict[str, Any]:
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "requestCpus": 1,
            "requestMemory": "64Mi",
            "process": {"executable": "/bin/sh", "arguments": ["-c", script], "output": "out.txt"},
        },
    }


def _apply(release: Release, manifest: dict[str, Any], user: str = "alice") -> None:
    base = [release.kubectl_bin, f"--kubeconfig={release.kubeconfig}", f"--context={user}"]
    release.run([*base, "apply", "-f", "-"], stdin=yaml.safe_dump(manifest))


def _running(release: Release, name: str) -> dict[str, Any] | None:
    execution = release.job(name).get("status", {}).get("execution") or {}
    return execution if execution.get("state") == "Running" else None


def _freezer_state(pid: int, root: str) -> tuple[str, str]:
    """The cgroup under `root` that `pid` is frozen by, and its state: FROZEN or THAWED.

    The agent freezes where it made the job's cgroup: the v2 tree (`cgroup.freeze`; on a hybrid
    host the one at /sys/fs/cgroup/unified) or the v1 freezer hierarchy (`freezer.state`)."""
    base = Path("/sys/fs/cgroup")
    unified = base / "unified" if (base / "unified" / "cgroup.procs").exists() else base
    places = dict(
        (controllers, path)
        for _id, controllers, path in (
            line.split(":", 2) for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        )
        if path.startswith(root + "/")
    )
    # The v2 tree freezes when it can (its cgroup.freeze); the v1 freezer only otherwise (a job
    # also sits in its supervisor's cgroup of the v1 freezer hierarchy, which nothing freezes).
    path = places.get("")
    if path is not None and (unified / path.lstrip("/") / "cgroup.freeze").exists():
        events = (unified / path.lstrip("/") / "cgroup.events").read_text().split()
        return path, "FROZEN" if events[events.index("frozen") + 1] == "1" else "THAWED"
    path = places.get("freezer")
    if path is not None:
        return path, (base / "freezer" / path.lstrip("/") / "freezer.state").read_text().strip()
    raise AssertionError(f"process {pid} is in no cgroup under {root}")


SUSPENDING = """POLLING_INTERVAL = 1
WANT_SUSPEND = True
SUSPEND = Activity == "Busy" && (time() - EnteredCurrentActivity) > 3
CONTINUE = (time() - EnteredCurrentActivity) > 4
PREEMPT = False
"""


def _host_path(release: Release, directory: str) -> Path:
    """A job directory the agent names (inside its pod) on this host."""
    inside = Path(directory).relative_to("/var/lib/kondor/execute")
    return release.host / "execute" / inside


def test_a_process_job_is_frozen_and_thawed_in_its_cgroup_for_real(release: Release) -> None:
    policy = {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "SlotPolicy",
        "metadata": {"name": "helm-suspend"},
        "spec": {
            "nodeSelector": {"matchLabels": {"kondor.io/real-node": "true"}},
            "priority": 30,
            "condorConfig": SUSPENDING,
        },
    }
    _apply(release, policy, user="admin")

    def carved_with_it() -> bool:
        point = release.get("executionpoint", REAL_NODE)
        return bool((point["status"].get("policy") or {}).get("name") == "helm-suspend")

    try:
        eventually(carved_with_it, 60, f"{REAL_NODE} carved with the SUSPEND policy")
        counting = (
            "i=0; while [ $i -lt 60 ]; do i=$((i+1)); echo $i > count; sleep 0.25; done; exit 4"
        )
        _apply(release, _process_job("freezer", counting))
        running = eventually(lambda: _running(release, "freezer"), 90, "the job Running")
        directory = _host_path(release, running["directory"])
        pid = int((directory / "job.pid").read_text())
        root = release.cgroup_root
        cgroup, _state = _freezer_state(pid, root)
        assert "default.freezer.1" in cgroup, cgroup  # the job's own, under the chart's root
        count = directory / "scratch" / "count"
        eventually(lambda: _freezer_state(pid, root)[1] == "FROZEN", 30, "the job's cgroup FROZEN")
        frozen_at = count.read_text()
        time.sleep(1.0)
        assert count.read_text() == frozen_at  # frozen in place: not counting, not killed
        eventually(lambda: _freezer_state(pid, root)[1] == "THAWED", 30, "the job's cgroup THAWED")
        eventually(lambda: count.read_text() != frozen_at, 10, "the job counting again")
        job = _wait_completed(release, "freezer", 120)
        assert job["status"]["exitCode"] == 4
        assert count.read_text().strip() == "60"
    finally:
        release.kubectl("delete", "slotpolicy", "helm-suspend", "--ignore-not-found")


def test_kill_9_of_the_in_cluster_agent_the_daemonset_restarts_it_and_the_job_completes_once(
    release: Release,
) -> None:
    _apply(release, _process_job("survivor", "echo start; sleep 12; echo done; exit 7"))
    running = eventually(lambda: _running(release, "survivor"), 90, "the job Running")
    agents = _agent_pids()
    assert len(agents) == 1, agents
    agent_pod = next(p for p in release.pods() if _component(p) == "agent")
    restarts = agent_pod["status"]["containerStatuses"][0]["restartCount"]
    os.kill(agents[0], signal.SIGKILL)

    def restarted() -> bool:
        pod = next(p for p in release.pods() if _component(p) == "agent")
        status = pod["status"]["containerStatuses"][0]
        return bool(status["restartCount"] > restarts and status.get("ready"))

    eventually(restarted, 120, "the agent container restarted by the kubelet")
    assert pod_uid(release, "agent") == agent_pod["metadata"]["uid"]  # the same pod
    job = _wait_completed(release, "survivor", 90)
    status = job["status"]
    assert status["exitCode"] == 7
    assert status["numJobStarts"] == 1  # never started twice: its exit reported once
    assert status["execution"]["directory"] == running["directory"]


def _operator_pid(pod_name: str) -> int:
    """The host pid of the operator process of pod `pod_name` (its POD_NAME, from the chart)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(w.endswith(b"kondor-operator") for w in argv[:2]) and (
            f"POD_NAME={pod_name}".encode() in environ
        ):
            return int(entry.name)
    raise AssertionError(f"no operator process of pod {pod_name}")


def test_with_two_operators_jobs_are_admitted_while_the_killed_leader_still_holds_the_lease(
    release: Release,
) -> None:
    release.upgrade(*EXECUTING, "operator.replicas=2")

    def operators() -> list[dict[str, Any]]:
        return [
            p
            for p in release.pods()
            if _component(p) == "operator" and not p["metadata"].get("deletionTimestamp")
        ]

    eventually(lambda: len(operators()) == 2 and all(map(_ready, operators())), 180, "2 ready")

    def holder() -> str:
        lease = release.get("lease", "kondor-operator", "-n", NAMESPACE)
        return str(lease["spec"].get("holderIdentity") or "")

    names = {p["metadata"]["name"]: p["status"]["podIP"] for p in operators()}
    leader = eventually(lambda: holder() if holder() in names else None, 60, "a leader")
    # Killed, it cannot release its Lease; deleted, its pod leaves the webhook's endpoints (the
    # Deployment's replacement has another name, so the Lease still names the dead leader).
    os.kill(_operator_pid(leader), signal.SIGKILL)
    release.kubectl("delete", "pod", "-n", NAMESPACE, leader, "--grace-period=0", "--force")

    def endpoints_without_it() -> bool:
        endpoints = release.get("endpoints", "-n", NAMESPACE, f"{RELEASE}-webhook")
        subsets = endpoints.get("subsets") or []
        ready = {a["ip"] for s in subsets for a in s.get("addresses", [])}
        return bool(ready) and names[leader] not in ready

    eventually(endpoints_without_it, 30, "the dead leader gone from the webhook's endpoints")
    for number in range(3):
        name = f"after-the-leader-{number}"
        _apply(release, _process_job(name, "exit 0"))  # alice, naming no owner
        assert release.job(name)["spec"]["owner"] == "alice"
    assert holder() == leader, "admitted by replicas of which none leads yet"
    eventually(lambda: holder() not in ("", leader), 60, "a surviving replica leading")


def pod_uid(release: Release, component: str) -> str:
    pod = next(p for p in release.pods() if _component(p) == component)
    return str(pod["metadata"]["uid"])


def test_the_operator_and_agent_logs_show_no_traceback(release: Release) -> None:
    for pod in release.pods():
        name = pod["metadata"]["name"]
        logs = release.kubectl("logs", "-n", NAMESPACE, name, "--all-containers")
        assert "Traceback" not in logs, f"{name}:\n{logs[-3000:]}"
        assert logs.strip(), f"{name} logged nothing"


def test_helm_uninstall_leaves_nothing_of_kondor_behind_but_its_crds(release: Release) -> None:
    release.kubectl("delete", "executionjobs", "--all", "-n", "default", "--wait=true")
    release.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=180s")
    kinds = release.kubectl("api-resources", "--verbs=list", "-o", "name").split()
    listed = ",".join(kind for kind in kinds if kind not in ("events", "events.events.k8s.io"))

    def nothing_left() -> bool:
        selector = f"-l=app.kubernetes.io/instance={RELEASE}"
        return release.kubectl("get", listed, "-A", selector, "-o", "name").strip() == ""

    # The pods go once their containers have stopped (the operator releases its Lease first).
    eventually(nothing_left, 90, "nothing of the release left")
    assert not release.pods()
    # Nor anything the operator made in its namespace (its Lease): only what every namespace has.
    namespaced = release.kubectl("api-resources", "--namespaced=true", "--verbs=list", "-o", "name")
    kinds_here = [k for k in namespaced.split() if k not in ("events", "events.events.k8s.io")]
    here = release.kubectl("get", ",".join(kinds_here), "-n", NAMESPACE, "-o", "name").split()
    every_namespace = {"serviceaccount/default", "configmap/kube-root-ca.crt"}
    assert sorted(set(here) - every_namespace) == []
    crds = release.kubectl("get", "crds", "-o", "name")
    assert "customresourcedefinition.apiextensions.k8s.io/executionjobs.kondor.io" in crds
    assert not _agent_pids()
