"""Admission of CodClaims: whose claim it is, and who may act on it.

The reference's COD text: "the tools to request and manage COD claims require that the user
issuing the commands be authenticated", claims "are assigned to users", and an Owner in the
`-jobad` "that does not match the authenticated identity" is an error. `admit_cod_claim` is
that for the API server's admission webhooks: on CREATE `spec.owner` becomes the
authenticated user (a delegate, a cluster admin or the operator, may name another) and the
claim is labelled with its execution point (the node's agent watches by that label); an
UPDATE or DELETE by anyone but the owner or a delegate is refused, as are changes to what
the claim was requested on, and an inline job ad naming another Owner.

Whether the owner is in the execution point's VALID_COD_USERS is checked by the node's agent
at request, as the startd checks it: admission does not read the node's configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from kondor_core.api.codclaim import CodClaimSpec
from kondor_core.api.manifest import describe_errors
from kondor_core.api.meta import EXECUTION_POINT_LABEL
from kondor_core.classads import ExpressionError, parse_ad
from kondor_core.inputs import InputError, check_document
from kondor_core.jobs.admission import Admission, Delegates, Requester

#: Fixed at request: what the claim was made on, and whose it is.
IMMUTABLE = ("owner", "executionPoint", "slot", "requirements", "lease")


def admit_cod_claim(
    operation: str,
    requester: Requester,
    new: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None,
    *,
    delegates: Delegates | None = None,
) -> Admission:
    """Admit one CodClaim request (CREATE, UPDATE, DELETE); the patch the mutating webhook
    applies on CREATE (owner, label), or the refusal."""
    delegates = delegates or Delegates()
    acting_for_others = delegates.include(requester)
    name = _name(new or old or {})
    if new is not None:
        try:
            check_document(new, source=f"CodClaim {name}")
        except InputError as error:
            return Admission(refusal=str(error))
    if operation == "CREATE":
        claim = new or {}
        spec = _spec(claim)
        owner = spec.get("owner")
        patch: dict[str, Any] = {}
        if not (acting_for_others and owner) and owner != requester.name:
            patch["spec"] = {"owner": requester.name}
            owner = requester.name
        node = spec.get("executionPoint")
        labels = (claim.get("metadata") or {}).get("labels") or {}
        if isinstance(node, str) and labels.get(EXECUTION_POINT_LABEL) != node:
            patch["metadata"] = {"labels": {EXECUTION_POINT_LABEL: node}}
        problems = spec_problems(spec, str(owner or ""))
        if problems:
            return Admission(patch, _refusal(name, problems))
        return Admission(patch)
    if operation in ("UPDATE", "DELETE"):
        claim = old or new or {}
        owner = _spec(claim).get("owner")
        verb = "update" if operation == "UPDATE" else "release (delete)"
        if not acting_for_others and owner != requester.name:
            return Admission(
                refusal=f"CodClaim {name} belongs to {owner!r}: {requester.name!r} may not "
                f"{verb} it (a user acts only on their own COD claims)",
                forbidden=True,
            )
        if operation == "UPDATE" and new is not None and old is not None:
            before, after = _spec(old), _spec(new)
            problems = [
                f"spec.{key} may not change after the request (was {before.get(key)!r}, now "
                f"{after.get(key)!r}): request a new claim instead"
                for key in IMMUTABLE
                if before.get(key) != after.get(key)
            ]
            if not problems and before != after:
                problems = spec_problems(after, str(after.get("owner") or ""))
            if problems:
                return Admission(refusal=_refusal(name, problems))
    return Admission()


def spec_problems(spec: Mapping[str, Any], owner: str) -> list[str]:
    """What is wrong with a CodClaim's spec, one line each; [] when valid. The inline job ad
    must parse and name no Owner but `owner`."""
    try:
        model = CodClaimSpec.model_validate(dict(spec))
    except ValidationError as error:
        return [f"spec.{line}" for line in describe_errors(error)]
    if model.job_ad is None:
        return []
    try:
        ad = parse_ad(model.job_ad, field="spec.jobAd")
    except ExpressionError as error:
        return [str(error)]
    given = next((ad.eval(key) for key in ad if key.lower() == "owner"), None)
    if given is not None and given != owner:
        return [
            f"spec.jobAd: Owner {given!r} does not match the authenticated user {owner!r}; "
            "leave Owner out, it is set from who you are"
        ]
    return []


def _spec(claim: Mapping[str, Any]) -> dict[str, Any]:
    spec = claim.get("spec")
    return dict(spec) if isinstance(spec, Mapping) else {}


def _name(claim: Mapping[str, Any]) -> str:
    metadata = claim.get("metadata") or {}
    namespace, name = metadata.get("namespace"), metadata.get("name")
    return f"{namespace}/{name}" if namespace else str(name)


def _refusal(name: str, problems: list[str]) -> str:
    return f"CodClaim {name} is not valid: " + "; ".join(problems)
