"""Job hooks that fetch work: which slots fetch, when, whether a fetched job is taken, and the
ExecutionJob it becomes (the reference's "Job Hooks That Fetch Work").

- A slot fetches with the startd's keyword (SLOT<N>_JOB_HOOK_KEYWORD, else
  STARTD_JOB_HOOK_KEYWORD) when `<Keyword>_HOOK_FETCH_WORK` is set: "the only hook that must
  be defined for any of the other condor_startd hooks to operate". REPLY_FETCH and EVICT_CLAIM
  are optional.
- FetchWorkDelay is an expression evaluated against the slot ad (MY) and the running job's ad
  (TARGET), the seconds since the last fetch completed before the next one; "If this
  expression is not defined, the condor_startd will default to a five minute (300 second)
  delay". A value that is no number of seconds is treated as undefined (the default).
- A fetched job is taken when the slot is Unclaimed and its START (and the job's
  Requirements) hold for it, or when the slot is Claimed and the slot's RANK of the fetched
  job is above its RANK of the running job (CurrentRank): the running job is preempted. Any
  other slot ("unavailable for whatever reason") refuses it. REPLY_FETCH is told `accept` or
  `reject`, with the job ad and the slot ad separated by a line `-----`.
- In Kondor a taken job becomes an ExecutionJob owned by the ExecutionPoint, labelled with
  the keyword and the node, its Requirements pinned to the node (`Machine == "<node>"`): the
  negotiator matches it there and the startd claims, polices and preempts it like any other
  job. Its HookKeyword is the keyword that fetched it, so the starter's hooks use it.
- A hook is a program in the hooks directory, or an `http://` / `https://` URL to which the
  agent POSTs the hook's standard input (`kondor_agent.fetchwork`). Any other URL scheme is
  refused, naming the knob.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import classad2

from kondor_core.classads import ExpressionError, is_error, is_undefined, match_scope, parse_expr
from kondor_core.cron import HookPathError, hook_path
from kondor_core.cron.jobs import CronError, parse_args
from kondor_core.jobs.hooks import startd_hook_keyword

FETCH_WORK = "FETCH_WORK"
REPLY_FETCH = "REPLY_FETCH"
EVICT_CLAIM = "EVICT_CLAIM"
FETCH_HOOKS = (FETCH_WORK, REPLY_FETCH, EVICT_CLAIM)

#: "the condor_startd will default to a five minute (300 second) delay between all attempts".
DEFAULT_FETCH_WORK_DELAY = 300.0
#: The line between the job ad and the slot ad on REPLY_FETCH's and EVICT_CLAIM's stdin.
AD_SEPARATOR = "-----"
#: Labels of a fetched ExecutionJob: the keyword that fetched it and the node that did.
HOOK_KEYWORD_LABEL = "kondor.io/hook-keyword"
FETCHED_BY_LABEL = "kondor.io/fetched-by"
#: Namespace of fetched ExecutionJobs unless KONDOR_FETCH_WORK_NAMESPACE says otherwise.
DEFAULT_NAMESPACE = "default"
URL_SCHEMES = ("http", "https")

_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://(\S*)")
#: Job ad attributes the ExecutionJob's spec carries in its own fields.
_SPEC_ATTRIBUTES = frozenset(
    {
        "CMD",
        "ARGUMENTS",
        "ARGS",
        "ENV",
        "ENVIRONMENT",
        "IWD",
        "IN",
        "OUT",
        "ERR",
        "REQUESTCPUS",
        "REQUESTMEMORY",
        "REQUESTDISK",
        "REQUESTGPUS",
        "REQUIREMENTS",
        "RANK",
        "JOBPRIO",
        "KILLSIG",
        "MAXJOBRETIREMENTTIME",
        "JOBMAXVACATETIME",
        "JOBUNIVERSE",
        "HOOKKEYWORD",
    }
)
#: Attributes the schedd (here, the operator and admission) sets: not taken from the hook.
_SCHEDD_ATTRIBUTES = frozenset(
    {"OWNER", "CLUSTERID", "PROCID", "MYTYPE", "TARGETTYPE", "GLOBALJOBID", "JOBSTATUS", "QDATE"}
)
_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 9: "SIGKILL", 10: "SIGUSR1", 12: "SIGUSR2"}
_SIGNALS |= {15: "SIGTERM"}


class FetchedJobError(ValueError):
    """A fetched job ad Kondor cannot run; the message names the attribute."""


def is_url(program: str) -> bool:
    """Whether a hook knob names a URL (`scheme://...`) rather than a program."""
    return _URL.fullmatch(program.strip()) is not None


def check_hook_target(program: str, hooks_dir: str, *, field: str) -> str:
    """A hook's program inside `hooks_dir` (lexically; `cron.hook_path`), or an http(s) URL
    with a host. HookPathError names `field` (the knob) otherwise."""
    found = _URL.fullmatch(program.strip())
    if found is None:
        return hook_path(program, hooks_dir, field=field)
    scheme, rest = found.group(1).lower(), found.group(2)
    if scheme not in URL_SCHEMES:
        raise HookPathError(
            f"{field}: {program!r} is a {scheme}:// URL; a hook is a program in the hooks "
            "directory or an http:// or https:// URL"
        )
    if not rest or rest.startswith("/"):
        raise HookPathError(f"{field}: {program!r} names no host")
    return program.strip()


def _upper(macros: Mapping[str, str]) -> dict[str, str]:
    return {name.upper(): value.strip() for name, value in macros.items()}


@dataclass(frozen=True)
class FetchHooks:
    """The startd's fetch-work hooks of one slot: the keyword and, by hook, the program or URL
    as configured, and the knob that names each."""

    keyword: str
    programs: Mapping[str, str]
    timeout: float

    def knob(self, hook: str) -> str:
        return f"{self.keyword}_HOOK_{hook}"

    def program(self, hook: str) -> str | None:
        return self.programs.get(hook)


def fetch_hooks(macros: Mapping[str, str], slot_id: int, *, timeout: float) -> FetchHooks | None:
    """The fetch-work hooks of slot `slot_id`; None when its keyword defines no FETCH_WORK."""
    keyword = startd_hook_keyword(macros, slot_id)
    if keyword is None:
        return None
    return keyword_fetch_hooks(macros, keyword, timeout=timeout)


def keyword_fetch_hooks(
    macros: Mapping[str, str], keyword: str, *, timeout: float
) -> FetchHooks | None:
    """The fetch-work hooks `keyword` names; None when it defines no FETCH_WORK."""
    upper = _upper(macros)
    programs = {
        hook: upper[f"{keyword.upper()}_HOOK_{hook}"]
        for hook in FETCH_HOOKS
        if upper.get(f"{keyword.upper()}_HOOK_{hook}")
    }
    if FETCH_WORK not in programs:
        return None
    return FetchHooks(keyword=keyword, programs=programs, timeout=timeout)


def fetch_work_delay(expression: str | None, slot_ad: Any, job_ad: Any | None) -> float:
    """FetchWorkDelay in seconds for a slot (MY) and its running job (TARGET, or none); 300
    when it is not set or does not evaluate to a number of seconds."""
    if expression is None or not expression.strip():
        return DEFAULT_FETCH_WORK_DELAY
    try:
        tree = parse_expr(expression, field="FetchWorkDelay")
    except ExpressionError:
        return DEFAULT_FETCH_WORK_DELAY
    scope = slot_ad if job_ad is None else match_scope(slot_ad, job_ad)
    value = _numeric(tree.eval(scope) if job_ad is None else tree.eval(scope, job_ad))
    if value is None or value < 0:
        return DEFAULT_FETCH_WORK_DELAY
    return value


def _numeric(value: object) -> float | None:
    """A ClassAd number as a float; None for anything else (booleans, strings, and
    UNDEFINED and ERROR, which classad2 gives as an int enum)."""
    return float(value) if type(value) in (int, float) else None  # type: ignore[arg-type]


def fetch_due(last_done: float | None, delay: float, now: float) -> bool:
    """Whether a slot fetches now: never fetched yet, or `delay` seconds since the last fetch
    completed ("If ... the time since the last attempted fetch is shorter than the current
    value of the delay expression, the condor_startd will set a timer")."""
    return last_done is None or now - last_done >= delay


@dataclass(frozen=True)
class FetchDecision:
    """What the startd does with a fetched job: take it (preempting the running one when the
    slot is Claimed) or refuse it, and why."""

    accept: bool
    reason: str
    preempts: bool = False

    @property
    def reply(self) -> str:
        """REPLY_FETCH's argument."""
        return "accept" if self.accept else "reject"


def _true(tree: Any, my: Any, target: Any) -> bool:
    if tree is None:
        return True
    value = tree.eval(match_scope(my, target), target) if hasattr(tree, "eval") else tree
    return value is True


def _rank(slot_ad: Any, job: Any) -> float:
    tree = slot_ad.lookup("Rank") if "Rank" in slot_ad else None
    if tree is None:
        return 0.0
    value = tree.eval(match_scope(slot_ad, job), job)
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    return _numeric(value) or 0.0


def fetch_decision(slot_ad: Any, job: Any) -> FetchDecision:
    """Whether slot `slot_ad` (a published slot ad: State, Activity, Start, Rank, CurrentRank,
    Cpus, Memory) takes the fetched job ad `job`."""
    state = slot_ad.get("State")
    activity = slot_ad.get("Activity")
    if state == "Unclaimed":
        for request, have in (("RequestCpus", "Cpus"), ("RequestMemory", "Memory")):
            wanted = _numeric(job.eval(request)) if request in job else None
            offered = _numeric(slot_ad.eval(have)) if have in slot_ad else None
            if wanted is not None and offered is not None and wanted > offered:
                return FetchDecision(
                    False, f"{request} {wanted:g} is more than the slot's {have} {offered:g}"
                )
        start = slot_ad.lookup("Start") if "Start" in slot_ad else None
        if not _true(start, slot_ad, job):
            return FetchDecision(False, "the slot's START is not true for the fetched job")
        requirements = job.lookup("Requirements") if "Requirements" in job else None
        if not _true(requirements, job, slot_ad):
            return FetchDecision(False, "the fetched job's Requirements are not met by the slot")
        return FetchDecision(True, "the slot is Unclaimed and START is true")
    if state == "Claimed" and activity in ("Idle", "Busy"):
        current_rank = _numeric(slot_ad.get("CurrentRank")) or 0.0
        rank = _rank(slot_ad, job)
        if rank > current_rank:
            return FetchDecision(
                True,
                f"the slot's RANK of the fetched job ({rank:g}) is above the running "
                f"job's ({current_rank:g})",
                preempts=True,
            )
        return FetchDecision(
            False,
            f"the slot is Claimed and its RANK of the fetched job ({rank:g}) is not above "
            f"the running job's ({current_rank:g})",
        )
    return FetchDecision(False, f"the slot is {state}/{activity}")


def reply_input(job_text: str, slot_text: str) -> str:
    """REPLY_FETCH's and EVICT_CLAIM's stdin: the job ad, `-----`, the slot ad."""
    return f"{job_text.rstrip()}\n{AD_SEPARATOR}\n{slot_text.rstrip()}\n"


# -- the ExecutionJob of a fetched job ------------------------------------------------------


def _get(ad: Any, name: str) -> Any:
    """An attribute's value (evaluated), None when the ad has none."""
    if name not in ad:
        return None
    value = ad.eval(name)
    return None if is_undefined(value) or is_error(value) else value


def _string(ad: Any, name: str) -> str | None:
    value = _get(ad, name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise FetchedJobError(f"{name} = {ad.lookup(name)}: expected a string")
    return value


def _number(ad: Any, name: str) -> float | None:
    value = _get(ad, name)
    if value is None:
        return None
    number = _numeric(value)
    if number is None or number < 0:
        raise FetchedJobError(f"{name} = {ad.lookup(name)}: expected a number of at least 0")
    return number


def _source(ad: Any, name: str) -> str | None:
    """An attribute's expression as ClassAd source text."""
    return None if name not in ad else str(ad.lookup(name))


def _environment(ad: Any) -> dict[str, str]:
    """Env (`NAME=value;NAME=value`, the manual's FetchWork form) or Environment (new
    syntax, space-separated)."""
    env: dict[str, str] = {}
    old = _string(ad, "Env")
    if old:
        for item in old.split(";"):
            if item.strip():
                name, sep, value = item.partition("=")
                if not sep or not name.strip():
                    raise FetchedJobError(f"Env: {item!r} is not NAME=value")
                env[name.strip()] = value
    new = _string(ad, "Environment")
    if new:
        try:
            words = parse_args(f'"{new}"', field="Environment")
        except CronError as err:
            raise FetchedJobError(str(err)) from None
        for word in words:
            name, sep, value = word.partition("=")
            if not sep or not name:
                raise FetchedJobError(f"Environment: {word!r} is not NAME=value")
            env[name] = value
    return env


def _arguments(ad: Any) -> list[str]:
    """Arguments (new syntax) or Args (old syntax: whitespace separates)."""
    try:
        new = _string(ad, "Arguments")
        if new is not None:
            return list(parse_args(f'"{new}"', field="Arguments"))
        old = _string(ad, "Args")
        return list(parse_args(old, field="Args")) if old else []
    except CronError as err:
        raise FetchedJobError(str(err)) from None


def _kill_sig(ad: Any) -> str | None:
    value = _get(ad, "KillSig")
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if value not in _SIGNALS:
            raise FetchedJobError(f"KillSig = {value}: not a signal number Kondor knows")
        return _SIGNALS[value]
    if isinstance(value, str) and value:
        return value if value.upper().startswith("SIG") else f"SIG{value}"
    raise FetchedJobError(f"KillSig = {ad.lookup('KillSig')}: expected a signal name or number")


def fetched_job_name(node: str, keyword: str, job_text: str, now: float) -> str:
    """A name for the ExecutionJob of a fetched job: unique per node, ad and time."""
    digest = hashlib.sha256(f"{node}\0{job_text}\0{now!r}".encode()).hexdigest()[:10]
    word = re.sub(r"[^a-z0-9-]", "-", keyword.lower()).strip("-") or "fetched"
    return f"fetched-{word[:20]}-{digest}"


def fetched_job(
    ad: Any,
    *,
    node: str,
    keyword: str,
    name: str,
    namespace: str = DEFAULT_NAMESPACE,
    execution_point_uid: str | None = None,
) -> dict[str, Any]:
    """The ExecutionJob manifest of fetched job ad `ad`: Cmd, Arguments/Args, Env/Environment,
    Iwd, In, Out, Err, RequestCpus, RequestMemory (MiB) and RequestDisk ("in Megabytes", as
    the manual's FetchWork attributes say), Requirements (pinned to `node`), Rank, JobPrio,
    KillSig, MaxJobRetirementTime, JobMaxVacateTime in the spec's fields; every other
    attribute (but the schedd's: Owner, ClusterId, ...) kept as an extra attribute; HookKeyword
    set to `keyword`. FetchedJobError names what Kondor cannot run."""
    universe = _get(ad, "JobUniverse")
    if universe is not None and universe != 5:
        raise FetchedJobError(f"JobUniverse = {universe}: Kondor runs vanilla (5) jobs only")
    spec: dict[str, Any] = {"process": _process(ad)}
    spec.update(_requests(ad))
    spec.update(_scheduling(ad, node))
    attributes = {
        key: str(ad.lookup(key))
        for key in ad
        if key.upper() not in _SPEC_ATTRIBUTES and key.upper() not in _SCHEDD_ATTRIBUTES
    }
    attributes["HookKeyword"] = str(classad2.quote(keyword))
    spec["attributes"] = attributes
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionJob",
        "metadata": _metadata(node, keyword, name, namespace, execution_point_uid),
        "spec": spec,
    }


def _process(ad: Any) -> dict[str, Any]:
    """spec.process: Cmd, Arguments/Args, Env/Environment, Iwd, In, Out and Err."""
    cmd = _string(ad, "Cmd")
    if not cmd:
        raise FetchedJobError("Cmd: the job ad has no Cmd, the program to run (required)")
    process: dict[str, Any] = {"executable": cmd, "arguments": _arguments(ad)}
    env = _environment(ad)
    if env:
        process["environment"] = env
    for attribute, key in (
        ("Iwd", "workingDirectory"),
        ("In", "input"),
        ("Out", "output"),
        ("Err", "error"),
    ):
        value = _string(ad, attribute)
        if value:
            process[key] = value
    return process


def _requests(ad: Any) -> dict[str, Any]:
    """RequestCpus, RequestMemory and RequestDisk (MiB), RequestGPUs as the spec's requests."""
    spec: dict[str, Any] = {}
    cpus = _number(ad, "RequestCpus")
    if cpus is not None:
        spec["requestCpus"] = int(cpus)
    memory = _number(ad, "RequestMemory")
    if memory is not None:
        spec["requestMemory"] = f"{int(memory)}Mi"
    disk = _number(ad, "RequestDisk")
    if disk is not None:
        spec["requestDisk"] = f"{int(disk)}Mi"
    gpus = _number(ad, "RequestGPUs")
    if gpus is not None:
        spec["requestGpus"] = int(gpus)
    return spec


def _scheduling(ad: Any, node: str) -> dict[str, Any]:
    """Requirements (pinned to `node`), Rank, MaxJobRetirementTime, JobMaxVacateTime, JobPrio
    and KillSig as the spec's fields."""
    spec: dict[str, Any] = {}
    pin = f"Machine == {classad2.quote(node)}"
    wanted = _source(ad, "Requirements")
    spec["requirements"] = pin if wanted in (None, "true") else f"({pin}) && ({wanted})"
    for attribute, key in (
        ("Rank", "rank"),
        ("MaxJobRetirementTime", "maxJobRetirementTime"),
        ("JobMaxVacateTime", "jobMaxVacateTime"),
    ):
        text = _source(ad, attribute)
        if text is not None:
            spec[key] = text
    priority = _get(ad, "JobPrio")
    if priority is not None:
        if type(priority) is not int:
            raise FetchedJobError(f"JobPrio = {_get(ad, 'JobPrio')!r}: expected an integer")
        spec["priority"] = priority
    kill_sig = _kill_sig(ad)
    if kill_sig is not None:
        spec["killSig"] = kill_sig
    return spec


def _metadata(
    node: str, keyword: str, name: str, namespace: str, execution_point_uid: str | None
) -> dict[str, Any]:
    """The job's name and namespace, its keyword and node labels, and the ExecutionPoint that
    owns it (so it goes with its node)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {HOOK_KEYWORD_LABEL: _label(keyword), FETCHED_BY_LABEL: _label(node)},
    }
    if execution_point_uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "kondor.io/v1alpha1",
                "kind": "ExecutionPoint",
                "name": node,
                "uid": execution_point_uid,
            }
        ]
    return metadata


def _label(text: str) -> str:
    """A label value: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends."""
    value = re.sub(r"[^A-Za-z0-9._-]", "-", text)[:63].strip("-._")
    return value or "none"


def fetched_keyword(labels: Mapping[str, str] | None) -> str | None:
    """The keyword that fetched an ExecutionJob (its label), None for a submitted job."""
    return (labels or {}).get(HOOK_KEYWORD_LABEL) or None
