"""Reading the files users hand to the CLI: machines, SlotPolicy and ExecutionJob manifests, ads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kondor_core.api import (
    ExecutionJob,
    InvalidObjectError,
    Machine,
    SlotPolicy,
    parse_machine_file,
    validate,
)
from kondor_core.classads import parse_ad
from kondor_core.inputs import InputError, load_yaml
from kondor_core.sim.scenario import Scenario, load_scenario


class UserError(Exception):
    """A problem in what the user gave us; the message names the file and the field."""


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise UserError(f"{path}: cannot read it ({err.strerror})") from None


def read_yaml(path: Path) -> Any:
    """The YAML data in `path`, within `kondor_core.inputs.load_yaml`'s bounds."""
    try:
        return load_yaml(_read_bytes(path), source=str(path))
    except InputError as err:
        raise UserError(str(err)) from None


def _mapping(path: Path, data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected {what} as a YAML mapping, got {type(data).__name__}")
    return data


def _check_kind(path: Path, data: dict[str, Any], kind: str) -> None:
    if data.get("kind") != kind:
        raise UserError(
            f"{path}: kind is {data.get('kind')!r}; expected a {kind} manifest "
            f"(apiVersion: kondor.io/v1alpha1, kind: {kind})"
        )


def load_machine(path: Path) -> Machine:
    """The machine file at `path` (`kondor_core.api.parse_machine_file`); errors name it."""
    try:
        return parse_machine_file(_read_bytes(path), str(path))
    except InvalidObjectError as err:
        raise UserError(str(err)) from None


def load_policy(path: Path) -> SlotPolicy:
    data = _mapping(path, read_yaml(path), "a SlotPolicy manifest")
    _check_kind(path, data, "SlotPolicy")
    try:
        return validate(SlotPolicy, data, what=str(path))
    except ValueError as err:
        raise UserError(str(err)) from None


def load_request(path: Path) -> tuple[str, ExecutionJob | Any]:
    """An ExecutionJob manifest, or a file of ClassAd text (named after the file)."""
    content = _read_bytes(path)
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        read_yaml(path)  # raises the loader's message, naming the byte
        raise
    try:
        data = load_yaml(text, source=str(path))
    except InputError as err:
        if not str(err).startswith(f"{path}: not valid YAML"):
            raise UserError(str(err)) from None
        data = None
    if isinstance(data, dict) and "apiVersion" in data:
        _check_kind(path, data, "ExecutionJob")
        try:
            job = validate(ExecutionJob, data, what=str(path))
        except ValueError as err:
            raise UserError(str(err)) from None
        problems = job.spec.attribute_name_problems()
        if problems:
            raise UserError(f"{path} is invalid:\n  " + "\n  ".join(problems))
        return job.metadata.name, job
    try:
        return path.stem, parse_ad(text, field=str(path))
    except ValueError as err:
        raise UserError(
            f"{path}: neither an ExecutionJob manifest nor ClassAd text ({err})"
        ) from None


def load_scenario_file(path: Path) -> Scenario:
    """A timeline scenario. A `{file: PATH}` in it is read relative to the scenario file's
    directory; when no such file is there, relative to the current directory (so the paths
    of a scenario written from the repository root, `examples/machines/...`, work too)."""
    data = _mapping(path, read_yaml(path), "a timeline scenario")
    return load_scenario(data, read=_relative_reader(path.parent), what=str(path))


def _relative_reader(base: Path) -> Callable[[str, str], Any]:
    def read(name: str, field: str) -> Any:
        candidates = [base / name, Path.cwd() / name]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            tried = " or ".join(str(c) for c in dict.fromkeys(candidates))
            raise ValueError(f"{field}: {name}: no such file (looked for {tried})")
        try:
            return read_yaml(found)
        except UserError as err:
            raise ValueError(f"{field}: {err}") from None

    return read
