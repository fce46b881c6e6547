"""Which file a hook runs: a startd cron job, a job hook (PREPARE_JOB, UPDATE_JOB_INFO,
JOB_EXIT, fetch work) runs only from the agent's hooks directory, with symlinks resolved,
and only an executable regular file (`kondor_core.cron.hook_path` checks the name first)."""

from __future__ import annotations

import os
from pathlib import Path

from kondor_core.cron import HookPathError, hook_path


class RefusedExecutableError(ValueError):
    """A job's executable that the agent will not run."""


def resolve_hook(executable: str, hooks_dir: Path, *, where: str) -> Path:
    """The file a hook (a startd cron job, a job hook) runs: inside `hooks_dir` with symlinks
    resolved, an executable regular file; RefusedExecutableError says why not, from `where`."""
    try:
        lexical = hook_path(executable, str(hooks_dir), field=where)
    except HookPathError as err:
        raise RefusedExecutableError(str(err)) from None
    root = hooks_dir.resolve()
    real = Path(lexical).resolve()
    if not real.is_relative_to(root):
        raise RefusedExecutableError(
            f"{where}: {executable!r} resolves to {real}, outside the hooks directory "
            f"{root} (a symlink leads out of it)"
        )
    if not real.is_file():
        raise RefusedExecutableError(f"{where}: {real} does not exist or is not a file")
    if not os.access(real, os.X_OK):
        raise RefusedExecutableError(f"{where}: {real} is not executable")
    return real
