"""condor_q -better-analyze as a pure function: why a job runs or does not.

For one job ad and the pool's slot ads (`negotiator.slot_offer`) it counts, as condor_q's
analysis does ("Matchmaking with ClassAds"; condor_q's manual page):

- how many slots the job's Requirements accept, and for each clause of the Requirements
  (its top-level `&&` terms) how many slots that clause alone rejects;
- how many slots have too little of what the job requests (the negotiator's own check);
- of the slots the job accepts, how many reject the job by their START (and the reasons);
- how many are able to run it now (not Claimed), and how many are running it already;
- and, from the job's status, whether it runs, waits for its execution point's answer, or
  waits for its user's priority (a slot could run it but the fair share went elsewhere).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kondor_core.classads import ExpressionError, match_scope, parse_expr
from kondor_core.negotiation.negotiator import evaluate_slot, shortfall
from kondor_core.policy.evaluation import describe, truth


@dataclass(frozen=True)
class Clause:
    """One top-level term of the job's Requirements and how many slots it matches and
    rejects on its own."""

    text: str
    matched: int
    rejected: int


@dataclass(frozen=True)
class Analysis:
    """What condor_q -better-analyze reports for one job."""

    job: str
    requirements: str
    slots: int
    clauses: tuple[Clause, ...]
    rejected_by_requirements: int
    rejected_by_resources: int
    resource_reasons: Counter[str] = field(default_factory=Counter)
    rejected_by_start: int = 0
    start_reasons: Counter[str] = field(default_factory=Counter)
    running_this_job: int = 0
    serving_others: int = 0
    available: int = 0
    status: str = ""


def conjuncts(text: str) -> list[str]:
    """The top-level `&&` terms of an expression (outer parentheses around the whole
    removed first), as written."""
    text = _unwrap(text.strip())
    terms: list[str] = []
    depth, start, quote, i = 0, 0, "", 0
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif depth == 0 and text.startswith("&&", i):
            terms.append(text[start:i].strip())
            start = i + 2
            i += 1
        i += 1
    terms.append(text[start:].strip())
    return [_unwrap(term) for term in terms if term]


def _unwrap(text: str) -> str:
    while text.startswith("(") and text.endswith(")") and _closes_at_end(text):
        text = text[1:-1].strip()
    return text


def _closes_at_end(text: str) -> bool:
    depth, quote = 0, ""
    for index, char in enumerate(text):
        if quote:
            if char == quote:
                quote = ""
            continue
        if char in "\"'":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0 and index != len(text) - 1:
                return False
    return True


def _accepts(tree: Any, job: Any, slot: Any) -> bool:
    return truth(tree.eval(match_scope(job, slot), slot)) is True


def analyze(job_id: str, job: Any, offers: Sequence[Any], *, status: str = "") -> Analysis:
    """The analysis of `job` (its ad) against the slot ads `offers`; `status` is the
    sentence about the job's own state (`job_state`)."""
    requirements = job.lookup("Requirements") if "Requirements" in job else None
    text = str(requirements) if requirements is not None else "true"
    terms = conjuncts(text)
    trees: list[Any] = []
    for term in terms:
        try:
            trees.append(parse_expr(term, field="Requirements"))
        except ExpressionError:
            trees.append(None)
    whole = parse_expr(text, field="Requirements")
    matched = [0] * len(terms)
    by_requirements = by_resources = by_start = running = others = available = 0
    resource_reasons: Counter[str] = Counter()
    start_reasons: Counter[str] = Counter()
    for slot in offers:
        for index, tree in enumerate(trees):
            if tree is not None and _accepts(tree, job, slot):
                matched[index] += 1
        if not _accepts(whole, job, slot):
            by_requirements += 1
            continue
        short = shortfall(slot, job)
        if short is not None:
            by_resources += 1
            resource_reasons[short.split(":", 1)[0]] += 1
            continue
        start = evaluate_slot(slot, "Start", job)
        if truth(start) is not True:
            by_start += 1
            start_reasons[f"START is {describe(start)}"] += 1
            continue
        if slot.get("State") == "Claimed":
            if slot.get("GlobalJobId") == job_id or slot.get("JobId") == job_id:
                running += 1
            else:
                others += 1
            continue
        if slot.get("Requirements") is False:
            others += 1
            continue
        available += 1
    clauses = tuple(
        Clause(term, count, len(offers) - count) for term, count in zip(terms, matched, strict=True)
    )
    return Analysis(
        job_id,
        text,
        len(offers),
        clauses,
        by_requirements,
        by_resources,
        resource_reasons,
        by_start,
        start_reasons,
        running,
        others,
        available,
        status,
    )


def job_state(job_status: str, *, claimed: bool, last_reason: str | None, available: int) -> str:
    """The sentence about where the job stands (condor_q's "Job is running" and friends)."""
    if job_status in ("Running", "Suspended"):
        return f"Job is {job_status.lower()}."
    if job_status != "Idle":
        return f"Job is {job_status}: it is not negotiated for."
    if claimed:
        return "Job is matched; its execution point has not answered yet."
    if last_reason and "waiting for user priority" in last_reason:
        return f"Job is waiting for its user's priority: {last_reason}."
    if available:
        return (
            f"Job is idle: {available} slot(s) can run it now; it waits for the next "
            "negotiation cycle or for its user's priority (fair share)."
        )
    if last_reason:
        return f"Job is idle. Reason for last match failure: {last_reason}"
    return "Job is idle and no slot can run it."


def render(analysis: Analysis, label: str) -> str:
    """condor_q -better-analyze's text."""
    out = [
        f"The Requirements expression for job {label} is",
        "",
        f"    {analysis.requirements}",
        "",
        f"The Requirements expression for job {label} reduces to these conditions:",
        "",
        "         Slots     Slots",
        "Step    Matched  Rejected  Condition",
        "-----  --------  --------  ---------",
    ]
    for index, clause in enumerate(analysis.clauses):
        out.append(f"[{index}]  {clause.matched:>9}  {clause.rejected:>8}  {clause.text}")
    out += ["", f"{label}:  Run analysis summary.  Of {analysis.slots} slots,"]
    width = len(str(analysis.slots))
    lines = [
        (analysis.rejected_by_requirements, "are rejected by your job's requirements"),
        (analysis.rejected_by_resources, "have too little of what your job requests"),
        (analysis.rejected_by_start, "reject your job because of their own requirements"),
        (analysis.running_this_job, "match and are already running your job"),
        (analysis.serving_others, "match but are serving other jobs"),
        (analysis.available, "are able to run your job"),
    ]
    out += [f"  {count:>{width}} {words}" for count, words in lines]
    for reason, count in sorted(analysis.resource_reasons.items()):
        out.append(f"      {count:>{width}} with {reason}")
    for reason, count in sorted(analysis.start_reasons.items()):
        out.append(f"      {count:>{width}} whose {reason} for your job")
    if analysis.status:
        out += ["", analysis.status]
    return "\n".join(out) + "\n"
