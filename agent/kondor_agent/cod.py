"""The agent's COD claims (the reference's "Computing On Demand (COD)"): one more claim on a
slot beside its batch claim.

Every polling cycle (and at once when a CodClaim labelled with this node changes) `tick`:

- answers new requests: the owner must be in the policy's VALID_COD_USERS and a slot must
  match the name or requirements (`kondor_core.startd.cod`), else the claim is Refused with
  the startd's message; else it is created Idle with a claim ID and its lease;
- steps each claim towards its spec (`cod.commands` then `cod.step`): activate starts the
  application as a real process (the `<Keyword>_*` knobs or the inline job ad) in a cgroup
  of its own under the slot, suspend and resume freeze and thaw it, deactivate sends its
  KillSig (-fast: SIGKILL), release (the CodClaim deleted) or an expired lease shuts it down
  and destroys the claim, leaving no process;
- says which slots' batch jobs are suspended meanwhile (`suspended_slots`, which the loop
  hands to the JobRunner: the batch job's cgroup is frozen by the existing suspend path) and
  what the slot ads show (`slot_attributes`: NumCODClaims and the per-claim attributes).

COD claims do not outlive the startd ("if the condor_startd daemon is restarted for any
reason, all existing COD claims will be destroyed"): a restarted agent marks the claims an
earlier one held Released, and the earlier applications die with the launcher's `clear`.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from pydantic import ValidationError

from kondor_agent.kube import KubernetesAPI, NotFoundError, WatchedNodeObjects
from kondor_agent.runtimes.process_launcher import JobHandle, LaunchError, ProcessLauncher
from kondor_core import startd
from kondor_core.api import COD_CLAIMS, CodClaim, CodClaimStatus
from kondor_core.api.job import ProcessRuntime
from kondor_core.api.meta import EXECUTION_POINT_LABEL, format_time, model_patch
from kondor_core.classads import ExpressionError, parse_ad
from kondor_core.jobs.runas import Account, AccountError, RunAsSettings, run_as
from kondor_core.startd import cod

log = logging.getLogger("kondor_agent.cod")


class CodClaimAPI(Protocol):
    #: The claims have been listed once.
    synced: bool

    def claims(self) -> list[dict[str, Any]]:
        """The CodClaims labelled with this node, as plain JSON."""

    def patch_claim_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """Merge-patch a claim's status subresource."""


@dataclass
class _Held:
    """One claim this startd holds."""

    claim: cod.Claim
    namespace: str
    name: str
    spec: Any
    handle: JobHandle | None = None
    application: cod.Application | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    exit_time: float | None = None
    reason: str | None = None
    written: dict[str, Any] | None = None
    pid: int | None = None


class CodRunner:
    """The COD claims of one node: requested, stepped, and their applications run."""

    def __init__(
        self,
        api: CodClaimAPI,
        launcher: ProcessLauncher,
        node_name: str,
        *,
        clock: Callable[[], float],
        killing_timeout: float = cod.DEFAULT_KILLING_TIMEOUT,
    ) -> None:
        self.api = api
        self.launcher = launcher
        self.node_name = node_name
        self.clock = clock
        self.killing_timeout = killing_timeout
        self.started = clock()
        self._sequence = 0
        #: uid -> the claim held.
        self.held: dict[str, _Held] = {}
        #: Claims answered for good (refused, released, an earlier agent's): uid.
        self._answered: set[str] = set()

    # -- what the loop reads -------------------------------------------------------------

    def suspended_slots(self) -> set[str]:
        """The slots whose batch job a COD application suspends now."""
        claims = [held.claim for held in self.held.values()]
        return {claim.slot for claim in claims if cod.batch_suspended(claims, claim.slot)}

    def slot_attributes(self) -> dict[str, dict[str, Any]]:
        return cod.slot_attributes(held.claim for held in self.held.values())

    @property
    def busy(self) -> bool:
        """Whether an application runs (its exit is watched between polling ticks)."""
        return any(
            held.handle is not None and held.claim.state is not cod.State.IDLE
            for held in self.held.values()
        )

    def any_ended(self) -> bool:
        return any(
            held.handle is not None and self.launcher.has_result(held.handle)
            for held in self.held.values()
        )

    # -- one cycle ---------------------------------------------------------------------------

    def tick(self, node: startd.Startd, now: float) -> None:
        if not self.api.synced:
            return
        objects: dict[str, CodClaim] = {}
        for raw in self.api.claims():
            try:
                found = CodClaim.model_validate(raw)
            except ValidationError as err:
                log.warning("skipping a CodClaim that does not parse: %s", err)
                continue
            objects[found.metadata.uid or f"{found.metadata.namespace}/{found.metadata.name}"] = (
                found
            )
        for uid, found in objects.items():
            if uid in self.held:
                self.held[uid].spec = found.spec
            elif uid not in self._answered:
                self._request(uid, found, node, now)
        self._follow_slots(node, now)
        for uid in list(self.held):
            self._advance(uid, objects.get(uid), node, now)

    def _follow_slots(self, node: startd.Startd, now: float) -> None:
        """A claim whose dynamic slot is gone (its batch job ended and the slot was released)
        stays on the partitionable slot its resources went back to."""
        if not self.held:
            return
        names = {ad.name for ad in startd.published_ads(node, {}, now)}
        for held in self.held.values():
            slot = held.claim.slot
            if slot in names:
                continue
            parent = cod.parent_slot(slot)
            if parent is not None and parent in names:
                log.info("COD claim %s: %s is gone; on %s", held.claim.claim_id, slot, parent)
                held.claim = replace(held.claim, slot=parent)

    def _request(self, uid: str, found: CodClaim, node: startd.Startd, now: float) -> None:
        """A new CodClaim: condor_cod_request, answered by this startd."""
        namespace = found.metadata.namespace or "default"
        name = found.metadata.name
        status = found.status
        if status is not None and status.state is not None:
            self._answered.add(uid)
            if status.state not in ("Refused", "Released"):
                why = "the node's agent restarted: COD claims do not outlive it"
                self._write_raw(
                    namespace,
                    name,
                    CodClaimStatus(
                        **{
                            **status.model_dump(),
                            "state": "Released",
                            "entered_current_state": int(now),
                            "reason": why,
                        }
                    ),
                )
            return
        owner = found.spec.owner or ""
        refusal = cod.refuse_user(node.policy.macros, owner)
        slot = ""
        if refusal is None:
            ads = startd.published_ads(node, {}, now)
            try:
                slot = cod.choose_slot(
                    [(ad.name, ad.to_classad()) for ad in ads],
                    name=found.spec.slot,
                    requirements=found.spec.requirements,
                )
            except cod.CodError as err:
                refusal = str(err)
        if refusal is not None:
            self._answered.add(uid)
            log.info("COD request %s/%s refused: %s", namespace, name, refusal)
            self._write_raw(
                namespace,
                name,
                CodClaimStatus(
                    execution_point=self.node_name,
                    state="Refused",
                    entered_current_state=int(now),
                    reason=refusal,
                ),
            )
            return
        self._sequence += 1
        claim = cod.request(
            claim_id=cod.claim_id(self.node_name, self.started, self._sequence),
            cod_id=cod.next_cod_id(held.claim for held in self.held.values()),
            slot=slot,
            owner=owner,
            lease=found.spec.lease,
            now=now,
        )
        claim = replace(claim, renewal=found.spec.renewal)
        log.info("COD claim %s on %s for %s (%s/%s)", claim.claim_id, slot, owner, namespace, name)
        self.held[uid] = _Held(claim, namespace, name, found.spec)
        self._write(self.held[uid])

    def _advance(self, uid: str, found: CodClaim | None, node: startd.Startd, now: float) -> None:
        held = self.held[uid]
        if held.handle is not None and held.claim.state is not cod.State.IDLE:
            result = self.launcher.poll(held.handle)
            if result is not None:
                held.exit_code = result.exit_code
                held.exit_signal = result.exit_signal
                held.exit_time = result.end_time or now
                if result.hold_reason is not None:
                    held.reason = result.hold_reason
                held.claim = cod.step(held.claim, cod.Verb.EXITED, now).claim
                self._cleanup(held)
        spec = held.spec
        wanted = cod.Wanted(
            state=spec.state,
            activation=spec.activation,
            renewal=spec.renewal,
            fast=spec.fast,
            released=found is None,
        )
        for verb in cod.commands(held.claim, wanted, now, killing_timeout=self.killing_timeout):
            try:
                stepped = cod.step(held.claim, verb, now)
            except cod.CodError as err:
                held.reason = str(err)
                continue
            claim = stepped.claim
            if verb is cod.Verb.ACTIVATE:
                claim = replace(claim, activation=spec.activation)
                if not self._activate(held, node, now):
                    held.claim = replace(held.claim, activation=spec.activation)
                    break
                assert held.application is not None
                claim = replace(
                    claim, keyword=held.application.keyword, job_id=held.application.job_id
                )
            elif verb is cod.Verb.RENEW:
                claim = replace(claim, renewal=spec.renewal)
            held.claim = claim
            self._act(held, stepped.actions)
        if held.claim.state is cod.State.RELEASED:
            self._cleanup(held, remove=True)
            del self.held[uid]
            self._answered.add(uid)
            if found is not None:
                self._write(held)
            log.info("COD claim %s released", held.claim.claim_id)
            return
        self._write(held)

    def _activate(self, held: _Held, node: startd.Startd, now: float) -> bool:
        """Start the application (condor_cod_activate); False, with the reason kept, when
        its job ad cannot be built."""
        spec = held.spec
        try:
            app = cod.application(
                node.policy.macros,
                owner=held.claim.owner,
                keyword=spec.keyword,
                job_ad=spec.job_ad,
                cluster_id=spec.cluster_id,
                proc_id=spec.proc_id,
            )
        except cod.CodError as err:
            held.reason = f"activation {spec.activation} failed: {err}"
            log.info("COD claim %s: %s", held.claim.claim_id, held.reason)
            return False
        self._cleanup(held, remove=True)  # the previous activation's sandbox
        ads = {ad.name: ad for ad in startd.published_ads(node, {}, now)}
        slot_ad = ads.get(held.claim.slot)
        runtime = ProcessRuntime(
            executable=app.cmd,
            arguments=list(app.args),
            environment=dict(app.env),
            working_directory=app.iwd,
            input=app.input,
            output=app.output,
            error=app.error,
        )
        # The claim ID's sequence keeps a re-created claim of the same name apart.
        number = held.claim.claim_id.rpartition("#")[2]
        job_id = f"cod.{held.namespace}.{held.name}.{number}.{spec.activation}"
        slot = held.claim.slot.split("@", 1)[0]
        account = _account(node.policy.macros, app, slot)
        try:
            held.handle = self.launcher.launch(
                job_id,
                runtime,
                app.ad_text,
                slot_ad.to_classad().printOld() if slot_ad is not None else "",
                slot=slot,
                account=account,
            )
        except (LaunchError, OSError, ValueError) as err:
            held.reason = f"activation {spec.activation} failed: cannot start {app.cmd}: {err}"
            log.warning("COD claim %s: %s", held.claim.claim_id, held.reason)
            return False
        held.application = app
        held.exit_code = held.exit_signal = held.exit_time = None
        held.reason = None
        held.pid = None
        log.info("COD claim %s: started %s (%s)", held.claim.claim_id, app.cmd, app.job_id)
        return True

    def _act(self, held: _Held, actions: tuple[cod.Act, ...]) -> None:
        handle = held.handle
        if handle is None:
            return
        for act in actions:
            if act is cod.Act.FREEZE:
                self.launcher.suspend(handle)
            elif act is cod.Act.THAW:
                self.launcher.resume(handle)
            elif act is cod.Act.SOFT_KILL:
                sig = held.application.kill_sig if held.application is not None else "SIGTERM"
                self.launcher.soft_kill(handle, int(signal.Signals[sig]))
            elif act is cod.Act.HARD_KILL:
                self.launcher.hard_kill(handle)

    def _cleanup(self, held: _Held, *, remove: bool = False) -> None:
        """After the application: its cgroup's leftovers killed; with `remove`, its sandbox
        deleted too (the claim is released, or a new activation starts)."""
        if held.handle is None:
            return
        cgroups = self.launcher.cgroups
        cgroup = held.handle.cgroup
        if cgroups.enabled and cgroups.exists(cgroup) and cgroups.pids(cgroup):
            cgroups.kill(cgroup)  # what the application left behind: no process outlives it
        if remove:
            self.launcher.remove(held.handle)
            held.handle = None

    # -- status ------------------------------------------------------------------------------

    def _write(self, held: _Held) -> None:
        claim = held.claim
        if held.handle is not None and held.pid is None:
            held.pid = self.launcher.job_pid(held.handle)
        status = CodClaimStatus(
            claim_id=claim.claim_id,
            cod_id=claim.cod_id,
            execution_point=self.node_name,
            slot=claim.slot,
            state=claim.state.value,
            entered_current_state=int(claim.entered),
            lease_expiry=None if claim.lease_expiry is None else format_time(claim.lease_expiry),
            activation=claim.activation,
            renewal=claim.renewal,
            keyword=claim.keyword,
            job_id=claim.job_id,
            pid=held.pid if held.handle is not None and claim.state is not cod.State.IDLE else None,
            directory=str(held.handle.directory) if held.handle is not None else None,
            exit_code=held.exit_code,
            exit_signal=held.exit_signal,
            exit_time=None if held.exit_time is None else format_time(held.exit_time),
            reason=claim.reason or held.reason,
        )
        dumped = status.model_dump()
        if dumped == held.written:
            return
        if self._write_raw(held.namespace, held.name, status):
            held.written = dumped

    def _write_raw(self, namespace: str, name: str, status: CodClaimStatus) -> bool:
        try:
            self.api.patch_claim_status(namespace, name, {"status": model_patch(status)})
        except NotFoundError:
            return False
        except Exception as err:  # written again at the next change
            log.warning("cannot write the status of codclaim %s/%s: %s", namespace, name, err)
            return False
        return True


class WatchedCodClaims(WatchedNodeObjects):
    """The CodClaims of one node (labelled `kondor.io/execution-point=<node>` at admission),
    in every namespace, kept by a watch; `on_change` is called on every change."""

    def __init__(
        self,
        api: KubernetesAPI,
        node: str,
        on_change: Callable[[], None] | None = None,
        *,
        timeout_seconds: int = 300,
    ) -> None:
        selector = {"label_selector": f"{EXECUTION_POINT_LABEL}={node}"}
        super().__init__(
            api, node, COD_CLAIMS, selector, on_change, timeout_seconds=timeout_seconds
        )

    def claims(self) -> list[dict[str, Any]]:
        return self.objects()

    def patch_claim_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self.patch_status(namespace, name, patch)


def _account(macros: Mapping[str, str], app: cod.Application, slot: str) -> Account | AccountError:
    """Who a COD application runs as: its Owner (the claim's authenticated user) where the
    policy maps that user to a uid and STARTER_ALLOW_RUNAS_OWNER allows, else the slot's
    user, as for a batch job (`kondor_core.jobs.runas`); never the agent's root."""
    try:
        ad = parse_ad(app.ad_text, field="the COD job ad")
    except ExpressionError:
        ad = None
    try:
        account = run_as(RunAsSettings.from_macros(macros), owner=app.owner, slot=slot, job_ad=ad)
    except AccountError as err:
        log.error("COD application of %s cannot run: %s", app.owner, err)
        return err
    log.info(
        "COD application of %s runs as %s (uid %s): %s",
        app.owner,
        account.name,
        account.uid,
        account.reason,
    )
    return account
