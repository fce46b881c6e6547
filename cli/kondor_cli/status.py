"""`kubectl kondor status`: condor_status over the ExecutionPoints' slot ads.

    kubectl kondor status [NODE] [-l|--long] [-af ATTR ...] [-constraint EXPR] [-cod]

The default output is condor_status's: one line per slot (Name, OpSys, Arch, State, Activity,
LoadAv, Mem, ActvtyTime), then the totals by Arch/OpSys and state. `-long` prints whole ads
in ClassAd form, `-af` the values of the named attributes (or expressions), `-constraint`
keeps the ads for which the expression is TRUE, evaluated by classad2 with MY = the slot ad,
as condor_status does; `-cod` lists the COD claims of the slots that have any. The cluster is
reached as kubectl reaches it: `--kubeconfig`, else
$KUBECONFIG, else the pod's ServiceAccount, else ~/.kube/config, and `--context`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import classad2

from kondor_cli import render
from kondor_cli.files import UserError
from kondor_cli.kube import ApiError, add_connection_arguments, connect_cluster
from kondor_cli.render import table
from kondor_core.api import EXECUTION_POINTS, whole_slot_ad
from kondor_core.classads import ExpressionError, parse_expr
from kondor_core.slots import SlotAd
from kondor_core.startd.cod import cod_rows
from kondor_kube import paths

#: condor_status's default columns.
HEADERS = ("Name", "OpSys", "Arch", "State", "Activity", "LoadAv", "Mem", "ActvtyTime")
#: The states counted in condor_status's summary, in its order (Drained shows as Drain).
SUMMARY = ("Owner", "Claimed", "Unclaimed", "Matched", "Preempting", "Backfill", "Drained")


def slot_ads(execution_points: Iterable[Mapping[str, Any]]) -> list[SlotAd]:
    """Every slot ad of `execution_points`, ordered by machine and then as the agent listed
    them (condor_status order within a machine)."""
    ads: list[SlotAd] = []
    ordered = sorted(execution_points, key=lambda ep: str(ep.get("metadata", {}).get("name")))
    for ep in ordered:
        status = ep.get("status") or {}
        for slot in status.get("slots") or []:
            attributes = whole_slot_ad(status.get("machine") or {}, slot.get("ad") or {})
            name = str(attributes.get("Name") or slot.get("name") or "")
            expressions = frozenset(slot.get("expressions") or ())
            ads.append(SlotAd(name, attributes, expressions & set(attributes)))
    return ads


def classad(ad: SlotAd) -> Any:
    """The slot ad as a classad2.ClassAd built from fresh expression trees (the core's parse
    cache shares trees between ads, and a tree remembers the scopes it was evaluated in)."""
    values: dict[str, Any] = {}
    for key, value in ad.attributes.items():
        if key in ad.expressions and isinstance(value, str):
            try:
                values[key] = classad2.ExprTree(value)
            except classad2.ClassAdException:
                values[key] = value  # shown as the string it is, rather than dropped
        elif isinstance(value, dict):
            values[key] = classad2.ClassAd(value)
        else:
            values[key] = value
    return classad2.ClassAd(values)


def select(ads: Sequence[SlotAd], node: str | None, constraint: str | None) -> list[SlotAd]:
    """The ads of `node` (a machine or a slot name) for which `constraint` is TRUE."""
    tree = None
    if constraint is not None:
        try:
            tree = parse_expr(constraint, field="-constraint")
        except ExpressionError as err:
            raise UserError(
                f"-constraint {constraint!r} is not a ClassAd expression: {err.reason}"
            ) from None
    out: list[SlotAd] = []
    for ad in ads:
        if node is not None and node not in (ad.name, ad.attributes.get("Machine")):
            continue
        if tree is not None and tree.eval(classad(ad), render.NO_TARGET) is not True:
            continue
        out.append(ad)
    return out


def activity_time(seconds: float) -> str:
    """condor_status's ActvtyTime: days+hours:minutes:seconds."""
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}+{hours:02d}:{minutes:02d}:{secs:02d}"


def _load(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "0.000"
    return f"{value:.3f}"


def _text(value: Any) -> str:
    return "?" if value is None else str(value)


def default_table(ads: Sequence[SlotAd], now: float) -> str:
    """condor_status's default output: the slot table, then the totals."""
    rows = []
    for ad in ads:
        a = ad.attributes
        entered = a.get("EnteredCurrentActivity")
        rows.append(
            [
                ad.name,
                _text(a.get("OpSys")),
                _text(a.get("Arch")),
                _text(a.get("State")),
                _text(a.get("Activity")),
                _load(a.get("LoadAvg")),
                _text(a.get("Memory")),
                activity_time(now - entered) if isinstance(entered, int | float) else "?",
            ]
        )
    return table(HEADERS, rows) + "\n\n" + totals(ads)


def totals(ads: Sequence[SlotAd]) -> str:
    """condor_status's summary: slots by Arch/OpSys and state, then the grand total."""
    groups: dict[str, list[SlotAd]] = {}
    for ad in ads:
        key = f"{_text(ad.attributes.get('Arch'))}/{_text(ad.attributes.get('OpSys'))}"
        groups.setdefault(key, []).append(ad)

    def counts(label: str, members: Sequence[SlotAd]) -> list[Any]:
        states = [m.attributes.get("State") for m in members]
        return [label, len(members), *(states.count(state) for state in SUMMARY)]

    headers = ("", "Total", *("Drain" if s == "Drained" else s for s in SUMMARY))
    rows = [counts(key, members) for key, members in sorted(groups.items())]
    rows.append(counts("Total", ads))
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]

    def line(row: Sequence[Any]) -> str:
        return "  ".join(str(cell).rjust(width) for cell, width in zip(row, widths, strict=True))

    body = [line(row) for row in rows]
    return "\n\n".join([line(headers), "\n".join(body[:-1]), body[-1]]).rstrip() + "\n"


#: condor_status -cod's columns.
COD_HEADERS = ("Name", "ID", "ClaimState", "TimeInState", "RemoteUser", "JobId", "Keyword")


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def cod_table(ads: Sequence[SlotAd], now: float) -> str:
    """`condor_status -cod`: one line per COD claim of the slots with NumCODClaims > 0 (the
    claim's state and how long it has been in it, its user, job id and keyword), then the
    claims counted by state."""
    claims = cod_rows(ad.attributes for ad in ads)
    rows = [
        [
            row.name,
            row.cod_id,
            row.state,
            activity_time(now - row.entered),
            row.user,
            row.job_id,
            row.keyword,
        ]
        for row in claims
    ]
    states = ("Idle", "Running", "Suspended", "Vacating", "Killing")
    count_headers = ("", "Total", *states)
    counts = [["Total", len(claims), *(sum(r.state == s for r in claims) for s in states)]]
    return table(COD_HEADERS, rows) + "\n\n" + table(count_headers, counts) + "\n"


def long_form(ads: Sequence[SlotAd]) -> str:
    """Each slot ad as `condor_status -long` prints it."""
    return render.long_form(classad(ad) for ad in ads)


def autoformat(ads: Sequence[SlotAd], attributes: Sequence[str]) -> str:
    """`-af`: each slot ad's values of `attributes`, one ad a line."""
    return render.autoformat((classad(ad) for ad in ads), attributes)


# ------------------------------------------------------------------------------- the command

Fetch = Callable[[argparse.Namespace], list[dict[str, Any]]]


def fetch_execution_points(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The ExecutionPoints, read as kubectl would: `--kubeconfig`, else $KUBECONFIG, else the
    pod's ServiceAccount, else ~/.kube/config (`kondor_kube.config.load`), with `--context`;
    the `kubernetes` client reads and merges the kubeconfig files."""
    cluster = connect_cluster(args)
    try:
        return cluster.list("list executionpoints", paths.kondor(EXECUTION_POINTS))
    except ApiError as err:
        raise UserError(str(err)) from None


def run(
    args: argparse.Namespace,
    *,
    fetch: Fetch = fetch_execution_points,
    clock: Callable[[], float] = time.time,
) -> int:
    ads = select(slot_ads(fetch(args)), args.node, args.constraint)
    if args.node is not None and not ads and args.constraint is None:
        raise UserError(f"no execution point or slot named {args.node!r}")
    if getattr(args, "cod", False):
        ads = [ad for ad in ads if _number(ad.attributes.get("NumCODClaims")) > 0]
        if ads:
            print(cod_table(ads, clock()), end="")
    elif args.long:
        print(long_form(ads), end="")
    elif args.autoformat:
        print(autoformat(ads, args.autoformat), end="")
    elif ads:
        print(default_table(ads, clock()), end="")
    return 0


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `status` to the `kondor` (and `kubectl kondor`) command."""
    parser = commands.add_parser(
        "status",
        help="condor_status: the slots of the ExecutionPoints",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("node", nargs="?", metavar="NODE", help="a node or a slot name")
    parser.add_argument(
        "-l", "-long", "--long", dest="long", action="store_true", help="print whole ads"
    )
    parser.add_argument(
        "-af",
        "-autoformat",
        "--autoformat",
        dest="autoformat",
        nargs="+",
        metavar="ATTR",
        help="print these attributes (or expressions) of each ad",
    )
    parser.add_argument(
        "-constraint",
        "--constraint",
        dest="constraint",
        metavar="EXPR",
        help="only ads for which this ClassAd expression is TRUE",
    )
    parser.add_argument(
        "-cod",
        "--cod",
        dest="cod",
        action="store_true",
        help="the COD claims of the slots that have any (condor_status -cod)",
    )
    add_connection_arguments(parser)
    parser.set_defaults(func=run)
