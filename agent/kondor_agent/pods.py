"""The `pod` runtime: a job's Pod, bound to this node, created and followed by the agent.

The Pod and the ConfigMap holding its ads come from `kondor_core.jobs.pod`; the node's job
pods are followed through one watch (pods labelled with the node), so looking for their end
between polling ticks costs the API server nothing. On the dev cluster's kwok nodes, kwok
runs the pod to its annotated exit code (a simulation of the kubelet: devcluster/README.md).

On a real node the agent acts on the pod's cgroup (found from its UID and QoS class,
`kondor_agent.podcgroup`): suspend freezes it in place and continue thaws it; soft kill sends
the job's KillSig to the containers' processes (not the sandbox's pause); hard kill deletes
the pod at once and kills what is left in its cgroup. A frozen pod is thawed before any
deletion (the kubelet cannot stop a frozen container). A container the kernel OOM-killed holds
the job with HoldReasonCode 34, as HTCondor does. Where the pod has no cgroup on this host (a
simulated node) suspend leaves it running and soft kill deletes it with its grace period.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal as signals
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kondor_agent import podcgroup
from kondor_agent.execute.jobdir import OUT_OF_MEMORY
from kondor_agent.jobs import Outcome
from kondor_agent.kube import KubernetesAPI, informer
from kondor_core.api import EXECUTION_POINT_LABEL, ExecutionJob, JobExecution
from kondor_core.api.meta import parse_time
from kondor_core.jobs.pod import (
    DEDICATED,
    HARVEST_PRIORITY_CLASS,
    ads_config_map,
    job_pod,
    pod_mode,
)
from kondor_core.slots import SlotAd

log = logging.getLogger("kondor_agent.pods")


@dataclass(frozen=True)
class PodHandle:
    namespace: str
    name: str
    #: The slot's name and memory (MiB), for an OOM hold's reason.
    slot: str = ""
    memory_mib: int = 0


class PodLauncher:
    """Creates, follows and deletes the job pods of one node."""

    def __init__(
        self, api: KubernetesAPI, node: str, cgroup_root: Path = podcgroup.CGROUP_ROOT
    ) -> None:
        self.core = client.CoreV1Api(api.api_client)
        self.api = api
        self.node = node
        self.cgroup_root = cgroup_root
        self.mode = DEDICATED
        self.priority_class = HARVEST_PRIORITY_CLASS
        self._pods: dict[tuple[str, str], Mapping[str, Any]] = {}
        #: Pods a restarted agent took back: `clear` leaves them running.
        self._adopted: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-pods-{node}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def configure(self, macros: Mapping[str, str]) -> None:
        """The node's pod mode (KONDOR_POD_MODE) and harvest PriorityClass."""
        self.mode, self.priority_class = pod_mode(macros)

    def launch(self, job: ExecutionJob, job_id: str, slot: SlotAd, job_ad_text: str) -> PodHandle:
        claim_id = job.status.claim_id if job.status and job.status.claim_id else job_id
        namespace = job.metadata.namespace or "default"
        machine_ad = slot.to_classad().printOld()  # the slot's ad is the job's machine ad
        config_map = ads_config_map(job, claim_id, self.node, job_ad_text, machine_ad)
        pod = job_pod(
            job,
            claim_id,
            self.node,
            slot.attributes,
            mode=self.mode,
            priority_class=self.priority_class,
        )
        creates: tuple[tuple[Any, dict[str, Any]], ...] = (
            (self.core.create_namespaced_config_map, config_map),
            (self.core.create_namespaced_pod, pod),
        )
        for create, body in creates:
            try:
                create(namespace, body)
            except ApiException as error:
                if error.status != 409:  # already there: a restarted agent re-launching
                    raise
        log.info("created pod %s/%s for %s", namespace, pod["metadata"]["name"], job_id)
        memory = slot.attributes.get("Memory", 0)
        return PodHandle(
            namespace,
            pod["metadata"]["name"],
            slot.name,
            int(memory) if isinstance(memory, int | float) else 0,
        )

    def ended(self, handle: PodHandle) -> bool:
        with self._lock:
            pod = self._pods.get((handle.namespace, handle.name))
        return pod is not None and (pod.get("status") or {}).get("phase") in (
            "Succeeded",
            "Failed",
        )

    def poll(self, handle: PodHandle) -> Outcome | None:
        if not self.ended(handle):
            return None
        with self._lock:
            pod = self._pods[(handle.namespace, handle.name)]
        status = pod.get("status") or {}
        code, started, finished, oom = 0, None, None, False
        for container in status.get("containerStatuses") or []:
            done = (container.get("state") or {}).get("terminated") or {}
            code = code or int(done.get("exitCode") or 0)
            started = started or _epoch(done.get("startedAt"))
            finished = _epoch(done.get("finishedAt")) or finished
            oom = oom or done.get("reason") == "OOMKilled"
        if oom:
            over = f" of {handle.memory_mib} megabytes" if handle.memory_mib else ""
            return Outcome(
                hold_reason=f"Error from {handle.slot or self.node}: Job has gone over cgroup "
                f"memory limit{over}. Consider resubmitting with a higher request_memory.",
                hold_reason_code=OUT_OF_MEMORY,
                start_time=started,
                end_time=finished,
            )
        return Outcome(exit_code=code, start_time=started, end_time=finished)

    def directory(self, handle: PodHandle) -> str:
        return f"pod/{handle.namespace}/{handle.name}"

    def soft_kill(self, handle: PodHandle, signal: str) -> None:
        """The job's KillSig to the containers' processes; the pod stays until hard kill."""
        cgroup = self._identity(handle)
        directory = self._freezer(handle)
        if cgroup is None or directory is None:
            self._delete(handle, None)  # no cgroup here: the kubelet sends the stop signal
            return
        number = _signal_number(signal)
        with contextlib.suppress(OSError):
            podcgroup.set_frozen(directory, False)  # a frozen process acts on no signal
        for pid in podcgroup.pod_processes(*cgroup, self.cgroup_root):
            if not podcgroup.is_pause(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, number)

    def hard_kill(self, handle: PodHandle) -> None:
        """Delete the pod at once and kill whatever is left in its cgroup."""
        cgroup = self._identity(handle)
        self._delete(handle, 0)
        if cgroup is not None:
            for pid in podcgroup.pod_processes(*cgroup, self.cgroup_root):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signals.SIGKILL)

    def suspend(self, handle: PodHandle) -> None:
        directory = self._freezer(handle)
        if directory is None:
            log.warning(
                "pod %s/%s has no cgroup on this host (a simulated node): not frozen",
                handle.namespace,
                handle.name,
            )
            return
        if not podcgroup.freeze(directory):
            log.warning("pod %s/%s: not every task froze within 5 s", handle.namespace, handle.name)

    def resume(self, handle: PodHandle) -> None:
        self._thaw(handle)

    def is_suspended(self, handle: PodHandle) -> bool:
        directory = self._freezer(handle)
        return directory is None or podcgroup.is_frozen(directory)

    def remove(self, handle: PodHandle) -> None:
        """The pod goes with its ExecutionJob (owner reference); a finished one now."""
        self._delete(handle, 0)

    def _identity(self, handle: PodHandle) -> tuple[str, str] | None:
        """The pod's UID and QoS class, as the watch last saw it."""
        with self._lock:
            pod = self._pods.get((handle.namespace, handle.name)) or {}
        uid = (pod.get("metadata") or {}).get("uid")
        qos = (pod.get("status") or {}).get("qosClass")
        if not uid or qos not in podcgroup.QOS_CLASSES:
            return None
        return str(uid), str(qos)

    def _freezer(self, handle: PodHandle) -> Path | None:
        """The pod's freezer cgroup on this host; None where it has none (a simulated node)."""
        cgroup = self._identity(handle)
        return None if cgroup is None else podcgroup.freezer(*cgroup, self.cgroup_root)

    def _thaw(self, handle: PodHandle) -> None:
        directory = self._freezer(handle)
        if directory is not None:
            with contextlib.suppress(OSError):
                podcgroup.set_frozen(directory, False)

    def adopt(self, job: ExecutionJob, execution: JobExecution) -> PodHandle | None:
        """The pod a previous agent launched for this run (`execution.directory` names it),
        if it is still there: a restarted agent takes it back instead of vacating it. A pod
        that ended meanwhile is taken back too, so its exit is reported (once)."""
        namespace, name = _pod_of(execution.directory)
        if not name or namespace != (job.metadata.namespace or "default"):
            return None
        try:
            found = self.core.read_namespaced_pod(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        pod = self.api.api_client.sanitize_for_serialization(found)  # type: ignore[no-untyped-call]
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get(EXECUTION_POINT_LABEL) != self.node or pod["metadata"].get(
            "deletionTimestamp"
        ):
            return None
        with self._lock:
            self._pods.setdefault((namespace, name), pod)
            self._adopted.add((namespace, name))
        limits = _container_memory_mib(pod)
        log.info("took back pod %s/%s for %s", namespace, name, execution.claim_id)
        return PodHandle(namespace, name, execution.slot or "", limits)

    def clear(self) -> int:
        """Delete the job pods of this node still running that were not taken back."""
        found = self._list(label_selector=f"{EXECUTION_POINT_LABEL}={self.node}")
        with self._lock:
            adopted = set(self._adopted)
        running = [
            _key(pod)
            for pod in found.get("items") or []
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and _key(pod) not in adopted
        ]
        for namespace, name in running:
            self._delete(PodHandle(namespace, name), 0)
        return len(running)

    def _delete(self, handle: PodHandle, grace: int | None) -> None:
        self._thaw(handle)  # deleting a frozen pod hangs until it is thawed
        try:
            self.core.delete_namespaced_pod(
                handle.name, handle.namespace, grace_period_seconds=grace
            )
        except ApiException as error:
            if error.status != 404:
                raise
        with self._lock:  # gone: its end is the kill's
            self._pods[(handle.namespace, handle.name)] = {"status": {"phase": "Failed"}}

    def _run(self) -> None:
        def listed(items: list[Mapping[str, Any]]) -> None:
            with self._lock:
                self._pods = {_key(item): item for item in items}

        def changed(kind: str, found: Mapping[str, Any]) -> None:
            with self._lock:
                if kind != "DELETED":
                    self._pods[_key(found)] = found

        informer(
            self._list,
            {"label_selector": f"{EXECUTION_POINT_LABEL}={self.node}"},
            listed=listed,
            changed=changed,
            lost=lambda: None,
            stop=self._stop,
            what=f"job pods of {self.node}",
            timeout_seconds=300,
        )

    def _list(self, **options: Any) -> Any:
        """Pods as plain JSON for the list; the watch takes the raw call."""
        found = self.core.list_pod_for_all_namespaces(**options)
        if options.get("watch"):
            return found
        return self.api.api_client.sanitize_for_serialization(found)  # type: ignore[no-untyped-call]


def _key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


def _pod_of(directory: str | None) -> tuple[str, str]:
    """(namespace, name) from `directory` as `PodLauncher.directory` wrote it (`pod/NS/NAME`)."""
    parts = (directory or "").split("/")
    return (parts[1], parts[2]) if len(parts) == 3 and parts[0] == "pod" else ("", "")


def _container_memory_mib(pod: Mapping[str, Any]) -> int:
    """The first container's memory limit in MiB (the slot's Memory), 0 when unreadable."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    limit = str(((containers[0].get("resources") or {}).get("limits") or {}).get("memory", ""))
    return int(limit[:-2]) if limit.endswith("Mi") and limit[:-2].isdigit() else 0


def _signal_number(name: str) -> int:
    """KillSig as HTCondor spells it (SIGTERM, TERM, 15) as a number; SIGTERM if unknown."""
    text = name.strip().upper()
    if text.isdigit():
        return int(text)
    with contextlib.suppress(KeyError):
        return int(signals.Signals[text if text.startswith("SIG") else f"SIG{text}"])
    log.warning("KillSig %r is not a signal; sending SIGTERM", name)
    return int(signals.SIGTERM)


def _epoch(text: Any) -> float | None:
    when = parse_time(text) if isinstance(text, str) else None
    return when.timestamp() if when is not None else None
