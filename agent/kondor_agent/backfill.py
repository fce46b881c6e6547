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
import re
import signal
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from kondor_agent.execute.cgroups import CgroupError, JobCgroups
from kondor_agent.execute.privileges import drop_privileges, ensure_traversable, load_libc
from kondor_core.api.backfill import BackfillSpec
from kondor_core.jobs.podsecurity import DEFAULT_RUN_AS, harden
from kondor_core.jobs.runas import AccountError, slot_user_ids
from kondor_core.policy import BackfillExited, BackfillStarted, Event
from kondor_kube import managers, paths
from kondor_kube.client import Client
from kondor_kube.config import ApiClient
from kondor_kube.errors import ConflictError, NotFoundError

log = logging.getLogger(__name__)

#: The backfill process's leaf under its slot's cgroup.
CGROUP_LEAF = "backfill"
MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
#: Labels of a backfill pod: the node it is bound to and the slot it backfills.
BACKFILL_NODE_LABEL = "kondor.io/backfill-node"
BACKFILL_SLOT_LABEL = "kondor.io/backfill-slot"


class BackfillPods(Protocol):
    """Backfill pods through the API server (KubeBackfillPods, or a fake)."""

    def create(self, namespace: str, manifest: dict[str, Any]) -> None: ...
    def phase(self, namespace: str, name: str) -> str | None: ...
    def delete(self, namespace: str, name: str) -> None: ...
    def delete_all(self, node: str) -> int: ...


def backfill_pod(spec: BackfillSpec, slot: str, node: str) -> dict[str, Any]:
    """The Pod a slot's `pod` backfill runs as: the template, bound to the node, labelled with
    the node and the slot, never restarted, named after both (DNS-1123), and hardened as a
    job pod is where the template is silent (`kondor_core.jobs.podsecurity.harden`): the
    slot's own user, no privilege escalation, no capabilities, seccomp RuntimeDefault."""
    assert spec.pod is not None
    template = spec.pod
    metadata = dict(template.get("metadata") or {})
    labels = {
        **dict(metadata.get("labels") or {}),
        BACKFILL_NODE_LABEL: _label(node),
        BACKFILL_SLOT_LABEL: _label(slot.split("@", 1)[0]),
    }
    name = re.sub(r"[^a-z0-9-]+", "-", f"backfill-{node}-{slot.split('@', 1)[0]}".lower())
    try:
        ids = slot_user_ids(slot.split("@", 1)[0])
        run_as = (ids.uid, ids.gid)
    except AccountError:
        run_as = DEFAULT_RUN_AS
    pod_spec = harden(
        {"restartPolicy": "Never", **dict(template["spec"]), "nodeName": node}, run_as
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**metadata, "name": name[:63].strip("-"), "labels": labels},
        "spec": pod_spec,
    }


def _label(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", value)[:63].strip("-_.")


class BackfillRunner:
    """Starts and kills one backfill process per slot."""

    def __init__(
        self,
        directory: Path,
        cgroups: JobCgroups | None = None,
        *,
        kill: Callable[[int, int], None] = os.killpg,
        pods: BackfillPods | None = None,
        node: str = "",
    ) -> None:
        self.directory = directory
        self.cgroups = cgroups if cgroups is not None else JobCgroups.disabled()
        self._kill = kill
        self.pods = pods
        self.node = node
        self._running: dict[str, subprocess.Popen[bytes]] = {}
        #: slot -> (namespace, name) of its backfill pod.
        self._pods: dict[str, tuple[str, str]] = {}
        self._events: dict[str, list[Event]] = {}
        # The directory is made by the first backfill process: a node without backfill keeps
        # its execute directory to its jobs.
        self._kill_leftovers()
        if pods is not None and node:
            with contextlib.suppress(Exception):  # best effort: the next agent tries again
                if pods.delete_all(node):
                    log.info("deleted the backfill pods an earlier agent left")

    @property
    def running(self) -> frozenset[str]:
        return frozenset(self._running) | frozenset(self._pods)

    def start(self, slot: str, spec: BackfillSpec) -> bool:
        """Start the slot's backfill process (nothing if one runs); whether it started. A
        process that cannot start is said in the log and reported as exited at once, so the
        slot goes back to Backfill/Idle rather than waiting for it."""
        if slot in self._running or slot in self._pods:
            return False
        if spec.pod is not None:
            return self._start_pod(slot, spec)
        assert spec.executable is not None
        workdir = self.directory / _safe(slot)
        workdir.mkdir(parents=True, exist_ok=True)
        try:
            drop = self._as_slot_user(slot, workdir)
        except (AccountError, OSError) as err:
            log.warning("backfill on %s did not start: %s", slot, err)
            self._events.setdefault(slot, []).extend([BackfillStarted(), BackfillExited()])
            return False
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
                    # Dropping needs prctl and capset: only a function run after the fork
                    # can (libc is loaded before it, so the child imports nothing).
                    preexec_fn=drop,  # noqa: PLW1509
                )
        except (OSError, subprocess.SubprocessError) as err:
            log.warning("backfill on %s did not start: %s", slot, err)
            self._events.setdefault(slot, []).extend([BackfillStarted(), BackfillExited()])
            return False
        self._place(slot, process.pid)
        self._pidfile(slot).write_text(f"{process.pid}\n")
        self._running[slot] = process
        self._events.setdefault(slot, []).append(BackfillStarted())
        log.info("backfill on %s started (pid %d)", slot, process.pid)
        return True

    def _as_slot_user(self, slot: str, workdir: Path) -> Callable[[], None]:
        """What the backfill client's child runs before exec: it never runs as root, but as
        its slot's own user (`kondor_core.jobs.runas.slot_user_ids`, as a job with no owner
        account would), without capabilities and with `no_new_privs`; its directory
        (mode 0700) is that user's. An agent that is not root keeps its own user."""
        load_libc()
        uid = gid = None
        if os.geteuid() == 0:
            ids = slot_user_ids(slot.split("@", 1)[0])
            uid, gid = ids.uid, ids.gid
            os.chmod(self.directory, 0o711)
            ensure_traversable(self.directory)
            os.chown(workdir, uid, gid)
            os.chmod(workdir, 0o700)
            log.info("backfill on %s runs as uid %d gid %d", slot, uid, gid)

        def drop() -> None:
            drop_privileges(uid, gid)

        return drop

    def _start_pod(self, slot: str, spec: BackfillSpec) -> bool:
        manifest = backfill_pod(spec, slot, self.node)
        name = manifest["metadata"]["name"]
        try:
            if self.pods is None:
                raise RuntimeError("this agent runs no pods")
            self.pods.create(spec.namespace, manifest)
        except Exception as err:  # the API refused: said, and the slot goes back to Idle
            log.warning("backfill pod on %s not created: %s", slot, err)
            self._events.setdefault(slot, []).extend([BackfillStarted(), BackfillExited()])
            return False
        self._pods[slot] = (spec.namespace, name)
        self._events.setdefault(slot, []).append(BackfillStarted())
        log.info("backfill on %s started (pod %s/%s)", slot, spec.namespace, name)
        return True

    def kill(self, slot: str) -> None:
        """Hard-kill the slot's backfill process and everything it forked (or delete its pod
        with no grace period)."""
        if slot in self._pods and self.pods is not None:
            namespace, name = self._pods[slot]
            with contextlib.suppress(Exception):  # gone already, or the next check sees it
                self.pods.delete(namespace, name)
            log.info("backfill on %s killed (pod %s/%s deleted)", slot, namespace, name)
            return
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
        for slot, (namespace, name) in list(self._pods.items()):
            assert self.pods is not None
            try:
                phase = self.pods.phase(namespace, name)
            except Exception as err:  # a failed read: looked at again next time
                log.warning("backfill pod %s/%s: %s", namespace, name, err)
                continue
            if phase is None or phase in ("Succeeded", "Failed"):
                if phase is not None:
                    with contextlib.suppress(Exception):
                        self.pods.delete(namespace, name)
                del self._pods[slot]
                self._events.setdefault(slot, []).append(BackfillExited())
                log.info("backfill on %s exited (pod %s)", slot, phase or "gone")
        out, self._events = self._events, {}
        return out

    def events_for(self, busy: Iterable[str]) -> dict[str, list[Event]]:
        """`events()`, and BackfillExited for each slot in `busy` (Backfill/Busy or Killing)
        that no process of this runner serves: a restarted agent's slots whose process the
        earlier agent left (and this one killed)."""
        out = self.events()
        for slot in busy:
            if slot not in self.running and slot not in out:
                out[slot] = [BackfillExited()]
        return out

    def kill_all(self) -> None:
        for slot in list(self._running) + list(self._pods):
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


class KubeBackfillPods:
    """BackfillPods through `kondor_kube` (the agent may create, read and delete pods in any
    namespace, as it does for pod jobs), writing as the agent's field manager."""

    def __init__(self, api_client: ApiClient) -> None:
        self.client = Client(api_client, field_manager=managers.AGENT)

    def create(self, namespace: str, manifest: dict[str, Any]) -> None:
        # An earlier one of the same name (409) is the client.
        with contextlib.suppress(ConflictError):
            self.client.create(paths.core("pods", namespace=namespace), manifest)

    def phase(self, namespace: str, name: str) -> str | None:
        pod = self.client.read(paths.core("pods", name, namespace=namespace))
        if pod is None:
            return None
        if (pod.get("metadata") or {}).get("deletionTimestamp") is not None:
            return None  # being deleted: the client is gone as far as the slot goes
        status = pod.get("status")
        return str(status.get("phase")) if status is not None else "Pending"

    def delete(self, namespace: str, name: str) -> None:
        with contextlib.suppress(NotFoundError):
            self.client.delete(
                paths.core("pods", name, namespace=namespace),
                query=[("gracePeriodSeconds", "0")],
            )

    def delete_all(self, node: str) -> int:
        found, _ = self.client.list(
            paths.core("pods"),
            query=[("labelSelector", f"{BACKFILL_NODE_LABEL}={_label(node)}")],
        )
        for pod in found:
            metadata = pod.get("metadata") or {}
            if metadata.get("name") and metadata.get("namespace"):
                self.delete(metadata["namespace"], metadata["name"])
        return len(found)
