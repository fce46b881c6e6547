"""Computing On Demand on the dev cluster (issue 15): alice, in the node's VALID_COD_USERS,
claims the slot that runs bob's batch job and activates the FractGen application the
SlotPolicy defines by keyword; bob's job is frozen while it runs and goes on, to the right
output, once she deactivates. Suspend, resume, release and an unrenewed lease act as the
reference says; bob is refused at request, alice cannot act on carol's claim, and an inline
job ad naming another Owner is refused. Applications and jobs are real processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from .conftest import MACHINES, skip_reason
from .test_jobs_end_to_end import Cluster, eventually, job_cluster, process_job, slot_policy

pytestmark = pytest.mark.timeout(180)

NODE = "kwok-small-0"
#: The uid the policy maps alice to (KONDOR_USER_ACCOUNTS): her COD application runs as it.
ALICE_UID = 2001
#: The FractGen application: prints its arguments, counts in its IWD until SIGTERM.
FRACTGEN = """#!/bin/sh
echo "fractgen $*"
trap 'echo "terminated at $i"; exit 0' TERM
i=0
while true; do i=$((i+1)); echo $i > count; sleep 0.05; done
"""


def policy(script: Path, iwd: Path) -> str:
    return f"""POLLING_INTERVAL = 1
VALID_COD_USERS = alice, carol
KONDOR_USER_ACCOUNTS = alice={ALICE_UID}
FractGen_Cmd = "{script}"
FractGen_Iwd = "{iwd}"
FractGen_Out = "output"
FractGen_Err = "error"
FractGen_Args = "mandelbrot -0.65865,-0.56254 -0.45865,-0.71254"
"""


@pytest.fixture(scope="module")
def cod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path]]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("cod")
    script = tmp / "fractgen"
    script.write_text(FRACTGEN)
    script.chmod(0o755)
    iwd = tmp / "cod-fractgen"
    iwd.mkdir()
    # The application runs as its Owner, alice (mapped to a uid): its IWD is hers, as an
    # admin makes the directory of an application writable by the user it runs as.
    os.chown(iwd, ALICE_UID, ALICE_UID)
    policies = [slot_policy("cod", {"kondor.io/pool": "cpu"}, policy(script, iwd))]
    with job_cluster(tmp, [MACHINES / "kwok-small.yaml"], policies) as made:
        yield made, iwd


def kondor(cluster: Cluster, *args: str, user: str, stdin: str | None = None) -> tuple[int, str]:
    """`kubectl kondor ARGS` as `user`: its exit status and its output (stdout and stderr)."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    done = subprocess.run(
        ["kubectl", "kondor", *args, "--kubeconfig", str(cluster.kubeconfig), "--context", user],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PATH": path},
    )
    return done.returncode, done.stdout + done.stderr


def request(cluster: Cluster, *args: str, user: str = "alice") -> str:
    """A claim requested with `kubectl kondor cod request`; its CodClaim's name."""
    code, out = kondor(cluster, "cod", "request", *args, user=user)
    assert code == 0, out
    assert re.search(r'ID of new claim is: "<kwok-small-0>#\d+#\d+"', out), out
    found = re.search(r"CodClaim: default/(\S+)", out)
    assert found, out
    return found.group(1)


def claim(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.get("codclaims", name)


def cod_state(cluster: Cluster, name: str) -> str | None:
    state = claim(cluster, name).get("status", {}).get("state")
    return str(state) if state is not None else None


def count(path: Path) -> int:
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text.isdigit() else 0


def frozen(directory: Path) -> bool:
    """Whether the kernel holds the job's processes stopped: its cgroup frozen (v1
    freezer.state FROZEN, v2 cgroup.events `frozen 1`), else (no cgroups) every process of
    its group in state T."""
    spec = json.loads((directory / "spec.json").read_text())
    for procs in spec.get("job_procs") or []:
        folder = Path(procs).parent
        state = folder / "freezer.state"
        if state.exists():
            return state.read_text().strip() == "FROZEN"
        events = folder / "cgroup.events"
        if events.exists():
            return "frozen 1" in events.read_text()
    pid = int((directory / "job.pid").read_text())
    return process_states(pid) == {"T"}


def process_states(group: int) -> set[str]:
    """The states of the live processes of process group `group` (zombies left out)."""
    states = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            states.add(fields[0])
    return states


def slot_status(cluster: Cluster, name: str) -> dict[str, Any]:
    """The slot as the ExecutionPoint's status shows it."""
    return next(s for s in cluster.slots() if s["name"] == name)


def moving(path: Path, seconds: float = 0.6) -> bool:
    before = count(path)
    time.sleep(seconds)
    return count(path) > before


def test_alice_s_cod_application_freezes_bob_s_job_and_gives_the_slot_back(
    cod: tuple[Cluster, Path],
) -> None:
    cluster, iwd = cod
    # Bob's job counts until the test lets it finish (a GO file), so that its end never
    # races the COD commands however loaded the machine is; it prints how far it counted.
    counter = (
        "i=0; while [ $i -lt 40 ] || [ ! -e GO ]; do i=$((i+1)); echo $i > count; "
        "sleep 0.05; done; echo counted $i"
    )
    cluster.apply(process_job("bobjob", counter), user="bob")
    execution = eventually(
        lambda: (
            (e := cluster.job("bobjob")["status"].get("execution", {})).get("state") == "Running"
            and e
        ),
        20,
        "bob's job Running",
    )
    bob_dir = Path(execution["directory"])
    bob_count = bob_dir / "scratch" / "count"
    eventually(lambda: count(bob_count) > 3, 10, "bob's job counting")
    slot = execution["slot"]

    name = request(cluster, "-name", slot)
    requested = claim(cluster, name)
    assert requested["spec"]["owner"] == "alice"
    assert requested["status"]["state"] == "Idle"
    assert requested["status"]["slot"] == slot

    # Activate as condor_cod_activate does (the CLI's own patch), timed from the API write.
    alice = config.new_client_from_config(config_file=str(cluster.kubeconfig), context="alice")
    objects = client.CustomObjectsApi(alice)
    started = time.monotonic()
    objects.patch_namespaced_custom_object(
        "kondor.io",
        "v1alpha1",
        "default",
        "codclaims",
        name,
        {"spec": {"state": "Running", "activation": 1, "keyword": "FractGen"}},
    )
    eventually(lambda: frozen(bob_dir), 2, "bob's job frozen within 2 s")
    froze_after = time.monotonic() - started
    app_count = iwd / "count"
    eventually(lambda: count(app_count) > 3, 5, "alice's application counting")
    assert app_count.stat().st_uid == ALICE_UID  # it runs as its Owner, not as root
    print(f"bob's job frozen {froze_after:.2f}s after the activation was written")
    held = count(bob_count)
    assert not moving(bob_count) and count(bob_count) == held  # stopped, not killed
    running = claim(cluster, name)["status"]
    assert running["state"] == "Running" and running["keyword"] == "FractGen"
    assert running["jobId"] == "1.0"
    assert (
        (iwd / "output")
        .read_text()
        .startswith("fractgen mandelbrot -0.65865,-0.56254 -0.45865,-0.71254")
    )
    eventually(
        lambda: cluster.job("bobjob")["status"]["jobStatus"] == "Suspended", 10, "bob Suspended"
    )
    # The batch claim is Claimed/Suspended while the COD job runs (the startd's
    # suspendForCOD), and takes no match.
    suspended = eventually(
        lambda: (s := slot_status(cluster, slot))["activity"] == "Suspended" and s,
        10,
        "bob's slot Claimed/Suspended",
    )
    assert suspended["state"] == "Claimed"
    assert suspended["ad"]["Requirements"] is False
    code, table = kondor(cluster, "status", "-cod", user="bob")
    assert code == 0, table
    assert re.search(rf"{re.escape(slot)}\s+COD1\s+Running\s+\S+\s+alice\s+1\.0\s+FractGen", table)

    # Suspend: alice's application is frozen and bob's job runs meanwhile; resume: back.
    code, out = kondor(cluster, "cod", "suspend", "-id", name, user="alice")
    assert code == 0, out
    app_pid = int(claim(cluster, name)["status"]["pid"])
    app_dir = Path(claim(cluster, name)["status"]["directory"])
    assert frozen(app_dir)
    assert not moving(app_count)
    eventually(lambda: moving(bob_count, 0.3), 5, "bob's job running meanwhile")
    code, out = kondor(cluster, "cod", "resume", "-id", name, user="alice")
    assert code == 0, out
    eventually(lambda: moving(app_count, 0.3), 5, "alice's application running again")
    eventually(lambda: frozen(bob_dir), 2, "bob's job frozen again")

    # A second resume is refused, as condor_cod_resume refuses a claim that is not Suspended.
    code, out = kondor(cluster, "cod", "resume", "-id", name, user="alice")
    assert code == 1 and "Running: resume needs a claim that is Suspended" in out, out

    # Deactivate: KillSig (SIGTERM) to the application, the claim Idle, bob's job goes on.
    code, out = kondor(cluster, "cod", "deactivate", "-id", name, user="alice")
    assert code == 0 and "the claim is Idle" in out, out
    assert "terminated at" in (iwd / "output").read_text()
    assert claim(cluster, name)["status"]["exitCode"] == 0
    assert process_states(app_pid) == set()
    eventually(lambda: moving(bob_count, 0.3), 5, "bob's job counting again")
    busy = eventually(
        lambda: (s := slot_status(cluster, slot))["activity"] == "Busy" and s,
        10,
        "bob's slot Claimed/Busy again",
    )
    assert busy["state"] == "Claimed"
    assert busy["ad"]["TotalJobSuspendTime"] >= 1  # the time frozen for COD counts
    (bob_dir / "scratch" / "GO").touch()
    done = eventually(
        lambda: (j := cluster.job("bobjob"))["status"]["jobStatus"] == "Completed" and j,
        30,
        "bob's job Completed",
    )
    assert done["status"]["exitCode"] == 0
    assert done["status"]["numJobStarts"] == 1  # the same run, thawed, not a restart
    final = count(bob_count)
    assert (bob_dir / "scratch" / "out.txt").read_text().strip() == f"counted {final}"
    code, table = kondor(cluster, "status", "-cod", user="alice")
    # Bob's dynamic slot is gone with his job: the claim stays, on the partitionable slot.
    parent = slot.split("_")[0] + "@" + slot.split("@")[1]
    assert re.search(rf"{re.escape(parent)}\s+COD1\s+Idle\s+\S+\s+alice", table), table

    # Activate again (the CLI), then release: the application is killed, no process stays.
    code, out = kondor(
        cluster, "cod", "activate", "-id", name, "-keyword", "FractGen", user="alice"
    )
    assert code == 0 and "the claim is Running" in out, out
    status = eventually(
        lambda: claim(cluster, name)["status"].get("pid") and claim(cluster, name)["status"],
        5,
        "its pid",
    )
    pid, app_dir = int(status["pid"]), Path(status["directory"])
    assert process_states(pid)
    code, out = kondor(cluster, "cod", "release", "-id", name, user="alice")
    assert code == 0 and "State of claim when it was released: Running" in out, out
    eventually(lambda: not process_states(pid), 5, "no process of the application left")
    eventually(lambda: not app_dir.exists(), 5, "the application's directory removed")
    code, table = kondor(cluster, "status", "-cod", user="alice")
    assert "COD1" not in table


def test_a_lease_not_renewed_expires_and_releases_the_claim(cod: tuple[Cluster, Path]) -> None:
    cluster, _ = cod
    # A 10 s lease renewed each second: on a loaded machine (pytest -n) the agent has taken over
    # 5 s to see a renewal, and a 5 s lease expired while renewed.
    name = request(cluster, "-name", NODE, "-lease", "10")
    requested = time.monotonic()  # the startd made the claim, and started its lease, before
    as_alice = client.CustomObjectsApi(
        config.new_client_from_config(config_file=str(cluster.kubeconfig), context="alice")
    )

    def patch(spec: dict[str, Any]) -> None:
        as_alice.patch_namespaced_custom_object(
            "kondor.io", "v1alpha1", "default", "codclaims", name, {"spec": spec}
        )

    # Activated with an inline job ad (condor_cod_activate -jobad), as the CLI writes it.
    patch({"state": "Running", "activation": 1, "jobAd": 'Cmd = "/bin/sleep"\nArgs = "300"'})
    pid = int(eventually(lambda: claim(cluster, name)["status"].get("pid"), 5, "its pid"))
    renewal = 0
    while time.monotonic() - requested < 11.0:  # renewed: still held past the first lease
        renewal += 1
        patch({"renewal": renewal})
        time.sleep(1.0)
    code, out = kondor(cluster, "cod", "renew", "-id", name, user="alice")
    assert code == 0 and "lease expires" in out, out
    assert time.monotonic() - requested > 10.0
    assert cod_state(cluster, name) == "Running"
    released = eventually(
        lambda: (c := claim(cluster, name))["status"]["state"] == "Released" and c, 30, "Released"
    )
    assert "lease expired" in released["status"]["reason"]
    assert not process_states(pid)
    code, out = kondor(cluster, "cod", "suspend", "-id", name, user="alice")
    assert code == 1 and "is Released" in out, out


def test_who_may_request_and_act_on_a_claim(cod: tuple[Cluster, Path]) -> None:
    cluster, _ = cod
    code, out = kondor(cluster, "cod", "request", "-name", NODE, user="bob")
    assert code == 1, out
    assert "user 'bob' is not authorized to create COD claims here" in out, out

    admin = config.new_client_from_config(config_file=str(cluster.kubeconfig), context="admin")
    admin.set_default_header("Impersonate-User", "carol")
    admin.set_default_header("Impersonate-Group", "kondor:users")
    as_carol = client.CustomObjectsApi(admin)
    made = as_carol.create_namespaced_custom_object(
        "kondor.io",
        "v1alpha1",
        "default",
        "codclaims",
        {
            "apiVersion": "kondor.io/v1alpha1",
            "kind": "CodClaim",
            "metadata": {"name": "carols"},
            "spec": {"executionPoint": NODE, "requirements": 'State == "Unclaimed"'},
        },
    )
    assert made["spec"]["owner"] == "carol"
    eventually(lambda: cod_state(cluster, "carols") == "Idle", 10, "carol's claim Idle")
    listed = cluster.kubectl("get", "codclaims", "-n", "default", user="alice").splitlines()
    assert listed[0].split()[:7] == [
        "NAME", "OWNER", "EXECUTIONPOINT", "SLOT", "ID", "CLAIMSTATE", "WANT"
    ]  # fmt: skip
    assert next(line.split()[:3] for line in listed if line.startswith("carols ")) == [
        "carols",
        "carol",
        NODE,
    ]
    assert "Idle" in next(line for line in listed if line.startswith("carols ")).split()

    alice = client.CustomObjectsApi(
        config.new_client_from_config(config_file=str(cluster.kubeconfig), context="alice")
    )
    for act in (
        lambda: alice.patch_namespaced_custom_object(
            "kondor.io",
            "v1alpha1",
            "default",
            "codclaims",
            "carols",
            {"spec": {"state": "Running"}},
        ),
        lambda: alice.delete_namespaced_custom_object(
            "kondor.io", "v1alpha1", "default", "codclaims", "carols"
        ),
    ):
        with pytest.raises(ApiException) as refused:
            act()
        assert refused.value.status == 403
        assert "belongs to 'carol'" in str(refused.value.body)
    code, out = kondor(cluster, "cod", "suspend", "-id", "carols", user="alice")
    assert code == 1, out

    # An inline job ad naming another Owner: refused at admission, nothing started.
    name = request(cluster, "-name", NODE)
    job_ad = 'Cmd = "/bin/sleep"\nArgs = "300"\nOwner = "bob"\n'
    code, out = kondor(
        cluster, "cod", "activate", "-id", name, "-jobad", "-", user="alice", stdin=job_ad
    )
    assert code == 1, out
    assert "Owner 'bob' does not match the authenticated user 'alice'" in out, out
    assert cod_state(cluster, name) == "Idle"
    as_carol.delete_namespaced_custom_object(
        "kondor.io", "v1alpha1", "default", "codclaims", "carols"
    )
    kondor(cluster, "cod", "release", "-id", name, user="alice")
