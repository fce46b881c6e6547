"""An Apptainer ExecutionJob on the dev cluster, run by the real Apptainer `make apptainer`
built (skipped, saying so, where it is not built).

The dev cluster puts Apptainer first on each agent's PATH (a copy in its state directory the
slot accounts can reach), as a node has it installed on the host. The SlotPolicy says what
real Apptainer needs of a node (tests/unit/agent/execute/apptainer_runtimes.py has the
details): jobs run as an account the password file has (NOBODY_SLOT_USER = nobody; Kondor's
own slot users are bare uids, which Apptainer refuses), `--unsquash` where the job's account
may not open /dev/fuse, and no MOUNT_UNDER_SCRATCH, since the dev cluster's execute
directories are under /tmp (`-S /tmp` would hide the scratch directory's bind target).
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kondor_agent.execute.privileges import ensure_traversable
from kondor_devcluster import apptainer

from .conftest import MACHINES, skip_reason
from .test_jobs_end_to_end import Cluster, eventually, job_cluster, slot_policy


def fuse_usable() -> bool:
    """Whether a job's account (not root) may open /dev/fuse."""
    try:
        mode = Path("/dev/fuse").stat().st_mode
    except OSError:
        return False
    return mode & (stat.S_IROTH | stat.S_IWOTH) == stat.S_IROTH | stat.S_IWOTH


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    if apptainer.built() is None:
        pytest.skip("Apptainer is not built here (`make apptainer`; the host may not build it)")
    if os.geteuid() != 0:
        pytest.skip("the agents run jobs as `nobody` only as root")
    config = "NOBODY_SLOT_USER = nobody\nMOUNT_UNDER_SCRATCH =\n"
    if not fuse_usable():
        config += "SINGULARITY_EXTRA_ARGUMENTS = --unsquash\n"
    policy = slot_policy("apptainer", {"kondor.io/pool": "cpu"}, config)
    tmp = tmp_path_factory.mktemp("apptainer-jobs")
    with job_cluster(tmp, [MACHINES / "kwok-small.yaml"], [policy]) as made:
        yield made


def busybox_sif(binary: Path, path: Path) -> Path:
    """A SIF built with `apptainer build` from a busybox sandbox, readable by every account."""
    busybox = shutil.which("busybox")
    assert busybox is not None, "the image needs busybox (apt-get install busybox-static)"
    sandbox = path.with_suffix(".dir")
    (sandbox / "bin").mkdir(parents=True)
    (sandbox / "etc").mkdir()
    (sandbox / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (sandbox / "etc" / "group").write_text("root:x:0:\n")
    shutil.copy2(busybox, sandbox / "bin" / "busybox")
    for applet in ("sh", "echo", "id", "test", "pwd", "cat"):
        (sandbox / "bin" / applet).symlink_to("busybox")
    sif = path.with_suffix(".sif")
    built = subprocess.run(
        [str(binary), "-q", "build", str(sif), str(sandbox)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    sif.chmod(0o644)
    ensure_traversable(sif)
    return sif


def test_an_apptainer_job_runs_in_its_sif_and_ends_completed(
    cluster: Cluster, tmp_path: Path
) -> None:
    """alice's `apptainer` ExecutionJob: the node's agent runs it with HTCondor's command line
    in the SIF, unprivileged, with its scratch directory bound in; it reads its job ad there,
    writes its output, and ends Completed with its exit code."""
    binary = apptainer.built()
    assert binary is not None
    image = busybox_sif(binary, tmp_path / "busybox")
    script = (
        'test -d /.singularity.d && test ! -e /usr/bin/python3 && echo "in the image"; '
        'echo "$(pwd) uid=$(id -u)"; cat "$_CONDOR_JOB_AD" > ad.copy; exit 4'
    )
    job = {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionJob",
        "metadata": {"name": "sif", "namespace": "default"},
        "spec": {
            "requestCpus": 1,
            "requestMemory": "64Mi",
            "apptainer": {
                "image": str(image),
                "executable": "/bin/sh",
                "arguments": ["-c", script],
                "output": "out.txt",
                "error": "err.txt",
            },
        },
    }
    cluster.apply(job, user="alice")
    done = eventually(
        lambda: (j := cluster.job("sif"))["status"]["jobStatus"] in ("Completed", "Held") and j,
        90,
        "the Apptainer job Completed",
    )
    status = done["status"]
    assert status["jobStatus"] == "Completed", status
    scratch = Path(status["execution"]["directory"]) / "scratch"
    assert status["exitCode"] == 4, (scratch / "err.txt").read_text()
    lines = (scratch / "out.txt").read_text().splitlines()
    nobody = pwd.getpwnam("nobody").pw_uid
    assert lines == ["in the image", f"{scratch} uid={nobody}"], lines
    assert "JobUniverse = 5" in (scratch / "ad.copy").read_text()  # read through the bind
