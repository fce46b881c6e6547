"""Typed views of the job directory's records: the launch spec and the job's result.

The launcher writes `LaunchSpec` and reads `JobResult`; the supervisor, which
must start fast, reads and writes the same JSON as plain dicts (the file names
and hold codes are in `jobdir`, which it shares). `JobResult.from_json` refuses
a key it does not know, so the two cannot drift apart unnoticed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from kondor_agent.execute.jobdir import (
    EXIT,
    EXIT_HOW,
    FAILED_TO_CREATE_PROCESS,
    HOOK_PREPARE_JOB_FAILURE,
    IWD_ERROR,
    JOB_AD,
    JOB_PID,
    KILLED,
    MACHINE_AD,
    OUT_OF_MEMORY,
    SCRATCH,
    SPEC,
    SUPERVISOR_LOG,
    SUPERVISOR_PID,
    UNABLE_TO_OPEN_INPUT,
    UNABLE_TO_OPEN_OUTPUT,
    write_atomic,
)

__all__ = [
    "EXIT",
    "EXIT_HOW",
    "FAILED_TO_CREATE_PROCESS",
    "HOOK_PREPARE_JOB_FAILURE",
    "IWD_ERROR",
    "JOB_AD",
    "JOB_PID",
    "KILLED",
    "MACHINE_AD",
    "OUT_OF_MEMORY",
    "SCRATCH",
    "SPEC",
    "SUPERVISOR_LOG",
    "SUPERVISOR_PID",
    "UNABLE_TO_OPEN_INPUT",
    "UNABLE_TO_OPEN_OUTPUT",
    "JobResult",
    "LaunchSpec",
    "write_atomic",
]


@dataclass(frozen=True)
class LaunchSpec:
    """What the supervisor runs; every path is absolute and already resolved by the launcher."""

    job_id: str
    slot: str
    cgroup: str
    argv: list[str]
    executable: str
    environment: dict[str, str]
    iwd: str
    scratch: str
    input: str | None = None
    output: str | None = None
    error: str | None = None
    job_procs: list[str] = field(default_factory=list)
    supervisor_procs: list[str] = field(default_factory=list)
    peak_memory_file: str | None = None
    #: Where the kernel counts the cgroup's OOM kills (memory.events or memory.oom_control).
    oom_kills_file: str | None = None
    #: The job cgroup's memory limit, for the hold reason of an OOM kill.
    memory_limit_mib: int | None = None
    #: v2's `cgroup.kill` of the job's cgroup, where the kernel has it (else each pid is killed).
    cgroup_kill_file: str | None = None
    #: Run before the job (`apptainer test <image>`); a failure holds the job (code 41).
    image_test: list[str] | None = None
    #: The job hooks (`kondor_agent.execute.hookrun`): programs already checked against the
    #: hooks directory, the knobs that named them, intervals and timeout; None: no hooks.
    hooks: dict[str, Any] | None = None
    #: Where the job's own executable is in `argv` (after any Apptainer command), so that a
    #: PREPARE_JOB hook's Cmd and Arguments can replace it and its arguments.
    command_at: int | None = None
    #: The account the job runs as (`kondor_core.jobs.runas`): the child of the supervisor
    #: switches to this uid and gid before exec; None where the agent is not root and cannot.
    uid: int | None = None
    gid: int | None = None
    #: The account's name and why it was chosen, for the log and the job's status.
    account: str | None = None
    account_reason: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> LaunchSpec:
        data: dict[str, Any] = json.loads(text)
        return cls(**data)


ResultState = Literal["exited", "failed", "lost"]


@dataclass(frozen=True)
class JobResult:
    """How a job ended: `exited` (by itself or by a signal), `failed` (it never started: the
    hold reason says why) or `lost` (its supervisor vanished without a word, as on a reboot).

    `killed` is set by the launcher when the agent sent the signal (vacate, hold, remove),
    so an `exited` job with `killed` is ExecutionJob's `Killed`.
    """

    state: ResultState
    exit_code: int | None = None
    exit_signal: int | None = None
    start_time: float | None = None
    end_time: float | None = None
    user_cpu_seconds: float = 0.0
    sys_cpu_seconds: float = 0.0
    peak_memory_mib: int | None = None
    hold_reason: str | None = None
    hold_reason_code: int | None = None
    hold_reason_subcode: int | None = None
    #: The PREPARE_JOB hook sent the job back to Idle (HookStatusCode 300 and up): why.
    requeue_reason: str | None = None
    killed: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> JobResult:
        data: dict[str, Any] = json.loads(text)
        return cls(**data)

    @classmethod
    def failure(cls, code: int, subcode: int, reason: str, *, at: float) -> JobResult:
        return cls(
            state="failed",
            end_time=at,
            hold_reason=reason,
            hold_reason_code=code,
            hold_reason_subcode=subcode,
        )
