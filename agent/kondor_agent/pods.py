"""The `pod` runtime: a job's Pod, bound to this node, created and followed by the agent.

The Pod and the ConfigMap holding its ads come from `kondor_core.jobs.pod`; the node's job
pods are followed through one watch (pods labelled with the node), so looking for their end
between polling ticks costs the API server nothing. On the dev cluster's kwok nodes, kwok
runs the pod to its annotated exit code (a simulation of the kubelet: devcluster/README.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kondor_agent.jobs import Outcome
from kondor_agent.kube import KubernetesAPI, informer
from kondor_core.api import EXECUTION_POINT_LABEL, ExecutionJob
from kondor_core.api.meta import parse_time
from kondor_core.jobs.pod import ads_config_map, job_pod
from kondor_core.slots import SlotAd

log = logging.getLogger("kondor_agent.pods")


@dataclass(frozen=True)
class PodHandle:
    namespace: str
    name: str


class PodLauncher:
    """Creates, follows and deletes the job pods of one node."""

    def __init__(self, api: KubernetesAPI, node: str) -> None:
        self.core = client.CoreV1Api(api.api_client)
        self.api = api
        self.node = node
        self._pods: dict[tuple[str, str], Mapping[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-pods-{node}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def launch(self, job: ExecutionJob, job_id: str, slot: SlotAd, job_ad_text: str) -> PodHandle:
        claim_id = job.status.claim_id if job.status and job.status.claim_id else job_id
        namespace = job.metadata.namespace or "default"
        machine_ad = slot.to_classad().printOld()  # the slot's ad is the job's machine ad
        config_map = ads_config_map(job, claim_id, self.node, job_ad_text, machine_ad)
        pod = job_pod(job, claim_id, self.node, slot.attributes)
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
        return PodHandle(namespace, pod["metadata"]["name"])

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
        code, started, finished = 0, None, None
        for container in status.get("containerStatuses") or []:
            done = (container.get("state") or {}).get("terminated") or {}
            code = code or int(done.get("exitCode") or 0)
            started = started or _epoch(done.get("startedAt"))
            finished = _epoch(done.get("finishedAt")) or finished
        return Outcome(exit_code=code, start_time=started, end_time=finished)

    def directory(self, handle: PodHandle) -> str:
        return f"pod/{handle.namespace}/{handle.name}"

    def soft_kill(self, handle: PodHandle, signal: str) -> None:
        self._delete(handle, None)  # the kubelet sends the container's stop signal

    def hard_kill(self, handle: PodHandle) -> None:
        self._delete(handle, 0)

    def suspend(self, handle: PodHandle) -> None:
        # Freezing a pod's cgroup needs the real node (the execution issue).
        log.warning("suspending pod %s/%s is not carried out yet", handle.namespace, handle.name)

    def resume(self, handle: PodHandle) -> None:
        log.warning("resuming pod %s/%s is not carried out yet", handle.namespace, handle.name)

    def is_suspended(self, handle: PodHandle) -> bool:
        return True  # not frozen by Kondor yet (see suspend): nothing to re-check

    def remove(self, handle: PodHandle) -> None:
        """The pod goes with its ExecutionJob (owner reference); a finished one now."""
        self._delete(handle, 0)

    def clear(self) -> int:
        """Delete the job pods of this node that are still running."""
        found = self._list(label_selector=f"{EXECUTION_POINT_LABEL}={self.node}")
        running = [
            _key(pod)
            for pod in found.get("items") or []
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        for namespace, name in running:
            self._delete(PodHandle(namespace, name), 0)
        return len(running)

    def _delete(self, handle: PodHandle, grace: int | None) -> None:
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


def _epoch(text: Any) -> float | None:
    when = parse_time(text) if isinstance(text, str) else None
    return when.timestamp() if when is not None else None
