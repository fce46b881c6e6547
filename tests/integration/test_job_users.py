"""Who jobs run as on the dev cluster (issue 29): never root.

bob is mapped to uid 2002 by the SlotPolicy's `userAccounts`; alice is not, so her jobs run
as the slot's own user (Kondor's default slot users: 100000 + 1000 x N + M). Each job reads
its own /proc/self/status, and tries what it must not do: read /root, another job's scratch
directory, the agent's state directory. A mapping to uid 0 is refused at `kubectl apply`.
"""

from __future__ import annotations

import copy
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import MACHINES, skip_reason
from .test_jobs_end_to_end import Cluster, eventually, job_cluster, process_job, slot_policy

BOB_UID = 2002
NONE = "0000000000000000"


def policy() -> dict[str, Any]:
    made = slot_policy("everything", {"kondor.io/pool": "cpu"})
    made["spec"]["userAccounts"] = {"bob": {"uid": BOB_UID, "gid": BOB_UID}}
    return made


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("users")
    with job_cluster(tmp, [MACHINES / "kwok-small.yaml"], [policy()]) as made:
        yield made


def finished(cluster: Cluster, name: str) -> dict[str, Any]:
    done: dict[str, Any] = eventually(
        lambda: (j := cluster.job(name))["status"]["jobStatus"] in ("Completed", "Held") and j,
        60,
        f"{name} Completed",
    )
    assert done["status"]["jobStatus"] == "Completed", done["status"]
    return done


def status_of(text: str) -> dict[str, str]:
    return {k: v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def test_jobs_run_as_the_mapped_owner_or_the_slot_user_never_root(cluster: Cluster) -> None:
    # alice is not mapped: her job runs as the slot's own user and leaves a file behind.
    cluster.apply(process_job("alices", "echo secret > data; cat /proc/self/status"), user="alice")
    alices = finished(cluster, "alices")
    alice_execution = alices["status"]["execution"]
    alice_scratch = Path(alice_execution["directory"]) / "scratch"
    slot = alice_execution["slot"].split("@")[0]  # slot1_1
    slot_uid = 100000 + 1000 * int(slot[4:].split("_")[0]) + int(slot.split("_")[1])
    alice_status = status_of((alice_scratch / "out.txt").read_text())
    assert alice_status["Uid"].split() == [str(slot_uid)] * 4
    assert alice_execution["account"]["name"] == slot
    assert alice_execution["account"]["uid"] == slot_uid
    assert "maps no uid to alice" in alice_execution["account"]["reason"]
    scratch_stat = alice_scratch.stat()
    assert (scratch_stat.st_uid, stat.S_IMODE(scratch_stat.st_mode)) == (slot_uid, 0o700)

    agent_state = Path(alice_execution["directory"]).parent.parent
    script = (
        "cat /proc/self/status; "
        "if ls /root >/dev/null 2>&1; then echo READ-ROOT; fi; "
        f"if cat {alice_scratch}/data 2>/dev/null; then echo READ-OTHER-JOB; fi; "
        f"if ls {alice_scratch} >/dev/null 2>&1; then echo LISTED-OTHER-JOB; fi; "
        f"if ls {agent_state} >/dev/null 2>&1; then echo LISTED-AGENT-STATE; fi; "
        f"if cat {agent_state}/status.json >/dev/null 2>&1; then echo READ-AGENT-STATUS; fi; "
        'echo made > "$_CONDOR_SCRATCH_DIR/made.txt"'
    )
    cluster.apply(process_job("bobs", script), user="bob")
    bobs = finished(cluster, "bobs")
    execution = bobs["status"]["execution"]
    scratch = Path(execution["directory"]) / "scratch"
    out = (scratch / "out.txt").read_text()
    status = status_of(out)
    assert status["Uid"].split() == [str(BOB_UID)] * 4
    assert status["Gid"].split() == [str(BOB_UID)] * 4
    assert status["CapEff"] == status["CapPrm"] == status["CapBnd"] == NONE
    assert status["NoNewPrivs"] == "1"
    for forbidden in (
        "READ-ROOT",
        "READ-OTHER-JOB",
        "LISTED-OTHER-JOB",
        "LISTED-AGENT-STATE",
        "READ-AGENT-STATUS",
    ):
        assert forbidden not in out, out
    for name in ("out.txt", "err.txt", "made.txt"):
        assert (scratch / name).stat().st_uid == BOB_UID
    assert execution["account"]["name"] == "bob"
    assert (execution["account"]["uid"], execution["account"]["gid"]) == (BOB_UID, BOB_UID)
    # condor_q shows the owner as ever.
    queue = cluster.kubectl("kondor", "q", "-all", "bobs", "-af", "Owner", user="bob")
    assert queue.split() == ["bob"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"userAccounts": {"bob": {"uid": 0}}}, "spec.userAccounts.bob.uid: uid 0 is root"),
        ({"userAccounts": {"bob": {"uid": 2002, "gid": 0}}}, "spec.userAccounts.bob.gid"),
        (
            {"condorConfig": "KONDOR_USER_ACCOUNTS = bob=0\n"},
            "KONDOR_USER_ACCOUNTS: bob: uid 0 is root",
        ),
        ({"condorConfig": "SLOT1_USER = root\n"}, "SLOT1_USER = root"),
    ],
)
def test_a_mapping_to_root_is_refused_at_apply_naming_the_field(
    cluster: Cluster, change: dict[str, Any], field: str
) -> None:
    bad = copy.deepcopy(policy())
    bad["metadata"]["name"] = "to-root"
    bad["spec"].update(change)
    with pytest.raises(AssertionError) as refused:
        cluster.apply(bad)
    assert field in str(refused.value)
    assert "never runs as root" in str(refused.value)
