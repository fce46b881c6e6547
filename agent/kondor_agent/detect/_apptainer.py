"""Apptainer (or Singularity): HasSingularity, SingularityVersion, SingularityOfflineReason.

HTCondor's starter (`condor_starter -classad`) advertises, only where Singularity
or Apptainer is installed: `HasSingularity = True` and `SingularityVersion` (the
first line of `--version`, such as "apptainer version 1.3.4-1.el9") when it works,
and `HasSingularity = False` with `SingularityOfflineReason` when it is installed but
fails. Where it is not installed the attributes are not advertised at all, so
`Requirements = HasSingularity` is undefined, hence false, there.

Kondor checks that `apptainer --version` (then `singularity --version`) found on
PATH runs; it does not run HTCondor's test containers (SIF and sandbox) at start-up.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: The programs looked for on PATH, in order.
PROGRAMS = ("apptainer", "singularity")


@dataclass(frozen=True)
class RunResult:
    returncode: int
    stdout: str
    stderr: str


#: Runs a command; None when its program is not on PATH.
Runner = Callable[[Sequence[str]], RunResult | None]


def run_on_path(argv: Sequence[str], *, timeout: float = 20.0) -> RunResult | None:
    """The default Runner: the program found on PATH, with a time limit."""
    program = shutil.which(argv[0])
    if program is None:
        return None
    try:
        done = subprocess.run(
            [program, *argv[1:]], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return RunResult(124, "", f"{argv[0]} did not answer within {timeout:g} s")
    except OSError as err:
        return RunResult(126, "", f"{program}: {err.strerror or err}")
    return RunResult(done.returncode, done.stdout, done.stderr)


def apptainer_attributes(runner: Runner) -> dict[str, bool | str]:
    """The attributes above, from `--version` of the first program found."""
    for program in PROGRAMS:
        result = runner([program, "--version"])
        if result is None:
            continue
        lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        if result.returncode == 0 and lines:
            version = lines[0]
            if not version.lower().startswith(program):
                # `apptainer --version` prints "apptainer version 1.3.4"; older builds
                # print the number alone.
                version = f"{program} version {version}"
            return {"HasSingularity": True, "SingularityVersion": version}
        errors = [line.strip() for line in result.stderr.splitlines() if line.strip()]
        reason = errors[-1] if errors else f"exit status {result.returncode} and no version"
        return {
            "HasSingularity": False,
            "SingularityOfflineReason": f"{program} --version failed: {reason}",
        }
    return {}
