"""`kubectl kondor cod`: condor_cod over CodClaims (the reference's "Computing On Demand").

    kubectl kondor cod request -name [SLOT@]NODE [-requirements EXPR] [-lease N] [-classad F]
    kubectl kondor cod activate -id CLAIM (-keyword K | -jobad FILE|-) [-cluster N] [-proc M]
    kubectl kondor cod suspend|resume|renew -id CLAIM
    kubectl kondor cod deactivate|release -id CLAIM [-fast]

Each verb writes the CodClaim's spec as the user (the API server authenticates them; the
admission webhook lets only the claim's owner act on it) and waits up to `-timeout` seconds
for the node's agent, the claim's startd, to carry it out, then prints what condor_cod
prints. CLAIM is the CodClaim's name or its claim ID. A command the claim's state does not
allow (suspend of a claim that is not Running, ...) exits with condor_cod's error message
before anything is written. `release` prints the state the claim was in, and deletes the
CodClaim (with -fast, after asking for a hard kill).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from kondor_cli.files import UserError
from kondor_cli.kube import ApiError, Cluster, add_connection_arguments, connect_cluster
from kondor_cli.status import long_form, slot_ads
from kondor_core.api import API_VERSION, COD_CLAIMS, EXECUTION_POINTS
from kondor_kube import paths

#: The claim states each verb needs (condor_cod refuses the others with a message).
NEEDS: Mapping[str, tuple[str, ...]] = {
    "activate": ("Idle",),
    "suspend": ("Running",),
    "resume": ("Suspended",),
    "deactivate": ("Running", "Suspended"),
}
#: What the claim's state is once the agent has carried the verb out.
REACHES: Mapping[str, tuple[str, ...]] = {
    "activate": ("Running", "Idle"),  # Idle: it ran and already exited, or failed to start
    "suspend": ("Suspended",),
    "resume": ("Running",),
    "deactivate": ("Idle",),
}


class CodApi(Protocol):
    namespace: str

    def create(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def list(self, namespace: str) -> list[dict[str, Any]]: ...
    def patch(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None: ...
    def delete(self, namespace: str, name: str) -> None: ...
    def execution_point(self, name: str) -> dict[str, Any] | None: ...


class KubeCod:
    """CodClaims over the CLI's `Cluster` (kondor_cli.kube), connected as `kubectl kondor q`
    is."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.namespace = cluster.namespace

    def create(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        path = paths.kondor(COD_CLAIMS, namespace=namespace)
        return self.cluster.create(f"create a codclaim in namespace {namespace}", path, body)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        path = paths.kondor(COD_CLAIMS, name, namespace=namespace)
        return self.cluster.read(f"read codclaim {namespace}/{name}", path)

    def list(self, namespace: str) -> list[dict[str, Any]]:
        path = paths.kondor(COD_CLAIMS, namespace=namespace)
        return self.cluster.list(f"list codclaims in namespace {namespace}", path)

    def patch(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        path = paths.kondor(COD_CLAIMS, name, namespace=namespace)
        self.cluster.merge_patch(f"patch codclaim {namespace}/{name}", path, patch)

    def delete(self, namespace: str, name: str) -> None:
        path = paths.kondor(COD_CLAIMS, name, namespace=namespace)
        self.cluster.delete(f"delete codclaim {namespace}/{name}", path)

    def execution_point(self, name: str) -> dict[str, Any] | None:
        path = paths.kondor(EXECUTION_POINTS, name)
        return self.cluster.read(f"read executionpoint {name}", path)


def kube_cod(args: argparse.Namespace) -> CodApi:
    return KubeCod(connect_cluster(args))


def parse_name(text: str) -> tuple[str | None, str]:
    """condor_cod_request -name: `slot1@node` (a slot of the node) or `node`."""
    slot, at, node = text.rpartition("@")
    if not node or (at and not slot):
        raise UserError(f"-name {text!r}: give NODE or SLOT@NODE")
    return (slot or None), node


def _state(claim: Mapping[str, Any]) -> str | None:
    state = (claim.get("status") or {}).get("state")
    return str(state) if state is not None else None


def find_claim(api: CodApi, namespace: str, ident: str) -> dict[str, Any]:
    """The CodClaim named `ident`, or whose claim ID is `ident` (quotes allowed)."""
    found = api.get(namespace, ident)
    if found is not None:
        return found
    wanted = ident.strip().strip('"')
    for claim in api.list(namespace):
        if (claim.get("status") or {}).get("claimId") == wanted:
            return claim
    raise UserError(f"-id {ident!r}: no COD claim by that name or claim ID in {namespace}")


def _wait(
    api: CodApi,
    namespace: str,
    name: str,
    done: Callable[[Mapping[str, Any]], bool],
    *,
    timeout: float,
    what: str,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> dict[str, Any]:
    deadline = clock() + timeout
    while True:
        claim = api.get(namespace, name)
        if claim is None:
            raise UserError(f"COD claim {name} is gone while waiting for {what}")
        if done(claim):
            return claim
        if clock() >= deadline:
            state = _state(claim) or "not yet answered"
            raise UserError(f"{what}: not done within {timeout:g}s (the claim is {state})")
        sleep(0.2)


def run(
    args: argparse.Namespace,
    *,
    connect_api: Callable[[argparse.Namespace], CodApi] = kube_cod,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
    stdin: Any = None,
) -> int:
    try:
        return _run(args, connect_api, sleep, clock, stdin or sys.stdin)
    except ApiError as err:
        print(f"kondor cod {args.verb}: {err}", file=sys.stderr)
        return 1
    except UserError as err:
        print(f"kondor cod {args.verb}: {err}", file=sys.stderr)
        return 1


def _run(
    args: argparse.Namespace,
    connect_api: Callable[[argparse.Namespace], CodApi],
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    stdin: Any,
) -> int:
    verb = args.verb
    job_ad = None
    if verb == "activate":
        if args.keyword is None and args.jobad is None:
            raise UserError("activate needs -keyword KEYWORD or -jobad FILE (or both)")
        if args.jobad is not None:
            job_ad = stdin.read() if args.jobad == "-" else _read(args.jobad)
    api = connect_api(args)
    namespace = args.namespace or api.namespace

    def wait(name: str, done: Callable[[Mapping[str, Any]], bool], what: str) -> dict[str, Any]:
        return _wait(
            api, namespace, name, done, timeout=args.timeout, what=what, sleep=sleep, clock=clock
        )

    if verb == "request":
        slot, node = parse_name(args.name)
        spec: dict[str, Any] = {"executionPoint": node}
        if slot is not None:
            spec["slot"] = slot
        if args.requirements is not None:
            spec["requirements"] = args.requirements
        if args.lease is not None:
            spec["lease"] = args.lease
        body = {
            "apiVersion": API_VERSION,
            "kind": "CodClaim",
            "metadata": {"generateName": "cod-", "namespace": namespace},
            "spec": spec,
        }
        made = api.create(namespace, body)
        name = str(made["metadata"]["name"])
        claim = wait(name, lambda c: _state(c) is not None, "the request")
        status = claim.get("status") or {}
        if _state(claim) == "Refused":
            raise UserError(f"request refused by {node}: {status.get('reason')}")
        # "the ClassAd describing the resource is returned ... If condor_cod_request is
        # invoked with the -classad option ... written out to the given file. Otherwise, the
        # ClassAd is printed to the screen."
        ep = api.execution_point(node)
        ads = [ad for ad in slot_ads([ep] if ep else []) if ad.name == status.get("slot")]
        text = long_form(ads)
        if args.classad is not None:
            _write(args.classad, text)
        print(f"Successfully sent CA_REQUEST_CLAIM to startd at {node}")
        if args.classad is None:
            print(text, end="")
        print(f'ID of new claim is: "{status.get("claimId")}"')
        print(f"CodClaim: {namespace}/{name} on {status.get('slot')}")
        return 0
    claim = find_claim(api, namespace, args.id)
    name = str(claim["metadata"]["name"])
    spec = dict(claim.get("spec") or {})
    status = dict(claim.get("status") or {})
    state = _state(claim)
    if state in (None, "Refused", "Released"):
        why = f": {status.get('reason')}" if status.get("reason") else ""
        raise UserError(f"claim {name} is {state or 'not yet answered'}{why}")
    if verb == "release":
        if args.fast:
            api.patch(namespace, name, {"spec": {"fast": True}})
        api.delete(namespace, name)
        print(f"Successfully sent CA_RELEASE_CLAIM to startd at {status.get('executionPoint')}")
        print(f"State of claim when it was released: {state}")
        return 0
    if verb == "renew":
        renewal = int(spec.get("renewal") or 0) + 1
        api.patch(namespace, name, {"spec": {"renewal": renewal}})
        done = wait(name, lambda c: (c.get("status") or {}).get("renewal", 0) >= renewal, verb)
        print(f"Successfully sent CA_RENEW_LEASE_FOR_CLAIM; lease expires {_lease(done)}")
        return 0
    if state not in NEEDS[verb]:
        allowed = " or ".join(NEEDS[verb])
        raise UserError(f"claim {name} is {state}: {verb} needs a claim that is {allowed}")
    patch: dict[str, Any] = {}
    activation = int(spec.get("activation") or 0)
    if verb == "activate":
        activation += 1
        patch = {
            "state": "Running",
            "activation": activation,
            "keyword": args.keyword,
            "jobAd": job_ad,
            "clusterId": args.cluster,
            "procId": args.proc,
            "fast": False,
        }
    elif verb == "suspend":
        patch = {"state": "Suspended"}
    elif verb == "resume":
        patch = {"state": "Running"}
    elif verb == "deactivate":
        patch = {"state": "Idle", "fast": bool(args.fast)}
    api.patch(namespace, name, {"spec": patch})

    def reached(c: Mapping[str, Any]) -> bool:
        now = c.get("status") or {}
        if verb == "activate" and int(now.get("activation") or 0) < activation:
            return False
        return _state(c) in REACHES[verb]

    done = wait(name, reached, verb)
    now = done.get("status") or {}
    if verb == "activate" and now.get("reason") and _state(done) == "Idle":
        raise UserError(f"activate failed: {now.get('reason')}")
    print(f"Successfully sent CA_{verb.upper()}_CLAIM; the claim is {_state(done)}")
    return 0


def _lease(claim: Mapping[str, Any]) -> str:
    return str((claim.get("status") or {}).get("leaseExpiry") or "never (no lease)")


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text)
    except OSError as err:
        raise UserError(f"-classad {path}: {err.strerror or err}") from None


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as err:
        raise UserError(f"-jobad {path}: {err.strerror or err}") from None


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `cod` to the `kondor` (and `kubectl kondor`) command."""
    parser = commands.add_parser(
        "cod",
        help="condor_cod: request and use Computing On Demand claims",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = verbs.add_parser(name, help=help_text)
        sub.add_argument("-n", "--namespace", help="default: the kubeconfig context's")
        sub.add_argument("-timeout", "--timeout", type=float, default=30.0, metavar="S")
        add_connection_arguments(sub)
        sub.set_defaults(func=run)
        if name != "request":
            sub.add_argument("-id", required=True, metavar="CLAIM", help="name or claim ID")
        return sub

    request = verb("request", "create a COD claim on a slot")
    request.add_argument("-name", required=True, metavar="[SLOT@]NODE")
    request.add_argument("-requirements", metavar="EXPR", help="a constraint on the slot ads")
    request.add_argument("-lease", type=int, metavar="N", help="seconds; default: forever")
    request.add_argument(
        "-classad", metavar="FILE", help="write the claimed slot's ad here (else print it)"
    )
    activate = verb("activate", "start an application on an Idle claim")
    activate.add_argument("-keyword", metavar="K", help="<K>_Cmd, ... in the SlotPolicy")
    activate.add_argument("-jobad", metavar="FILE", help="the application's ClassAd; - is stdin")
    activate.add_argument("-cluster", type=int, metavar="N", help="ClusterId (default 1)")
    activate.add_argument("-proc", type=int, metavar="N", help="ProcId (default 0)")
    verb("suspend", "suspend a Running application")
    verb("resume", "resume a Suspended application")
    verb("renew", "renew the claim's lease")
    for name, text in (
        ("deactivate", "stop the application, keep the claim"),
        ("release", "destroy the claim (stopping its application)"),
    ):
        verb(name, text).add_argument("-fast", action="store_true", help="SIGKILL at once")
