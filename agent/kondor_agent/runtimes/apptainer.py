"""The Apptainer runtime: a process job run inside `apptainer exec`, as HTCondor's starter runs it.

An Apptainer job (or any job SINGULARITY_JOB sends there) starts through the process
runtime's supervisor (`kondor_agent.runtimes.process_launcher`) with the command line
HTCondor's starter builds (`kondor_core.jobs.apptainer`), as the manual's example shows it:
`apptainer -s exec -S /tmp -S /var/tmp --pwd <iwd> -B <scratch> --no-home -C <image> <exe> <args>`.
What is Apptainer's is here: which program runs it, whether PID namespaces work on this
node (SINGULARITY_USE_PID_NAMESPACES = auto), and the job's command line, environment and
image test once wrapped.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from kondor_agent.execute import records
from kondor_agent.execute.jobdir import DEFAULT_PATH
from kondor_agent.execute.records import JobResult
from kondor_core.api import ApptainerRuntime, ProcessRuntime
from kondor_core.classads import parse_ad
from kondor_core.jobs.apptainer import ApptainerSettings, apptainer_command, job_wants_apptainer

APPTAINER_MISSING = "apptainer is not installed on this node (no apptainer executable on PATH)"

#: How long the PID namespace probe may take before it counts as not working.
_PROBE_TIMEOUT = 5.0

#: A contained job: its command line, its environment and the image test to run first.
Contained = tuple[list[str], dict[str, str], list[str] | None]


def pid_namespaces_work() -> bool:
    """Whether a process started here can have its own PID namespace, for
    SINGULARITY_USE_PID_NAMESPACES = auto (the starter probes the same by running a test
    container with `-C`, and again without it on failure). A user namespace comes with it,
    as an unprivileged Apptainer makes one: jobs never run as root."""
    unshare = shutil.which("unshare", path=DEFAULT_PATH)
    if unshare is None:
        return False
    # Jobs run unprivileged (never as root), so the probe asks what an unprivileged
    # Apptainer needs: a user namespace with the PID namespace.
    argv = [unshare, "--pid", "--fork", "--user", "--map-root-user"]
    try:
        done = subprocess.run(
            [*argv, "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=_PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


class ApptainerCommands:
    """Wraps a job's command line in Apptainer where its runtime or SINGULARITY_JOB says so.

    `search_path` is where `apptainer` is looked for (the agent's PATH when None);
    `pid_namespaces` probes this node once, the first time a job asks."""

    def __init__(
        self,
        *,
        search_path: str | None = None,
        pid_namespaces: Callable[[], bool] = pid_namespaces_work,
    ) -> None:
        self._search_path = search_path
        self._probe_pid_namespaces = pid_namespaces
        self._pid_namespaces: bool | None = None

    def wrap(
        self,
        runtime: ProcessRuntime | ApptainerRuntime,
        settings: ApptainerSettings,
        job_ad_text: str,
        machine_ad_text: str,
        *,
        executable: str,
        iwd: str,
        scratch: Path,
        environment: dict[str, str],
    ) -> Contained | JobResult | None:
        """The Apptainer command line, environment and image test of a job that runs in
        Apptainer (its runtime, or SINGULARITY_JOB); None for one that does not; a failed
        result when no apptainer is installed."""
        job_ad = parse_ad(job_ad_text, field="the job ad")
        machine_ad = parse_ad(machine_ad_text, field="the machine ad")
        if isinstance(runtime, ApptainerRuntime):
            if not isinstance(job_ad.get("ContainerImage"), str):
                job_ad["ContainerImage"] = runtime.image
        elif not job_wants_apptainer(settings, machine_ad, job_ad):
            return None
        program = self.program(settings)
        if program is None:
            return JobResult.failure(
                records.FAILED_TO_CREATE_PROCESS, errno.ENOENT, APPTAINER_MISSING, at=0.0
            )
        command = apptainer_command(
            settings,
            program=program,
            machine_ad=machine_ad,
            job_ad=job_ad,
            executable=executable,
            arguments=list(runtime.arguments),
            iwd=iwd,
            scratch=str(scratch),
            environment=environment,
            pid_namespaces=settings.pid_namespaces(self._pid_namespaces_work),
            is_dir=os.path.isdir,
        )
        test = command.test_argv if settings.test_before_job else None
        return command.argv, command.environment, test

    def program(self, settings: ApptainerSettings) -> str | None:
        """SINGULARITY where the snippet sets it (a name is looked up on PATH), else the
        `apptainer` or `singularity` on PATH."""
        names = [settings.program] if settings.program else ["apptainer", "singularity"]
        for name in names:
            if "/" in name:
                return name if os.access(name, os.X_OK) else None
            found = shutil.which(name, path=self._search_path)
            if found is not None:
                return found
        return None

    def _pid_namespaces_work(self) -> bool:
        """The PID namespace probe, run once per agent."""
        if self._pid_namespaces is None:
            self._pid_namespaces = self._probe_pid_namespaces()
        return self._pid_namespaces
