"""What a PREPARE_JOB hook's edits of the job ad do to a `pod` job's Pod.

The reference's "Job Hooks That Modify and Monitor Execution": PREPARE_JOB prints attributes
to insert or update in the job ad before the job is spawned. A process job takes every one
(its command line follows Cmd and Arguments). A pod job's Pod is built from its template and
sized by the claimed slot, so only what has a meaning in a container maps onto it:

- `Cmd` -> the job container's `command` (its entrypoint, one word);
- `Arguments` (new syntax) or `Args` (old syntax) -> its `args`;
- `Environment` (new syntax, `NAME=value` words) or `Env` (old syntax, `;`-separated) -> its
  `env`, each name replacing the template's variable of that name;
- `Iwd` -> its `workingDir`; `ContainerImage` -> its `image`.

The job container is the template's first container (a pod job's others are helpers). Edits
of what a Pod cannot take are refused, naming the attribute and why: `In`, `Out`, `Err`
(a container reads no input file and writes its output to its log), the file transfer lists
(nothing is transferred to a pod), `Request*` (the Pod is sized by the slot the job was matched
to) and `JobUniverse`. Every other attribute only updates the job ad the pod sees at
`/etc/kondor/.job.ad`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kondor_core.cron import CronError
from kondor_core.cron.jobs import parse_args

#: Edits a Pod cannot take, with why.
REFUSED: Mapping[str, str] = {
    "in": "a pod's container reads no input file",
    "out": "a pod's container writes its output to its log, not to a file",
    "err": "a pod's container writes its errors to its log, not to a file",
    "transferinput": "nothing is transferred to a pod",
    "transferinputfiles": "nothing is transferred to a pod",
    "transferoutput": "nothing is transferred from a pod",
    "transferoutputfiles": "nothing is transferred from a pod",
    "requestcpus": "the pod is sized by the slot the job was matched to",
    "requestmemory": "the pod is sized by the slot the job was matched to",
    "requestdisk": "the pod is sized by the slot the job was matched to",
    "requestgpus": "the pod is sized by the slot the job was matched to",
    "jobuniverse": "a pod job's universe is its runtime",
}
#: Attributes the hook answers with that are not edits of the job.
STATUS_ATTRIBUTES = frozenset({"hookstatuscode", "hookstatusmessage"})


class PodEditError(ValueError):
    """An edit PREPARE_JOB asked for that the job's Pod cannot take; the message names the
    knob, the attribute, its value and why."""


@dataclass(frozen=True)
class PodEdits:
    """What PREPARE_JOB changes in the job container (None: unchanged)."""

    command: list[str] | None = None
    args: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    working_dir: str | None = None
    image: str | None = None

    def __bool__(self) -> bool:
        return bool(
            self.command is not None
            or self.args is not None
            or self.env
            or self.working_dir is not None
            or self.image is not None
        )


def pod_edits(output: Mapping[str, Any], *, knob: str) -> PodEdits:
    """The container edits of PREPARE_JOB's output (attribute -> evaluated value); raises
    PodEditError for an edit the Pod cannot take or a value of the wrong kind."""
    values = {name.lower(): (name, value) for name, value in output.items()}
    for key, (name, value) in values.items():
        if key in REFUSED:
            raise PodEditError(
                f"{knob} set {name} = {_show(value)}, which a pod job cannot take: {REFUSED[key]}"
            )

    def text(key: str) -> str | None:
        if key not in values:
            return None
        name, value = values[key]
        if not isinstance(value, str):
            raise PodEditError(f"{knob} set {name} = {_show(value)}: expected a string")
        return value

    command = text("cmd")
    if command is not None and not command.strip():
        raise PodEditError(f'{knob} set Cmd = "": expected the container\'s command')
    try:
        args = _arguments(text("arguments"), text("args"))
        env = _environment(text("environment"), text("env"))
    except CronError as err:
        raise PodEditError(f"{knob}: {err}") from None
    image = text("containerimage")
    if image is not None and not image.strip():
        raise PodEditError(f'{knob} set ContainerImage = "": expected an image')
    return PodEdits(
        command=None if command is None else [command],
        args=args,
        env=env,
        working_dir=text("iwd"),
        image=image,
    )


def _show(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


def _arguments(new: str | None, old: str | None) -> list[str] | None:
    if new is not None:
        return list(parse_args(f'"{new}"', field="Arguments"))
    if old is not None:
        return list(parse_args(old, field="Args"))
    return None


def _environment(new: str | None, old: str | None) -> dict[str, str]:
    env: dict[str, str] = {}
    if old:
        for item in old.split(";"):
            if item.strip():
                name, sep, value = item.partition("=")
                if not sep or not name.strip():
                    raise CronError(f"Env: {item!r} is not NAME=value")
                env[name.strip()] = value
    if new:
        for word in parse_args(f'"{new}"', field="Environment"):
            name, sep, value = word.partition("=")
            if not sep or not name:
                raise CronError(f"Environment: {word!r} is not NAME=value")
            env[name] = value
    return env


def apply_pod_edits(pod: Mapping[str, Any], edits: PodEdits) -> dict[str, Any]:
    """`pod` with `edits` made to its job container (the first); the others unchanged."""
    edited: dict[str, Any] = copy.deepcopy(dict(pod))
    containers = edited["spec"]["containers"]
    if not containers or not edits:
        return edited
    container = containers[0]
    if edits.command is not None:
        container["command"] = list(edits.command)
    if edits.args is not None:
        container["args"] = list(edits.args)
    if edits.working_dir is not None:
        container["workingDir"] = edits.working_dir
    if edits.image is not None:
        container["image"] = edits.image
    if edits.env:
        kept = [e for e in container.get("env") or [] if e.get("name") not in edits.env]
        container["env"] = [*kept, *({"name": k, "value": v} for k, v in edits.env.items())]
    return edited
