"""`kubectl kondor q`, `hold`, `release`, `rm` on the dev cluster, as alice and bob with their own
kubectl contexts (client certificates, RBAC `kondor:user`).

`kubectl kondor` is run as a user runs it: kubectl finds the `kubectl-kondor` plugin on PATH
(the virtual environment's bin directory). No operator runs: `q` lists what the API server
holds, and the commands are checked by the spec they patch. No admission webhook runs either,
so each manifest carries the `spec.owner` the webhook would set.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kondor_core.api import EXECUTION_JOBS, GROUP, MERGE_PATCH, VERSION

# Some twenty kubectl and kondor processes: over 60 s on a loaded machine (pytest -n).
pytestmark = pytest.mark.timeout(120)


def _job(name: str, owner: str, seconds: int) -> dict[str, Any]:
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionJob",
        "metadata": {"name": name},
        "spec": {
            "owner": owner,
            "requestMemory": "256Mi",
            "process": {"executable": "/bin/sleep", "arguments": [str(seconds)]},
        },
    }


class Kubectl:
    """kubectl as one of the kubeconfig's users, with the `kubectl-kondor` plugin on PATH."""

    def __init__(self, binary: str, kubeconfig: Path, context: str, namespace: str) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.context = context
        self.namespace = namespace
        self.env = dict(os.environ)
        self.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{self.env.get('PATH', '')}"
        self.env.pop("KUBECONFIG", None)

    def apply(self, manifest: dict[str, Any]) -> None:
        result = subprocess.run(
            [self.binary, f"--kubeconfig={self.kubeconfig}", f"--context={self.context}",
             "-n", self.namespace, "apply", "-f", "-"],
            input=yaml.safe_dump(manifest), capture_output=True, text=True, timeout=60,
            check=False, env=self.env,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr

    def kondor(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`kubectl kondor ARGS --kubeconfig K --context C -n NS` (kubectl hands the plugin
        every argument after its name)."""
        return subprocess.run(
            [self.binary, "kondor", *args, "--kubeconfig", str(self.kubeconfig),
             "--context", self.context, "-n", self.namespace],
            capture_output=True, text=True, timeout=60, check=False, env=self.env,
        )  # fmt: skip


def _spec(admin: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    objects = client.CustomObjectsApi(admin)
    job: dict[str, Any] = objects.get_namespaced_custom_object(  # type: ignore[assignment]
        GROUP, VERSION, namespace, EXECUTION_JOBS, name
    )
    return dict(job["spec"])


def _rows(out: str) -> list[list[str]]:
    """The job lines of condor_q's table (header and totals left out)."""
    lines = out.split("\n\n", maxsplit=1)[0].splitlines()
    return [line.split() for line in lines[1:]]


def test_q_hold_release_rm_as_alice_and_bob(
    kondor_crds: list[str],
    kubectl_bin: str,
    kubeconfig: Path,
    namespace: str,
    admin: client.ApiClient,
) -> None:
    alice = Kubectl(kubectl_bin, kubeconfig, "alice", namespace)
    bob = Kubectl(kubectl_bin, kubeconfig, "bob", namespace)
    alice.apply(_job("alice-short", "alice", 60))
    alice.apply(_job("alice-long", "alice", 3600))
    bob.apply(_job("bob-one", "bob", 10))

    # alice sees her own jobs only (the user from her client certificate, asked of the server)
    mine = alice.kondor("q")
    assert mine.returncode == 0, mine.stderr
    rows = _rows(mine.stdout)
    assert sorted(row[0] for row in rows) == ["alice-long", "alice-short"]
    assert {row[1] for row in rows} == {"alice"}
    assert {row[5] for row in rows} == {"I"}
    assert {" ".join(row[-2:]) for row in rows} == {"sleep 60", "sleep 3600"}
    assert (
        "Total for alice: 2 jobs; 0 completed, 0 removed, 2 idle, 0 running, 0 held, 0 suspended"
        in mine.stdout
    )
    assert "Total for all users: 3 jobs;" in mine.stdout

    # bob: his own by default, everyone's with -all, alice's shown with owner alice
    assert [row[0] for row in _rows(bob.kondor("q").stdout)] == ["bob-one"]
    everyone = bob.kondor("q", "-all")
    assert everyone.returncode == 0, everyone.stderr
    owners = {row[0]: row[1] for row in _rows(everyone.stdout)}
    assert owners == {"alice-long": "alice", "alice-short": "alice", "bob-one": "bob"}
    assert "Total for query: 3 jobs;" in everyone.stdout

    chosen = bob.kondor("q", "-all", "-constraint", 'Owner == "alice"', "-af", "Owner", "Arguments")
    assert chosen.returncode == 0, chosen.stderr
    assert sorted(chosen.stdout.splitlines()) == ["alice 3600", "alice 60"]
    long = alice.kondor("q", "-l", "alice-short")
    assert 'Owner = "alice"' in long.stdout.splitlines()
    assert "RequestMemory = 256" in long.stdout.splitlines()
    bad = alice.kondor("q", "-constraint", "Owner == == 2")
    assert bad.returncode == 2
    assert "-constraint 'Owner == == 2' is not a ClassAd expression" in bad.stderr

    # hold and release write spec.hold; release of a job not held says so
    held = alice.kondor("hold", "alice-short")
    assert (held.returncode, held.stdout) == (0, "Job alice-short held\n"), held.stderr
    assert _spec(admin, namespace, "alice-short")["hold"] is True
    assert [row[5] for row in _rows(alice.kondor("q", "alice-short").stdout)] == ["I"]
    released = alice.kondor("release", "alice-short")
    assert (released.returncode, released.stdout) == (0, "Job alice-short released\n")
    assert _spec(admin, namespace, "alice-short")["hold"] is False
    not_held = alice.kondor("release", "alice-long")
    assert not_held.returncode == 1
    assert not_held.stderr == "Job alice-long not held to be released\n"

    # a job by its ClusterId, once it has one (the operator's field; written here as admin)
    client.CustomObjectsApi(admin).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, EXECUTION_JOBS, "alice-long",
        {"status": {"clusterId": 41, "jobStatus": "Idle"}}, _content_type=MERGE_PATCH,
    )  # fmt: skip
    assert _rows(alice.kondor("q", "41").stdout)[0][:2] == ["41.0", "alice"]
    removed = alice.kondor("rm", "41")
    assert (removed.returncode, removed.stdout) == (0, "Job 41.0 marked for removal\n")
    assert _spec(admin, namespace, "alice-long")["remove"] is True

    # -all: all of bob's jobs, none of alice's
    all_held = bob.kondor("hold", "-all")
    assert (all_held.returncode, all_held.stdout) == (0, "All jobs have been held\n")
    assert _spec(admin, namespace, "bob-one")["hold"] is True
    assert _spec(admin, namespace, "alice-short")["hold"] is False

    # the merge patches changed only the command fields: the rest of the spec is as written
    spec = _spec(admin, namespace, "alice-long")
    assert spec["owner"] == "alice"
    assert spec["process"] == {"executable": "/bin/sleep", "arguments": ["3600"]}
