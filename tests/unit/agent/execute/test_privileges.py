"""Jobs never run as root: real supervisors drop real jobs to their account (needs root).

Each job reads its own /proc/self/status; the kernel says who it is and what it may do.
"""

from __future__ import annotations

import os
import pwd
import stat
import sys
from pathlib import Path

import pytest
from apptainer_runtimes import Apptainer
from execute_fakes import wait_result

from kondor_agent.execute.cgroups import JobCgroups
from kondor_agent.runtimes.process_launcher import ProcessLauncher, environment_of
from kondor_core.api import ApptainerRuntime, ProcessRuntime
from kondor_core.jobs.hooks import JobHooks
from kondor_core.jobs.runas import Account, RunAsSettings, UnixIds, run_as, slot_user_ids

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or os.geteuid() != 0,
    reason="switching a job to another user needs root (the agent is root on a node)",
)

JOB_AD = 'ClusterId = 12\nProcId = 0\nOwner = "bob"\nCmd = "/bin/sh"'
MACHINE_AD = 'Name = "slot1_1@node-a"\nCpus = 1\nMemory = 128'
NONE = "0000000000000000"


@pytest.fixture
def launcher(tmp_path: Path) -> ProcessLauncher:
    return ProcessLauncher(tmp_path / "execute", JobCgroups.disabled(), search_path="")


def sh(script: str, **fields: str) -> ProcessRuntime:
    return ProcessRuntime(executable="/bin/sh", arguments=["-c", script], **fields)  # type: ignore[arg-type]


def status_of(text: str) -> dict[str, str]:
    return {k: v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def test_a_job_runs_as_its_slot_user_with_no_capabilities_and_no_new_privs(
    launcher: ProcessLauncher, tmp_path: Path
) -> None:
    secret = tmp_path / "root-only"
    secret.mkdir(mode=0o700)
    (secret / "key").write_text("root's\n")
    script = (
        "cat /proc/self/status; id -u > id.txt; "
        f"if cat {secret}/key 2>/dev/null; then echo READ-SECRET; fi; "
        "if ls /root >/dev/null 2>&1; then echo READ-ROOT; fi"
    )
    handle = launcher.launch(
        "job-1", sh(script, output="out.txt", error="err.txt"), JOB_AD, MACHINE_AD, slot="slot1_1"
    )
    result = wait_result(launcher, handle)
    assert result.state == "exited" and result.exit_code == 0, result
    out = (handle.scratch / "out.txt").read_text()
    status = status_of(out)
    uid = slot_user_ids("slot1_1").uid  # Kondor's default slot user: 100000 + 1000 + 1
    assert uid == 101001
    assert status["Uid"].split() == [str(uid)] * 4 and status["Gid"].split() == [str(uid)] * 4
    assert status["Groups"] == str(uid)
    for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert status[caps] == NONE, (caps, status[caps])
    assert status["NoNewPrivs"] == "1"
    assert "READ-SECRET" not in out and "READ-ROOT" not in out
    # Its files are its own: the output it wrote, and the scratch directory, 0700.
    for name in ("out.txt", "err.txt", "id.txt"):
        assert (handle.scratch / name).stat().st_uid == uid
    scratch = handle.scratch.stat()
    assert (scratch.st_uid, scratch.st_gid, stat.S_IMODE(scratch.st_mode)) == (uid, uid, 0o700)
    assert (handle.scratch / ".job.ad").stat().st_uid == uid
    # The job's directory (the agent's records) and the execute dir: crossed, never listed.
    assert stat.S_IMODE(handle.directory.stat().st_mode) == 0o711
    assert handle.directory.stat().st_uid == 0
    assert stat.S_IMODE(launcher.execute_dir.stat().st_mode) == 0o711
    assert environment_of(handle)["_CONDOR_SCRATCH_DIR"] == str(handle.scratch)


def test_a_directory_above_that_loses_its_search_bit_gets_it_back_at_the_next_launch(
    launcher: ProcessLauncher, tmp_path: Path
) -> None:
    """A job's account must cross every directory above its scratch. A mode reset since the
    last launch (a tmp cleaner, another tool: here a second pytest run resets its temporary
    root to 0700) would lock out every later job; each launch gives the search bit back."""
    first = launcher.launch("job-a", sh("true"), JOB_AD, MACHINE_AD, slot="slot1_1")
    assert wait_result(launcher, first).exit_code == 0
    os.chmod(tmp_path, 0o700)
    then = launcher.launch("job-b", sh("echo reached > out"), JOB_AD, MACHINE_AD, slot="slot1_1")
    assert wait_result(launcher, then).exit_code == 0
    assert (then.scratch / "out").read_text() == "reached\n"
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o701  # crossed, never listed


def test_a_job_cannot_read_another_jobs_scratch_directory(launcher: ProcessLauncher) -> None:
    first = launcher.launch(
        "job-a", sh("echo mine > data; echo done"), JOB_AD, MACHINE_AD, slot="slot1_1"
    )
    assert wait_result(launcher, first).exit_code == 0
    other = first.scratch
    script = (
        f"if cat {other}/data; then echo READ-OTHER; fi; if ls {other}; then echo LISTED; fi; "
        f"if ls {launcher.execute_dir}; then echo LISTED-EXECUTE; fi; "
        f"if cat {first.directory}/spec.json >/dev/null; then echo READ-SPEC; fi"
    )
    second = launcher.launch(
        "job-b", sh(script, output="out", error="err"), JOB_AD, MACHINE_AD, slot="slot1_2"
    )
    assert wait_result(launcher, second).exit_code == 0
    out = (second.scratch / "out").read_text()
    assert "READ-OTHER" not in out and "LISTED" not in out, out
    assert "Permission denied" in (second.scratch / "err").read_text()
    assert (second.scratch / "out").stat().st_uid == slot_user_ids("slot1_2").uid


def test_the_owners_mapped_account_and_a_named_slot_user(launcher: ProcessLauncher) -> None:
    settings = RunAsSettings(accounts={"bob": UnixIds(2002, 3003)})
    account = run_as(settings, owner="bob", slot="slot1_1", job_ad=None)
    handle = launcher.launch(
        "job-bob", sh("id -u; id -g; id -G", output="out"), JOB_AD, MACHINE_AD,
        slot="slot1_1", account=account,
    )  # fmt: skip
    assert wait_result(launcher, handle).exit_code == 0
    assert (handle.scratch / "out").read_text().split() == ["2002", "3003", "3003"]
    nobody = run_as(
        RunAsSettings(nobody_slot_user="nobody"), owner="alice", slot="slot2", job_ad=None
    )
    assert (nobody.uid, nobody.name) == (None, "nobody")  # looked up on the node
    handle = launcher.launch(
        "job-nobody", sh("id -un", output="out"), JOB_AD, MACHINE_AD, slot="slot2",
        account=nobody,
    )  # fmt: skip
    assert wait_result(launcher, handle).exit_code == 0
    assert (handle.scratch / "out").read_text().strip() == "nobody"


@pytest.mark.parametrize(
    "account",
    [
        Account("root", 0, 0, "slot-user", "forged"),
        Account("bob", 2002, 0, "owner", "forged gid"),
        Account("root", None, None, "slot-user", "a name that is root on the node"),
        Account("no-such-user-here", None, None, "slot-user", "SLOT1_USER"),
    ],
)
def test_root_or_a_missing_account_holds_the_job_and_nothing_runs(
    launcher: ProcessLauncher, tmp_path: Path, account: Account
) -> None:
    marker = tmp_path / "ran"
    handle = launcher.launch(
        "job-x", sh(f"touch {marker}"), JOB_AD, MACHINE_AD, slot="slot1", account=account
    )
    result = wait_result(launcher, handle)
    assert result.state == "failed" and result.hold_reason_code == 6
    assert result.hold_reason is not None and account.name in result.hold_reason
    assert not marker.exists()


def test_an_output_file_the_user_may_not_write_holds_the_job(
    launcher: ProcessLauncher, tmp_path: Path
) -> None:
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o755)  # root's: the slot user may not create files in it
    handle = launcher.launch(
        "job-o", sh("echo hi", output=str(closed / "out")), JOB_AD, MACHINE_AD, slot="slot1"
    )
    result = wait_result(launcher, handle)
    assert (result.state, result.hold_reason_code) == ("failed", 7)
    assert result.hold_reason is not None and "Permission denied" in result.hold_reason
    assert not (closed / "out").exists()


def test_the_jobs_hooks_run_as_the_job_does(tmp_path: Path) -> None:
    # The manual's Hooks section: PREPARE_JOB, UPDATE_JOB_INFO and JOB_EXIT run "with the
    # same privileges as the job itself. If slot users are defined, the hook runs as the
    # slot user, just as the job does."
    hooks_dir = tmp_path / "hooks"
    hooks_dir.mkdir()
    for name, body in (
        (
            "prepare",
            'cat >/dev/null\necho "HookUid = $(id -u)"\n'
            'echo "HookCapEff = \\"$(grep CapEff /proc/self/status | cut -f2)\\""\n',
        ),
        ("exit", 'id -u > "$_CONDOR_SCRATCH_DIR/exit-uid"\n'),
    ):  # fmt: skip
        (hooks_dir / name).write_text("#!/bin/sh\n" + body)
        (hooks_dir / name).chmod(0o755)
    launcher = ProcessLauncher(
        tmp_path / "execute", JobCgroups.disabled(), search_path="", hooks_dir=hooks_dir
    )
    hooks = JobHooks(
        keyword="TEST",
        programs={"TEST_HOOK_PREPARE_JOB": "prepare", "TEST_HOOK_JOB_EXIT": "exit"},
    )
    handle = launcher.launch(
        "job-h", sh('cat "$_CONDOR_JOB_AD"', output="out"), JOB_AD, MACHINE_AD,
        slot="slot1_1", hooks=hooks,
    )  # fmt: skip
    result = wait_result(launcher, handle)
    assert result.exit_code == 0, result
    uid = slot_user_ids("slot1_1").uid
    ad = (handle.scratch / "out").read_text()
    assert f"HookUid = {uid}" in ad and f'HookCapEff = "{NONE}"' in ad, ad
    assert (handle.scratch / "exit-uid").read_text().strip() == str(uid)


def apptainer_launcher(tmp_path: Path, apptainer: Apptainer) -> ProcessLauncher:
    return ProcessLauncher(
        apptainer.execute_dir(tmp_path),
        JobCgroups.disabled(),
        search_path=str(apptainer.bin_dir),
        pid_namespaces=lambda: True,
    )


def test_an_apptainer_job_runs_unprivileged_too(tmp_path: Path, apptainer: Apptainer) -> None:
    """apptainer itself is started by the dropped child: real Apptainer (or the stand-in's
    bubblewrap) enters a user namespace as the job's account, and what it runs has no
    capabilities and no new privileges. Without a /dev/fuse the account may open, the real
    one extracts the SIF into the job's scratch directory (--unsquash) to run it."""
    launcher = apptainer_launcher(tmp_path, apptainer)
    image = apptainer.image(tmp_path / "image")
    runtime = ApptainerRuntime(
        image=str(image), executable="/bin/cat", arguments=["/proc/self/status"], output="out"
    )
    handle = launcher.launch(
        "job-app", runtime, JOB_AD, MACHINE_AD, slot="slot1_3",
        apptainer=apptainer.settings(), account=apptainer.account,
    )  # fmt: skip
    result = wait_result(launcher, handle)
    assert result.state == "exited" and result.exit_code == 0, result
    status = status_of((handle.scratch / "out").read_text())
    account = apptainer.account
    uid = slot_user_ids("slot1_3").uid if account is None else pwd.getpwnam(account.name).pw_uid
    assert uid != 0
    assert status["Uid"].split() == [str(uid)] * 4  # the user namespace maps the user to itself
    for caps in ("CapPrm", "CapEff", "CapBnd"):
        assert status[caps] == NONE, (caps, status[caps])
    assert status["NoNewPrivs"] == "1"
    assert (handle.scratch / "out").stat().st_uid == uid


def test_real_apptainer_refuses_an_account_the_password_file_lacks(
    tmp_path: Path, apptainer: Apptainer
) -> None:
    """Kondor's own slot users are bare uids (no password entry); real Apptainer looks the
    job's uid up and refuses one it cannot find, so the job is held with its words (the
    image test fails first: HoldReasonCode 41). Such nodes name accounts that exist
    (SLOT<N>_USER, NOBODY_SLOT_USER), as HTCondor's nodes do."""
    if not apptainer.real:
        pytest.skip("the stand-in looks no account up (real Apptainer is not built here)")
    if pwd_entry(slot_user_ids("slot1_3").uid):
        pytest.skip("this node has a password entry for the slot user")
    launcher = apptainer_launcher(tmp_path, apptainer)
    image = apptainer.image(tmp_path / "image")
    runtime = ApptainerRuntime(image=str(image), executable="/bin/true")
    handle = launcher.launch(
        "job-nameless", runtime, JOB_AD, MACHINE_AD, slot="slot1_3",
        apptainer=apptainer.settings(),
    )  # fmt: skip
    result = wait_result(launcher, handle)
    assert (result.state, result.hold_reason_code) == ("failed", 41), result
    assert "unknown userid" in (result.hold_reason or ""), result.hold_reason


def pwd_entry(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True
