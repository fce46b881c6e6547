"""Whether a pod job's containers got the GPUs its slot assigned: never silent.

With the device plugin (KONDOR_GPU_POD_DEVICES = device-plugin, or a slot whose GPUs have no
UUID) the kubelet's plugin picks the GPUs and sets NVIDIA_VISIBLE_DEVICES in the container's
environment itself, over the Pod's; a webhook may rewrite it too. So once a pod job's
container runs on this node, the agent reads that variable from a container process's
`/proc/<pid>/environ` (the agent shares the host's PID namespace) and compares it with the
slot's GPUs (`kondor_core.jobs.gpus.visible_mismatch`). A difference is logged as an error
and posted as a Warning Event `GPUMismatch` on the node's ExecutionPoint, naming the job;
then it is not checked again for that job. A node where the pod's processes cannot be read
(a simulated node) checks nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kondor_core.jobs.gpus import SlotGpus, visible_mismatch
from kondor_kube import managers, paths
from kondor_kube.client import Client
from kondor_kube.events import EVENTS_NAMESPACE, agent_warning

log = logging.getLogger("kondor_agent.gpu_pods")

VARIABLE = "NVIDIA_VISIBLE_DEVICES"
REASON = "GPUMismatch"
#: `visible_devices`' answer when no process of the container could be read.
UNREAD = object()


def visible_devices(pids: Iterable[int], proc: Path = Path("/proc")) -> str | object | None:
    """NVIDIA_VISIBLE_DEVICES of the first readable process of `pids` (None: it has none);
    `UNREAD` when none of them can be read."""
    for pid in pids:
        try:
            raw = (proc / str(pid) / "environ").read_bytes()
        except OSError:
            continue
        for entry in raw.split(b"\0"):
            name, eq, value = entry.partition(b"=")
            if eq and name.decode(errors="replace") == VARIABLE:
                return value.decode(errors="replace")
        return None
    return UNREAD


class PodGpuCheck:
    """Each GPU pod job's container checked once against its slot's GPUs."""

    def __init__(
        self, post_event: Callable[[str, str], None] | None = None, proc: Path = Path("/proc")
    ) -> None:
        self.post_event = post_event
        self.proc = proc
        self._expected: dict[tuple[str, str], SlotGpus] = {}
        self.mismatches: dict[tuple[str, str], str] = {}

    def expect(self, key: tuple[str, str], gpus: SlotGpus) -> None:
        """The pod `key` (namespace, name) runs on a slot with these GPUs."""
        if gpus.has_gpus:
            self._expected[key] = gpus

    def pending(self, key: tuple[str, str]) -> bool:
        """Whether the pod `key` is still to be checked."""
        return key in self._expected

    def check_pending(self, key: tuple[str, str], pids: Callable[[], Iterable[int]]) -> None:
        """`check` the pod `key` with the processes `pids()` finds, if it is still to be."""
        if self.pending(key):
            self.check(key, pids())

    def check(self, key: tuple[str, str], pids: Iterable[int]) -> str | None:
        """Compare once the container's processes can be read; the mismatch, if any."""
        gpus = self._expected.get(key)
        if gpus is None:
            return self.mismatches.get(key)
        given = visible_devices(pids, self.proc)
        if given is UNREAD:
            return None  # not running yet here, or no processes to read (a simulated node)
        del self._expected[key]
        why = visible_mismatch(gpus, given if isinstance(given, str) else None)
        if why is None:
            return None
        message = f"pod {key[0]}/{key[1]}: {why} (AssignedGPUs {gpus.assigned!r})"
        self.mismatches[key] = message
        log.error("%s", message)
        if self.post_event is not None:
            try:
                self.post_event(REASON, message)
            except Exception as err:  # best effort: the log has it
                log.warning("cannot post the %s Event: %s", REASON, err)
        return message

    def forget(self, key: tuple[str, str]) -> None:
        self._expected.pop(key, None)
        self.mismatches.pop(key, None)


def execution_point_events(api_client: Any, node: str) -> Callable[[str, str], None]:
    """Post a Warning Event on the ExecutionPoint `node` (where the agent may post Events)."""

    def post(reason: str, message: str) -> None:
        body = agent_warning(node, reason, message)
        client = Client(api_client, field_manager=managers.AGENT)
        client.create(paths.core("events", namespace=EVENTS_NAMESPACE), body)

    return post
