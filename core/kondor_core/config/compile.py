"""Compile a SlotPolicy (structured fields plus its condorConfig snippet) to one EffectivePolicy.

The knobs follow the reference: "Dividing System Resources in Multi-core
Machines" (SLOT_TYPE_<N>, NUM_SLOTS_TYPE_<N>, NUM_SLOTS, MACHINE_RESOURCE_*),
"Dynamic Provisioning" (SLOT_TYPE_<N>_PARTITIONABLE, MODIFY_REQUEST_EXPR_*),
"condor_negotiator-Side Resource Consumption Policies" (CONSUMPTION_*),
"Custom and system slot attributes" (STARTD_ATTRS, SLOT<N>_STARTD_ATTRS,
SLOT<N>_<attr>) and "condor_startd Policy Configuration" (START, SUSPEND, ...).

Structured fields win over the snippet (spec.start over START, spec.slotTypes
over SLOT_TYPE_<N> of the same id, spec.macros over snippet macros,
spec.modifyRequest over MODIFY_REQUEST_EXPR_*); each override is reported.
Every problem is collected before PolicyError is raised, so a user fixes them
all in one pass.

The compiler is split by section, each a module of functions of a `KnobReader`
(`kondor_core.config.reader`): `machine_knobs`, `slot_types`, `policy_knobs` (the policy
expressions, STARTD_ATTRS, MODIFY_REQUEST_EXPR_*), `cron_knobs` and `macros` (everything else).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from kondor_core.api.slotpolicy import SlotPolicySpec
from kondor_core.config import cron_knobs, machine_knobs, macros, policy_knobs, slot_types
from kondor_core.config.effective import EffectivePolicy
from kondor_core.config.reader import KnobReader
from kondor_core.config.snippet import MacroError, parse_snippet
from kondor_core.errors import KondorError


class PolicyError(KondorError):
    """A SlotPolicy that cannot be compiled; `problems` lists every one found."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        listed = "\n".join(f"  - {problem}" for problem in self.problems)
        count = len(self.problems)
        super().__init__(f"the SlotPolicy has {count} problem{'s' * (count != 1)}:\n{listed}")


def compile_policy(spec: SlotPolicySpec) -> EffectivePolicy:
    """The effective policy of `spec`; raises PolicyError listing every problem.

    Unknown knobs, knobs HTCondor has that Kondor does not implement, and
    structured fields overriding the snippet are in `EffectivePolicy.warnings`.
    """
    snippet = parse_snippet(spec.condor_config)
    try:
        table = snippet.table.with_macros(spec.macros, source="spec.macros")
    except MacroError as err:
        raise PolicyError(
            [*(str(error) for error in snippet.errors), f"spec.macros.{err}"]
        ) from None
    compiler = KnobReader(spec, table)
    compiler.problems.extend(str(error) for error in snippet.errors)
    compiler.warnings.extend(snippet.notes)
    policy = _effective(compiler, snippet.templates)
    if compiler.problems:
        raise PolicyError(sorted(compiler.problems, key=_line_order))
    return policy


def _line_order(problem: str) -> int:
    """Problems in snippet order; those about structured fields after them."""
    match = re.match(r"condorConfig line (\d+)", problem)
    return int(match.group(1)) if match else 1 << 30


def _effective(r: KnobReader, templates: tuple[str, ...]) -> EffectivePolicy:
    """Every section read into the EffectivePolicy, in the order the knobs depend on."""
    consumption_policy = machine_knobs.machine_consumption_policy(r)
    machine_consumption = machine_knobs.machine_consumption(r)
    resources, resource_ids, names, inventory = machine_knobs.machine_resources(r)
    types = slot_types.slot_types(r, consumption_policy, machine_consumption)
    reserved_cpus, reserved_memory = machine_knobs.reserved(r)
    num_cpus = machine_knobs.machine_number(r, "NUM_CPUS", minimum=1)
    memory_mib = machine_knobs.machine_number(r, "MEMORY", minimum=1)
    expressions = policy_knobs.expressions(r)
    startd_attrs, slot_attrs = policy_knobs.attributes(r)
    modify_request = policy_knobs.modify_request(r)
    cron_jobs, cron_settings = cron_knobs.cron_jobs(r)
    all_macros = macros.macros(r)
    return EffectivePolicy(
        slot_types=types,
        num_cpus=num_cpus,
        memory_mib=memory_mib,
        reserved_cpus=reserved_cpus,
        reserved_memory_mib=reserved_memory,
        machine_resources=resources,
        machine_resource_ids=resource_ids,
        machine_resource_names=names,
        inventory_resources=inventory,
        startd_attrs=startd_attrs,
        slot_attrs=slot_attrs,
        expressions=expressions,
        macros=all_macros,
        modify_request=modify_request,
        consumption_policy=consumption_policy,
        cron_jobs=cron_jobs,
        cron=cron_settings,
        templates=templates,
        warnings=tuple(dict.fromkeys(r.warnings)),
    )
