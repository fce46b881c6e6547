"""A SlotPolicy manifest's spec, checked and compiled: what admission and status report."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kondor_core.api.manifest import InvalidObjectError, validate
from kondor_core.api.slotpolicy import SlotPolicySpec
from kondor_core.classads import ExpressionError
from kondor_core.config import EffectivePolicy, PolicyError, compile_policy, policy_hash
from kondor_core.cron import DEFAULT_HOOKS_DIR, HookPathError, hook_path
from kondor_core.fleet.selector import selector_problems
from kondor_core.inputs import InputError, check_document
from kondor_core.jobs.fetchwork import check_hook_target, is_url
from kondor_core.jobs.hooks import (
    HookSettingsError,
    check_hook_settings,
    hook_programs,
    startd_hook_programs,
)
from kondor_core.jobs.runas import run_as_problems
from kondor_core.policy import EngineError, StartdPolicy
from kondor_core.slots import policy_problems
from kondor_core.startd.power import PowerConfigError, check_interval

#: HTCondor's UPDATE_INTERVAL default ("condor_startd Configuration File Macros").
DEFAULT_UPDATE_INTERVAL = 300.0


@dataclass(frozen=True)
class CheckedPolicy:
    """The outcome of checking one SlotPolicy spec: a spec and hash, or the problems found."""

    spec: SlotPolicySpec | None = None
    hash: str = ""
    warnings: tuple[str, ...] = ()
    problems: tuple[str, ...] = field(default_factory=tuple)
    #: UPDATE_INTERVAL of the policy: how often the agent's heartbeat is due.
    update_interval: float = DEFAULT_UPDATE_INTERVAL

    @property
    def valid(self) -> bool:
        return self.spec is not None and not self.problems


def check_policy(
    spec: Mapping[str, Any],
    *,
    hooks_dir: str = DEFAULT_HOOKS_DIR,
    resolve: Callable[[str], str] | None = None,
) -> CheckedPolicy:
    """Validate the spec against the model, then compile it; every problem names its field.

    Expression problems quote classad2's parser (`spec.start: 'X >' is not a valid
    ClassAd expression (classad2: ...)`), snippet problems name the condorConfig line.
    A startd cron executable or job hook (`<Keyword>_HOOK_PREPARE_JOB`, ...) outside
    `hooks_dir` (the agents' `--hooks-dir`) is refused: agents run hooks from that directory
    only (they check again with symlinks resolved). `resolve` (the caller's `realpath`, where
    it sees the hooks directory) resolves symlinks, so one that leads out is refused too.
    """
    try:
        # The webhook's bound on the object as the API server parsed it (its nesting and size).
        check_document(spec, source="spec")
    except InputError as error:
        return CheckedPolicy(problems=(str(error),))
    try:
        model = validate(SlotPolicySpec, dict(spec), what="SlotPolicy spec", prefix="spec")
    except InvalidObjectError as error:
        return CheckedPolicy(problems=tuple(error.problems))
    problems = selector_problems(model.node_selector)
    try:
        compiled = compile_policy(model)
    except PolicyError as error:
        return CheckedPolicy(problems=(*problems, *map(_in_spec, error.problems)))
    problems.extend(f"spec: {problem}" for problem in policy_problems(compiled))

    problems.extend(_hook_problems(compiled, hooks_dir, resolve))
    problems.extend(_node_knob_problems(compiled.macros))
    try:
        # The agent builds this engine from the same policy: what it would refuse, refuse here.
        engine = StartdPolicy.from_effective(compiled)
    except (EngineError, ExpressionError) as error:
        problems.append(f"spec: {error}")
    if problems:
        return CheckedPolicy(problems=tuple(problems))
    return CheckedPolicy(
        model,
        policy_hash(compiled),
        tuple(compiled.warnings),
        update_interval=engine.update_interval,
    )


def _hook_problems(
    compiled: EffectivePolicy, hooks_dir: str, resolve: Callable[[str], str] | None
) -> list[str]:
    """Startd cron executables, the starter's job hooks and the startd's fetch hooks that are
    not programs in the hooks directory (or, resolved, lead out of it)."""
    problems: list[str] = []

    def inside(path: str, program: str, field: str) -> None:
        if resolve is None:
            return
        root, real = resolve(hooks_dir), resolve(path)
        if real != root and not real.startswith(root.rstrip("/") + "/"):
            raise HookPathError(
                f"{field}: {program!r} resolves to {real}, outside the hooks directory {root} "
                "(a symlink leads out of it)"
            )

    for job in compiled.cron_jobs:
        try:
            field = _in_spec(job.source)
            inside(hook_path(job.executable, hooks_dir, field=field), job.executable, field)
        except HookPathError as error:
            problems.append(str(error))
    for knob, program in hook_programs(compiled.macros).items():
        try:
            if is_url(program):  # the supervisor runs these: programs only
                raise HookPathError(
                    f"spec.condorConfig: {knob} = {program}: a URL; only FETCH_WORK, "
                    "REPLY_FETCH and EVICT_CLAIM may be http(s) URLs, the starter's hooks "
                    "are programs in the hooks directory"
                )
            field = f"spec.condorConfig: {knob} = {program}"
            inside(hook_path(program, hooks_dir, field=field), program, field)
        except HookPathError as error:
            problems.append(str(error))
    for knob, program in startd_hook_programs(compiled.macros).items():
        try:
            field = f"spec.condorConfig: {knob} = {program}"
            target = check_hook_target(program, hooks_dir, field=field)
            if not is_url(program):
                inside(target, program, field)
        except HookPathError as error:
            problems.append(str(error))
    return problems


def _node_knob_problems(macros: Mapping[str, str]) -> list[str]:
    """What the agent would refuse of the knobs it reads: who jobs run as, the hooks'
    settings, the power management interval."""
    # Who jobs run as: uid 0 and root refused, naming the field or knob ("Who a job runs as").
    problems = [f"spec.condorConfig: {problem}" for problem in run_as_problems(macros)]
    try:
        check_hook_settings(macros)
    except HookSettingsError as error:
        problems.append(f"spec.condorConfig: {error}")
    try:
        # The agent reads it each tick ("Power Management"); refuse here what it would refuse.
        check_interval(macros)
    except PowerConfigError as error:
        problems.append(f"spec.condorConfig: {error}")
    return problems


def _in_spec(problem: str) -> str:
    # The compiler names snippet lines `condorConfig line N`; the user wrote it under spec.
    return f"spec.{problem}" if problem.startswith("condorConfig") else problem


def admission_message(name: str, checked: CheckedPolicy) -> str:
    """The message `kubectl apply` shows when admission refuses the policy."""
    count = len(checked.problems)
    listed = "; ".join(checked.problems)
    return f"SlotPolicy {name!r} has {count} problem{'s' * (count != 1)}: {listed}"
