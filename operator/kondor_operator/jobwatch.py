"""The ExecutionJob watch: one list+watch outside kopf, one parsed table for the negotiator.

Every job changes a few times in its life (submitted, matched, running, ended), so a queue
of 10,000 jobs is 40,000 watch events. Handled by kopf, each went through an `@kopf.index`
(parsing the body) and an `@kopf.on.event` handler, on kopf's copies of the body, on the
operator's event loop (issue 16). Here one thread lists and watches ExecutionJobs in every
namespace (`kondor_kube.reflector`), drops an event whose resourceVersion it has already
read before parsing anything, parses the rest once (`negotiator.job_entry`, without
`metadata.managedFields`), keeps ONE table `namespace/name` -> `JobEntry`, and reports which
jobs changed, with the event's type, in one batch per event (a listing in one batch) to its
listener (`on_loop` hands it to the negotiator on the event loop).

Like the ExecutionPoint watch, it writes nothing: it runs whatever the leadership.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from kondor_core.jobs import job_key
from kondor_kube.reflector import Reflector
from kondor_operator.negotiator import JobEntry, job_entry

#: What the watch reports: job key -> the event's type ("ADDED", "MODIFIED", "DELETED").
JobChanges = Mapping[str, str]
Listener = Callable[[JobChanges], None]


def _key(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return job_key(metadata.get("namespace"), str(metadata.get("name") or ""))


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def read_job(obj: Mapping[str, Any]) -> JobEntry | None:
    """Parse an ExecutionJob as the API server sent it, once, without its managedFields;
    None (with a warning) when it does not parse."""
    metadata = dict(obj.get("metadata") or {})
    metadata.pop("managedFields", None)
    return job_entry({**obj, "metadata": metadata})


class JobTable:
    """key -> JobEntry, written by one thread, read by any (copies)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, JobEntry] = {}
        #: The version each key was last read at, parsed or not (one that does not parse
        #: is not parsed again at the same version).
        self._versions: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._jobs)

    def jobs(self) -> dict[str, JobEntry]:
        with self._lock:
            return dict(self._jobs)

    def relist(self, listed: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        """Replace the table by a full listing, parsing only what is at a new version: what
        changed (ADDED for a new or changed job, DELETED for one gone)."""
        jobs: dict[str, JobEntry] = {}
        versions: dict[str, str] = {}
        changes: dict[str, str] = {}
        for obj in listed:
            key, version = _key(obj), _version(obj)
            versions[key] = version
            if self._versions.get(key) == version:
                if key in self._jobs:
                    jobs[key] = self._jobs[key]
                continue
            changes[key] = "ADDED"
            entry = read_job(obj)
            if entry is not None:
                jobs[key] = entry
        for key in self._versions:
            if key not in versions:
                changes[key] = "DELETED"
        with self._lock:
            self._jobs, self._versions = jobs, versions
        return changes

    def apply(self, kind: str, obj: Mapping[str, Any]) -> bool:
        """One watch event: whether it changed the table (an event at the version already
        read is dropped unparsed)."""
        key, version = _key(obj), _version(obj)
        if kind == "DELETED":
            if key not in self._versions:
                return False
            with self._lock:
                self._jobs.pop(key, None)
                del self._versions[key]
            return True
        if self._versions.get(key) == version:
            return False
        entry = read_job(obj)
        with self._lock:
            self._versions[key] = version
            if entry is None:
                self._jobs.pop(key, None)
            else:
                self._jobs[key] = entry
        return True


class JobSource(Protocol):
    """ExecutionJobs from the API server (kondor_operator.kube.Kube, or a fake in tests)."""

    def list_execution_jobs(self) -> tuple[list[dict[str, Any]], str]: ...
    def watch_execution_jobs(
        self, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]: ...


class JobWatch(Reflector):
    """Keeps a `JobTable` current from `source` and reports its changes to `listener`,
    from the watch's thread."""

    kind = "ExecutionJob"

    def __init__(
        self,
        source: JobSource,
        listener: Listener | None = None,
        *,
        timeout_seconds: int = 300,
        max_backoff: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(timeout_seconds=timeout_seconds, max_backoff=max_backoff, sleep=sleep)
        self.source = source
        self.listeners = (listener,) if listener is not None else ()
        self.table = JobTable()

    def jobs(self) -> dict[str, JobEntry]:
        """The jobs as last read (the negotiator's `JobSource`)."""
        return self.table.jobs()

    def relist(self) -> None:
        items, version = self.source.list_execution_jobs()
        changes = self.table.relist(items)
        del items  # the bodies: only the parsed models stay
        self.listed(changes, version)

    def watch(self, resource_version: str, timeout_seconds: int) -> Iterator[dict[str, Any]]:
        return self.source.watch_execution_jobs(resource_version, timeout_seconds)

    def apply(self, kind: str, obj: Mapping[str, Any]) -> bool:
        if not self.table.apply(kind, obj):
            return False
        self.report({_key(obj): kind})
        return True
