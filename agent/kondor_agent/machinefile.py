"""Machine descriptions from a file (a simulated node), re-read when the file changes."""

from __future__ import annotations

import logging
from pathlib import Path

from pydantic import ValidationError

from kondor_core.api import (
    InvalidObjectError,
    Machine,
    SlotPolicy,
    describe_errors,
    parse_machine_file,
    validate,
)
from kondor_core.inputs import InputError, load_yaml

log = logging.getLogger("kondor_agent")


def load(path: Path, model: type[Machine] | type[SlotPolicy]) -> Machine | SlotPolicy:
    """Parse a machine file or a SlotPolicy manifest; errors name the file."""
    if model is Machine:
        return load_machine(path)
    try:
        data = load_yaml(path.read_bytes(), source=str(path))
    except OSError as err:
        raise InvalidObjectError(str(path), [f"cannot read it: {err}"]) from None
    except InputError as err:
        raise InvalidObjectError(str(path), [str(err).removeprefix(f"{path}: ")]) from None
    try:
        return validate(model, data, what=str(path))
    except ValidationError as err:  # pragma: no cover - validate already converts
        raise InvalidObjectError(str(path), describe_errors(err)) from None


def load_machine(path: Path) -> Machine:
    """The machine file at `path` (`kondor_core.api.parse_machine_file`); errors name it."""
    try:
        content = path.read_bytes()
    except OSError as err:
        raise InvalidObjectError(str(path), [f"cannot read it: {err}"]) from None
    return parse_machine_file(content, str(path))


class MachineFile:
    """The machine described by `path`; `read()` re-parses only when the file changed.

    A file that becomes unreadable or invalid while the agent runs keeps the last good
    machine, and `error` says what is wrong, so that a half-saved edit does not take the
    node's slots away.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._machine: Machine | None = None
        self.error: str | None = None

    def read(self) -> Machine:
        """The current machine. Raises InvalidObjectError only when no good version was read."""
        try:
            info = self.path.stat()
            stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
        except OSError as err:
            return self._keep(InvalidObjectError(str(self.path), [f"cannot read it: {err}"]))
        if stamp == self._stamp and self._machine is not None:
            return self._machine
        try:
            machine = load_machine(self.path)
        except InvalidObjectError as err:
            self._stamp = stamp
            return self._keep(err)
        self._stamp, self._machine, self.error = stamp, machine, None
        return machine

    def _keep(self, error: InvalidObjectError) -> Machine:
        if self._machine is None:
            raise error
        if self.error != str(error):
            log.error("%s; keeping the machine as last read", error)
        self.error = str(error)
        return self._machine
