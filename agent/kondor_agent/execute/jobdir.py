"""The job directory's layout: its file names, HTCondor's hold codes, and atomic writes.

The job directory is the state the supervisor and a restarted agent share, as
containerd's shims and slurmstepd keep theirs on disk:

    <execute-dir>/<job-id>/
        spec.json        the launch spec (the launcher writes it before starting anything)
        supervisor.pid   the supervisor's pid, written before launch() returns
        job.pid          the job's pid (also its process group), once it runs
        exit.json        the result (`records.JobResult`'s fields), written once, atomically
        killed           the signal the agent sent, when it ended the job
        exit-how         why the agent ended it (remove, hold, evict), for the JOB_EXIT hook
        supervisor.log   the supervisor's own stdout and stderr
        image-test.log   what `apptainer test` said before an Apptainer job
        scratch/         _CONDOR_SCRATCH_DIR: .job.ad, .machine.ad, the job's files

The job directory is root's, mode 0711, as is the execute directory above it: the job's
account (never root: `kondor_core.jobs.runas`) crosses them to its `scratch/`, which is its
own, mode 0700, and can list neither, nor enter another job's scratch.

Only `os` here: the supervisor imports this module, and every millisecond of its
start-up is the job's launch latency.
"""

from __future__ import annotations

import os

#: The search path a job gets when its environment names none (dash's and systemd's default).
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

SPEC = "spec.json"
SUPERVISOR_PID = "supervisor.pid"
JOB_PID = "job.pid"
EXIT = "exit.json"
KILLED = "killed"
EXIT_HOW = "exit-how"
SUPERVISOR_LOG = "supervisor.log"
IMAGE_TEST_LOG = "image-test.log"
SCRATCH = "scratch"
JOB_AD = ".job.ad"
MACHINE_AD = ".machine.ad"

#: HTCondor's HoldReasonCode values a job that cannot start gets (the manual's job ClassAd
#: attributes, HoldReasonCode); the subcode is the errno.
FAILED_TO_CREATE_PROCESS = 6
UNABLE_TO_OPEN_OUTPUT = 7
UNABLE_TO_OPEN_INPUT = 8
IWD_ERROR = 14
#: The kernel killed the job for going over its cgroup memory limit (the job is held).
OUT_OF_MEMORY = 34
#: `apptainer test` of the job's image failed before the job ran (SINGULARITY_RUN_TEST_BEFORE_JOB).
SINGULARITY_TEST_FAILED = 41
#: PREPARE_JOB could not run or failed (HookPrepareJobFailure); the subcode is its status.
HOOK_PREPARE_JOB_FAILURE = 19


def write_atomic(path: str | os.PathLike[str], text: str, *, durable: bool = False) -> None:
    """Write `text` to `path` so that readers see the old file or the whole new one.

    `durable` also survives a crash of the node (fsync), for the result only: pid files
    mean nothing after a reboot.
    """
    target = os.fspath(path)
    head, name = os.path.split(target)
    tmp = os.path.join(head, f".{name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, target)
