"""Every macro not turned into a field, and the knobs Kondor does not know or implement
(reported, never silently dropped); the structured fields that set macros (userAccounts,
podMode, podSecurity)."""

from __future__ import annotations

from kondor_core.api.slotpolicy import (
    POD_MODES,
    POD_SECURITY_LEVELS,
)
from kondor_core.config import knobs
from kondor_core.config.accounts import USER_ACCOUNTS_KNOB, AccountError, merge_user_accounts
from kondor_core.config.reader import KnobReader
from kondor_core.config.reader import bare as _bare
from kondor_core.config.reader import label as _label
from kondor_core.config.snippet import (
    Definition,
    MacroError,
)


def macros(r: KnobReader) -> dict[str, str]:
    """Every macro not turned into a field, expanded; unknown knobs reported."""
    _startd_knobs(r)
    macros: dict[str, str] = {}
    unimplemented_by_use: dict[tuple[int, str], dict[str, list[str]]] = {}
    for definition in r.table.user_definitions():
        name = _bare(definition.name)
        if definition.name.upper() in r.consumed or r.table.get(name) is not definition:
            continue
        value = _helper_value(r, definition)
        if value is None:
            continue
        macros[knobs.canonical_name(name)] = value
        reason = knobs.unimplemented_reason(name)
        used = name.upper() in r.used and name.upper() not in knobs.UNIMPLEMENTED
        if knobs.is_startd_knob(name) or used:
            continue
        origin = definition.origin
        if origin.template is not None:
            if reason is not None:
                by_reason = unimplemented_by_use.setdefault((origin.line, origin.text), {})
                by_reason.setdefault(reason, []).append(name)
        elif reason is not None:
            r.warnings.append(
                f"{_label(definition)}: {name} is an HTCondor knob Kondor does not implement "
                f"({reason}); it has no effect"
            )
        else:
            r.warnings.append(
                f"{_label(definition)}: {name} is not a knob Kondor knows, and nothing Kondor "
                f"reads refers to it as $({name}); it has no effect"
            )
    for (line, text), by_reason in unimplemented_by_use.items():
        listed = "; ".join(f"{', '.join(names)} ({reason})" for reason, names in by_reason.items())
        r.warnings.append(
            f"condorConfig line {line} ({text.strip()}) sets knobs Kondor does not implement, "
            f"which have no effect: {listed}"
        )
    if r.spec.user_accounts:  # the structured field wins, user by user, over the knob
        try:
            macros[USER_ACCOUNTS_KNOB] = merge_user_accounts(
                macros.get(USER_ACCOUNTS_KNOB, ""),
                {user: (ids.uid, ids.gid) for user, ids in r.spec.user_accounts.items()},
            )
        except AccountError as err:
            r.problems.append(str(err))
    if r.spec.pod_mode is not None:  # the structured field wins over the snippet's knob
        macros["KONDOR_POD_MODE"] = r.spec.pod_mode
    mode = macros.get("KONDOR_POD_MODE")
    if mode is not None and mode.strip().lower() not in POD_MODES:
        r.problems.append(f"KONDOR_POD_MODE = {mode}: expected one of {', '.join(POD_MODES)}")
    if r.spec.pod_security is not None:  # likewise the Pod Security level
        macros["KONDOR_POD_SECURITY"] = r.spec.pod_security
    level = macros.get("KONDOR_POD_SECURITY")
    if level is not None and level.strip().lower() not in POD_SECURITY_LEVELS:
        r.problems.append(
            f"KONDOR_POD_SECURITY = {level}: expected one of "
            f"{', '.join(POD_SECURITY_LEVELS)} (the Pod Security Standards levels)"
        )
    return macros


def _helper_value(r: KnobReader, definition: Definition) -> str | None:
    """A macro's value for `macros`. A template's helper that nothing uses and that cannot
    be expanded is left out with a warning: HTCondor never expands it either."""
    if definition.origin.template is None:
        return r.expand(definition, record=False)
    try:
        return r.table.expand(definition.value, owner=definition).value.strip()
    except MacroError as err:
        r.warnings.append(f"{err}; {definition.name} is left out of the macros")
        return None


def _startd_knobs(r: KnobReader) -> None:
    """Startd knobs kept for the policy engine: their references count as used."""
    for definition in r.table.user_definitions():
        name = _bare(definition.name)
        if name.upper() not in knobs.STARTD_KNOBS or r.table.get(name) is not definition:
            continue
        value = r.expand(definition)
        if value and name.upper() in knobs.STARTD_EXPRESSION_KNOBS:
            r.expression(value, _label(definition))
