"""The Pool's `condorConfig`: the negotiator's knobs as an HTCondor config snippet.

An HTCondor admin can paste their negotiator configuration (`PRIORITY_HALFLIFE = 3600`,
`NEGOTIATOR_CONSIDER_PREEMPTION = False`, `$(MACRO)` references, `if`/`else`), read with
the same snippet reader as a SlotPolicy's. A field set in the Pool's spec wins over the
snippet; a knob the negotiator does not know is left alone (it may be meant for a startd).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from kondor_core.api import describe_errors
from kondor_core.api.pool import PoolSpec
from kondor_core.config import parse_snippet
from kondor_core.errors import KondorError

#: HTCondor knob -> PoolSpec field.
KNOBS = {
    "NEGOTIATOR_INTERVAL": "negotiator_interval",
    "MATCH_TIMEOUT": "match_timeout",
    "PRIORITY_HALFLIFE": "priority_halflife",
    "DEFAULT_PRIO_FACTOR": "default_prio_factor",
    "NICE_USER_PRIO_FACTOR": "nice_user_prio_factor",
    "PREEMPTION_REQUIREMENTS": "preemption_requirements",
    "PREEMPTION_RANK": "preemption_rank",
    "NEGOTIATOR_CONSIDER_PREEMPTION": "negotiator_consider_preemption",
    "NEGOTIATOR_CONSIDER_EARLY_PREEMPTION": "negotiator_consider_early_preemption",
    "ALLOW_PSLOT_PREEMPTION": "allow_pslot_preemption",
    "SLOT_WEIGHT": "slot_weight",
    "NEGOTIATOR_DISCOUNT_SUSPENDED_RESOURCES": "negotiator_discount_suspended_resources",
}


#: Fields that hold ClassAd expressions: their text is kept as written.
_EXPRESSIONS = ("preemption_requirements", "preemption_rank", "slot_weight")


class PoolConfigError(KondorError):
    """The Pool's condorConfig cannot be read, or a knob's value is not allowed."""


def pool_settings(spec: PoolSpec) -> PoolSpec:
    """The negotiator's settings: `spec` with the knobs of its condorConfig applied to the
    fields the spec does not set itself. Raises PoolConfigError naming the line or knob."""
    if not spec.condor_config:
        return spec
    snippet = parse_snippet(spec.condor_config)
    if snippet.errors:
        raise PoolConfigError("; ".join(str(error) for error in snippet.errors))
    values: dict[str, Any] = {}
    for knob, name in KNOBS.items():
        definition = snippet.table.get(knob)
        if name in spec.model_fields_set or definition is None or definition.is_builtin:
            continue
        try:
            expansion = snippet.table.value(knob)
        except KondorError as error:
            raise PoolConfigError(f"condorConfig {knob}: {error}") from error
        if expansion is not None and expansion.value.strip():
            text = expansion.value.strip()
            values[name] = text if name in _EXPRESSIONS else _value(text)
    if not values:
        return spec
    try:
        return PoolSpec.model_validate({**spec.model_dump(), **values})
    except ValidationError as error:
        names = {field: knob for knob, field in KNOBS.items()}
        problems = [
            f"condorConfig {names.get(str(e['loc'][0]), e['loc'][0])} = "
            f"{values.get(str(e['loc'][0]))!r}: {e['msg']}"
            for e in error.errors()
        ] or describe_errors(error)
        raise PoolConfigError("; ".join(problems)) from error


def _value(text: str) -> Any:
    """A knob's value as pydantic reads it: booleans and numbers as such, else the text."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
