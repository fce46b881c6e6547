"""Backfill processes: the agent's side of the startd's Backfill state.

The engine asks `start-backfill` for a slot in Backfill/Idle and `kill-backfill` when the
slot must leave Backfill (EVICT_BACKFILL, a match, a drain); this runner starts the
SlotPolicy's `backfill` process for the slot (one per slot) and kills it, and tells the agent
what happened (`events()`: BackfillStarted once it runs, BackfillExited once it is gone,
killed or ended on its own), which moves the slot along Backfill/Busy, Backfill/Killing and
back to Backfill/Idle or on to where the eviction was heading.

Each process runs in `<directory>/<slot>` in its own session, in the cgroup
`<slot>/backfill` under the Kondor root where the agent has cgroups (so a kill reaches every
process it forked), and its pid is kept in `<directory>/<slot>.pid`, so that a restarted agent
kills what an earlier one left running before it starts anything.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from kondor_agent.execute.cgroups import CgroupError, JobCgroups
from kondor_core.api.backfill import BackfillSpec
from kondor_core.policy import BackfillExited, BackfillStarted, Event

log = logging.getLogger(__name__)

#: The backfill process's leaf under its slot's cgroup.
CGROUP_LEAF = "backfill"
MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"


class BackfillRunner:
    """Starts and kills one backfill process per slot."""

    def __init__(
        self,
        directory: Path,
        cgroups: JobCgroups | None = None,
        *,
        kill: Callable[[int, int], None] = os.killpg,
    ) -> None:
        self.directory = directory
        self.cgroups = cgroups if cgroups is not None else JobCgroups.disabled()
        self._kill = kill
        self._running: dict[str, subprocess.Popen[bytes]] = {}
        self._events: dict[str, list[Event]] = {}
        self.directory.mkdir(parents=True, exist_ok=True)
        self._kill_leftovers()

    @property
    def running(self) -> frozenset[str]:
        return frozenset(self._running)

    def start(self, slot: str, spec: BackfillSpec) -> bool:
        """Start the slot's backfill process (nothing if one runs); whether it started. A
        process that cannot start is said in the log and reported as exited at once, so the
        slot goes back to Backfill/Idle rather than waiting for it."""
        if slot in self._running:
            return False
        workdir = self.directory / _safe(slot)
        workdir.mkdir(parents=True, exist_ok=True)
        env = {"PATH": MINIMAL_PATH, "HOME": str(workdir), **spec.environment}
        env["_CONDOR_SLOT"] = slot
        try:
            with (
                (workdir / "backfill.out").open("ab") as out,
                (workdir / "backfill.err").open("ab") as err_file,
            ):
                process = subprocess.Popen(  # the admin's SlotPolicy names the program
                    [spec.executable, *spec.arguments],
                    cwd=workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err_file,
                    start_new_session=True,
                )
        except OSError as err:
            log.warning("backfill on %s did not start: %s", slot, err)
            self._events.setdefault(slot, []).extend([BackfillStarted(), BackfillExited()])
            return False
        self._place(slot, process.pid)
        self._pidfile(slot).write_text(f"{process.pid}\n")
        self._running[slot] = process
        self._events.setdefault(slot, []).append(BackfillStarted())
        log.info("backfill on %s started (pid %d)", slot, process.pid)
        return True

    def kill(self, slot: str) -> None:
        """Hard-kill the slot's backfill process and everything it forked."""
        process = self._running.get(slot)
        if process is None:
            # Nothing runs there (an earlier agent's process, killed at start): it is gone.
            self._events.setdefault(slot, []).append(BackfillExited())
            return
        self._kill_tree(slot, process.pid)
        log.info("backfill on %s killed (pid %d)", slot, process.pid)

    def events(self) -> dict[str, list[Event]]:
        """What happened since the last call: BackfillStarted and BackfillExited per slot."""
        for slot, process in list(self._running.items()):
            if process.poll() is not None:
                del self._running[slot]
                self._kill_tree(slot, process.pid)  # what it left behind
                self._pidfile(slot).unlink(missing_ok=True)
                self._events.setdefault(slot, []).append(BackfillExited())
                log.info("backfill on %s exited (%s)", slot, process.returncode)
        out, self._events = self._events, {}
        return out

    def events_for(self, busy: Iterable[str]) -> dict[str, list[Event]]:
        """`events()`, and BackfillExited for each slot in `busy` (Backfill/Busy or Killing)
        that no process of this runner serves: a restarted agent's slots whose process the
        earlier agent left (and this one killed)."""
        out = self.events()
        for slot in busy:
            if slot not in self._running and slot not in out:
                out[slot] = [BackfillExited()]
        return out

    def kill_all(self) -> None:
        for slot in list(self._running):
            self.kill(slot)

    # -- mechanism ---------------------------------------------------------------------------

    def _pidfile(self, slot: str) -> Path:
        return self.directory / f"{_safe(slot)}.pid"

    def _cgroup(self, slot: str) -> str:
        return JobCgroups.job_cgroup(_safe(slot), CGROUP_LEAF)

    def _place(self, slot: str, pid: int) -> None:
        if not self.cgroups.enabled:
            return
        cgroup = self._cgroup(slot)
        try:
            self.cgroups.create(cgroup)
            self.cgroups.add(cgroup, pid)
        except (CgroupError, OSError) as err:
            log.warning("backfill on %s runs outside a cgroup: %s", slot, err)

    def _kill_tree(self, slot: str, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            self._kill(pid, signal.SIGKILL)
        if self.cgroups.enabled:
            cgroup = self._cgroup(slot)
            with contextlib.suppress(CgroupError, OSError):
                if self.cgroups.exists(cgroup):
                    self.cgroups.kill(cgroup)

    def _kill_leftovers(self) -> None:
        for pidfile in self.directory.glob("*.pid"):
            slot = pidfile.stem
            with contextlib.suppress(ValueError, OSError):
                pid = int(pidfile.read_text().strip())
                # Only the process still in that slot's directory: the pid may be reused.
                if os.readlink(f"/proc/{pid}/cwd") == str((self.directory / slot).resolve()):
                    log.info("killing the backfill process an earlier agent left on %s", slot)
                    self._kill_tree(slot, pid)
            pidfile.unlink(missing_ok=True)


def _safe(slot: str) -> str:
    """A slot name as a file name: `slot1@node` -> `slot1_node`."""
    return slot.replace("@", "_").replace("/", "_")
