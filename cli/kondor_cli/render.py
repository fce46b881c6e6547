"""Tables for people, in the spirit of condor_status."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import classad2

from kondor_cli.files import UserError
from kondor_core.classads import ExpressionError, parse_expr
from kondor_core.sim import Placement

_STANDARD = ("Cpus", "Memory", "Disk", "GPUs")


def _cell(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None else str(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines)


def slot_table(slots: Sequence[Mapping[str, Any]], placements: Sequence[Placement]) -> str:
    """Slots as condor_status prints them, custom resources as extra columns, then placements."""
    custom: list[str] = []
    for ad in slots:
        for name in ad.get("MachineResources", "").split():
            if name not in _STANDARD and name not in custom and name != "Swap":
                custom.append(name)
    headers = ["Name", "Type", "State", "Activity", *_STANDARD, *custom]
    rows = [
        [ad.get("Name"), ad.get("SlotType"), ad.get("State"), ad.get("Activity")]
        + [ad.get(name, 0) for name in (*_STANDARD, *custom)]
        for ad in slots
    ]
    out = table(headers, rows)
    if placements:
        out += "\n\n" + table(
            ["Request", "Slot", "Reason"],
            [[p.request, p.slot or "-", p.reason or ""] for p in placements],
        )
    return out


def timeline_table(document: Mapping[str, Any]) -> str:
    """A replayed timeline: one row per transition, then the actions the agent would take."""
    out = table(
        ["Time", "Slot", "From", "To", "Job", "Reason"],
        [
            [
                t["time"],
                t["slot"],
                t.get("from", ""),
                f"{t['state']}/{t['activity']}",
                t.get("job") or "",
                t["reason"],
            ]
            for t in document["transitions"]
        ],
    )
    actions = document.get("actions") or []
    if actions:
        out += "\n\n" + table(
            ["Time", "Action", "Slot", "Job", "Reason"],
            [[a["time"], a["kind"], a["slot"], a.get("job_id", ""), a["reason"]] for a in actions],
        )
    jobs = document.get("jobs") or []
    if jobs:
        out += "\n\n" + table(
            ["Job", "Status", "Slot", "Reason"],
            [[j["name"], j["status"], j.get("slot", ""), j.get("reason", "")] for j in jobs],
        )
    return out


# ---- condor_status and condor_q: -long and -af ------------------------------------------------

#: An empty TARGET: condor_status and condor_q evaluate with MY = the ad, so `MY.x` resolves
#: and `TARGET.x` is UNDEFINED.
NO_TARGET = classad2.ClassAd()


def long_form(ads: Iterable[Any]) -> str:
    """Each ClassAd in `attr = value` lines, by attribute name, a blank line after each, as
    `condor_status -long` and `condor_q -long` print them."""
    out = []
    for ad in ads:
        lines = ad.printOld().strip("\n").splitlines()
        out.append("\n".join(sorted(lines, key=str.lower)) + "\n\n")
    return "".join(out)


def autoformat(ads: Iterable[Any], attributes: Sequence[str]) -> str:
    """`-af`: each ClassAd's values of `attributes` (names or expressions), space separated,
    one ad a line; strings unquoted, a missing attribute as `undefined`."""
    trees = []
    for text in attributes:
        try:
            trees.append(parse_expr(text, field="-af"))
        except ExpressionError as err:
            raise UserError(f"-af {text!r} is not a ClassAd expression: {err.reason}") from None
    lines = [" ".join(shown(tree.eval(ad, NO_TARGET)) for tree in trees) for ad in ads]
    return "".join(line + "\n" for line in lines)


def shown(value: Any) -> str:
    """A ClassAd value as -af prints it."""
    if value is classad2.Value.Undefined:
        return "undefined"
    if value is classad2.Value.Error:
        return "error"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, classad2.ClassAd):
        return str(value.printJson()).replace("\n", " ")
    if isinstance(value, list):
        return "{" + ",".join(shown(item) for item in value) + "}"
    return str(value)
