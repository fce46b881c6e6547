"""The `process` and `apptainer` runtimes for the JobRunner: `kondor_agent.execute` underneath.

Each claim of a job gets its own directory under the execute dir (`<namespace>.<name>.<n>`,
n the claim's number), so a job matched again after a vacate starts afresh while the last
run's output stays for `kubectl kondor tail` until the ExecutionJob is deleted. The slot's
Cpus and Memory become the job cgroup's CPU weight and memory limit, as the SlotPolicy's
CGROUP_MEMORY_LIMIT_POLICY, DISABLE_SWAP_FOR_JOB and Kondor's CPU and pids knobs say
(`kondor_agent.execute.limits`); an Apptainer job's command line follows the SINGULARITY
knobs (`kondor_core.jobs.apptainer`). The job's hooks (PREPARE_JOB, UPDATE_JOB_INFO, JOB_EXIT) are
the SlotPolicy's `<Keyword>_HOOK_*` knobs under the keyword `kondor_core.jobs.hooks` resolves
for the slot and the job's HookKeyword; a PREPARE_JOB that sends the job back to Idle
(HookStatusCode 300 and up) makes its run an eviction.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kondor_agent.execute.cgroups import CgroupError, JobCgroups
from kondor_agent.execute.limits import ExecuteSettings, SettingsError, slot_limits
from kondor_agent.gpu_usage import GpuWatch
from kondor_agent.jobs import Outcome, Usage
from kondor_agent.runtimes.process_launcher import JobHandle, ProcessLauncher
from kondor_core.api import ExecutionJob, JobExecution
from kondor_core.api.job import ExecutionAccount
from kondor_core.classads import ExpressionError, parse_ad
from kondor_core.jobs.apptainer import ApptainerSettings
from kondor_core.jobs.gpus import (
    GpuSettings,
    devices_to_hide,
    gpu_environment,
    parse_environment_for,
    slot_gpus,
)
from kondor_core.jobs.hooks import HOOK_FAILURES_FILE, HookSettingsError, JobHooks, job_hooks
from kondor_core.jobs.runas import Account, AccountError, RunAsSettings, run_as
from kondor_core.slots import SlotAd

log = logging.getLogger("kondor_agent.runtimes.process")
_MIB = 1024 * 1024
_HOOK_NUMBERS = (
    "STARTER_INITIAL_UPDATE_INTERVAL",
    "STARTER_UPDATE_INTERVAL",
    "KONDOR_JOB_HOOK_TIMEOUT",
)


class ProcessJobs:
    """The JobRunner's Launcher for process and Apptainer jobs."""

    def __init__(self, launcher: ProcessLauncher) -> None:
        self.launcher = launcher
        self.settings = ExecuteSettings()
        self.apptainer = ApptainerSettings.from_macros()
        #: The GPU knobs: the job's GPU environment and hidden device nodes.
        self.gpus = GpuSettings.from_macros()
        #: The jobs' GPU usage (none measured without NVML), and each job's GPUs' UUIDs.
        self.gpu_watch = GpuWatch(None)
        self._gpu_devices: dict[str, tuple[str, ...]] = {}
        self._macros: Mapping[str, str] | None = None
        #: Who jobs run as (the policy's run-as knobs and user accounts).
        self.run_as = RunAsSettings()
        #: Job directories a restarted agent took back: `clear` leaves them running.
        self._adopted: set[Path] = set()
        #: Bytes of each job directory's `hook-failures` already reported.
        self._failures_read: dict[Path, int] = {}

    def adopt(self, job: ExecutionJob, execution: JobExecution) -> JobHandle | None:
        """The run `execution` names (its directory), as the previous agent launched it."""
        if not execution.directory:
            return None
        wanted = Path(execution.directory).resolve()
        for handle in self.launcher.adopt():
            if handle.directory.resolve() == wanted:
                self._adopted.add(handle.directory)
                return handle
        return None

    def configure(self, macros: Mapping[str, str]) -> None:
        """Take the limits' knobs from the policy's macros. A value Kondor does not understand
        is logged, naming the knob, and the default is kept: the default limits the most."""
        if macros == self._macros:
            return
        self._macros = dict(macros)
        self.apptainer = ApptainerSettings.from_macros(macros)
        self.gpus = GpuSettings.from_macros(macros)
        for problem in parse_environment_for(self.gpus.environment_for)[1]:
            log.error("%s", problem)
        try:
            self.run_as = RunAsSettings.from_macros(macros)
        except AccountError as err:
            # Admission refuses these; a policy that got past it runs jobs as slot users.
            log.error("%s; jobs run as their slots' own users", err)
            self.run_as = RunAsSettings()
        try:
            self.settings = ExecuteSettings.from_macros(macros)
        except SettingsError as err:
            log.error("%s; jobs are limited by the defaults (%s)", err, ExecuteSettings())
            self.settings = ExecuteSettings()

    def launch(self, job: ExecutionJob, job_id: str, slot: SlotAd, job_ad_text: str) -> JobHandle:
        runtime = job.spec.process or job.spec.apptainer
        assert runtime is not None  # RuntimeLaunchers sends only these runtimes here
        claim = (job.status.claim_id if job.status else None) or ""
        number = claim.rpartition("#")[2] or "0"
        namespace, _, name = job_id.partition("/")
        attributes = slot.attributes
        memory = int(_number(attributes.get("Memory")))
        total = int(_number(attributes.get("TotalMemory"))) or None
        limits = None
        if memory > 0:
            limits = slot_limits(
                _number(attributes.get("Cpus")),
                memory,
                settings=self.settings,
                machine_memory_mib=total,
            )
        account = self._account(job, job_id, slot, job_ad_text)
        gpus = slot_gpus(slot.attributes)
        self._gpu_devices[f"{namespace}.{name}.{number}"] = gpus.uuids or ()
        # The starter's GPU variables win over the job's own (HTCondor sets them last).
        env = {**runtime.environment, **gpu_environment(gpus, self.gpus)}
        return self.launcher.launch(
            f"{namespace}.{name}.{number}",
            runtime.model_copy(update={"environment": env}),
            job_ad_text,
            slot.to_classad().printOld(),  # the slot's ad is the job's machine ad
            slot=slot.name,
            limits=limits,
            apptainer=self.apptainer,
            hooks=self._hooks(slot, job_ad_text),
            account=account,
            hide_devices=devices_to_hide(gpus, self.gpus, self.launcher.gpu_isolation.nodes),
        )

    def _account(
        self, job: ExecutionJob, job_id: str, slot: SlotAd, job_ad_text: str
    ) -> Account | AccountError:
        """Who the job runs as (`kondor_core.jobs.runas`): its Owner is the one admission
        set from the API server's authentication, never a value of the job's own ad."""
        try:
            ad = parse_ad(job_ad_text, field="the job ad")
        except ExpressionError:
            ad = None
        try:
            account = run_as(self.run_as, owner=job.spec.owner, slot=slot.name, job_ad=ad)
        except AccountError as err:
            log.error("%s cannot run: %s", job_id, err)
            return err
        log.info(
            "%s runs as %s (uid %s gid %s): %s",
            job_id,
            account.name,
            account.uid,
            account.gid,
            account.reason,
        )
        return account

    def account(self, handle: JobHandle) -> ExecutionAccount | None:
        """The account the job runs as, from its launch spec (for its status)."""
        spec = self.launcher.spec(handle)
        if spec is None or spec.account is None:
            return None
        return ExecutionAccount(
            name=spec.account, uid=spec.uid, gid=spec.gid, reason=spec.account_reason
        )

    def _hooks(self, slot: SlotAd, job_ad_text: str) -> JobHooks | None:
        """The job's hooks, as the policy's knobs and the job's HookKeyword say."""
        macros = self._macros or {}
        if not any("_HOOK_" in name.upper() for name in macros):
            return None  # no hooks configured: the job ad need not be read
        try:
            keyword = parse_ad(job_ad_text, field="the job ad").get("HookKeyword")
        except ExpressionError:
            keyword = None
        slot_id = int(_number(slot.attributes.get("SlotID")))
        try:
            return job_hooks(
                macros,
                slot_id=slot_id,
                hook_keyword=keyword if isinstance(keyword, str) else None,
            )
        except HookSettingsError as err:
            log.error("%s; the job's hooks use the defaults", err)
            return job_hooks(
                {k: v for k, v in macros.items() if k.upper() not in _HOOK_NUMBERS},
                slot_id=slot_id,
                hook_keyword=keyword if isinstance(keyword, str) else None,
            )

    def poll(self, handle: JobHandle) -> Outcome | None:
        result = self.launcher.poll(handle)
        if result is None:
            return None
        self.gpu_watch.forget(handle.job_id)  # its last GPU figures were written running
        self._gpu_devices.pop(handle.job_id, None)
        cgroups = self.launcher.cgroups
        if cgroups.enabled and cgroups.exists(handle.cgroup):
            _end_cgroup(cgroups, handle.cgroup)  # the output stays; the cgroup is done
        # Lost, or sent back to Idle by PREPARE_JOB: either way the run is an eviction.
        lost = result.state == "lost" or result.requeue_reason is not None
        if result.requeue_reason is not None:
            log.info("%s goes back to Idle: %s", handle.job_id, result.requeue_reason)
        # A failed start, or an exit that holds the job (an OOM kill); a lost job is evicted.
        held = not lost and result.hold_reason is not None
        return Outcome(
            exit_code=result.exit_code,
            exit_signal=result.exit_signal,
            hold_reason=result.hold_reason if held else None,
            hold_reason_code=result.hold_reason_code if held else None,
            start_time=result.start_time,
            end_time=result.end_time,
            user_cpu=result.user_cpu_seconds,
            sys_cpu=result.sys_cpu_seconds,
            peak_memory_mib=result.peak_memory_mib,
            lost=lost,
        )

    def hook_failures(self, handle: JobHandle) -> list[tuple[str, str]]:
        """The failures of the job's UPDATE_JOB_INFO and JOB_EXIT its supervisor recorded
        since the last call (`hook-failures` in its directory: one stat when there is none)."""
        path = handle.directory / HOOK_FAILURES_FILE
        read = self._failures_read.get(handle.directory, 0)
        try:
            if path.stat().st_size <= read:
                return []
            with path.open("rb") as f:
                f.seek(read)
                data = f.read()
        except OSError:
            return []
        complete = data.rfind(b"\n") + 1  # a line being written waits for the next call
        self._failures_read[handle.directory] = read + complete
        found = []
        for line in data[:complete].decode(errors="replace").splitlines():
            reason, _, message = line.partition("\t")
            if reason and message:
                found.append((reason, message))
        return found

    def usage(self, handle: JobHandle) -> Usage | None:
        """What the job's cgroup accounts now; None without cgroups."""
        cgroups = self.launcher.cgroups
        if not cgroups.enabled or not cgroups.exists(handle.cgroup):
            return None
        used = cgroups.usage(handle.cgroup)
        return Usage(
            user_cpu=used.user_cpu_seconds,
            sys_cpu=used.sys_cpu_seconds,
            memory_mib=None if used.memory_bytes is None else -(-used.memory_bytes // _MIB),
            peak_memory_mib=(
                None if used.peak_memory_bytes is None else -(-used.peak_memory_bytes // _MIB)
            ),
            num_pids=used.num_pids,
            gpus=self.gpu_watch.measure(
                handle.job_id,
                cgroups.pids(handle.cgroup),
                self._gpu_devices.get(handle.job_id, ()),
            ),
        )

    def ended(self, handle: JobHandle) -> bool:
        """Whether the supervisor has recorded the job's end: one stat, as the agent looks
        five times a second. A supervisor lost without a word is found by `poll` at the next
        polling tick."""
        return self.launcher.has_result(handle)

    def directory(self, handle: JobHandle) -> str:
        return str(handle.directory)

    def soft_kill(self, handle: JobHandle, signal_name: str) -> None:
        self.launcher.soft_kill(handle, _signal(signal_name))

    def hard_kill(self, handle: JobHandle) -> None:
        self.launcher.hard_kill(handle)

    def note_exit_how(self, handle: JobHandle, how: str) -> None:
        self.launcher.note_exit_how(handle, how)

    def suspend(self, handle: JobHandle) -> None:
        self.launcher.suspend(handle)

    def resume(self, handle: JobHandle) -> None:
        self.launcher.resume(handle)

    def is_suspended(self, handle: JobHandle) -> bool:
        return self.launcher.is_suspended(handle)

    def remove(self, handle: JobHandle) -> None:
        self._failures_read.pop(handle.directory, None)
        self.launcher.remove(handle)

    def clear(self) -> int:
        """Hard-kill the jobs under the execute dir still running that were not taken back
        (their output stays)."""
        running = [
            h
            for h in self.launcher.adopt()
            if h.directory not in self._adopted and self.launcher.poll(h) is None
        ]
        for handle in running:
            self.launcher.hard_kill(handle)
        return len(running)


def _end_cgroup(cgroups: JobCgroups, cgroup: str, timeout: float = 1.0) -> None:
    """Kill what an ended job left in its cgroup (the supervisor has, unless it was lost)
    and remove the cgroup once the kernel has let the processes go."""
    deadline = time.monotonic() + timeout
    while cgroups.pids(cgroup):
        cgroups.kill(cgroup)
        if time.monotonic() > deadline:
            log.warning("processes left in %s: %s", cgroup, cgroups.pids(cgroup))
            return
        time.sleep(0.01)
    try:
        cgroups.remove(cgroup)
    except CgroupError as err:
        log.warning("cannot remove the cgroup of an ended job: %s", err)


def _signal(name: str) -> int:
    """KillSig (a name such as SIGTERM, or a number) as a signal number; SIGTERM if unknown."""
    if name.isdigit():
        return int(name)
    try:
        return int(signal.Signals[name if name.startswith("SIG") else f"SIG{name}"])
    except KeyError:
        return int(signal.SIGTERM)


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value)
