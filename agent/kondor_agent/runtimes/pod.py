"""The `pod` runtime: a job's Pod, bound to this node, created and followed by the agent.

The Pod, carrying the job's ads in its annotations, comes from `kondor_core.jobs.pod`: one
create per job. A job whose ads do not fit in a Pod's annotations (256 KiB) is held at once
(HoldReasonCode 6) with a reason naming the sizes, and no Pod is created. Likewise a template
asking for more than this node's SlotPolicy allows (its podSecurity level, Pod Security
`restricted` unless it says more: `kondor_core.jobs.podsecurity`) is held with HoldReasonCode
21 (StartdHeldJob) naming the field, and a Pod the API server refuses (a namespace's own Pod
Security admission, a quota) with code 6 and the API server's message. Every job pod runs
hardened where its template is silent: as the account a process job in its slot would run as
(`kondor_core.jobs.runas`: the owner's mapped uid, else the slot's user; never root), with no
privilege escalation, no capabilities and seccomp RuntimeDefault. The node's job
pods are followed through one watch (pods labelled with the node), so looking for their end
between polling ticks costs the API server nothing. On the dev cluster's kwok nodes, kwok
runs the pod to its annotated exit code (a simulation of the kubelet: devcluster/README.md).

On a real node the agent acts on the pod's cgroup (found from its UID and QoS class,
`pod_cgroup`): suspend freezes it in place and continue thaws it; soft kill sends
the job's KillSig to the containers' processes (not the sandbox's pause); hard kill deletes
the pod at once and kills what is left in its cgroup. A frozen pod is thawed before any
deletion (the kubelet cannot stop a frozen container). A container the kernel OOM-killed holds
the job with HoldReasonCode 34, as HTCondor does. Where the pod has no cgroup on this host (a
simulated node) suspend leaves it running and soft kill deletes it with its grace period.

A job whose policy and HookKeyword name job hooks (PREPARE_JOB, UPDATE_JOB_INFO, JOB_EXIT) has
its Pod created, followed and ended by a thread of its own (`pod_hooks`), so a hook
never blocks the agent's loop: PREPARE_JOB may edit the Pod before it exists or hold the job,
and the job's end is reported once JOB_EXIT has returned. A pod a restarted agent takes back
runs no hooks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pwd
import signal as signals
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kondor_agent.execute.jobdir import OUT_OF_MEMORY
from kondor_agent.gpu_pods import PodGpuCheck, execution_point_events
from kondor_agent.jobs import Outcome
from kondor_agent.kube import KubernetesAPI, PodApi, informer
from kondor_agent.runtimes import pod_cgroup
from kondor_agent.runtimes.pod_hooks import (
    FAILED_TO_CREATE_PROCESS,
    PodHooksRun,
    PodSide,
    pod_job_hooks,
    resolve_programs,
)
from kondor_core.api import EXECUTION_POINT_LABEL, ExecutionJob, JobExecution
from kondor_core.api.job import ExecutionAccount
from kondor_core.api.meta import parse_time
from kondor_core.classads import ExpressionError, parse_ad
from kondor_core.jobs.gpus import GpuSettings, slot_gpus
from kondor_core.jobs.hooks import HOOK_PREPARE_JOB_FAILURE
from kondor_core.jobs.pod import (
    DEDICATED,
    HARVEST_PRIORITY_CLASS,
    VISIBLE_DEVICES,
    AdsTooLargeError,
    gpu_pod_devices,
    job_pod,
    pod_mode,
    pod_name,
)
from kondor_core.jobs.podsecurity import (
    RESTRICTED,
    STARTD_HELD_JOB,
    pod_security_level,
    violations,
)
from kondor_core.jobs.runas import Account, AccountError, RunAsSettings, run_as
from kondor_core.slots import SlotAd
from kondor_kube import paths
from kondor_kube.errors import ApiError, ConflictError, NotFoundError

log = logging.getLogger("kondor_agent.runtimes.pod")
#: The API server's answers to a Pod create that hold the job rather than retry: Forbidden
#: (Pod Security admission, a quota, RBAC) and Invalid.
REFUSED_CREATES = (403, 422)


@dataclass(frozen=True)
class PodHandle:
    namespace: str
    name: str
    #: The slot's name and memory (MiB), for an OOM hold's reason.
    slot: str = ""
    memory_mib: int = 0


@dataclass(frozen=True)
class PodSettings:
    """What a node's SlotPolicy says of its pod jobs: the pod mode (KONDOR_POD_MODE) and
    harvest PriorityClass, the most a pod template may ask for (its podSecurity), who a pod
    runs as where its template names no user (`kondor_core.jobs.runas`), and how a pod gets
    its slot's GPUs (KONDOR_GPU_POD_DEVICES) with the GPU knobs."""

    mode: str = DEDICATED
    priority_class: str = HARVEST_PRIORITY_CLASS
    pod_security: str = RESTRICTED
    run_as: RunAsSettings = dataclasses.field(default_factory=RunAsSettings)
    gpu_devices: str = VISIBLE_DEVICES
    gpus: GpuSettings = dataclasses.field(default_factory=GpuSettings)

    @classmethod
    def from_macros(cls, macros: Mapping[str, str]) -> PodSettings:
        """The settings a SlotPolicy's macros give; a bad GPU or run-as knob is logged and
        its default kept (admission refuses these; one that got past it changes nothing)."""
        mode, priority_class = pod_mode(macros)
        try:
            gpu_devices = gpu_pod_devices(macros)
        except ValueError as err:
            log.error("%s; pods get their GPUs by %s", err, VISIBLE_DEVICES)
            gpu_devices = VISIBLE_DEVICES
        try:
            run_as = RunAsSettings.from_macros(macros)
        except AccountError as err:
            log.error("%s; pod jobs run as their slots' own users", err)
            run_as = RunAsSettings()
        return cls(
            mode=mode,
            priority_class=priority_class,
            pod_security=pod_security_level(macros),
            run_as=run_as,
            gpu_devices=gpu_devices,
            gpus=GpuSettings.from_macros(macros),
        )


class HookedPods:
    """The pod jobs whose hooks run around their Pod, each in a thread of its own
    (`pod_hooks.PodHooksRun`), by (namespace, name) of their Pod."""

    def __init__(self, hooks_dir: Path | None, clock: Callable[[], float]) -> None:
        self.hooks_dir = hooks_dir
        self.clock = clock
        self._runs: dict[tuple[str, str], PodHooksRun] = {}
        self._lock = threading.Lock()

    def start(
        self,
        handle: PodHandle,
        hooks: Any,
        job_ad_text: str,
        pod: dict[str, Any],
        side: PodSide,
        *,
        on_done: Callable[[], None] | None,
    ) -> None:
        """Start the job's hooks' thread; a hook program refused (outside the hooks
        directory) holds the job at once."""
        programs = resolve_programs(hooks, self.hooks_dir)
        run = PodHooksRun(
            hooks=hooks,
            programs=programs if isinstance(programs, dict) else {},
            job_ad_text=job_ad_text,
            pod=pod,
            side=side,
            hooks_dir=str(self.hooks_dir or "/"),
            environment=dict(os.environ),
            clock=self.clock,
            on_done=on_done,
        )
        with self._lock:
            self._runs[(handle.namespace, handle.name)] = run
        if isinstance(programs, str):
            log.warning("pod %s/%s: %s", handle.namespace, handle.name, programs)
            run.outcome = Outcome(
                hold_reason=programs,
                hold_reason_code=HOOK_PREPARE_JOB_FAILURE,
                end_time=self.clock(),
            )
            return
        log.info(
            "running the hooks of pod %s/%s (%s)", handle.namespace, handle.name, hooks.keyword
        )
        run.start()

    def get(self, handle: PodHandle) -> PodHooksRun | None:
        with self._lock:
            return self._runs.get((handle.namespace, handle.name))

    def forget(self, handle: PodHandle) -> None:
        with self._lock:
            self._runs.pop((handle.namespace, handle.name), None)

    def stop(self) -> None:
        """Stop every hooks' thread (the agent stops)."""
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            run.stop()


class PodLauncher:
    """Creates, follows and deletes the job pods of one node."""

    def __init__(
        self,
        api: KubernetesAPI,
        node: str,
        cgroup_root: Path = pod_cgroup.CGROUP_ROOT,
        *,
        hooks_dir: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.core = PodApi(api.api_client)
        self.hooks_dir = hooks_dir
        self.clock = clock
        self._macros: Mapping[str, str] = {}
        #: The pod jobs with hooks.
        self._hooked = HookedPods(hooks_dir, clock)
        #: Told when a hooked pod job has ended (the loop wakes to report it).
        self.on_done: Callable[[], None] | None = None
        self.api = api
        self.node = node
        self.cgroup_root = cgroup_root
        #: What the node's SlotPolicy says of its pods (`configure`).
        self.settings = PodSettings()
        #: Whether each GPU pod's container got its slot's GPUs (kondor_agent.gpu_pods).
        self.gpu_check = PodGpuCheck(execution_point_events(api.api_client, node))
        self._accounts: dict[tuple[str, str], Account] = {}
        self._pods: dict[tuple[str, str], Mapping[str, Any]] = {}
        #: Pods a restarted agent took back: `clear` leaves them running.
        self._adopted: set[tuple[str, str]] = set()
        #: Jobs whose Pod was never created (their ads did not fit), with their end.
        self._refused: dict[tuple[str, str], Outcome] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-pods-{node}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._hooked.stop()

    def configure(self, macros: Mapping[str, str]) -> None:
        """The node's pod mode (KONDOR_POD_MODE) and harvest PriorityClass, its Pod Security
        level (KONDOR_POD_SECURITY); its job hooks."""
        self.settings = PodSettings.from_macros(macros)
        self._macros = dict(macros)

    def launch(self, job: ExecutionJob, job_id: str, slot: SlotAd, job_ad_text: str) -> PodHandle:
        claim_id = job.status.claim_id if job.status and job.status.claim_id else job_id
        namespace = job.metadata.namespace or "default"
        machine_ad = slot.to_classad().printOld()  # the slot's ad is the job's machine ad
        memory = slot.attributes.get("Memory", 0)
        handle = PodHandle(
            namespace,
            pod_name(job, claim_id),
            slot.name,
            int(memory) if isinstance(memory, int | float) else 0,
        )
        assert job.spec.pod is not None
        level = self.settings.pod_security
        asked = violations(job.spec.pod.template, level)
        if asked:  # admission allowed what some node allows; this node's SlotPolicy does not
            self._refuse(
                handle,
                f"The job's pod asks for more than the SlotPolicy of {self.node} allows "
                f"(podSecurity: {level}): " + "; ".join(found.message(level) for found in asked),
                STARTD_HELD_JOB,
            )
            return handle
        account = pod_account(self.settings.run_as, job, job_id, slot, job_ad_text, node=self.node)
        if isinstance(account, AccountError):
            self._refuse(handle, f"The job's account: {account}", FAILED_TO_CREATE_PROCESS)
            return handle
        assert account.uid is not None and account.gid is not None
        with self._lock:
            self._accounts[(handle.namespace, handle.name)] = account
        try:
            pod = job_pod(
                job,
                claim_id,
                self.node,
                slot.attributes,
                job_ad_text=job_ad_text,
                machine_ad_text=machine_ad,
                mode=self.settings.mode,
                priority_class=self.settings.priority_class,
                run_as=(account.uid, account.gid),
                gpu_devices=self.settings.gpu_devices,
                gpu_settings=self.settings.gpus,
            )
        except AdsTooLargeError as err:
            self._refuse(handle, f"Cannot create the job's pod: {err}", FAILED_TO_CREATE_PROCESS)
            return handle
        self.gpu_check.expect((handle.namespace, handle.name), slot_gpus(slot.attributes))
        slot_id = slot.attributes.get("SlotID", 1)
        hooks = pod_job_hooks(
            self._macros, int(slot_id) if isinstance(slot_id, int | float) else 1, job_ad_text
        )
        if hooks is None:
            try:
                self._create(namespace, pod)
            except ApiError as error:
                if error.status not in REFUSED_CREATES:
                    raise
                # The API server refused the Pod itself: the namespace's Pod Security
                # admission (pod-security.kubernetes.io/enforce), a quota, an invalid spec.
                self._refuse(
                    handle,
                    f"Cannot create the job's pod: {_api_message(error)}",
                    FAILED_TO_CREATE_PROCESS,
                )
                return handle
            log.info("created pod %s/%s for %s", namespace, handle.name, job_id)
            return handle
        self._launch_hooked(handle, hooks, job_ad_text, pod)
        return handle

    def account(self, handle: PodHandle) -> ExecutionAccount | None:
        """The account the job's pod runs as unless its template names one (for its status)."""
        with self._lock:
            account = self._accounts.get((handle.namespace, handle.name))
        if account is None:
            return None
        return ExecutionAccount(
            name=account.name, uid=account.uid, gid=account.gid, reason=account.reason
        )

    def _refuse(self, handle: PodHandle, reason: str, code: int) -> None:
        """The job ends held with `reason` and `code`, and no Pod is created."""
        log.warning("pod %s/%s not created: %s", handle.namespace, handle.name, reason)
        with self._lock:
            self._refused[(handle.namespace, handle.name)] = Outcome(
                hold_reason=reason, hold_reason_code=code, end_time=self.clock()
            )

    def _create(self, namespace: str, pod: dict[str, Any]) -> None:
        """The job's one write before its exit: its ads travel in the Pod."""
        with contextlib.suppress(ConflictError):  # already there: a restarted agent re-launching
            self.core.create(namespace, pod)

    def _launch_hooked(
        self,
        handle: PodHandle,
        hooks: Any,
        job_ad_text: str,
        pod: dict[str, Any],
    ) -> None:
        """Start the thread that runs the job's hooks around its Pod (`pod_hooks`), which
        creates, follows and kills the Pod through this launcher."""
        side = PodSide(
            create=lambda made: self._create(handle.namespace, made),
            outcome=lambda: self._pod_outcome(handle),
            terminated=lambda: first_termination(self._pod(handle)),
            attributes=lambda started: running_attributes(
                self._pod(handle), self._identity(handle), self.cgroup_root, started
            ),
            kill=lambda number: self._kill_now(handle, number),
        )
        self._hooked.start(handle, hooks, job_ad_text, pod, side, on_done=self.on_done)

    def _run_of(self, handle: PodHandle) -> PodHooksRun | None:
        return self._hooked.get(handle)

    def _refused_outcome(self, handle: PodHandle) -> Outcome | None:
        """The end of a job whose Pod was never created (`launch` refused its ads)."""
        with self._lock:
            return self._refused.get((handle.namespace, handle.name))

    def hook_failures(self, handle: PodHandle) -> list[tuple[str, str]]:
        """The failures of the job's UPDATE_JOB_INFO and JOB_EXIT since the last call."""
        run = self._run_of(handle)
        return [] if run is None else run.failures()

    def note_exit_how(self, handle: PodHandle, how: str) -> None:
        """Why the agent ends the job (remove, hold, evict), for its JOB_EXIT hook."""
        run = self._run_of(handle)
        if run is not None:
            with run._lock:
                run.how = how

    def ended(self, handle: PodHandle) -> bool:
        if self._refused_outcome(handle) is not None:
            return True
        run = self._run_of(handle)
        if run is not None:
            return run.ended  # once JOB_EXIT has returned
        return self._pod_ended(handle)

    def _pod_ended(self, handle: PodHandle) -> bool:
        return pod_ended(self._pod(handle))

    def poll(self, handle: PodHandle) -> Outcome | None:
        refused = self._refused_outcome(handle)
        if refused is not None:
            return refused
        run = self._run_of(handle)
        if run is not None:
            with run._lock:
                return run.outcome
        key = (handle.namespace, handle.name)
        self.gpu_check.check_pending(
            key, lambda: _container_pids(self._pod(handle), self.cgroup_root)
        )
        return self._pod_outcome(handle)

    def _kill_now(self, handle: PodHandle, number: int) -> None:
        """A kill asked for while the hooks' thread was creating the Pod."""
        if number == signals.SIGKILL:
            self.hard_kill(handle)
        else:
            self.soft_kill(handle, str(number))

    def _identity(self, handle: PodHandle) -> tuple[str, str] | None:
        """The pod's UID and QoS class, as the watch last saw it."""
        return pod_identity(self._pod(handle))

    def _pod(self, handle: PodHandle) -> Mapping[str, Any]:
        """The job's Pod as the watch last saw it ({} before it has)."""
        with self._lock:
            return self._pods.get((handle.namespace, handle.name)) or {}

    def _pod_outcome(self, handle: PodHandle) -> Outcome | None:
        if not self._pod_ended(handle):
            return None
        with self._lock:
            pod = self._pods[(handle.namespace, handle.name)]
        return pod_outcome(pod, handle, self.node)

    def directory(self, handle: PodHandle) -> str:
        return f"pod/{handle.namespace}/{handle.name}"

    def soft_kill(self, handle: PodHandle, signal: str) -> None:
        """The job's KillSig to the containers' processes; the pod stays until hard kill."""
        if self._refused_outcome(handle) is not None:
            return  # no Pod was created
        run = self._run_of(handle)
        if run is not None and not run.killed(_signal_number(signal)):
            return  # no Pod yet: its hooks' thread will not create it
        cgroup = self._identity(handle)
        directory = self._freezer(handle)
        if cgroup is None or directory is None:
            self._delete(handle, None)  # no cgroup here: the kubelet sends the stop signal
            return
        number = _signal_number(signal)
        with contextlib.suppress(OSError):
            pod_cgroup.set_frozen(directory, False)  # a frozen process acts on no signal
        signal_pod(cgroup, self.cgroup_root, number, pause_too=False)

    def hard_kill(self, handle: PodHandle) -> None:
        """Delete the pod at once and kill whatever is left in its cgroup."""
        if self._refused_outcome(handle) is not None:
            return  # no Pod was created
        run = self._run_of(handle)
        if run is not None and not run.killed(int(signals.SIGKILL)):
            return  # no Pod yet: its hooks' thread will not create it
        cgroup = self._identity(handle)
        self._delete(handle, 0)
        if cgroup is not None:
            signal_pod(cgroup, self.cgroup_root, signals.SIGKILL, pause_too=True)

    def suspend(self, handle: PodHandle) -> None:
        directory = self._freezer(handle)
        if directory is None:
            log.warning(
                "pod %s/%s has no cgroup on this host (a simulated node): not frozen",
                handle.namespace,
                handle.name,
            )
            return
        if not pod_cgroup.freeze(directory):
            log.warning("pod %s/%s: not every task froze within 5 s", handle.namespace, handle.name)

    def resume(self, handle: PodHandle) -> None:
        self._thaw(handle)

    def is_suspended(self, handle: PodHandle) -> bool:
        directory = self._freezer(handle)
        return directory is None or pod_cgroup.is_frozen(directory)

    def remove(self, handle: PodHandle) -> None:
        """The pod goes with its ExecutionJob (owner reference); a finished one now."""
        with self._lock:
            self._accounts.pop((handle.namespace, handle.name), None)
            if self._refused.pop((handle.namespace, handle.name), None) is not None:
                return  # no Pod was created: nothing to delete
        run = self._run_of(handle)
        if run is not None:
            run.killed(int(signals.SIGKILL))  # a Pod not created yet never is
            run.stop()
            self._hooked.forget(handle)
        self._delete(handle, 0)
        with self._lock:  # the job is gone: nothing asks about its pod any more
            self._pods.pop((handle.namespace, handle.name), None)
        self.gpu_check.forget((handle.namespace, handle.name))

    def _freezer(self, handle: PodHandle) -> Path | None:
        """The pod's freezer cgroup on this host; None where it has none (a simulated node)."""
        cgroup = self._identity(handle)
        return None if cgroup is None else pod_cgroup.freezer(*cgroup, self.cgroup_root)

    def _thaw(self, handle: PodHandle) -> None:
        directory = self._freezer(handle)
        if directory is not None:
            with contextlib.suppress(OSError):
                pod_cgroup.set_frozen(directory, False)

    def adopt(self, job: ExecutionJob, execution: JobExecution) -> PodHandle | None:
        """The pod a previous agent launched for this run (`execution.directory` names it),
        if it is still there: a restarted agent takes it back instead of vacating it. A pod
        that ended meanwhile is taken back too, so its exit is reported (once)."""
        namespace, name = _pod_of(execution.directory)
        if not name or namespace != (job.metadata.namespace or "default"):
            return None
        pod = self.core.read(namespace, name)
        if pod is None:
            return None
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
        found = self.core.list(f"{EXECUTION_POINT_LABEL}={self.node}")
        with self._lock:
            adopted = set(self._adopted)
        running = [
            _key(pod)
            for pod in found
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and _key(pod) not in adopted
        ]
        for namespace, name in running:
            self._delete(PodHandle(namespace, name), 0)
        return len(running)

    def _delete(self, handle: PodHandle, grace: int | None) -> None:
        self._thaw(handle)  # deleting a frozen pod hangs until it is thawed
        with contextlib.suppress(NotFoundError):
            self.core.delete(handle.namespace, handle.name, grace)
        with self._lock:  # gone: its end is the kill's
            self._pods[(handle.namespace, handle.name)] = {"status": {"phase": "Failed"}}

    def _run(self) -> None:
        # A pod this launcher deleted stays ended (`_delete` marks it so, with no metadata),
        # whatever the watch still shows of it while it terminates.
        def listed(items: list[Mapping[str, Any]]) -> None:
            with self._lock:
                deleted = {key: pod for key, pod in self._pods.items() if "metadata" not in pod}
                self._pods = {_key(item): item for item in items}
                self._pods.update(deleted)

        def changed(kind: str, found: Mapping[str, Any]) -> None:
            with self._lock:
                known = self._pods.get(_key(found))
                if kind != "DELETED" and (known is None or "metadata" in known):
                    self._pods[_key(found)] = found

        informer(
            self.core.client,
            paths.core("pods"),
            [("labelSelector", f"{EXECUTION_POINT_LABEL}={self.node}")],
            listed=listed,
            changed=changed,
            lost=lambda: None,
            stop=self._stop,
            what=f"job pods of {self.node}",
            timeout_seconds=300,
        )


def pod_account(
    settings: RunAsSettings,
    job: ExecutionJob,
    job_id: str,
    slot: SlotAd,
    job_ad_text: str,
    *,
    node: str,
) -> Account | AccountError:
    """Who the job's pod runs as where its template names no user, as a process job in
    the slot would (`kondor_core.jobs.runas`: the owner's mapped uid, else the slot's
    user); an account named without a uid is looked up in this host's password file
    (a pod's processes run with the host's uids). Never root."""
    try:
        ad = parse_ad(job_ad_text, field="the job ad")
    except ExpressionError:
        ad = None
    try:
        account = run_as(settings, owner=job.spec.owner, slot=slot.name.split("@", 1)[0], job_ad=ad)
        uid, gid = account.uid, account.gid
        if uid is None:
            try:
                entry = pwd.getpwnam(account.name)
            except KeyError:
                raise AccountError(
                    f"{account.name}: no such user on {node} ({account.reason})"
                ) from None
            uid, gid = entry.pw_uid, entry.pw_gid
        gid = uid if gid is None else gid
        if uid == 0 or gid == 0:
            raise AccountError(f"{account.name} is root (uid {uid} gid {gid}): refused")
    except AccountError as err:
        log.error("%s cannot run: %s", job_id, err)
        return err
    log.info("%s's pod runs as %s (uid %s gid %s): %s", job_id, account.name, uid, gid,
             account.reason)  # fmt: skip
    return dataclasses.replace(account, uid=uid, gid=gid)


def pod_ended(pod: Mapping[str, Any]) -> bool:
    """Whether the pod has ended (Succeeded or Failed)."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def first_termination(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The first container's `terminated` state the watch saw, None when none."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        done = (container.get("state") or {}).get("terminated")
        if done:
            return dict(done)
    return None


def signal_pod(cgroup: tuple[str, str], root: Path, number: int, *, pause_too: bool) -> None:
    """Signal `number` to the pod's processes in its cgroup (its UID and QoS class), the
    sandbox's pause too or not."""
    for pid in pod_cgroup.pod_processes(*cgroup, root):
        if pause_too or not pod_cgroup.is_pause(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, number)


def pod_identity(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """The pod's UID and QoS class (what finds its cgroup), None before the watch saw them."""
    uid = (pod.get("metadata") or {}).get("uid")
    qos = (pod.get("status") or {}).get("qosClass")
    if not uid or qos not in pod_cgroup.QOS_CLASSES:
        return None
    return str(uid), str(qos)


def pod_outcome(pod: Mapping[str, Any], handle: PodHandle, node: str) -> Outcome:
    """The end of a job whose Pod has ended: its containers' exit code and times, or a hold
    (HoldReasonCode 34) where the kernel OOM-killed one, as HTCondor holds the job."""
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
            hold_reason=f"Error from {handle.slot or node}: Job has gone over cgroup "
            f"memory limit{over}. Consider resubmitting with a higher request_memory.",
            hold_reason_code=OUT_OF_MEMORY,
            start_time=started,
            end_time=finished,
        )
    return Outcome(exit_code=code, start_time=started, end_time=finished)


def running_attributes(
    pod: Mapping[str, Any], cgroup: tuple[str, str] | None, cgroup_root: Path, created: float
) -> dict[str, Any]:
    """UPDATE_JOB_INFO's attributes: the pod's processes and CPU from its cgroup (its UID and
    QoS class) where this host has it (0 where it has none: a simulated node)."""
    started = created
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        state = container.get("state") or {}
        at = (state.get("running") or state.get("terminated") or {}).get("startedAt")
        started = _epoch(at) or started
        break
    pids: list[int] = []
    user = system = 0.0
    frozen = False
    if cgroup is not None:
        pids = [
            pid
            for pid in pod_cgroup.pod_processes(*cgroup, cgroup_root)
            if not pod_cgroup.is_pause(pid)
        ]
        user, system = _cgroup_cpu(pod_cgroup.find_pod_cgroups(*cgroup, cgroup_root))
        directory = pod_cgroup.freezer(*cgroup, cgroup_root)
        frozen = directory is not None and pod_cgroup.is_frozen(directory)
    return {
        "JobState": "Suspended" if frozen else "Running",
        "JobPid": min(pids, default=0),
        "NumPids": len(pids),
        "JobStartDate": int(started),
        "RemoteSysCpu": round(system, 3),
        "RemoteUserCpu": round(user, 3),
        "ImageSize": _image_size_kib(pids),
    }


def _container_pids(pod: Mapping[str, Any], cgroup_root: Path) -> list[int]:
    """The pod's container processes on this host (its pause process left out)."""
    identity = pod_identity(pod)
    if identity is None:
        return []
    return [
        p for p in pod_cgroup.pod_processes(*identity, cgroup_root) if not pod_cgroup.is_pause(p)
    ]


def _api_message(error: ApiError) -> str:
    """The API server's own message of a refusal (its Status), else the status and reason."""
    return error.message or f"{error.status} {error.reason}"


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


def _cgroup_cpu(directories: list[Path]) -> tuple[float, float]:
    """User and system CPU seconds of a pod: v2's cpu.stat, else v1's cpuacct.stat (ticks)."""
    for directory in directories:
        with contextlib.suppress(OSError, ValueError, KeyError):
            text = (directory / "cpu.stat").read_text()
            if "user_usec" in text:
                fields = dict(line.split() for line in text.splitlines() if line.count(" ") == 1)
                return int(fields["user_usec"]) / 1e6, int(fields["system_usec"]) / 1e6
    ticks = os.sysconf("SC_CLK_TCK")
    for directory in directories:
        with contextlib.suppress(OSError, ValueError, KeyError):
            text = (directory / "cpuacct.stat").read_text()
            fields = dict(line.split() for line in text.splitlines() if line.count(" ") == 1)
            return int(fields["user"]) / ticks, int(fields["system"]) / ticks
    return 0.0, 0.0


def _image_size_kib(pids: list[int]) -> int:
    """ImageSize: the processes' virtual memory in KiB (as the starter sums it)."""
    page_kib = os.sysconf("SC_PAGE_SIZE") // 1024
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[0]) * page_kib
    return total


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
