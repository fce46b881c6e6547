"""Admission of ExecutionJobs: who owns a job, what a valid job is, and what may change later.

condor_submit stamps a job with the submitting user (`Owner`) and refuses a submit file it
cannot parse; condor_qedit may not touch a job's identity, and only the job's owner or a
queue super user may edit or remove it (HTCondor manual, "Submitting a Job", and
QUEUE_SUPER_USERS). `admit_job` is that, for ExecutionJobs seen by the API server's admission
webhooks: a pure function of the request (operation, user, objects) and of who may act for
others, returning the merge patch the mutating webhook applies (`spec.owner`) and the
message the validating webhook refuses with.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from kondor_core.api.job import RUNTIMES, ExecutionJobSpec
from kondor_core.api.manifest import describe_errors
from kondor_core.errors import KondorError
from kondor_core.inputs import InputError, check_document
from kondor_core.jobs.ad import SCHEDD_ATTRIBUTES, submit_ad
from kondor_core.jobs.podsecurity import RESTRICTED, violations

#: The operations an admission request names (CONNECT never reaches an ExecutionJob).
Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]

#: The message of a job without a runtime.
NO_RUNTIME = "a job has no runtime: give one of process, apptainer or pod"

#: Requests and the runtime: fixed at submission, as the slot was carved for them.
IMMUTABLE = (
    "owner",
    "requestCpus",
    "requestMemory",
    "requestDisk",
    "requestGpus",
    "requestResources",
    "requireGpus",
)

#: Job ad attributes Kondor sets itself: an extra attribute may not replace them (an
#: `Owner` attribute would let a user be charged as someone else; the schedd's, such as
#: NumJobStarts or EnteredCurrentStatus, come from the job's status).
_ASSIGNED = ("Owner", "MyType", *sorted(SCHEDD_ATTRIBUTES))
#: Job ad attributes that have a spec field of their own.
_FROM_FIELDS = {
    "RequestCpus": "requestCpus",
    "RequestMemory": "requestMemory",
    "RequestDisk": "requestDisk",
    "RequestGPUs": "requestGpus",
    "RequireGPUs": "requireGpus",
    "Requirements": "requirements",
    "Rank": "rank",
    "JobPrio": "priority",
    "KillSig": "killSig",
    "MaxJobRetirementTime": "maxJobRetirementTime",
    "JobMaxVacateTime": "jobMaxVacateTime",
    "Cmd": "the runtime's executable",
    "Arguments": "the runtime's arguments",
    "Environment": "the runtime's environment",
    "Iwd": "the runtime's workingDirectory",
    "TargetType": "nothing: it is always Machine",
}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_POD_TEMPLATE_FIELDS = ("metadata", "spec")
_ARTICLE = {"name": "a", "image": "an"}


@dataclass(frozen=True)
class Requester:
    """The authenticated user of an admission request (`request.userInfo`)."""

    name: str
    groups: frozenset[str] = frozenset()

    @classmethod
    def of(cls, userinfo: Mapping[str, Any]) -> Requester:
        return cls(str(userinfo.get("username") or ""), frozenset(userinfo.get("groups") or ()))


@dataclass(frozen=True)
class Delegates:
    """Who may act for others (HTCondor's QUEUE_SUPER_USERS): submit with any `spec.owner`,
    update and delete anyone's job. By default cluster admins (`system:masters`) and
    Kubernetes' own controllers (the namespace controller and the garbage collector delete
    the jobs of a deleted namespace or owner); the operator adds its own user."""

    users: frozenset[str] = frozenset({"system:kube-controller-manager"})
    groups: frozenset[str] = frozenset({"system:masters", "system:serviceaccounts:kube-system"})

    def with_users(self, *users: str | None) -> Delegates:
        return Delegates(self.users | {user for user in users if user}, self.groups)

    def include(self, requester: Requester) -> bool:
        return requester.name in self.users or bool(requester.groups & self.groups)


@dataclass(frozen=True)
class Admission:
    """The outcome: a merge patch to apply (empty: none) and a refusal (None: allowed);
    `forbidden` when the refusal is about who asks (HTTP 403), not what they sent (422)."""

    patch: dict[str, Any] = field(default_factory=dict)
    refusal: str | None = None
    forbidden: bool = False

    @property
    def allowed(self) -> bool:
        return self.refusal is None


def admit_job(
    operation: Operation | str,
    requester: Requester,
    new: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None,
    *,
    delegates: Delegates | None = None,
    pod_security: str = RESTRICTED,
) -> Admission:
    """Admit one ExecutionJob request.

    * CREATE: the job must be valid (`job_problems`), and a pod job's Pod may ask for no
      more than `pod_security`, the most any SlotPolicy of the cluster allows (the job has
      no node yet; its node's agent checks again against its own: `pod_security_problems`);
      its owner is the requester, whatever `spec.owner` says, unless the requester is a
      delegate who names an owner. The patch sets `spec.owner` (the operator's mutating
      webhook applies it, or refuses the job).
    * UPDATE: only the owner or a delegate; the owner, the requests and the runtime stay as
      submitted; a changed spec must still be valid. `hold`, `remove`, `priority` and the
      rest may change.
    * DELETE: only the owner or a delegate.
    """
    delegates = delegates or Delegates()
    if new is not None:
        try:
            check_document(new, source=f"ExecutionJob {_name(new)}")
        except InputError as error:
            return Admission(refusal=str(error))
    acting_for_others = delegates.include(requester)
    if operation == "CREATE":
        job = new or {}
        spec = _spec(job)
        owner = spec.get("owner")
        patch: dict[str, Any] = {}
        if not (acting_for_others and owner) and owner != requester.name:
            patch = {"spec": {"owner": requester.name}}
        problems = job_problems(job) or pod_security_problems(job, pod_security)
        return Admission(patch, _refusal(job, problems) if problems else None)
    if operation in ("UPDATE", "DELETE"):
        job = old or new or {}
        verb = "update" if operation == "UPDATE" else "delete"
        if not acting_for_others:
            refused = _not_theirs(requester, job, verb)
            if refused:
                return Admission(refusal=refused, forbidden=True)
        if operation == "UPDATE" and new is not None and old is not None:
            problems = change_problems(old, new)
            if not problems and _spec(new) != _spec(old):
                problems = job_problems(new)
            if problems:
                return Admission(refusal=_refusal(new, problems))
    return Admission()


def job_problems(job: Mapping[str, Any]) -> list[str]:
    """What is wrong with a job's spec, one `field: message (value)` line each; [] when valid.

    The model checks types, quantities, signals and every ClassAd expression; then there must
    be a runtime, a pod runtime must hold a pod template, extra attributes must be ClassAd
    names Kondor does not set itself, and the job ad must build."""
    spec_data = job.get("spec")
    if not isinstance(spec_data, Mapping):
        return [f"spec: a job needs a spec (got {spec_data!r}); {NO_RUNTIME}"]
    try:
        spec = ExecutionJobSpec.model_validate(spec_data)
    except ValidationError as error:
        return _described(error)
    problems: list[str] = []
    if spec.runtime is None:
        problems.append(f"spec: {NO_RUNTIME}")
    if spec.pod is not None:
        problems += pod_template_problems(spec.pod.template, "spec.pod.template")
    problems += _attribute_problems(spec)
    if problems:
        return problems
    try:
        submit_ad(spec, _name(job))
    except KondorError as error:
        return [f"spec.{error}"]
    return []


def pod_security_problems(job: Mapping[str, Any], level: str) -> list[str]:
    """What a pod job's Pod (its template, hardened: `podsecurity.harden`) asks for beyond
    the Pod Security `level`, one line per field; [] for other runtimes. Checked at
    submission only: the runtime cannot change afterwards, and a job already queued is
    not refused its later edits (a hold, a priority) because the cluster's policies did."""
    pod = _spec(job).get("pod")
    template = pod.get("template") if isinstance(pod, Mapping) else None
    if not isinstance(template, Mapping):
        return []
    return [found.message(level) for found in violations(template, level)]


def change_problems(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The owner, the requests and the runtime as submitted, against an update's."""
    before, after = _spec(old), _spec(new)
    problems = []
    old_model, new_model = _model(before), _model(after)
    for name in IMMUTABLE:
        was, now = before.get(name), after.get(name)
        if old_model is not None and new_model is not None:
            attribute = _snake(name)
            same = _value(old_model, attribute) == _value(new_model, attribute)
        else:
            same = was == now
        if not same:
            problems.append(
                f"spec.{name} may not change after submission (was {_show(was)}, "
                f"now {_show(now)}): submit a new job instead"
            )
    was_runtime = [name for name in RUNTIMES if before.get(name) is not None]
    now_runtime = [name for name in RUNTIMES if after.get(name) is not None]
    if was_runtime != now_runtime:
        problems.append(
            f"the runtime may not change after submission (was {_runtimes(was_runtime)}, "
            f"now {_runtimes(now_runtime)}): submit a new job instead"
        )
    else:
        for name in now_runtime:
            if before.get(name) != after.get(name):
                problems.append(
                    f"spec.{name} may not change after submission (was {_show(before[name])}, "
                    f"now {_show(after[name])}): submit a new job instead"
                )
    return problems


def pod_template_problems(template: object, path: str) -> list[str]:
    """A PodTemplateSpec's shape: `metadata` and `spec` only, `spec.containers` a non-empty
    list of objects each with a `name` and an `image` (likewise `initContainers`). The rest
    of the pod spec is the API server's to validate when the agent creates the pod."""
    if not isinstance(template, Mapping):
        return [f"{path}: a pod template is an object with metadata and spec (got {template!r})"]
    problems = [
        f"{path}.{key}: not a field of a pod template (PodTemplateSpec has metadata and spec; "
        f"got {_show(value)})"
        for key, value in template.items()
        if key not in _POD_TEMPLATE_FIELDS
    ]
    metadata = template.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        problems.append(f"{path}.metadata: must be an object (got {metadata!r})")
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        problems.append(f"{path}.spec: a pod template needs a pod spec (got {_show(spec)})")
        return problems
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        problems.append(
            f"{path}.spec.containers: a pod spec needs a non-empty list of containers "
            f"(got {_show(containers)})"
        )
    else:
        problems += _container_problems(containers, f"{path}.spec.containers")
    init = spec.get("initContainers")
    if init is not None:
        if not isinstance(init, list):
            problems.append(f"{path}.spec.initContainers: must be a list (got {_show(init)})")
        else:
            problems += _container_problems(init, f"{path}.spec.initContainers")
    return problems


def admission_message(job: Mapping[str, Any], problems: Sequence[str]) -> str:
    """The message `kubectl apply` shows when admission refuses the job."""
    return _refusal(job, list(problems))


def _container_problems(containers: list[Any], path: str) -> list[str]:
    problems = []
    for index, container in enumerate(containers):
        where = f"{path}[{index}]"
        if not isinstance(container, Mapping):
            problems.append(f"{where}: a container is an object (got {_show(container)})")
            continue
        for key in ("name", "image"):
            value = container.get(key)
            if not isinstance(value, str) or not value.strip():
                problems.append(
                    f"{where}.{key}: a container needs {_ARTICLE[key]} {key}, a non-empty "
                    f"string (got {_show(value)})"
                )
    return problems


def _attribute_problems(spec: ExecutionJobSpec) -> list[str]:
    problems = []
    assigned = {name.lower(): name for name in _ASSIGNED}
    from_fields = {name.lower(): (name, where) for name, where in _FROM_FIELDS.items()}
    for name in spec.attributes:
        where = f"spec.attributes.{name}"
        if not _IDENTIFIER.fullmatch(name):
            problems.append(
                f"{where}: {name!r} is not a ClassAd attribute name (letters, digits and _, "
                "not starting with a digit)"
            )
        elif name.lower() in assigned:
            problems.append(
                f"{where}: {assigned[name.lower()]} is set by Kondor and may not be given "
                f"as an attribute (got {spec.attributes[name]!r})"
            )
        elif name.lower() in from_fields:
            attribute, field_name = from_fields[name.lower()]
            problems.append(
                f"{where}: {attribute} comes from {_field_ref(field_name)}, not from an "
                f"attribute (got {spec.attributes[name]!r})"
            )
        elif name.lower().startswith("request") and name[7:].lower() in {
            resource.lower() for resource in spec.request_resources
        }:
            problems.append(
                f"{where}: {name} comes from spec.requestResources, not from an attribute "
                f"(got {spec.attributes[name]!r})"
            )
    for resource in spec.request_resources:
        if not _IDENTIFIER.fullmatch(resource):
            problems.append(
                f"spec.requestResources.{resource}: {resource!r} is not a resource name "
                "(letters, digits and _, not starting with a digit)"
            )
    return problems


def _field_ref(name: str) -> str:
    return name if name.startswith(("the ", "nothing")) else f"spec.{name}"


def _described(error: ValidationError) -> list[str]:
    """pydantic's problems with the field path and the value (`describe_errors`), reworded
    where pydantic's words would not tell a user what to do."""
    return [
        _reworded(line, problem)
        for line, problem in zip(
            describe_errors(error, prefix="spec"), error.errors(include_url=False), strict=True
        )
    ]


def _reworded(line: str, problem: Any) -> str:
    path, sep, message = line.partition(": ")
    if problem["type"] == "extra_forbidden":
        # An unknown key in the spec itself is most often a runtime Kondor does not have.
        hint = "; the runtime is one of process, apptainer or pod" if path.count(".") == 1 else ""
        return f"{path}: unknown field (got {_show(problem.get('input'))}){hint}"
    if problem["type"] == "missing":
        return f"{path}: required, and missing"
    # Some validators name the field in snake_case before their message; drop it.
    head, colon, rest = message.partition(": ")
    if colon and head == _snake(path.rsplit(".", 1)[-1]):
        return f"{path}{sep}{rest}"
    return line


def _not_theirs(requester: Requester, job: Mapping[str, Any], verb: str) -> str | None:
    owner = _spec(job).get("owner")
    if owner and owner == requester.name:
        return None
    whose = f"{owner}'s job" if owner else "the job"
    refusal = (
        f"{requester.name} may not {verb} {whose} {_name(job)}: "
        "only its owner or a cluster admin may"
    )
    return refusal if owner else refusal + " (it has no spec.owner)"


def _refusal(job: Mapping[str, Any], problems: list[str]) -> str:
    count = len(problems)
    return f"ExecutionJob {_name(job)} has {count} problem{'s' * (count != 1)}: " + "; ".join(
        problems
    )


def _spec(job: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = job.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _model(spec: Mapping[str, Any]) -> ExecutionJobSpec | None:
    try:
        return ExecutionJobSpec.model_validate(spec)
    except ValidationError:
        return None


def _value(model: ExecutionJobSpec, attribute: str) -> object:
    """A request in one unit, so that `1Gi` and `1024` are the same memory."""
    if attribute == "request_memory":
        return model.request_memory_mib
    if attribute == "request_disk":
        return model.request_disk_kib
    return getattr(model, attribute)


def _name(job: Mapping[str, Any]) -> str:
    meta = job.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name") or (f"{meta['generateName']}*" if meta.get("generateName") else "")
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else str(name)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _runtimes(names: list[str]) -> str:
    return " and ".join(names) or "none"


def _show(value: object) -> str:
    """A value as the user wrote it in YAML/JSON (`unset` when absent)."""
    if value is None:
        return "unset"
    if isinstance(value, str):
        return repr(value)
    return json.dumps(value, sort_keys=True, separators=(", ", ": "))
