"""`kubectl kondor q`, `rm`, `hold`, `release`: condor_q, condor_rm, condor_hold and
condor_release over the ExecutionJobs of a namespace (docs/jobs.md).

    kubectl kondor q [-all] [-l | -af ATTR ...] [-constraint EXPR] [-n NS | -A] [JOB ...]
    kubectl kondor rm|hold|release [-n NS | -A] (JOB ... | -all)

`q` prints condor_q's -nobatch view: one line per job (ID, OWNER, SUBMITTED, RUN_TIME, ST, PRI,
SIZE, CMD), then the totals for the query, for you and for all users. As condor_q does since
8.5.2 (manual, condor_q), it shows only your jobs (spec.owner is your user name, as
`kubectl auth whoami` tells it) unless `-all` is given or jobs are named. `-l` prints each job
ad in ClassAd form, `-af` the values of attributes (or expressions), `-constraint` keeps the
jobs for which the expression, evaluated in the job ad, is TRUE. A JOB is an ExecutionJob's name
or its ClusterId (`12` or `12.0`); a job the operator has not numbered yet shows its name as ID.

`rm`, `hold` and `release` write `spec.remove: true`, `spec.hold: true` and `spec.hold: false`
with a JSON merge patch and print condor_rm's, condor_hold's and condor_release's messages
(`Job 12.0 held`); `-all` acts on all of your jobs. The namespace is `-n`, else the kubeconfig
context's, else `default`; the cluster is reached as `kubectl kondor status` reaches it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import posixpath
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from functools import partial
from typing import Any, Literal, Protocol

import classad2

from kondor_cli import render
from kondor_cli.files import UserError
from kondor_cli.kube import ApiError, add_connection_arguments, connect
from kondor_core.api import (
    ExecutionJob,
    ExecutionPoint,
    InvalidObjectError,
    parse_time,
    validate,
)
from kondor_core.classads import ExpressionError, parse_expr
from kondor_core.jobs import JOB_STATUS, job_ad, submit_ad
from kondor_core.negotiation.analyze import analyze, job_state
from kondor_core.negotiation.analyze import render as render_analysis
from kondor_core.negotiation.negotiator import slot_offer

#: condor_q's one-letter JobStatus (condor_utils' encode_status), by JobStatus number.
STATUS_LETTER = {1: "I", 2: "R", 3: "X", 4: "C", 5: "H", 7: "S"}
#: The states counted in condor_q's totals line, in its order.
TOTALS = ("Completed", "Removed", "Idle", "Running", "Held", "Suspended")

# ------------------------------------------------------------------------------- reading jobs


def read_jobs(items: Iterable[Mapping[str, Any]]) -> tuple[list[ExecutionJob], list[str]]:
    """The listed objects as ExecutionJobs in condor_q's order (by ClusterId; jobs not yet
    numbered after them, by namespace and name), and one problem line for each object the
    model refuses (shown, not dropped silently)."""
    jobs: list[ExecutionJob] = []
    problems: list[str] = []
    for item in items:
        meta = item.get("metadata") or {}
        what = f"executionjob {meta.get('namespace', '?')}/{meta.get('name', '?')}"
        try:
            jobs.append(validate(ExecutionJob, item, what=what))
        except InvalidObjectError as err:
            problems.append(str(err))
    jobs.sort(
        key=lambda job: (
            cluster_id(job) is None,
            cluster_id(job) or 0,
            job.metadata.namespace or "",
            job.metadata.name,
        )
    )
    return jobs, problems


def owner(job: ExecutionJob) -> str | None:
    return job.spec.owner


def job_status(job: ExecutionJob) -> str:
    """The job's JobStatus name; a job the operator has not seen yet is Idle."""
    return job.status.job_status if job.status is not None else "Idle"


def cluster_id(job: ExecutionJob) -> int | None:
    return job.status.cluster_id if job.status is not None else None


def job_label(job: ExecutionJob) -> str:
    """condor's job id, ClusterId.ProcId (ProcId is always 0), or the job's name while the
    operator has not given it a ClusterId."""
    cluster = cluster_id(job)
    return f"{cluster}.0" if cluster is not None else job.metadata.name


def qdate(job: ExecutionJob) -> int | None:
    """QDate: the job's creation time, in seconds since the epoch."""
    created = parse_time(job.metadata.creation_timestamp or "")
    return math.floor(created.timestamp()) if created is not None else None


def _epoch(text: str | None) -> int | None:
    when = parse_time(text) if text else None
    return math.floor(when.timestamp()) if when is not None else None


def run_time(job: ExecutionJob, now: float) -> int:
    """Seconds the job has run: from status.execution.startTime to its endTime, or to `now`
    while it runs; 0 before it has started."""
    execution = job.status.execution if job.status is not None else None
    start = _epoch(execution.start_time) if execution is not None else None
    if execution is None or start is None:
        return 0
    end = _epoch(execution.end_time)
    return max(0, int((end if end is not None else now) - start))


def queue_ad(job: ExecutionJob) -> Any:
    """The job ad condor_q shows: `kondor_core.jobs.job_ad`, the one ad of the job the
    negotiator, the startd's START re-check and the job's `.job.ad` file also have
    (ClusterId, QDate, GlobalJobId, JobStatus, EnteredCurrentStatus, NumJobStarts, ...).

    The ad is rebuilt from its text so that its expression trees are its own: the core's parse
    cache shares trees between ads, and a tree remembers the scopes it was evaluated in."""
    return classad2.ClassAd(str(job_ad(job)))


# ------------------------------------------------------------------------------- selecting


@dataclass(frozen=True)
class JobRef:
    """A job named on the command line: a ClusterId (`12`, `12.0`) or an ExecutionJob's name."""

    text: str
    cluster: int | None

    def matches(self, job: ExecutionJob) -> bool:
        if self.cluster is not None:
            return cluster_id(job) == self.cluster
        return job.metadata.name == self.text


def job_ref(text: str) -> JobRef:
    """`12` and `12.0` are ClusterIds (ProcId is always 0 here); anything else is a name."""
    cluster, dot, proc = text.partition(".")
    if cluster.isdigit() and (not dot or proc.isdigit()):
        if dot and int(proc) != 0:
            raise UserError(f"job {text!r}: each ExecutionJob is one job, ProcId 0; use {cluster}")
        return JobRef(text, int(cluster))
    return JobRef(text, None)


def constraint_tree(constraint: str | None) -> Any:
    if constraint is None:
        return None
    try:
        return parse_expr(constraint, field="-constraint")
    except ExpressionError as err:
        raise UserError(
            f"-constraint {constraint!r} is not a ClassAd expression: {err.reason}"
        ) from None


def select(
    jobs: Sequence[ExecutionJob],
    *,
    user: str | None,
    refs: Sequence[JobRef] = (),
    constraint: str | None = None,
) -> list[ExecutionJob]:
    """condor_q's selection: the jobs named by `refs` (any owner's) or else `user`'s jobs (all
    users' when `user` is None), and of those the ones for which `constraint` is TRUE with
    MY = the job ad, as condor_q evaluates it."""
    tree = constraint_tree(constraint)
    out = []
    for job in jobs:
        if refs:
            if not any(ref.matches(job) for ref in refs):
                continue
        elif user is not None and owner(job) != user:
            continue
        if tree is not None and tree.eval(queue_ad(job), render.NO_TARGET) is not True:
            continue
        out.append(job)
    return out


# ------------------------------------------------------------------------------- condor_q output


def submitted(when: int | None, tz: tzinfo | None) -> str:
    """condor_q's SUBMITTED (condor_utils' format_date): `%2d/%-2d %02d:%02d`, local time."""
    if when is None:
        return "    ???    "
    moment = datetime.fromtimestamp(when, tz)
    return f"{moment.month:2d}/{moment.day:<2d} {moment.hour:02d}:{moment.minute:02d}"


def cpu_time(seconds: int) -> str:
    """condor_q's RUN_TIME (condor_utils' format_time): days+hours:minutes:seconds."""
    days, rest = divmod(max(0, seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days:3d}+{hours:02d}:{minutes:02d}:{secs:02d}"


def size(job: ExecutionJob) -> str:
    """condor_q's SIZE: MemoryUsage (the agent's peak) in MiB when known, else RequestMemory,
    with one decimal."""
    execution = job.status.execution if job.status is not None else None
    peak = execution.peak_memory if execution is not None else None
    return f"{peak if peak is not None else job.spec.request_memory_mib:.1f}"


def command(job: ExecutionJob) -> str:
    """condor_q's CMD: the executable's base name and the arguments (condor_submit's syntax);
    for a pod, its first container's image."""
    runtime = job.spec.process or job.spec.apptainer
    if runtime is not None:
        arguments = str(submit_ad(job.spec, job.metadata.name).get("Arguments") or "")
        return " ".join(filter(None, (posixpath.basename(runtime.executable), arguments)))
    if job.spec.pod is not None:
        containers = (job.spec.pod.template.get("spec") or {}).get("containers") or []
        image = (
            containers[0].get("image") if containers and isinstance(containers[0], dict) else None
        )
        return str(image) if image else "pod"
    return ""


#: condor_q -nobatch's columns (its default print format, `jobDefault_PrintFormat`).
HEADERS = (" ID", "OWNER", "SUBMITTED", "RUN_TIME", "ST", "PRI", "SIZE", "CMD")


def default_table(jobs: Sequence[ExecutionJob], now: float, tz: tzinfo | None = None) -> str:
    """condor_q -nobatch's job lines under its header. Widths are condor_q's (ID 8, OWNER 14
    left-aligned, SUBMITTED 11, RUN_TIME 12, PRI at least 3 left-aligned, SIZE at least 4),
    grown to the widest cell so that the columns stay aligned."""
    rows = []
    for job in jobs:
        cluster = cluster_id(job)
        rows.append(
            [
                f"{cluster:4d}.0  " if cluster is not None else job.metadata.name,
                owner(job) or "??",
                submitted(qdate(job), tz),
                cpu_time(run_time(job, now)),
                STATUS_LETTER[JOB_STATUS.get(job_status(job), 1)] + " ",
                str(job.spec.priority),
                size(job),
                command(job),
            ]
        )
    minimum = (8, 14, 11, 12, 2, 3, 4, 0)
    left = (True, True, False, False, True, True, False, True)
    widths = [
        max([minimum[i], len(HEADERS[i]), *(len(row[i]) for row in rows)])
        for i in range(len(HEADERS))
    ]

    def line(cells: Sequence[str]) -> str:
        out = [
            cell.ljust(width) if left[i] else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return " ".join(out).rstrip()

    return "\n".join([line(HEADERS), *(line(row) for row in rows)]) + "\n"


def totals_line(label: str, jobs: Sequence[ExecutionJob]) -> str:
    """One line of condor_q's totals: `Total for LABEL: N jobs; C completed, X removed, ...`."""
    states = [job_status(job) for job in jobs]
    counts = ", ".join(f"{states.count(state)} {state.lower()}" for state in TOTALS)
    return f"Total for {label}: {len(jobs)} jobs; {counts}"


def totals(
    shown: Sequence[ExecutionJob], everyone: Sequence[ExecutionJob], user: str | None
) -> str:
    """condor_q's summary: the query's totals, `user`'s (when the query was restricted to
    them), then all users'."""
    lines = [totals_line("query", shown)]
    if user is not None:
        lines.append(totals_line(user, [job for job in everyone if owner(job) == user]))
    lines.append(totals_line("all users", everyone))
    return "\n".join(lines) + "\n"


def long_form(jobs: Sequence[ExecutionJob]) -> str:
    """Each job ad as `condor_q -long` prints it."""
    return render.long_form(queue_ad(job) for job in jobs)


def autoformat(jobs: Sequence[ExecutionJob], attributes: Sequence[str]) -> str:
    """`-af`: each job's values of `attributes`, one job a line, as condor_q -af prints."""
    return render.autoformat((queue_ad(job) for job in jobs), attributes)


# ----------------------------------------------------------- condor_rm, condor_hold, condor_release

Action = Literal["rm", "hold", "release"]

#: The merge patch of each command (docs/jobs.md: the user's fields of the spec).
PATCHES: dict[Action, dict[str, Any]] = {
    "rm": {"spec": {"remove": True}},
    "hold": {"spec": {"hold": True}},
    "release": {"spec": {"hold": False}},
}
#: What each command did, in condor's words (condor_daemon_client, DCSchedd's result strings).
DONE = {"rm": "marked for removal", "hold": "held", "release": "released"}
VERB = {"rm": "remove", "hold": "hold", "release": "release"}


@dataclass(frozen=True)
class Step:
    """What a command does to one job: the merge patch to send (None: nothing to send), and
    the message to print when it is sent, or why it is not."""

    job: ExecutionJob
    patch: dict[str, Any] | None
    message: str


def plan(action: Action, job: ExecutionJob) -> Step:
    """condor_rm/condor_hold/condor_release for one job: its patch and condor's message, or
    condor's refusal (`Job 12.0 not held to be released`, `Job 12.0 already held`)."""
    label = job_label(job)
    state = job_status(job)
    removed = job.spec.remove or state == "Removed"
    held = job.spec.hold or state == "Held"
    if action == "rm" and removed:
        return Step(job, None, f"Job {label} already marked for removal")
    if action == "hold":
        if held:
            return Step(job, None, f"Job {label} already held")
        if removed or state == "Completed":
            what = "marked for removal" if removed else "completed"
            return Step(job, None, f"Job {label} is {what} and cannot be held")
    if action == "release" and not held:
        return Step(job, None, f"Job {label} not held to be released")
    return Step(job, PATCHES[action], f"Job {label} {DONE[action]}")


def steps_for_all(action: Action, jobs: Sequence[ExecutionJob], user: str) -> list[Step]:
    """`-all`: the steps for `user`'s jobs the command changes (condor acts by constraint, so
    a held job is not held again and only held jobs are released)."""
    mine = [plan(action, job) for job in jobs if owner(job) == user]
    return [step for step in mine if step.patch is not None]


def resolve(
    jobs: Sequence[ExecutionJob], refs: Sequence[JobRef]
) -> tuple[list[ExecutionJob], list[str]]:
    """The jobs `refs` name, in the order named, and a message for each that names none (or,
    by name across namespaces, more than one)."""
    found: list[ExecutionJob] = []
    problems: list[str] = []
    for ref in refs:
        hits = [job for job in jobs if ref.matches(job)]
        if not hits:
            what = f"{ref.cluster}.0" if ref.cluster is not None else ref.text
            problems.append(f"Job {what} not found")
        elif len(hits) > 1 and ref.cluster is None:
            where = ", ".join(sorted(job.metadata.namespace or "" for job in hits))
            problems.append(f"Job {ref.text} is in several namespaces ({where}): give -n")
        else:
            found.extend(job for job in hits if job not in found)
    return found, problems


# ------------------------------------------------------------------------------- the cluster


class JobsApi(Protocol):
    """What the commands need of the API server (a fake in the unit tests)."""

    namespace: str

    def list_jobs(self, namespace: str | None) -> list[dict[str, Any]]: ...
    def patch_job(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None: ...
    def whoami(self) -> str: ...
    def list_execution_points(self) -> list[dict[str, Any]]: ...


Connect = Callable[[argparse.Namespace], JobsApi]


def _scope(args: argparse.Namespace, api: JobsApi) -> str | None:
    """The namespace to list: `-n`, none with `-A` (all namespaces), else the default."""
    if args.all_namespaces:
        return None
    return str(args.namespace) if args.namespace is not None else api.namespace


def _listed(api: JobsApi, namespace: str | None, command: str) -> list[ExecutionJob]:
    jobs, problems = read_jobs(api.list_jobs(namespace))
    for problem in problems:
        print(f"kondor {command}: warning: {problem}", file=sys.stderr)
    return jobs


# ------------------------------------------------------------------------------- the commands


def run_q(
    args: argparse.Namespace,
    *,
    connect: Connect = connect,
    clock: Callable[[], float] = time.time,
    tz: tzinfo | None = None,
) -> int:
    """`kubectl kondor q`."""
    refs = [job_ref(text) for text in args.jobs]
    constraint_tree(args.constraint)  # a bad expression is refused before the cluster is asked
    api = connect(args)
    try:
        jobs = _listed(api, _scope(args, api), "q")
        # condor_q shows only your jobs unless -all is given or jobs are named (manual).
        user = None if args.all or refs else api.whoami()
    except ApiError as err:
        print(f"kondor q: {err}", file=sys.stderr)
        return 1
    chosen = select(jobs, user=user, refs=refs, constraint=args.constraint)
    if args.better_analyze:
        return _better_analyze(api, chosen, clock())
    if args.long:
        print(long_form(chosen), end="")
    elif args.autoformat:
        print(autoformat(chosen, args.autoformat), end="")
    else:
        print(default_table(chosen, clock(), tz) + "\n" + totals(chosen, jobs, user), end="")
    return 0


def slot_offers(items: Iterable[Mapping[str, Any]], now: float) -> tuple[list[Any], list[str]]:
    """The slot ads of the ExecutionPoints as the negotiator evaluates them at `now`, and a
    problem line for each one that cannot be read."""
    offers: list[Any] = []
    problems: list[str] = []
    for item in sorted(items, key=lambda i: str((i.get("metadata") or {}).get("name"))):
        name = (item.get("metadata") or {}).get("name", "?")
        try:
            ep = validate(ExecutionPoint, item, what=f"executionpoint {name}")
        except InvalidObjectError as err:
            problems.append(str(err))
            continue
        for slot in ep.status.slots if ep.status is not None else []:
            try:
                offers.append(slot_offer(slot.ad, set(slot.expressions), now))
            except ExpressionError as err:
                problems.append(f"{name}/{slot.name}: {err}")
    return offers, problems


def better_analyze(job: ExecutionJob, offers: Sequence[Any]) -> str:
    """condor_q -better-analyze's report for one job against the slot ads `offers`."""
    ad = queue_ad(job)
    status = job.status
    key = f"{job.metadata.namespace or ''}/{job.metadata.name}"
    result = analyze(key, ad, offers)
    state = job_state(
        job_status(job),
        claimed=status is not None and status.claim_id is not None,
        last_reason=status.last_rej_match_reason if status is not None else None,
        available=result.available,
    )
    return render_analysis(dataclasses.replace(result, status=state), job_label(job))


def _better_analyze(api: JobsApi, chosen: Sequence[ExecutionJob], now: float) -> int:
    if len(chosen) != 1:
        raise UserError(f"-better-analyze takes one job; {len(chosen)} selected")
    try:
        offers, problems = slot_offers(api.list_execution_points(), now)
    except ApiError as err:
        print(f"kondor q: {err}", file=sys.stderr)
        return 1
    for problem in problems:
        print(f"kondor q: warning: {problem}", file=sys.stderr)
    print(better_analyze(chosen[0], offers), end="")
    return 0


def run_action(args: argparse.Namespace, *, action: Action, connect: Connect = connect) -> int:
    """`kubectl kondor rm|hold|release`: exit 0 when every job was changed, 1 otherwise, as
    condor_rm does."""
    refs = [job_ref(text) for text in args.jobs]
    if args.all and refs:
        raise UserError("can't mix -all with job names or ids")
    if not args.all and not refs:
        raise UserError("you did not specify any jobs: give JOB ... or -all")
    api = connect(args)
    namespace = _scope(args, api)
    where = f"namespace {namespace}" if namespace is not None else "any namespace"
    failed = False
    try:
        jobs = _listed(api, namespace, action)
        if args.all:
            user = api.whoami()
            steps = steps_for_all(action, jobs, user)
            if not steps:
                print(f"There are no jobs of {user} to {VERB[action]} in {where}", file=sys.stderr)
                return 1
        else:
            found, problems = resolve(jobs, refs)
            for problem in problems:
                print(problem, file=sys.stderr)
            failed = bool(problems)
            steps = [plan(action, job) for job in found]
    except ApiError as err:
        print(f"kondor {action}: {err}", file=sys.stderr)
        return 1
    for step in steps:
        if step.patch is None:
            print(step.message, file=sys.stderr)
            failed = True
            continue
        job = step.job
        try:
            api.patch_job(job.metadata.namespace or "", job.metadata.name, step.patch)
        except ApiError as err:
            failed = True
            label = job_label(job)
            if err.status == 403:
                print(f"Permission denied to {VERB[action]} job {label}: {err}", file=sys.stderr)
            elif err.status == 404:
                print(f"Job {label} not found (it was deleted): {err}", file=sys.stderr)
            else:
                print(f"kondor {action}: job {label}: {err}", file=sys.stderr)
            continue
        if not args.all:
            print(step.message)
    if args.all and not failed:
        print(f"All jobs have been {DONE[action]}")
    elif args.all:
        print(f"Couldn't find/{VERB[action]} all jobs", file=sys.stderr)
    return 1 if failed else 0


# ------------------------------------------------------------------------------- registration


def _cluster_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("-n", "--namespace", help="the namespace (default: the context's)")
    where.add_argument(
        "-A", "--all-namespaces", action="store_true", help="the jobs of every namespace"
    )
    add_connection_arguments(parser)


def add_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `q`, `rm`, `hold` and `release` to the `kondor` (and `kubectl kondor`) command."""
    q = commands.add_parser(
        "q",
        help="condor_q: the jobs (ExecutionJobs) of a namespace",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    q.add_argument("jobs", nargs="*", metavar="JOB", help="a job name or ClusterId")
    q.add_argument(
        "-all", "-allusers", "--all", dest="all", action="store_true", help="every user's jobs"
    )
    q.add_argument("-nobatch", action="store_true", help="accepted; this is the only view")
    output = q.add_mutually_exclusive_group()
    output.add_argument(
        "-l", "-long", "--long", dest="long", action="store_true", help="print whole job ads"
    )
    output.add_argument(
        "-af",
        "-autoformat",
        "--autoformat",
        dest="autoformat",
        nargs="+",
        metavar="ATTR",
        help="print these attributes (or expressions) of each job ad",
    )
    output.add_argument(
        "-better-analyze",
        "-analyze",
        "--better-analyze",
        dest="better_analyze",
        action="store_true",
        help="why the job (one) runs or not: its Requirements clause by clause against the slots",
    )
    q.add_argument(
        "-constraint",
        "--constraint",
        dest="constraint",
        metavar="EXPR",
        help="only jobs for which this ClassAd expression is TRUE",
    )
    _cluster_arguments(q)
    q.set_defaults(func=run_q)

    helps: dict[Action, str] = {
        "rm": "condor_rm: mark jobs for removal (spec.remove)",
        "hold": "condor_hold: hold jobs (spec.hold)",
        "release": "condor_release: release held jobs (spec.hold false)",
    }
    for action, help_text in helps.items():
        parser = commands.add_parser(action, help=help_text, description=help_text)
        parser.add_argument("jobs", nargs="*", metavar="JOB", help="a job name or ClusterId")
        parser.add_argument(
            "-all", "--all", dest="all", action="store_true", help="all of your jobs"
        )
        _cluster_arguments(parser)
        parser.set_defaults(func=partial(run_action, action=action))
