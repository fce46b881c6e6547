"""COD claims in `kondor simulate --timeline`: condor_cod's commands from a scenario's `cod`
steps, carried out by the same functions the agent uses (`kondor_core.startd.cod`), with
the simulated node answering as a cooperative one: an application asked to exit (KillSig or
SIGKILL) is gone at the next tick. Each change of a claim's state is a row, with the slot's
batch claim as the node's tick leaves it (`settle`): its job's State/Activity, Claimed/Suspended
"by COD" while a COD application runs (the engine's SuspendForCod, `cod.engine_events`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from kondor_core.policy.model import Activity, Event
from kondor_core.sim.scenario import CodStep
from kondor_core.startd import cod
from kondor_core.startd.node import Startd, published_ads

_VERBS = {
    "activate": cod.Verb.ACTIVATE,
    "suspend": cod.Verb.SUSPEND,
    "resume": cod.Verb.RESUME,
    "renew": cod.Verb.RENEW,
    "exit": cod.Verb.EXITED,
}


@dataclass
class CodTimeline:
    """The COD claims of the simulated node, and what happened to them."""

    node_name: str
    claims: dict[str, cod.Claim] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    #: Applications told to exit, and when: gone at the next tick.
    exiting: dict[str, float] = field(default_factory=dict)
    sequence: int = 0
    #: The time of the command or tick being carried out.
    _now: float = 0.0

    def apply(self, item: CodStep, node: Startd, now: float) -> None:
        """One condor_cod command; a refused one is a row saying why (as condor_cod prints
        its error), the claim unchanged."""
        self._now = now
        if item.verb == "request":
            self._request(item, node, now)
            return
        claim = self.claims.get(item.claim)
        if claim is None:
            self._row(item.claim, None, ("-", "Refused"), f"no claim {item.claim!r}")
            return
        if claim.owner != item.user:
            same = (claim.state.value, claim.state.value)
            self._row(item.claim, claim, same, f"{item.user} may not act on {claim.owner}'s claim")
            return
        if item.verb == "activate":
            try:
                app = cod.application(
                    node.policy.macros,
                    owner=claim.owner,
                    keyword=item.keyword,
                    job_ad=item.job_ad,
                    cluster_id=item.cluster,
                    proc_id=item.proc,
                )
            except cod.CodError as err:
                same = (claim.state.value, claim.state.value)
                self._row(item.claim, claim, same, f"activate refused: {err}")
                return
            claim = replace(claim, keyword=app.keyword, job_id=app.job_id)
        verb = _VERBS.get(item.verb)
        if item.verb == "deactivate":
            verb = cod.Verb.DEACTIVATE_FAST if item.fast else cod.Verb.DEACTIVATE
        elif item.verb == "release":
            verb = cod.Verb.RELEASE_FAST if item.fast else cod.Verb.RELEASE
        assert verb is not None
        self._step(item.claim, claim, verb, f"condor_cod {item.verb}")

    def tick(self, node: Startd, now: float) -> None:
        """The applications told to exit are gone; leases that ran out release claims."""
        self._now = now
        for name in sorted(n for n, told in self.exiting.items() if told < now):
            del self.exiting[name]
            claim = self.claims.get(name)
            if claim is not None and claim.state in (cod.State.VACATING, cod.State.KILLING):
                self._step(name, claim, cod.Verb.EXITED, "the application exited")
        for name, claim in sorted(self.claims.items()):
            if cod.lease_expired(claim, now):
                self._step(name, claim, cod.Verb.LEASE_EXPIRED, "the lease expired")

    def suspended_slots(self) -> set[str]:
        claims = list(self.claims.values())
        return {c.slot for c in claims if cod.batch_suspended(claims, c.slot)}

    def events(self, node: Startd) -> dict[str, list[Event]]:
        """The engine's SuspendForCod/ResumeForCod for the node's next tick."""
        return cod.engine_events(node.state.slots, self.suspended_slots())

    def settle(self, node: Startd) -> None:
        """After the node's tick: the rows of this tick show the batch claim as it is now."""
        for row in self.rows:
            if row["batch"] is None:
                row["batch"] = self._batch(node, row["slot"])

    def _request(self, item: CodStep, node: Startd, now: float) -> None:
        refusal = cod.refuse_user(node.policy.macros, item.user)
        slot = ""
        if refusal is None and item.claim in self.claims:
            refusal = f"the scenario already named a claim {item.claim!r}"
        if refusal is None:
            try:
                slot = cod.choose_slot(
                    [(ad.name, ad.to_classad()) for ad in published_ads(node, {}, now)],
                    name=item.slot,
                    requirements=item.requirements,
                )
            except cod.CodError as err:
                refusal = str(err)
        if refusal is not None:
            self._row(item.claim, None, ("-", "Refused"), refusal, user=item.user)
            return
        self.sequence += 1
        claim = cod.request(
            claim_id=cod.claim_id(self.node_name, 0, self.sequence),
            cod_id=cod.next_cod_id(self.claims.values()),
            slot=slot,
            owner=item.user,
            lease=item.lease,
            now=now,
        )
        self.claims[item.claim] = claim
        self._row(item.claim, claim, ("-", claim.state.value), "condor_cod request")

    def _step(self, name: str, claim: cod.Claim, verb: cod.Verb, why: str) -> None:
        now = self._now
        try:
            stepped = cod.step(claim, verb, now)
        except cod.CodError as err:
            self._row(name, claim, (claim.state.value, claim.state.value), str(err))
            return
        after = stepped.claim
        if after.state in (cod.State.VACATING, cod.State.KILLING):
            self.exiting.setdefault(name, now)
        if after.state is cod.State.RELEASED:
            del self.claims[name]
        else:
            self.claims[name] = after
        if after.state is not claim.state or verb is cod.Verb.RENEW:
            self._row(name, after, (claim.state.value, after.state.value), why)

    def _row(
        self,
        name: str,
        claim: cod.Claim | None,
        change: tuple[str, str],
        reason: str,
        *,
        user: str | None = None,
    ) -> None:
        before, state = change
        now = self._now
        slot = claim.slot if claim is not None else ""
        self.rows.append(
            {
                "time": now,
                "claim": name,
                "id": claim.cod_id if claim is not None else "",
                "slot": slot,
                "user": user or (claim.owner if claim is not None else ""),
                "from": before,
                "state": state,
                "batch": None,  # filled by `settle` after the node's tick
                "reason": reason,
            }
        )

    @staticmethod
    def _batch(node: Startd, slot: str) -> str:
        """The slot's batch claim as the row shows it: its job and the slot's State/Activity
        ("by COD" when suspended for a COD application), or none."""
        for state in node.state.slots:
            if state.name != slot or state.claim is None:
                continue
            shown = f"{state.claim.job_id} {state.state}/{state.activity}"
            if state.suspended_for_cod and state.activity is Activity.SUSPENDED:
                shown += " by COD"
            return shown
        return "none"
