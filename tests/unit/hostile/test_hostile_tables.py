"""Issue 18's families of hostile input, one table each: every one refused with exit 2 and
one message naming the file, the field and the value; none a traceback, a hang or output
that is not JSON."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import kopf
import pytest

from kondor_core.api import SlotPolicy, validate
from kondor_core.api.quantity import Unit, to_unit
from kondor_core.cron import OutputReader
from kondor_core.fleet import check_policy
from kondor_core.inputs import InputError, YamlLimits, check_document, load_yaml
from kondor_core.jobs import Requester, admit_job

from .hostile_support import JOB, MACHINE, POLICY, dump, run_cli, simulate, strict_json

BIG = 2**70


def _machine(**fields: Any) -> bytes:
    return dump({**MACHINE, **fields})


def _policy(**spec: Any) -> bytes:
    return dump({**POLICY, "spec": {**POLICY["spec"], **spec}})


def _bomb(levels: int = 7) -> bytes:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return ("\n".join(lines) + "\nname: n\n").encode()


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


# (id, machine file, policy file, what the message says)
REFUSED: list[tuple[str, bytes, bytes, list[str]]] = [
    ("not UTF-8", b"name: \xff\xfe\ncpus: 1\n", dump(POLICY), ["m.yaml", "not UTF-8", "0xff"]),
    ("nested deep", b"name: " + b"[" * 5000 + b"]" * 5000, dump(POLICY), ["m.yaml", "64 levels"]),
    (
        "policy nested deep",
        _machine(),
        b"spec: " + b"{a: " * 3000 + b"1" + b"}" * 3000,
        ["p.yaml", "64 levels"],
    ),
    ("alias bomb", _bomb(), dump(POLICY), ["m.yaml", "aliases are expanded"]),
    (
        "cpus 2^70",
        _machine(cpus=BIG),
        dump(POLICY),
        ["m.yaml", "cpus", str(BIG), "ClassAd integer"],
    ),
    ("memory 2^70", _machine(memory=BIG), dump(POLICY), ["memory", str(BIG), "2^63 - 1"]),
    ("memory 1e30", _machine(memory="1e30"), dump(POLICY), ["memory", "'1e30'", "too large"]),
    ("memory 1e999999Ei", _machine(memory="1e999999Ei"), dump(POLICY), ["memory", "too large"]),
    ("memory inf", _machine(memory=float("inf")), dump(POLICY), ["memory", "inf", "finite"]),
    ("memory nan", _machine(memory=float("nan")), dump(POLICY), ["memory", "nan", "finite"]),
    ("disk 2^70", _machine(disk=BIG), dump(POLICY), ["disk", "too large"]),
    (
        "resource 1e30",
        _machine(resources={"cogs": 1e30}),
        dump(POLICY),
        ["resources.cogs", "too large"],
    ),
    (
        "resource inf",
        _machine(resources={"cogs": float("inf")}),
        dump(POLICY),
        ["resources.cogs", "finite"],
    ),
    (
        "attribute nan",
        _machine(attributes={"X": float("nan")}),
        dump(POLICY),
        ["attributes.X", "nan"],
    ),
    (
        "attribute 2^70",
        _machine(attributes={"X": BIG}),
        dump(POLICY),
        ["attributes.X", "ClassAd integer"],
    ),
    (
        "gpu property 2^70",
        _machine(gpus=[{"id": "g0", "properties": {"X": BIG}}]),
        dump(POLICY),
        ["gpus[0].properties.X"],
    ),
    (
        "empty attribute name",
        _machine(attributes={"": 1}),
        dump(POLICY),
        ["attributes", "''", "attribute name"],
    ),
    (
        "attribute name with space",
        _machine(attributes={"a b": 1}),
        dump(POLICY),
        ["'a b'", "attribute name"],
    ),
    (
        "machine name with control characters",
        _machine(name="de\nsk\x1b[31m"),
        dump(POLICY),
        ["name", "machine name"],
    ),
    ("machine name with a quote", _machine(name='de"sk'), dump(POLICY), ["name", "machine name"]),
    (
        "label value with NUL",
        _machine(labels={"a": "b\x00"}),
        dump(POLICY),
        ["labels", "label value"],
    ),
    (
        "slot count 2^70",
        _machine(),
        _policy(slotTypes=[{"id": 1, "count": BIG}]),
        ["count", "ClassAd integer"],
    ),
    (
        "slot count 10^7",
        _machine(),
        _policy(slotTypes=[{"id": 1, "count": 10**7}]),
        ["NUM_SLOTS_TYPE_1", "10000"],
    ),
    ("slot type id 2^70", _machine(), _policy(slotTypes=[{"id": BIG}]), ["slotTypes[0].id"]),
    (
        "reserved memory 1e30",
        _machine(),
        _policy(reserved={"memory": "1e30"}),
        ["reserved.memory", "too large"],
    ),
    ("reserved cpus 2^70", _machine(), _policy(reserved={"cpus": BIG}), ["reserved.cpus"]),
    (
        "GPU constraint in SLOT_TYPE",
        _machine(gpus=[{"id": "g0"}]),
        _policy(slotTypes=[{"id": 1, "resources": "gpus=1 : ((("}]),
        ["slotTypes[0].resources", "'((('"],
    ),
    (
        "duplicate GPU ids in condorConfig",
        _machine(gpus=[{"id": "g0"}]),
        _policy(condorConfig="MACHINE_RESOURCE_GPUs = g0, g0\n"),
        ["'g0' appears twice"],
    ),
    (
        "machine resource 1e30 in condorConfig",
        _machine(),
        _policy(condorConfig="MACHINE_RESOURCE_cogs = 1e30\n"),
        ["machine resource cogs", "ClassAd"],
    ),
    (
        "slot count 2^70 in condorConfig",
        _machine(),
        _policy(condorConfig=f"SLOT_TYPE_1 = cpus=1\nNUM_SLOTS_TYPE_1 = {BIG}\n"),
        ["NUM_SLOTS_TYPE_1"],
    ),
]


@pytest.mark.parametrize(
    ("machine", "policy", "said"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_simulate_refuses_with_one_message(
    tmp_path: Path, machine: bytes, policy: bytes, said: list[str]
) -> None:
    outcome = simulate(tmp_path, machine, policy)
    assert outcome.code == 2, outcome
    assert outcome.out == ""
    assert outcome.err.startswith("kondor simulate: ")
    assert "Traceback" not in outcome.err
    for words in said:
        assert words in outcome.err, outcome.err


@pytest.mark.parametrize("output", ["json", "table", "classad"])
def test_a_valid_example_is_unchanged(tmp_path: Path, output: str) -> None:
    outcome = simulate(tmp_path, dump(MACHINE), dump(POLICY), output=output)
    assert outcome.code == 0, outcome.err
    if output == "json":
        strict_json(outcome.out)


TIMELINE = (
    "machine: {{file: {root}/examples/machines/desk.yaml}}\n"
    "policy: {{file: {root}/examples/policies/default.yaml}}\n"
)


@pytest.mark.parametrize(
    ("rest", "said"),
    [
        ("until: 1e18\n", ["until", "315360000"]),
        ("until: 3000000\npollingInterval: 1\n", ["until", "ticks", "100000"]),
        ("until: 600\npollingInterval: 0.000001\n", ["until", "pollingInterval", "ticks"]),
        ("until: .inf\n", ["until", "finite"]),
        ("until: .nan\n", ["until", "finite"]),
        ("until: 600\nsteps:\n  - {at: .inf, facts: {KeyboardIdle: 0}}\n", ["at", "finite"]),
        (
            "until: 600\nsteps:\n  - {at: 0, facts: {KeyboardIdle: .nan}}\n",
            ["KeyboardIdle", "finite"],
        ),
        ("until: 600\nsteps:\n  - {at: 0, facts: {'': 1}}\n", ["attribute name"]),
    ],
    ids=[
        "huge until",
        "too many ticks",
        "tiny interval",
        "infinite until",
        "NaN until",
        "infinite step",
        "NaN fact",
        "empty fact name",
    ],
)
def test_a_timeline_is_bounded(tmp_path: Path, rest: str, said: list[str]) -> None:
    from .hostile_support import ROOT

    scenario = tmp_path / "t.yaml"
    scenario.write_text(TIMELINE.format(root=ROOT) + rest)
    outcome = run_cli("simulate", "--timeline", scenario, "-o", "json")
    assert outcome.code == 2, outcome
    assert str(scenario) in outcome.err
    for words in said:
        assert words in outcome.err, outcome.err


def test_an_alias_bomb_in_a_timeline_is_refused_before_any_message_formats_it(
    tmp_path: Path,
) -> None:
    scenario = tmp_path / "t.yaml"
    scenario.write_bytes(_bomb(8).replace(b"name: n", b"machine: *a7"))
    outcome = run_cli("simulate", "--timeline", scenario)
    assert outcome.code == 2
    assert "aliases are expanded" in outcome.err


@pytest.mark.parametrize(
    ("request_fields", "said"),
    [
        ({"requestCpus": BIG}, "spec.requestCpus"),
        ({"requestMemory": "1e30Ei"}, "spec.requestMemory"),
        ({"requestMemory": float("nan")}, "spec.requestMemory"),
        ({"requestResources": {"cogs": 1e30}}, "spec.requestResources.cogs"),
        ({"attributes": {"": "1"}}, "spec.attributes"),
    ],
    ids=["cpus 2^70", "memory 1e30Ei", "memory NaN", "resource 1e30", "empty attribute name"],
)
def test_a_job_request_is_refused_naming_the_field(
    tmp_path: Path, request_fields: dict[str, Any], said: str
) -> None:
    (tmp_path / "j.yaml").write_bytes(dump({**JOB, "spec": {**JOB["spec"], **request_fields}}))
    (tmp_path / "m.yaml").write_bytes(dump(MACHINE))
    (tmp_path / "p.yaml").write_bytes(dump(POLICY))
    outcome = run_cli(
        "simulate",
        "--machine",
        tmp_path / "m.yaml",
        "--policy",
        tmp_path / "p.yaml",
        "--request",
        tmp_path / "j.yaml",
    )
    assert outcome.code == 2, outcome
    assert "j.yaml" in outcome.err and said in outcome.err, outcome.err


@pytest.mark.parametrize(
    ("value", "mib"),
    [(".5Gi", 512), ("+.5Gi", 512), ("1e3Mi", 1000), (2**63 - 1, 2**63 - 1)],
)
def test_quantities_at_the_limits(value: str | int, mib: int) -> None:
    assert to_unit(value, Unit.MIB, field="memory") == mib


@pytest.mark.parametrize(
    "value", [2**63, "8388608Ei", "1e999999Ei", float("inf"), float("nan"), "1e30"]
)
def test_quantities_beyond_the_limits_are_value_errors(value: str | float) -> None:
    with pytest.raises(ValueError, match=r"^memory: "):
        to_unit(value, Unit.MIB, field="memory")


def test_the_yaml_bounds_each_name_their_bound() -> None:
    limits = YamlLimits(max_bytes=100, max_depth=3, max_nodes=50)
    with pytest.raises(InputError, match=r"^f: the file has 101 bytes; at most 100"):
        load_yaml(b"#" * 101, source="f", limits=limits)
    with pytest.raises(InputError, match=r"^f: nested more than 3 levels deep"):
        load_yaml("[[[[1]]]]", source="f", limits=limits)
    with pytest.raises(InputError, match=r"^f: more than 50 values once aliases are expanded"):
        load_yaml(
            "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\nb: [*a, *a, *a, *a, *a, *a]",
            source="f",
            limits=limits,
        )
    with pytest.raises(InputError, match=r"^f: not valid YAML"):
        load_yaml("a: [", source="f", limits=limits)
    assert load_yaml("a: &a [1]\nb: *a", source="f", limits=limits) == {"a": [1], "b": [1]}


def test_policy_validation_names_the_field_of_an_absurd_number() -> None:
    with pytest.raises(ValueError, match=r"spec.reserved.memory"):
        validate(SlotPolicy, {**POLICY, "spec": {"reserved": {"memory": "1e30"}}}, what="p")


@pytest.mark.parametrize(
    ("job", "said"),
    [
        (
            {"spec": {"requestCpus": BIG, "process": {"executable": "/bin/true"}}},
            "spec.requestCpus",
        ),
        (
            {"spec": {"requestMemory": "1e30", "process": {"executable": "/bin/true"}}},
            "spec.requestMemory",
        ),
        ({"spec": {"pod": {"template": {"a": _nested(80)}}}}, "64 levels"),
    ],
    ids=["cpus 2^70", "memory 1e30", "nested template"],
)
def test_admission_refuses_with_a_message(job: dict[str, Any], said: str) -> None:
    job = {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionJob",
        "metadata": {"name": "j", "namespace": "ns"},
        **job,
    }
    admission = admit_job("CREATE", Requester("alice"), job, None)
    assert admission.refusal is not None and said in admission.refusal, admission


def test_check_document_counts_without_recursion() -> None:
    with pytest.raises(InputError, match=r"nested more than 64"):
        check_document(_nested(100_000), source="j")


@pytest.mark.parametrize(
    ("chunks", "lines", "failure"),
    [
        ([b"A = 1\nB = 2\n"], ["A = 1\n", "B = 2\n"], None),
        ([b"A = \xff\n"], [], "not UTF-8 (byte 0xff at offset 4)"),
        ([b"A = 1\n", b"x" * 2000], ["A = 1\n"], "more than 1024 bytes"),
        ([b"A = \xe2\x82", b"\xac\n"], ["A = \u20ac\n"], None),
    ],
    ids=["good", "undecodable", "flood", "a character split across reads"],
)
def test_cron_output_is_bounded_and_decoded(
    chunks: list[bytes], lines: list[str], failure: str | None
) -> None:
    reader = OutputReader("hook", limit=1024)
    got = [line for chunk in chunks for line in reader.feed(chunk)] + reader.finish()
    assert got == lines
    assert (reader.failure is None) if failure is None else (failure in (reader.failure or ""))


# The SlotPolicy webhook's validation (check_policy) refuses what the layout would refuse on
# every node, each as one problem naming the field, never an exception past it.
@pytest.mark.parametrize(
    ("spec", "said"),
    [
        (
            {"slotTypes": [{"id": 1, "resources": "gpus=1 : ((("}]},
            "spec.slotTypes[0].resources: '(((' is not a valid ClassAd expression",
        ),
        (
            {"condorConfig": "SLOT_TYPE_1 = gpus=1 : (((\nNUM_SLOTS_TYPE_1 = 1\n"},
            "spec.condorConfig line 1 (SLOT_TYPE_1): '(((' is not a valid ClassAd expression",
        ),
        (
            {"condorConfig": "MACHINE_RESOURCE_GPUs = g0, g0\n"},
            "spec: machine resource GPUs: the id 'g0' appears twice",
        ),
        (
            {"condorConfig": "MACHINE_RESOURCE_cogs = 1e30\n"},
            "spec: machine resource cogs: 1e+30 is not an amount a ClassAd holds",
        ),
        (
            {"condorConfig": f"SLOT_TYPE_1 = cpus=1\nNUM_SLOTS_TYPE_1 = {BIG}\n"},
            f"spec: slot type 1: count (NUM_SLOTS_TYPE_1): {BIG} gives {BIG} slots",
        ),
        ({"slotTypes": [{"id": 1, "count": 10**7}]}, "a machine has at most 10000"),
        ({"slotTypes": [{"id": 1, "resources": {"cpus": _nested(80)}}]}, "spec: nested more"),
    ],
    ids=[
        "GPU constraint in slotTypes",
        "GPU constraint in SLOT_TYPE",
        "duplicate GPU ids",
        "machine resource 1e30",
        "slot count 2^70 in condorConfig",
        "slot count 10^7",
        "nested resources",
    ],
)
def test_policy_admission_refuses_with_one_problem(spec: dict[str, Any], said: str) -> None:
    checked = check_policy(spec)
    assert not checked.valid
    assert len(checked.problems) == 1 and said in checked.problems[0], checked.problems


def test_admission_bounds_the_object_kopf_hands_it() -> None:
    """The webhook gets a kopf.Body, a mapping but not a dict: it is bounded all the same."""
    job = {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionJob",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"pod": {"template": _nested(80)}},
    }
    admission = admit_job("CREATE", Requester("alice"), kopf.Body(job), None)
    assert admission.refusal == "ExecutionJob ns/j: nested more than 64 levels deep"
    assert check_policy(kopf.Body({"a": _nested(80)})).problems == (
        "spec: nested more than 64 levels deep",
    )


@pytest.mark.parametrize("opener", [b"[", b"{a: "])
def test_deep_flow_nesting_is_refused_before_it_is_scanned(opener: bytes) -> None:
    """`make fuzz` found `deep: [[[...` 3000 levels taking seconds (the scanner looked at every
    open level at each token); it is refused at level 65, at once."""
    closer = b"]" if opener == b"[" else b"}"
    text = b"name: n\ndeep: " + opener * 100_000 + b"1" + closer * 100_000 + b"\n"
    started = time.perf_counter()
    with pytest.raises(InputError, match=r"^m: nested more than 64 levels deep \(line 2\)"):
        load_yaml(text, source="m")
    assert time.perf_counter() - started < 0.5


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # `make fuzz` found these escaping PyYAML's scanner as OverflowError and ValueError.
        (b'"\\UA0000000"', "not valid YAML (Python int too large"),
        (b'"\\U00A00000"', "not valid YAML (chr() arg not in range"),
        (b"when: 2026-13-45\n", "not valid YAML (month must be in 1..12"),
    ],
)
def test_values_yaml_cannot_represent_are_refused(text: bytes, said: str) -> None:
    with pytest.raises(InputError, match=re.escape(f"m: {said}")):
        load_yaml(text, source="m")
