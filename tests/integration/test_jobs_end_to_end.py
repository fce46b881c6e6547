"""Jobs end to end on the dev cluster (issue 10): alice submits an ExecutionJob with real
kubectl, the operator's negotiator matches it, the node's agent claims the slot and runs it as
a real process, and the job ends Completed with its exit code; hold, release and rm act as
condor's. The cluster has the operator (webhooks, negotiator) and one agent per kwok node."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port

from .conftest import MACHINES, skip_reason

NODE = "kwok-small-0"
CPUS = 4  # examples/machines/kwok-small.yaml


class Cluster:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def kubectl(self, *args: str, user: str = "admin", stdin: str | None = None) -> str:
        # The `kubectl-kondor` plugin is found on PATH, beside this Python.
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        # kubectl takes no flags before a plugin's name: they go after it.
        where = ["--kubeconfig", str(self.kubeconfig), "--context", user]
        command = ["kubectl", *args, *where] if args[0] == "kondor" else ["kubectl", *where, *args]
        done = subprocess.run(
            command,
            input=stdin,
            capture_output=True,
            check=False,
            text=True,
            timeout=60,
            env={**os.environ, "PATH": path},
        )
        if done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} as {user}: {done.stderr}")
        return done.stdout

    def apply(self, manifest: dict[str, Any], user: str = "admin") -> None:
        text = yaml.safe_dump(manifest)
        try:
            self.kubectl("apply", "-f", "-", user=user, stdin=text)
        except AssertionError as err:
            # kubectl apply reads, then creates: an object made in between (the operator makes
            # the Pool `default` at its first cycle when there is none) refuses the create, and
            # applying again patches it.
            if "AlreadyExists" not in str(err):
                raise
            self.kubectl("apply", "-f", "-", user=user, stdin=text)

    def get(self, kind: str, name: str, namespace: str | None = "default") -> dict[str, Any]:
        where = ["-n", namespace] if namespace else []
        found: dict[str, Any] = json.loads(self.kubectl("get", kind, name, *where, "-o", "json"))
        return found

    def job(self, name: str) -> dict[str, Any]:
        return self.get("executionjobs", name)

    def slots(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.get("executionpoints", NODE, None)["status"]["slots"]
        return found


def eventually(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (AssertionError, KeyError) as err:
            last = err
        else:
            if last:
                return last
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout}s; last: {last!r}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("jobs")
    policy = slot_policy("everything", {"kondor.io/pool": "cpu"})
    with job_cluster(tmp, [MACHINES / "kwok-small.yaml"], [policy]) as made:
        yield made


def slot_policy(name: str, labels: dict[str, str], condor_config: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeSelector": {"matchLabels": labels}}
    if condor_config:
        spec["condorConfig"] = condor_config
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "SlotPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


def kwok_machines(
    tmp: Path, names: Iterable[str], *, cpus: int, memory: str, labels: dict[str, str]
) -> list[Path]:
    """One machine file per name under `tmp`: a kwok node of `cpus` cores and `memory`."""
    paths = []
    for name in names:
        path = tmp / f"{name}.yaml"
        machine = {"name": name, "cpus": cpus, "memory": memory, "disk": 104857600}
        path.write_text(yaml.safe_dump({**machine, "labels": labels}))
        paths.append(path)
    return paths


@contextlib.contextmanager
def job_cluster(
    tmp: Path,
    machines: list[Path],
    policies: list[dict[str, Any]],
    real_node: str | None = None,
) -> Iterator[Cluster]:
    """A dev cluster of its own (operator, one agent per machine, and the real node `real_node`
    with its agent if named) with `policies` applied, a negotiator interval of 2 s, and every
    node's slots Unclaimed."""
    spec = ClusterSpec(
        port=free_port(),
        kubeconfig=tmp / "kubeconfig",
        state_dir=tmp / "state",
        nodes=tuple(machines),
        operator=True,
        agents=True,
        real_node=real_node,
    )
    dev = DevCluster(spec, log=sys.stderr)
    dev.start()
    try:
        made = Cluster(spec.kubeconfig)
        for policy in policies:
            made.apply(policy)
        made.apply(
            {
                "apiVersion": "kondor.io/v1alpha1",
                "kind": "Pool",
                "metadata": {"name": "default"},
                "spec": {"negotiatorInterval": 2},
            }
        )
        nodes = [yaml.safe_load(path.read_text())["name"] for path in machines]
        nodes += [real_node] if real_node else []

        def unclaimed() -> bool:
            slots = [
                s for n in nodes for s in made.get("executionpoints", n, None)["status"]["slots"]
            ]
            return bool(slots) and all(s["state"] == "Unclaimed" for s in slots)

        eventually(unclaimed, 60, "every node's slots Unclaimed")
        yield made
    finally:
        dev.stop()


def job_python() -> str:
    """A Python interpreter a job may execute. Jobs never run as root (each drops to its
    owner's or its slot's user), and this venv's interpreter may sit under /root (mode 0700),
    out of a job's reach; the system's python3 is then used."""

    def others_can_run(path: Path) -> bool:
        real = path.resolve()
        return bool(real.stat().st_mode & stat.S_IXOTH) and all(
            parent.stat().st_mode & stat.S_IXOTH for parent in real.parents
        )

    if others_can_run(Path(sys.executable)):
        return sys.executable
    found = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    assert found is not None and others_can_run(Path(found)), "no python3 a job can run"
    return found


def process_job(name: str, script: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "requestCpus": 1,
            "requestMemory": "64Mi",
            "process": {
                "executable": "/bin/sh",
                "arguments": ["-c", script],
                "output": "out.txt",
                "error": "err.txt",
            },
            **spec,
        },
    }


def test_a_process_job_runs_for_real_and_ends_completed_with_its_exit_code(
    cluster: Cluster,
) -> None:
    script = 'echo hello from $_CONDOR_SLOT; echo made > "$_CONDOR_SCRATCH_DIR/made.txt"; exit 3'
    started = time.monotonic()
    # No owner named: the webhook makes it the submitter (one naming bob is refused by the
    # owner admission policy: tests/integration/test_identity.py).
    cluster.apply(process_job("hello", script), user="alice")
    running = eventually(
        lambda: (
            cluster.job("hello")["status"].get("execution", {}).get("state")
            in ("Running", "Exited")
        ),
        15,
        "the job Running",
    )
    assert running
    submit_to_running = time.monotonic() - started
    done = eventually(
        lambda: (job := cluster.job("hello"))["status"]["jobStatus"] == "Completed" and job,
        30,
        "the job Completed",
    )
    status = done["status"]
    assert done["spec"]["owner"] == "alice"
    assert status["exitCode"] == 3
    assert status["numJobStarts"] == 1
    execution = status["execution"]
    assert execution["state"] == "Exited" and execution["exitCode"] == 3
    slot = execution["slot"]
    assert slot.startswith("slot1_") and slot.endswith(f"@{NODE}")
    scratch = Path(execution["directory"]) / "scratch"
    assert (scratch / "out.txt").read_text() == f"hello from {slot}\n"
    assert (scratch / "made.txt").read_text() == "made\n"
    assert "JobUniverse = 5" in (scratch / ".job.ad").read_text()
    # condor_q as bob shows alice's job, with its owner.
    queue = cluster.kubectl("kondor", "q", "-all", "hello", "-af", "Owner", "ExitCode", user="bob")
    assert queue.split() == ["alice", "3"]
    # The dynamic slot went back: the partitionable slot has all its cores again.
    eventually(
        lambda: (
            [(s["name"], s["state"], s["cpus"]) for s in cluster.slots()]
            == [(f"slot1@{NODE}", "Unclaimed", CPUS)]
        ),
        15,
        "the partitionable slot whole and Unclaimed again",
    )
    print(f"submit -> running: {submit_to_running:.2f}s")


def test_a_missing_executable_holds_the_job_naming_it(cluster: Cluster) -> None:
    job = process_job("missing", "exit 0")
    job["spec"]["process"]["executable"] = "/no/such/program"
    cluster.apply(job, user="alice")
    held = eventually(
        lambda: (j := cluster.job("missing"))["status"]["jobStatus"] == "Held" and j,
        30,
        "the job Held",
    )
    assert "/no/such/program" in held["status"]["holdReason"]
    assert held["status"]["holdReasonCode"] == 6


def test_rm_of_a_running_job_kills_its_process_and_frees_the_slot(cluster: Cluster) -> None:
    cluster.apply(process_job("sleeper", "echo $$ > pid; exec sleep 300"), user="alice")
    execution = eventually(
        lambda: (
            (e := cluster.job("sleeper")["status"].get("execution", {})).get("state") == "Running"
            and e
        ),
        20,
        "the sleeper Running",
    )
    pid_file = Path(execution["directory"]) / "scratch" / "pid"
    pid = int(eventually(lambda: pid_file.exists() and pid_file.read_text(), 10, "its pid"))
    cluster.kubectl(
        "patch",
        "executionjob",
        "sleeper",
        "-n",
        "default",
        "--type",
        "merge",
        "-p",
        '{"spec": {"remove": true}}',
        user="alice",
    )
    eventually(lambda: cluster.job("sleeper")["status"]["jobStatus"] == "Removed", 20, "Removed")
    eventually(lambda: not Path(f"/proc/{pid}").exists(), 20, "the process gone")
    eventually(
        lambda: [(s["state"], s["cpus"]) for s in cluster.slots()] == [("Unclaimed", CPUS)],
        20,
        "the slot free again",
    )


def test_hold_and_release_act_as_condor_s(cluster: Cluster) -> None:
    cluster.apply(process_job("held", "exit 0", hold=True), user="alice")
    eventually(lambda: cluster.job("held")["status"]["jobStatus"] == "Held", 15, "Held")
    time.sleep(3)  # a held job is not matched
    assert cluster.job("held")["status"].get("execution") is None
    cluster.kubectl(
        "patch",
        "executionjob",
        "held",
        "-n",
        "default",
        "--type",
        "merge",
        "-p",
        '{"spec": {"hold": false}}',
        user="alice",
    )
    eventually(lambda: cluster.job("held")["status"]["jobStatus"] == "Completed", 30, "Completed")


def test_a_pod_job_ends_completed_with_its_annotated_exit_code(cluster: Cluster) -> None:
    template = {
        "metadata": {
            "annotations": {"kondor.io/sim-duration": "1s", "kondor.io/sim-exit-code": "4"}
        },
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    cluster.apply(
        {
            "apiVersion": "kondor.io/v1alpha1",
            "kind": "ExecutionJob",
            "metadata": {"name": "podjob", "namespace": "default"},
            "spec": {"requestCpus": 1, "requestMemory": "200Mi", "pod": {"template": template}},
        },
        user="alice",
    )
    done = eventually(
        lambda: (j := cluster.job("podjob"))["status"]["jobStatus"] == "Completed" and j,
        40,
        "the pod job Completed",
    )
    assert done["status"]["exitCode"] == 4
    pods = json.loads(
        cluster.kubectl("get", "pods", "-n", "default", "-l", "kondor.io/job=podjob", "-o", "json")
    )["items"]
    [pod] = pods
    assert pod["spec"]["nodeName"] == NODE
    assert pod["metadata"]["ownerReferences"][0]["name"] == "podjob"
    # The dynamic slot took 1 core and 200 MiB rounded up to the 128 MiB quantum: 256 MiB.
    expected = {"cpu": "1", "memory": "256Mi"}
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources == {"requests": expected, "limits": expected}
    # The ads travel in the pod (the API server took its downwardAPI volume): one create.
    annotations = pod["metadata"]["annotations"]
    assert "JobUniverse = 5" in annotations["kondor.io/job-ad"]
    assert f'Machine = "{NODE}"' in annotations["kondor.io/machine-ad"]
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "kondor-ads"]
    assert [item["path"] for item in volume["downwardAPI"]["items"]] == [".job.ad", ".machine.ad"]
    maps = cluster.kubectl("get", "configmaps", "-n", "default", "-l", "kondor.io/job=podjob",
                           "-o", "json")  # fmt: skip
    assert json.loads(maps)["items"] == []


def _memory_limits_work() -> str | None:
    """Why job memory limits cannot be enforced on this machine, or None when they can."""
    import uuid

    from kondor_agent.execute.cgroups import CgroupError, JobCgroups

    try:
        cgroups = JobCgroups.open(root=f"kondor-probe-{uuid.uuid4().hex[:8]}")
    except (CgroupError, OSError) as err:
        return f"cgroups are not writable here: {err}"
    try:
        return None if cgroups.can_limit_memory else "no memory controller here"
    finally:
        cgroups.remove_root()


def test_a_job_over_its_slot_s_memory_is_oom_killed_and_held(cluster: Cluster) -> None:
    reason = _memory_limits_work()
    if reason:
        pytest.skip(reason)
    grow = "b = bytearray(512 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
    job = process_job("hog", "")
    job["spec"]["process"] = {"executable": job_python(), "arguments": ["-S", "-c", grow]}
    cluster.apply(job, user="alice")
    held = eventually(
        lambda: (j := cluster.job("hog"))["status"]["jobStatus"] == "Held" and j,
        40,
        "the job Held",
    )
    status = held["status"]
    assert status["holdReasonCode"] == 34
    # The dynamic slot has 128 MiB (64Mi rounded up to the 128 MiB quantum): its limit.
    assert "over cgroup memory limit of 128 megabytes" in status["holdReason"]
    assert status["execution"]["exitSignal"] == 9


def test_a_deferred_job_runs_no_earlier_than_its_deferral_time(cluster: Cluster) -> None:
    """The manual's "Job Deferral": matched ahead of time, it waits on its slot (Running)
    and starts at DeferralTime; one whose window has passed is held with HoldReasonCode 20."""
    at = int(time.time()) + 10
    script = 'date +%s.%N > "$_CONDOR_SCRATCH_DIR/started"'
    cluster.apply(process_job("deferred", script, deferralTime=at), user="alice")
    cluster.apply(
        process_job("too-late", "exit 0", deferralTime=at - 100, deferralWindow=30), user="alice"
    )
    held = eventually(
        lambda: (j := cluster.job("too-late"))["status"]["jobStatus"] == "Held" and j,
        30,
        "the late job Held",
    )
    assert held["status"]["holdReasonCode"] == 20
    assert "missed its deferred execution time" in held["status"]["holdReason"]
    waiting = eventually(
        lambda: (j := cluster.job("deferred"))["status"]["jobStatus"] == "Running" and j,
        15,
        "the deferred job matched and waiting, Running",
    )
    assert waiting["status"]["deferralTime"] == at
    assert time.time() < at, "matched, claimed and waiting before its time"
    done = eventually(
        lambda: (j := cluster.job("deferred"))["status"]["jobStatus"] == "Completed" and j,
        40,
        "the deferred job Completed",
    )
    scratch = Path(done["status"]["execution"]["directory"]) / "scratch"
    started = float((scratch / "started").read_text())
    assert at <= started < at + 3, f"started at {started}, DeferralTime {at}"
    assert f"DeferralTime = {at}" in (scratch / ".job.ad").read_text()


@pytest.mark.timeout(240)
def test_a_crontab_job_runs_at_each_minute_and_stays_in_the_queue(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The manual's "CronTab Scheduling": `cronMinute: "*"` runs at the top of each minute,
    never before it, and the job is Idle again after each exit (on_exit_remove false)."""
    runs = tmp_path / "runs"
    # Each run is a job of its own, never root and maybe another slot's user: the file it
    # appends to is open to them all (and its directory crossable).
    runs.touch()
    runs.chmod(0o666)
    tmp_path.chmod(0o711)
    script = f"date +%s.%N >> {runs}"
    job = process_job("every-minute", script, cronMinute="*", cronPrepTime=15, cronWindow=30)
    cluster.apply(job, user="alice")
    eventually(
        lambda: runs.exists() and len(runs.read_text().split()) >= 2,
        150,
        "two runs",
    )
    starts = [float(word) for word in runs.read_text().split()]
    minutes = [int(start // 60) for start in starts]
    assert len(set(minutes)) == len(minutes), f"one run a minute: {starts}"
    assert all(start % 60 < 30 for start in starts), f"each at its minute: {starts}"
    status = eventually(
        lambda: (j := cluster.job("every-minute")["status"])["jobStatus"] == "Idle" and j,
        30,
        "Idle again, waiting for its next minute",
    )
    assert status["deferralTime"] % 60 == 0 and status["deferralTime"] > starts[-1]
    job["spec"]["remove"] = True
    cluster.apply(job, user="alice")
