"""A startd cron job's output: attribute lines and `-` separators, parsed into named ads.

The reference's "Job output": each line is `Attribute = <ClassAd expression>` (parsed by
classad2); a line starting with `-` ends an ad and may name it and say `update:<bool>`
(`-s1`, `- update:true`, `- s1 update:false`). An unnamed ad is the job's own ad; a named
one is `<job><name>`, and each replaces the ad of the same full name from earlier runs.
What is left after the last separator when the job exits is one more (unnamed) ad.

A malformed line (not `Name = expression`, or an expression classad2 refuses) is
reported with its line number and text and left out, as the startd leaves out a line it
cannot insert; the ad's other lines still count (STARTD_CRON_LOG_NON_ZERO_EXIT logs
"unparsed stdout"). A problem never reaches a slot ad.

The attributes that say where an ad goes (SlotMergeConstraint, SlotName, Name,
SlotTypeId, SlotId) are read as written and never merged; the job's prefix applies to
every other attribute.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kondor_core.classads import ExpressionError, parse_expr
from kondor_core.cron.jobs import CronJob

#: Attributes that target an ad at slots, in the reference's order of priority; never merged.
TARGETING = ("SlotMergeConstraint", "SlotName", "Name", "SlotTypeId", "SlotId")
_TARGETING = {name.lower(): name for name in TARGETING}
_LINE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=(.*)", re.DOTALL)
_TRUE = {"true", "yes", "t", "y", "1"}
_FALSE = {"false", "no", "f", "n", "0"}


@dataclass(frozen=True)
class OutputProblem:
    """A line of output that was left out."""

    job: str
    line: int
    text: str
    reason: str

    def __str__(self) -> str:
        return f"startd cron job {self.job}: output line {self.line} {self.text!r}: {self.reason}"


@dataclass(frozen=True)
class CronAd:
    """One ad a job published."""

    job: str
    #: The uniqueness tag after `-` ("" for the job's own ad).
    tag: str = ""
    #: Attribute (prefix applied) -> ClassAd expression text.
    attributes: Mapping[str, str] = field(default_factory=dict)
    #: Targeting attribute (canonical spelling) -> expression text.
    targeting: Mapping[str, str] = field(default_factory=dict)
    #: `update:<bool>` of its separator; None when it said nothing.
    update: bool | None = None
    #: STARTD_CRON_<job>_SLOTS: slot ids allowed to take it (empty: all).
    slots: tuple[int, ...] = ()

    @property
    def full_name(self) -> str:
        """The job's name joined with the tag: what a later ad of that name replaces."""
        return self.job + self.tag


@dataclass
class OutputParser:
    """Feeds lines one at a time (a WaitForExit job's stream) or all at once (`parse_output`)."""

    job: CronJob
    problems: list[OutputProblem] = field(default_factory=list)
    _line: int = 0
    _attributes: dict[str, str] = field(default_factory=dict)
    _targeting: dict[str, str] = field(default_factory=dict)

    def feed(self, raw: str) -> CronAd | None:
        """One line; the ad it completes, if it is a separator."""
        self._line += 1
        line = raw.rstrip("\r\n")
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            return None
        if stripped.startswith("-"):
            return self._separator(stripped[1:])
        match = _LINE.fullmatch(line)
        if match is None:
            self._problem(line, "not an attribute line `Name = expression` or a `-` separator")
            return None
        name, text = match.group(1), match.group(2).strip()
        try:
            parse_expr(text, field=name)
        except ExpressionError as err:
            self._problem(line, err.reason)
            return None
        targeting = _TARGETING.get(name.lower())
        if targeting is not None:
            self._targeting[targeting] = text
        else:
            _put(self._attributes, self.job.prefix + name, text)
        return None

    def finish(self) -> CronAd | None:
        """The job exited: what was not yet separated is its own ad (if anything)."""
        if not self._attributes and not self._targeting:
            return None
        return self._complete("", None)

    def _separator(self, rest: str) -> CronAd:
        tag, update = "", None
        for word in rest.split():
            key, colon, value = word.partition(":")
            if colon and key.lower() == "update":
                update = _flag(value)
                if update is None:
                    self._problem("-" + rest, f"update:{value} is not update:true or update:false")
            elif not tag:
                tag = word
            else:
                self._problem("-" + rest, f"{word!r} after the name {tag!r} is not update:<bool>")
        return self._complete(tag, update)

    def _complete(self, tag: str, update: bool | None) -> CronAd:
        ad = CronAd(
            job=self.job.name,
            tag=tag,
            attributes=self._attributes,
            targeting=self._targeting,
            update=update,
            slots=self.job.slots,
        )
        self._attributes, self._targeting = {}, {}
        return ad

    def _problem(self, text: str, reason: str) -> None:
        self.problems.append(OutputProblem(self.job.name, self._line, text, reason))


@dataclass(frozen=True)
class ParsedOutput:
    ads: tuple[CronAd, ...]
    problems: tuple[OutputProblem, ...]

    @property
    def update(self) -> bool:
        """Whether any separator said `update:true`."""
        return any(ad.update is True for ad in self.ads)


def parse_output(job: CronJob, text: str | Iterable[str]) -> ParsedOutput:
    """Everything a run printed (Periodic and OneShot jobs publish when they exit)."""
    parser = OutputParser(job)
    lines = text.splitlines() if isinstance(text, str) else text
    ads = [ad for ad in (parser.feed(line) for line in lines) if ad is not None]
    last = parser.finish()
    if last is not None:
        ads.append(last)
    return ParsedOutput(tuple(ads), tuple(parser.problems))


def _flag(value: str) -> bool | None:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    return None


def _put(mapping: dict[str, str], key: str, value: str) -> None:
    """ClassAd names are case-insensitive: a later line replaces an earlier spelling."""
    for existing in [k for k in mapping if k.lower() == key.lower()]:
        del mapping[existing]
    mapping[key] = value


#: Bytes of stdout one run may print: ads are a few KiB; a hook that prints more is broken
#: (or hostile) and would otherwise fill the agent's memory.
MAX_OUTPUT_BYTES = 1024 * 1024


class OutputReader:
    """A run's stdout as bytes in, UTF-8 lines out, within `limit` bytes.

    Output that is not UTF-8, or more than `limit` bytes, makes the run a failure: `failure`
    says why (naming the byte or the bound) and no line after it is given out, so the
    run's ads are never published from garbled or truncated text.
    """

    def __init__(self, job: str, limit: int = MAX_OUTPUT_BYTES) -> None:
        self.job = job
        self.limit = limit
        self.failure: str | None = None
        self._read = 0
        self._pending = b""

    def feed(self, chunk: bytes) -> list[str]:
        """The complete lines in `chunk` (with what was pending), newline kept."""
        if self.failure is not None:
            return []
        self._read += len(chunk)
        if self._read > self.limit:
            self.failure = (
                f"startd cron job {self.job}: printed more than {self.limit} bytes in one run; "
                "the run is a failure and its output is dropped"
            )
            self._pending = b""
            return []
        data = self._pending + chunk
        cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        self._pending = data[cut:]
        return self._decode(data[:cut], self._read - len(data))

    def finish(self) -> list[str]:
        """What is left after the last newline (the run exited)."""
        if self.failure is not None or not self._pending:
            return []
        rest, self._pending = self._pending, b""
        return self._decode(rest, self._read - len(rest))

    def _decode(self, data: bytes, offset: int) -> list[str]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            self.failure = (
                f"startd cron job {self.job}: its output is not UTF-8 (byte "
                f"{data[err.start]:#04x} at offset {offset + err.start}); the run is a failure "
                "and its output is dropped"
            )
            return []
        # Universal newlines, as a text-mode pipe reads them.
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        return [line + "\n" for line in text.split("\n")[:-1]] + (
            [text.rsplit("\n", 1)[-1]] if not text.endswith("\n") and text else []
        )
