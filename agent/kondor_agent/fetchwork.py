"""The startd's fetch-work hooks on the node (the reference's "Job Hooks That Fetch Work";
what they mean is `kondor_core.jobs.fetchwork`).

Every slot whose keyword defines `<Keyword>_HOOK_FETCH_WORK` runs it when its FetchWorkDelay
has passed since the last fetch completed (and at once when fetched work it ran ends), with
the slot ad on stdin, in a worker thread so the agent's polling never waits for it. A job ad
printed back is weighed against the slot as it is then (`fetch_decision`: START on an
Unclaimed slot, RANK above the running job's on a Claimed one); REPLY_FETCH is told `accept`
or `reject` with the job ad and the slot ad, and not waited for. An accepted job becomes an
ExecutionJob owned by the ExecutionPoint, labelled with the keyword, pinned to this node:
the negotiator matches it here and the startd claims, polices and preempts it as any job.
While it waits to be matched the slot fetches no more. When the startd evicts fetched work
(preemption, policy, drain), EVICT_CLAIM is called with the job ad and the slot ad, and the
ExecutionJob is removed: the work goes back to its source, as in HTCondor.

A hook is a program in the hooks directory (symlinks resolved; its stderr goes to the
agent's log) or an http(s) URL: the hook's stdin is POSTed as `text/plain` ClassAd text, its
argument (accept/reject) in the `argument` query parameter and the `Kondor-Hook-Argument`
header, the hook's name in `Kondor-Hook`; the reply body is the hook's output, a 2xx status
is exit 0 (204 or an empty body: no work) and any other status the exit status, which for
FETCH_WORK is a failure rather than "no work"; TLS is verified (KONDOR_HOOK_CA_FILE names a
CA bundle). Every hook is bounded by its timeout (`<Keyword>_HOOK_<hook>_TIMEOUT`, else
KONDOR_JOB_HOOK_TIMEOUT, else 60 s). Failures are logged and posted as Events on the
ExecutionPoint, rate-limited.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from kondor_agent.execute.hookpath import RefusedExecutableError, resolve_hook
from kondor_agent.execute.hookrun import HookRun, run_hook
from kondor_core import startd
from kondor_core.api import EXECUTION_JOBS, ExecutionJob
from kondor_core.classads import ExpressionError, parse_ad
from kondor_core.jobs import job_ad, job_id
from kondor_core.jobs.fetchwork import (
    DEFAULT_NAMESPACE,
    EVICT_CLAIM,
    FETCH_WORK,
    REPLY_FETCH,
    FetchedJobError,
    FetchHooks,
    fetch_decision,
    fetch_due,
    fetch_hooks,
    fetch_work_delay,
    fetched_job,
    fetched_job_name,
    fetched_keyword,
    is_url,
    keyword_fetch_hooks,
    reply_input,
)
from kondor_core.jobs.hooks import HookSettingsError, hook_timeout
from kondor_kube import managers, paths
from kondor_kube.client import Client
from kondor_kube.config import ApiClient
from kondor_kube.events import EVENTS_NAMESPACE, agent_warning

log = logging.getLogger("kondor_agent.fetchwork")

#: Bytes of a URL hook's reply kept (as a program's stdout is bounded).
MAX_REPLY_BYTES = 1024 * 1024
#: A fetched job not matched within this many seconds no longer stops its slot fetching.
AWAIT_MATCH_SECONDS = 120.0


class FetchAPI(Protocol):
    def create_job(self, manifest: Mapping[str, Any]) -> None:
        """Create the ExecutionJob `manifest`."""

    def remove_job(self, namespace: str, name: str) -> None:
        """condor_rm the job: `spec.remove: true`."""

    def post_event(self, node: str, uid: str | None, reason: str, message: str) -> None:
        """A Warning Event on the ExecutionPoint `node`."""


class KubernetesFetchAPI:
    """FetchAPI over `kondor_kube`, on the connection the agent already has, writing as the
    agent's field manager."""

    def __init__(self, api_client: ApiClient) -> None:
        self.client = Client(api_client, field_manager=managers.AGENT)

    def create_job(self, manifest: Mapping[str, Any]) -> None:
        namespace = manifest["metadata"]["namespace"]
        self.client.create(paths.kondor(EXECUTION_JOBS, namespace=namespace), manifest)

    def remove_job(self, namespace: str, name: str) -> None:
        path = paths.kondor(EXECUTION_JOBS, name, namespace=namespace)
        self.client.merge_patch(path, {"spec": {"remove": True}})

    def post_event(self, node: str, uid: str | None, reason: str, message: str) -> None:
        body = agent_warning(node, reason, message, uid=uid)
        self.client.create(paths.core("events", namespace=EVENTS_NAMESPACE), body)


@dataclass
class EventRation:
    """Events rationed: one per (reason, message) per `quiet` seconds, and at most `burst`
    in any `quiet` seconds (a hook failing every second must not flood the API server)."""

    quiet: float = 60.0
    burst: int = 10
    _last: dict[tuple[str, str], float] = field(default_factory=dict)
    _sent: list[float] = field(default_factory=list)

    def allow(self, reason: str, message: str, now: float) -> bool:
        self._sent = [at for at in self._sent if now - at < self.quiet]
        key = (reason, message)
        last = self._last.get(key)
        if (last is not None and now - last < self.quiet) or len(self._sent) >= self.burst:
            return False
        self._last[key] = now
        self._sent.append(now)
        return True


class HookCaller:
    """Runs one hook: a program from the hooks directory or an http(s) URL."""

    def __init__(self, hooks_dir: Path, *, environment: Mapping[str, str] | None = None) -> None:
        self.hooks_dir = hooks_dir
        self.environment = dict(os.environ if environment is None else environment)

    def call(
        self,
        target: str,
        stdin: str,
        *,
        knob: str,
        hook: str,
        timeout: float,
        argument: str | None = None,
        ca_file: str | None = None,
    ) -> HookRun:
        if is_url(target):
            return self._post(
                target, stdin, knob, hook, timeout, argument=argument, ca_file=ca_file
            )
        try:
            program = resolve_hook(target, self.hooks_dir, where=knob)
        except RefusedExecutableError as err:
            return HookRun(None, None, "", str(err))
        argv = [str(program)] + ([argument] if argument else [])
        spec = {"scratch": str(self.hooks_dir), "environment": self.environment}
        return run_hook(argv, stdin, spec, timeout=timeout, name=knob)

    @staticmethod
    def _post(
        url: str,
        stdin: str,
        knob: str,
        hook: str,
        timeout: float,
        *,
        argument: str | None,
        ca_file: str | None,
    ) -> HookRun:
        headers = {"Content-Type": "text/plain; charset=utf-8", "Kondor-Hook": hook}
        params = {}
        if argument:
            headers["Kondor-Hook-Argument"] = argument
            params["argument"] = argument
        verify: ssl.SSLContext | bool = True
        if ca_file:
            try:
                verify = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as err:
                return HookRun(None, None, "", f"{knob}: KONDOR_HOOK_CA_FILE {ca_file}: {err}")
        try:
            with httpx.Client(timeout=timeout, verify=verify) as http:
                reply = http.post(url, content=stdin.encode(), headers=headers, params=params)
        except httpx.TimeoutException:
            return HookRun(None, None, "", f"{knob} ({url}) did not answer within {timeout:g} s")
        except (httpx.HTTPError, OSError) as err:
            return HookRun(None, None, "", f"{knob} ({url}) could not be reached: {err}")
        body = reply.content[:MAX_REPLY_BYTES].decode(errors="replace")
        if len(reply.content) > MAX_REPLY_BYTES:
            return HookRun(None, None, "", f"{knob} ({url}) answered more than 1 MiB")
        code = 0 if reply.is_success else reply.status_code
        return HookRun(code, None, body if reply.is_success else "", None)


@dataclass
class _Slot:
    """What one slot's fetching remembers."""

    last_done: float | None = None
    pending: Future[HookRun] | None = None
    #: The slot ad the pending fetch was given (text), for REPLY_FETCH.
    asked_with: str = ""
    #: The fetched job it accepted and waits to see matched: (namespace, name, since).
    awaiting: tuple[str, str, float] | None = None
    #: The fetched job it was running at the last step (its end fetches at once).
    running_fetched: str | None = None
    #: Its ad as last published (EVICT_CLAIM's slot ad).
    ad: Any = None


class FetchWork:
    """The node's fetch-work hooks: `step()` every polling cycle (and when a fetch ends)."""

    def __init__(
        self,
        api: FetchAPI,
        caller: HookCaller,
        node: str,
        *,
        clock: Callable[[], float] = time.time,
        workers: int = 2,
    ) -> None:
        self.api = api
        self.caller = caller
        self.node = node
        self.clock = clock
        self.slots: dict[str, _Slot] = {}
        self.ration = EventRation()
        #: Called when a fetch completes (the loop wakes to weigh its job).
        self.on_done: Callable[[], None] | None = None
        self.execution_point_uid: str | None = None
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fetch-work")
        self._lock = threading.Lock()
        self._macros: Mapping[str, str] = {}

    def stop(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- each cycle --------------------------------------------------------------------------

    def step(
        self,
        node: startd.Startd,
        running: Mapping[str, ExecutionJob],
        jobs: Mapping[str, ExecutionJob],
        now: float,
    ) -> float | None:
        """Fetch where due, weigh what came back; when the next fetch is due (None: none).

        `running` maps a slot name to the job it runs; `jobs` maps job ids to the
        ExecutionJobs labelled with this node (to see an accepted job matched)."""
        macros = node.policy.macros
        self._macros = macros
        if not any(name.upper().endswith("_HOOK_FETCH_WORK") for name in macros):
            return None  # no slot fetches: no slot ads built for nothing each cycle
        ads = {ad.name: ad for ad in startd.published_ads(node, {}, now)}
        next_due: float | None = None
        for name, ad in ads.items():
            slot_id = int(ad.attributes.get("SlotID", 1))
            try:
                hooks = fetch_hooks(
                    macros, slot_id, timeout=hook_timeout(macros, "KONDOR_JOB_HOOK")
                )
            except HookSettingsError as err:
                self._failed("FetchWorkFailed", str(err), now)
                continue
            if hooks is None:
                continue
            slot = self.slots.setdefault(name, _Slot())
            classad = ad.to_classad()
            slot.ad = classad
            current = running.get(name)
            current_id = job_id(current) if current is not None else None
            if slot.running_fetched is not None and slot.running_fetched != current_id:
                slot.last_done = None  # "the condor_starter exits after completing fetched work"
            fetched = current is not None and fetched_keyword(current.metadata.labels)
            slot.running_fetched = current_id if fetched else None
            if slot.pending is not None:
                if slot.pending.done():
                    self._weigh(name, slot, hooks, ads, now)
                continue
            if slot.awaiting is not None and not self._still_awaiting(slot, jobs, now):
                slot.awaiting = None
            if slot.awaiting is not None:
                continue
            delay = fetch_work_delay(
                _upper_get(macros, "FETCHWORKDELAY"),
                classad,
                None if current is None else _ad_of(current),
            )
            if fetch_due(slot.last_done, delay, now):
                self._fetch(slot, hooks, classad, macros)
            else:
                assert slot.last_done is not None
                due = slot.last_done + delay
                next_due = due if next_due is None else min(next_due, due)
        for gone in [name for name, slot in self.slots.items() if name not in ads]:
            if self.slots[gone].pending is None:  # a released dynamic slot
                del self.slots[gone]
        return next_due

    def _still_awaiting(self, slot: _Slot, jobs: Mapping[str, Any], now: float) -> bool:
        assert slot.awaiting is not None
        namespace, name, since = slot.awaiting
        job = jobs.get(f"{namespace}/{name}")
        if now - since > AWAIT_MATCH_SECONDS:
            return False
        if job is None:
            return True  # not matched here yet (the watch sees the node's matched jobs)
        status = job.status
        return status is None or (status.job_status == "Idle" and not status.claim_id)

    def _fetch(self, slot: _Slot, hooks: FetchHooks, classad: Any, macros: Any) -> None:
        program = hooks.program(FETCH_WORK)
        assert program is not None
        knob = hooks.knob(FETCH_WORK)
        slot_text = str(classad.printOld())
        slot.asked_with = slot_text
        timeout = hook_timeout(macros, knob)
        ca_file = _upper_get(macros, "KONDOR_HOOK_CA_FILE")
        future = self._pool.submit(
            self.caller.call,
            program,
            slot_text,
            knob=knob,
            hook=FETCH_WORK,
            timeout=timeout,
            ca_file=ca_file,
        )
        slot.pending = future
        if self.on_done is not None:
            on_done = self.on_done
            future.add_done_callback(lambda _f: on_done())

    def _weigh(
        self, name: str, slot: _Slot, hooks: FetchHooks, ads: Mapping[str, Any], now: float
    ) -> None:
        """A fetch came back: its job taken or refused, REPLY_FETCH told which."""
        assert slot.pending is not None
        future, slot.pending = slot.pending, None
        slot.last_done = now
        knob = hooks.knob(FETCH_WORK)
        try:
            run = future.result()
        except Exception as err:  # the worker itself failed
            self._failed("FetchWorkFailed", f"{knob}: {err}", now)
            return
        if run.failure is not None:
            self._failed("FetchWorkFailed", run.failure, now)
            return
        program = hooks.program(FETCH_WORK) or ""
        if run.exit_code and is_url(program):
            # A program's exit status is ignored (the manual); a service's error status is
            # no "no work": said, as a failure.
            self._failed("FetchWorkFailed", f"{knob} ({program}) answered {run.exit_code}", now)
            return
        if not run.stdout.strip():
            return  # "If there is no work, the hook should return no output."
        try:
            job = parse_ad(run.stdout, field=f"the output of {knob}")
        except ExpressionError as err:
            self._failed("FetchWorkFailed", f"{knob} printed no job ClassAd: {err}", now)
            return
        ad = ads[name]
        slot_ad = ad.to_classad()
        job["HookKeyword"] = hooks.keyword  # "the condor_startd will insert the keyword"
        decision = fetch_decision(slot_ad, job)
        manifest: dict[str, Any] | None = None
        if decision.accept:
            namespace = _upper_get(self._macros, "KONDOR_FETCH_WORK_NAMESPACE") or DEFAULT_NAMESPACE
            job_name = fetched_job_name(self.node, hooks.keyword, run.stdout, now)
            try:
                manifest = fetched_job(
                    job,
                    node=self.node,
                    keyword=hooks.keyword,
                    name=job_name,
                    namespace=namespace,
                    execution_point_uid=self.execution_point_uid,
                )
                self.api.create_job(manifest)
            except FetchedJobError as err:
                decision = type(decision)(False, f"the fetched job cannot run here: {err}")
                self._failed("FetchedJobRefused", f"{knob}: {err}", now)
                manifest = None
            except Exception as err:  # the API server refused it (admission, RBAC)
                decision = type(decision)(False, f"the ExecutionJob was not created: {err}")
                self._failed("FetchedJobRefused", f"{knob}: creating {job_name}: {err}", now)
                manifest = None
        log.info(
            "%s: %s the job %s fetched: %s",
            name,
            "accepted" if decision.accept else "rejected",
            knob,
            decision.reason,
        )
        if manifest is not None:
            metadata = manifest["metadata"]
            slot.awaiting = (metadata["namespace"], metadata["name"], now)
        self._advise(hooks, REPLY_FETCH, job, slot_ad, argument=decision.reply)

    def _advise(
        self, hooks: FetchHooks, hook: str, job: Any, slot_ad: Any, *, argument: str | None
    ) -> None:
        """REPLY_FETCH or EVICT_CLAIM: "will not wait for this hook to return ... it ignores
        all output"; a failure is logged and an Event."""
        program = hooks.program(hook)
        if program is None:
            return
        knob = hooks.knob(hook)
        stdin = reply_input(str(job.printOld()), str(slot_ad.printOld()))
        ca_file = _upper_get(self._macros, "KONDOR_HOOK_CA_FILE")

        def call() -> HookRun:
            return self.caller.call(
                program,
                stdin,
                knob=knob,
                hook=hook,
                timeout=hook_timeout(self._macros, knob),
                argument=argument,
                ca_file=ca_file,
            )

        def done(future: Future[HookRun]) -> None:
            try:
                run = future.result()
            except Exception as err:
                run = HookRun(None, None, "", f"{knob}: {err}")
            if run.failure is not None:
                self._failed(f"{hook.title().replace('_', '')}Failed", run.failure, self.clock())

        self._pool.submit(call).add_done_callback(done)

    # -- eviction ------------------------------------------------------------------------------

    def evicted(self, job: ExecutionJob, slot: str) -> None:
        """The startd evicts the claim of `job` on `slot`: for fetched work (its label names
        the keyword), EVICT_CLAIM with the job ad and the slot ad, and the job is removed (its
        source hands it out again if it wants it run). A submitted job: nothing."""
        keyword = fetched_keyword(job.metadata.labels)
        if keyword is None:
            return
        now = self.clock()
        try:
            hooks = keyword_fetch_hooks(
                self._macros, keyword, timeout=hook_timeout(self._macros, "KONDOR_JOB_HOOK")
            )
        except HookSettingsError as err:
            self._failed("EvictClaimFailed", str(err), now)
            hooks = None
        # A dynamic slot's ad, else its partitionable parent's (slot1_2@node -> slot1@node).
        known = self.slots.get(slot) or self.slots.get(re.sub(r"_\d+@", "@", slot))
        slot_ad = known.ad if known is not None and known.ad is not None else parse_ad("", field="")
        if hooks is not None:
            self._advise(hooks, EVICT_CLAIM, _ad_of(job), slot_ad, argument=None)
        try:
            self.api.remove_job(job.metadata.namespace or "default", job.metadata.name)
        except Exception as err:
            log.warning("cannot remove the evicted fetched job %s: %s", job_id(job), err)

    # -- failures ------------------------------------------------------------------------------

    def hook_failed(self, reason: str, message: str) -> None:
        """Another hook failed (PREPARE_JOB held a job): a rationed Event too."""
        self._failed(reason, message, self.clock())

    def _failed(self, reason: str, message: str, now: float) -> None:
        log.warning("%s: %s", reason, message)
        with self._lock:  # REPLY_FETCH and EVICT_CLAIM fail in the workers
            if not self.ration.allow(reason, message, now):
                return
        try:
            self.api.post_event(self.node, self.execution_point_uid, reason, message)
        except Exception as err:  # Events are best effort
            log.warning("cannot post Event %s: %s", reason, err)


def _ad_of(job: ExecutionJob) -> Any:
    """The job ad of a running job, as its slot's FetchWorkDelay and EVICT_CLAIM see it."""
    return job_ad(job, job_status=None if job.status is not None else "Running")


def _upper_get(macros: Mapping[str, str], name: str) -> str | None:
    for key, value in macros.items():
        if key.upper() == name and value.strip():
            return value.strip()
    return None
