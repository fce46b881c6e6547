"""`kubectl kondor userprio`: condor_userprio over the Pool `default`'s accountant.

    kubectl kondor userprio [-all] [-setfactor USER FACTOR] [-resetusage USER]

Without options it prints the users with resources in use or usage in the last day, by
effective priority (best first): effective priority, priority factor, resources in use,
weighted accumulated usage in hours and the time since their last usage, as condor_userprio
does ("User Priorities and Negotiation"); `-all` prints every user the accountant knows,
with the real priority and the usage start and last usage times.

`-setfactor USER FACTOR` writes `spec.priorityFactors[USER]` and `-resetusage USER` writes
`spec.usageResets[USER]` (now) with merge patches of the Pool (created when absent); the
operator's accountant carries them out at its next cycle. Both need the right to patch Pools.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any, Protocol

from kondor_cli.files import UserError
from kondor_cli.kube import ApiError, Cluster, add_connection_arguments, connect_cluster
from kondor_core.api import API_VERSION, format_time, parse_time
from kondor_core.api.pool import DEFAULT_POOL, POOLS, PoolStatus, UserPriority
from kondor_kube import paths

#: condor_userprio's default window: users whose last usage is older are not shown.
ACTIVE_WINDOW = 86400


class PoolApi(Protocol):
    """What userprio needs of the API server (a fake in the unit tests)."""

    def get_pool(self, name: str) -> dict[str, Any] | None: ...
    def patch_pool(self, name: str, patch: Mapping[str, Any]) -> None: ...


class KubePool:
    """The Pool over the CLI's `Cluster` (kondor_cli.kube)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def get_pool(self, name: str) -> dict[str, Any] | None:
        return self.cluster.read(f"get pool {name}", paths.kondor(POOLS, name))

    def patch_pool(self, name: str, patch: Mapping[str, Any]) -> None:
        """Merge-patch the Pool's spec; a missing Pool is created with it."""
        if self.get_pool(name) is None:
            body = {
                "apiVersion": API_VERSION,
                "kind": "Pool",
                "metadata": {"name": name},
                "spec": dict(patch.get("spec") or {}),
            }
            self.cluster.create(f"create pool {name}", paths.kondor(POOLS), body)
            return
        self.cluster.merge_patch(f"patch pool {name}", paths.kondor(POOLS, name), patch)


def connect(args: argparse.Namespace) -> PoolApi:
    return KubePool(connect_cluster(args))


Connect = Callable[[argparse.Namespace], PoolApi]


# ------------------------------------------------------------------------------- output


def _epoch(text: str | None) -> float | None:
    when = parse_time(text) if text else None
    return when.timestamp() if when is not None else None


def _since(text: str | None, now: float) -> str:
    """condor_userprio's Time Since Last Usage: days+hh:mm, `<now>` while in use."""
    when = _epoch(text)
    if when is None:
        return "<never>"
    seconds = max(0, int(now - when))
    if seconds < 60:
        return "<now>"
    days, rest = divmod(seconds, 86400)
    return f"{days}+{rest // 3600:02d}:{rest % 3600 // 60:02d}"


def _date(text: str | None, tz: tzinfo | None) -> str:
    when = _epoch(text)
    if when is None:
        return ""
    moment = datetime.fromtimestamp(when, tz)
    return f"{moment.month}/{moment.day:02d}/{moment.year} {moment.hour:02d}:{moment.minute:02d}"


def shown(status: PoolStatus, now: float, *, everyone: bool) -> list[UserPriority]:
    """The users condor_userprio lists, best effective priority first: every one with -all,
    else those using resources or having used some within the last day."""
    users = sorted(status.users, key=lambda u: (u.effective_priority, u.name))
    if everyone:
        return users
    return [
        user
        for user in users
        if user.resources_used > 0
        or (now - (_epoch(user.last_usage_time) or -1e18)) <= ACTIVE_WINDOW
    ]


def table(status: PoolStatus, now: float, *, everyone: bool, tz: tzinfo | None = None) -> str:
    """condor_userprio's report of the accountant."""
    users = shown(status, now, everyone=everyone)
    name_width = max([34, *(len(u.name) for u in users)])
    lines = [f"Last Priority Update: {_date(status.last_update, tz) or 'never'}"]
    if everyone:
        heads = [
            ("User Name", "", name_width, True),
            ("Effective", "Priority", 12, False),
            ("Real", "Priority", 10, False),
            ("Priority", "Factor", 12, False),
            ("Res", "Used", 6, False),
            ("Wghted Usage", "(hrs)", 12, False),
            ("Usage Start", "Time", 16, False),
            ("Last Usage", "Time", 16, False),
        ]
    else:
        heads = [
            ("User Name", "", name_width, True),
            ("Effective", "Priority", 12, False),
            ("Priority", "Factor", 12, False),
            ("In Use", "", 6, False),
            ("Usage", "(wghted-hrs)", 12, False),
            ("Time Since", "Last Usage", 10, False),
        ]

    def row(cells: Sequence[str]) -> str:
        out = [
            cell.ljust(width) if left else cell.rjust(width)
            for cell, (_, _, width, left) in zip(cells, heads, strict=True)
        ]
        return " ".join(out).rstrip()

    rule = " ".join("-" * width for _, _, width, _ in heads)
    lines += [row([h[0] for h in heads]), row([h[1] for h in heads]), rule]
    for user in users:
        hours = f"{user.accumulated_usage / 3600:.2f}"
        if everyone:
            cells = [
                user.name,
                f"{user.effective_priority:.2f}",
                f"{user.real_priority:.2f}",
                f"{user.priority_factor:.2f}",
                f"{user.resources_used:g}",
                hours,
                _date(user.begin_usage_time, tz),
                _date(user.last_usage_time, tz),
            ]
        else:
            cells = [
                user.name,
                f"{user.effective_priority:.2f}",
                f"{user.priority_factor:.2f}",
                f"{user.resources_used:g}",
                hours,
                _since(user.last_usage_time, now) if not user.resources_used else "<now>",
            ]
        lines.append(row(cells))
    lines.append(rule)
    in_use = sum(u.resources_used for u in users)
    usage = sum(u.accumulated_usage for u in users) / 3600
    lines.append(f"Number of users: {len(users)}    In use: {in_use:g}    Usage: {usage:.2f} hrs")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------- the command


def run_userprio(
    args: argparse.Namespace,
    *,
    connect: Connect = connect,
    clock: Callable[[], float] = time.time,
    tz: tzinfo | None = None,
) -> int:
    """`kubectl kondor userprio`."""
    api = connect(args)
    try:
        if args.setfactor is not None:
            user, text = args.setfactor
            try:
                factor = float(text)
            except ValueError:
                raise UserError(
                    f"-setfactor {user} {text!r}: the factor must be a number"
                ) from None
            if factor < 1:
                raise UserError(f"-setfactor {user} {text}: the factor must be at least 1")
            api.patch_pool(DEFAULT_POOL, {"spec": {"priorityFactors": {user: factor}}})
            print(f"The priority factor of {user} was set to {factor:.6f}")
            return 0
        if args.resetusage is not None:
            now = format_time(clock())
            api.patch_pool(DEFAULT_POOL, {"spec": {"usageResets": {args.resetusage: now}}})
            print(f"The accumulated usage of {args.resetusage} was reset")
            return 0
        pool = api.get_pool(DEFAULT_POOL)
    except ApiError as err:
        print(f"kondor userprio: {err}", file=sys.stderr)
        return 1
    status = PoolStatus.model_validate((pool or {}).get("status") or {})
    print(table(status, clock(), everyone=args.all, tz=tz), end="")
    return 0


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `userprio` to the `kondor` (and `kubectl kondor`) command."""
    parser = commands.add_parser(
        "userprio",
        help="condor_userprio: user priorities and usage (the Pool's accountant)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-all", "--all", dest="all", action="store_true", help="every user")
    act = parser.add_mutually_exclusive_group()
    act.add_argument(
        "-setfactor", "--setfactor", nargs=2, metavar=("USER", "FACTOR"), help="set a factor"
    )
    act.add_argument("-resetusage", "--resetusage", metavar="USER", help="reset a user's usage")
    add_connection_arguments(parser)
    parser.set_defaults(func=run_userprio)
