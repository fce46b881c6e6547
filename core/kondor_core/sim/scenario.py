"""Timeline scenarios: the file `kondor simulate --timeline` replays, as validated data.

A scenario names a machine (as `kondor simulate --machine` reads it), a SlotPolicy
manifest, the polling interval (POLLING_INTERVAL, 5 s by default, as in the
reference's "condor_startd Policy Configuration"), how long to run, and steps:
facts that change, jobs submitted, jobs whose process exits, and the commands an
admin runs (condor_vacate, condor_drain, condor_off). The machine, the policy and
each submitted job are either inline or `{file: PATH}`.

This module is pure: reading a referenced file is the caller's `read` function
(the CLI resolves paths), so every check here is a function of the data. Each
problem is reported with the step's index and field, for instance
`steps[3].exit.job: no job named 'sleep' was submitted before t=900`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator
from pydantic.alias_generators import to_camel

from kondor_core.api import ExecutionJob, InvalidObjectError, Machine, SlotPolicy, validate
from kondor_core.errors import KondorError
from kondor_core.inputs import check_attribute_name, check_number
from kondor_core.sim.timeline import MAX_TICKS

#: Commands a step may give, as the admin's tools name them ("Machine States": condor_vacate,
#: condor_drain -graceful/-quick/-fast and -cancel, condor_off -graceful/-peaceful/-fast).
Command = Literal[
    "vacate",
    "vacate-fast",
    "drain-graceful",
    "drain-quick",
    "drain-fast",
    "drain-cancel",
    "shutdown-graceful",
    "shutdown-peaceful",
    "shutdown-fast",
]
COMMANDS: tuple[Command, ...] = get_args(Command)

#: A fact's value: a boolean, a number or a string, as a slot ad attribute holds it.
FactValue = StrictBool | int | float | str

_M = TypeVar("_M", bound=BaseModel)

#: Reads a referenced file: (path as written, the field that names it) -> its YAML data.
Reader = Callable[[str, str], Any]


class ScenarioError(KondorError):
    """A scenario that cannot be replayed; `problems` lists `field: message` lines."""

    def __init__(self, what: str, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__(f"{what} is invalid:\n  " + "\n  ".join(self.problems))


#: Seconds of simulated time a scenario may span (ten years; times stay ClassAd integers).
MAX_SECONDS = 10 * 365 * 24 * 3600
#: Steps a scenario may list.
MAX_STEPS = 10_000


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        allow_inf_nan=False,
    )


class FileRef(_Model):
    """`{file: PATH}`: a document kept in its own file."""

    file: Annotated[str, Field(min_length=1)]


class ExitStep(_Model):
    """The job's process exits on its own with this code (the job completes)."""

    job: Annotated[str, Field(min_length=1)]
    exit_code: int = 0


#: condor_cod's verbs a step may give (the reference's "Computing On Demand"), and `exit`:
#: the claim's application exits on its own.
CodVerb = Literal[
    "request", "activate", "suspend", "resume", "renew", "deactivate", "release", "exit"
]


class CodStep(_Model):
    """A condor_cod command by `user` on the COD claim named `claim` (the name is the
    scenario's; the startd gives the claim its ID)."""

    claim: Annotated[str, Field(min_length=1)]
    verb: CodVerb
    user: Annotated[str, Field(min_length=1)] = "alice"
    #: request: -name slot1 (a slot of the machine) or -requirements EXPR, -lease N.
    slot: str | None = None
    requirements: str | None = None
    lease: Annotated[float, Field(gt=0, le=MAX_SECONDS)] | None = None
    #: activate: -keyword K or -jobad (ClassAd text), -cluster, -proc.
    keyword: str | None = None
    job_ad: str | None = None
    cluster: Annotated[int, Field(ge=0)] | None = None
    proc: Annotated[int, Field(ge=0)] | None = None
    #: deactivate, release: -fast.
    fast: bool = False


class StepDocument(_Model):
    """One step: at `at` seconds, exactly one of facts, submit, exit, command or cod."""

    at: Annotated[float, Field(ge=0, le=MAX_SECONDS)]
    facts: dict[str, Any] | None = None
    submit: FileRef | dict[str, Any] | None = None
    exit: ExitStep | None = None
    command: Command | None = None
    cod: CodStep | None = None

    @field_validator("facts")
    @classmethod
    def _scalar_facts(cls, facts: dict[str, Any] | None) -> dict[str, FactValue] | None:
        for name, value in (facts or {}).items():
            check_attribute_name(name, field="facts")
            if not isinstance(value, bool | int | float | str):
                raise ValueError(
                    f"{name}: {value!r} is not a fact value; a fact is a boolean, a number or "
                    "a string, as a slot ad attribute holds it"
                )
            check_number(value, field=f"facts.{name}")
        return facts

    @model_validator(mode="after")
    def _one_thing(self) -> StepDocument:
        given = [
            name for name in ("facts", "submit", "exit", "command", "cod") if getattr(self, name)
        ]
        if len(given) != 1:
            said = ", ".join(given) if given else "none of them"
            raise ValueError(
                f"a step does exactly one of facts, submit, exit or command, or a cod command "
                f"(this one has {said})"
            )
        return self


class ScenarioDocument(_Model):
    """The scenario file as written (`kondor simulate --timeline`)."""

    machine: FileRef | dict[str, Any]
    policy: FileRef | dict[str, Any]
    polling_interval: Annotated[float, Field(gt=0, le=MAX_SECONDS)] = 5.0
    until: Annotated[float, Field(gt=0, le=MAX_SECONDS)]
    steps: Annotated[list[StepDocument], Field(max_length=MAX_STEPS)] = Field(default_factory=list)

    @model_validator(mode="after")
    def _bounded(self) -> ScenarioDocument:
        ticks = self.until / self.polling_interval
        if ticks > MAX_TICKS:
            raise ValueError(
                f"until: {_t(self.until)} s at a pollingInterval of {_t(self.polling_interval)} s "
                f"is {ticks:.0f} ticks; a timeline has at most {MAX_TICKS} (shorten until or "
                "poll less often)"
            )
        return self


@dataclass(frozen=True)
class Step:
    """A step with its documents read: `submit` is an ExecutionJob."""

    index: int
    at: float
    facts: Mapping[str, FactValue] | None = None
    submit: ExecutionJob | None = None
    exit: ExitStep | None = None
    command: Command | None = None
    cod: CodStep | None = None

    @property
    def where(self) -> str:
        return f"steps[{self.index}]"


@dataclass(frozen=True)
class Scenario:
    """A scenario ready to replay: the machine, the SlotPolicy and the steps in time order."""

    machine: Machine
    policy: SlotPolicy
    polling_interval: float
    until: float
    steps: tuple[Step, ...]


def load_scenario(data: Any, *, read: Reader, what: str = "the scenario") -> Scenario:
    """Validate a scenario document, reading `{file: ...}` references with `read`.

    Raises ScenarioError listing every problem, each naming the field."""
    try:
        document = validate(ScenarioDocument, data, what=what)
    except InvalidObjectError as err:
        raise ScenarioError(what, err.problems) from None
    problems: list[str] = []
    machine = _document(Machine, document.machine, "machine", read, problems)
    policy = _document(SlotPolicy, document.policy, "policy", read, problems)
    steps = tuple(_step(i, item, read, problems) for i, item in enumerate(document.steps))
    problems.extend(check_steps(steps, until=document.until))
    if problems or machine is None or policy is None:
        raise ScenarioError(what, problems)
    return Scenario(machine, policy, document.polling_interval, document.until, steps)


def check_steps(steps: Sequence[Step], *, until: float) -> list[str]:
    """Time never goes backwards, steps fall within `until`, jobs are named once, and every
    `exit` names a job submitted by an earlier step."""
    problems: list[str] = []
    submitted: dict[str, float] = {}
    previous: Step | None = None
    for item in steps:
        if previous is not None and item.at < previous.at:
            problems.append(
                f"{item.where}.at: time goes backwards: {_t(item.at)} comes after "
                f"{previous.where} at {_t(previous.at)}; list steps in time order"
            )
        if item.at > until:
            problems.append(f"{item.where}.at: {_t(item.at)} is after until ({_t(until)})")
        if item.submit is not None:
            name = item.submit.metadata.name
            if name in submitted:
                problems.append(
                    f"{item.where}.submit: a job named {name!r} was already submitted at "
                    f"t={_t(submitted[name])}; give each job its own metadata.name"
                )
            submitted.setdefault(name, item.at)
        if item.exit is not None and item.exit.job not in submitted:
            known = ", ".join(repr(n) for n in submitted) or "none"
            problems.append(
                f"{item.where}.exit.job: no job named {item.exit.job!r} was submitted before "
                f"t={_t(item.at)} (submitted by then: {known})"
            )
        previous = item
    return problems


def _t(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)


def _document(
    model: type[_M],
    given: FileRef | dict[str, Any],
    where: str,
    read: Reader,
    problems: list[str],
) -> _M | None:
    """`given` (inline, or the file it names) validated as `model`; None and problems if not."""
    data: Any = given
    label = where
    if isinstance(given, FileRef):
        label = f"{where}.file ({given.file})"
        try:
            data = read(given.file, f"{where}.file")
        except ValueError as err:
            problems.append(str(err))
            return None
    kind = getattr(model, "model_fields", {}).get("kind")
    if kind is not None and isinstance(data, dict) and data.get("kind") != kind.default:
        problems.append(
            f"{label}: kind is {data.get('kind')!r}; expected a {kind.default} manifest "
            f"(apiVersion: kondor.io/v1alpha1, kind: {kind.default})"
        )
        return None
    try:
        return validate(model, data, what=label)
    except InvalidObjectError as err:
        problems.extend(f"{label}: {line}" for line in err.problems)
        return None


def _step(index: int, item: StepDocument, read: Reader, problems: list[str]) -> Step:
    where = f"steps[{index}]"
    job = None
    if item.submit is not None:
        job = _document(ExecutionJob, item.submit, f"{where}.submit", read, problems)
        if job is not None:
            problems.extend(f"{where}.submit: {p}" for p in job.spec.attribute_name_problems())
    return Step(
        index=index,
        at=item.at,
        facts=item.facts,
        submit=job,
        exit=item.exit,
        command=item.command,
        cod=item.cod,
    )
