"""Property-based fuzzing of every parser a user's file reaches (issue 18): the valid
examples mutated (types, numbers at and beyond the limits, NaN/inf, encodings, nesting,
aliases, unicode and control characters). No exception but Kondor's own refusals, no
output that is not JSON, and each case within a deadline.

CI runs a bounded number of examples; `make fuzz` runs many more
(KONDOR_FUZZ_EXAMPLES) with statistics."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kondor_core.errors import KondorError
from kondor_core.fleet import check_policy
from kondor_core.inputs import load_yaml
from kondor_core.jobs import Requester, admit_job

from .hostile_support import GPU_MACHINE, JOB, MACHINE, POLICY, dump, simulate, strict_json

EXAMPLES = int(os.environ.get("KONDOR_FUZZ_EXAMPLES", "30"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=5000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

NUMBERS = st.sampled_from(
    [
        0,
        -1,
        1,
        2**31,
        2**53 + 1,
        2**63 - 1,
        2**63,
        -(2**63) - 1,
        2**70,
        1e30,
        -1e30,
        1e-30,
        float("inf"),
        float("-inf"),
        float("nan"),
        0.5,
        1e308,
    ]
)
TEXTS = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            "1e30",
            "1e999999Ei",
            ".5Gi",
            "-1Mi",
            "8Ei",
            "16Gi",
            "(((",
            "a\nb",
            "\x00",
            "\x1b[31m",
            "é",
            "日本",
            "'",
            '"',
            "${x}",
            "$(X)",
            "1/0",
            "true",
            "UNDEFINED",
            "a" * 300,
        ]
    ),
    st.text(max_size=20),
)
LEAVES = st.one_of(NUMBERS, TEXTS, st.booleans(), st.none(), st.integers(), st.floats())
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXTS, inner, max_size=4)),
    max_leaves=12,
)


@st.composite
def mutated(draw: st.DrawFn, base: Any) -> Any:
    """`base` with one to three values (or keys) somewhere in it replaced."""
    data: Any = _copy(base)
    for _ in range(draw(st.integers(1, 3))):
        data = _mutate_once(draw, data)
    return data


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _mutate_once(draw: st.DrawFn, data: Any) -> Any:
    if not isinstance(data, dict | list) or not data or draw(st.integers(0, 5)) == 0:
        return draw(VALUES)
    if isinstance(data, dict):
        key = draw(st.sampled_from(sorted(data, key=str)))
        if draw(st.integers(0, 4)) == 0:  # a hostile key
            data[draw(TEXTS)] = data.pop(key)
        else:
            data[key] = _mutate_once(draw, data[key])
        return data
    index = draw(st.integers(0, len(data) - 1))
    data[index] = _mutate_once(draw, data[index])
    return data


@st.composite
def hostile_bytes(draw: st.DrawFn, base: Any) -> bytes:
    """A mutated document as YAML, sometimes with its bytes garbled, nested or aliased."""
    content = dump(draw(mutated(base)))
    trick = draw(st.integers(0, 5))
    if trick == 1:
        at = draw(st.integers(0, len(content)))
        content = content[:at] + draw(st.binary(min_size=1, max_size=4)) + content[at:]
    elif trick == 2:
        depth = draw(st.integers(50, 3000))
        content += b"deep: " + b"[" * depth + b"]" * depth + b"\n"
    elif trick == 3:
        fan = draw(st.integers(2, 12))
        lines = [b"z0: &z0 [x, x]"] + [
            f"z{i}: &z{i} [".encode() + b", ".join([f"*z{i - 1}".encode()] * fan) + b"]"
            for i in range(1, draw(st.integers(2, 9)))
        ]
        content = b"\n".join(lines) + b"\n" + content
    return content


def _simulate_checked(tmp: Path, machine: bytes, policy: bytes) -> None:
    outcome = simulate(tmp, machine, policy)
    assert outcome.code in (0, 2), outcome
    if outcome.code == 0:
        strict_json(outcome.out)
    else:
        assert outcome.err.startswith("kondor simulate: ") and outcome.out == ""


@FUZZ
@given(machine=st.one_of(hostile_bytes(MACHINE), hostile_bytes(GPU_MACHINE)))
def test_fuzz_machine_files(tmp_path_factory: Any, machine: bytes) -> None:
    _simulate_checked(tmp_path_factory.mktemp("m"), machine, dump(POLICY))


@FUZZ
@given(
    policy=hostile_bytes(
        {
            **POLICY,
            "spec": {
                "slotTypes": [{"id": 1, "count": 2, "resources": {"cpus": 1, "memory": "25%"}}],
                "reserved": {"cpus": 0, "memory": "1Gi"},
                "machineResources": {"cogs": 4},
                "attributes": {"Colour": '"blue"'},
                "condorConfig": "NUM_SLOTS_TYPE_2 = 1\nSLOT_TYPE_2 = cpus=1\n",
            },
        }
    )
)
def test_fuzz_slot_policies(tmp_path_factory: Any, policy: bytes) -> None:
    _simulate_checked(tmp_path_factory.mktemp("p"), dump(GPU_MACHINE), policy)


@FUZZ
@given(
    job=mutated(
        {
            **JOB,
            "spec": {
                **JOB["spec"],
                "process": {"executable": "/bin/true"},
                "requestResources": {"cogs": 1},
                "attributes": {"A": "1"},
            },
        }
    )
)
def test_fuzz_admission(job: Any) -> None:
    """The webhook's validation: a refusal or an admission, never an exception."""
    for operation, new, old in (("CREATE", job, None), ("UPDATE", job, JOB)):
        admission = admit_job(
            operation, Requester("alice"), job if isinstance(new, dict) else {}, old
        )
        assert admission.refusal is None or isinstance(admission.refusal, str)


POLICY_SPEC: dict[str, Any] = {
    "slotTypes": [{"id": 1, "count": 2, "resources": {"cpus": 1, "memory": "25%"}}],
    "reserved": {"cpus": 0, "memory": "1Gi"},
    "machineResources": {"cogs": 4},
    "attributes": {"Colour": '"blue"'},
    "slotAttributes": {"1": {"Tier": "1"}},
    "macros": {"M": "2"},
    "start": "KeyboardIdle > 2",
    "condorConfig": "NUM_SLOTS_TYPE_2 = 1\nSLOT_TYPE_2 = cpus=1\nMACHINE_RESOURCE_GPUs = g0, g1\n",
    "nodeSelector": {"matchLabels": {"kondor.io/pool": "a"}},
}


def test_the_policy_fuzzed_is_valid_unmutated() -> None:
    assert check_policy(POLICY_SPEC).valid


@FUZZ
@given(spec=mutated(POLICY_SPEC))
def test_fuzz_policy_admission(spec: Any) -> None:
    """The SlotPolicy webhook's validation (check_policy): valid, or refused with messages
    naming the spec's fields, never an exception."""
    checked = check_policy(spec if isinstance(spec, dict) else {"start": spec})
    assert checked.valid or checked.problems
    assert all(isinstance(p, str) and p.startswith("spec") for p in checked.problems), checked


@FUZZ
@given(text=st.one_of(st.binary(max_size=200), hostile_bytes({"a": [1, {"b": "c"}]})))
def test_fuzz_the_yaml_loader(text: bytes) -> None:
    try:
        load_yaml(text, source="f")
    except KondorError as err:
        assert str(err).startswith("f: ")


@FUZZ
@given(
    rest=st.fixed_dictionaries(
        {"until": NUMBERS, "pollingInterval": NUMBERS},
        optional={
            "steps": st.lists(
                st.fixed_dictionaries(
                    {"at": NUMBERS, "facts": st.dictionaries(TEXTS, LEAVES, max_size=2)}
                ),
                max_size=3,
            )
        },
    )
)
def test_fuzz_timelines(tmp_path_factory: Any, rest: dict[str, Any]) -> None:
    from .hostile_support import ROOT, run_cli

    tmp = tmp_path_factory.mktemp("t")
    scenario = {
        "machine": {"file": f"{ROOT}/examples/machines/desk.yaml"},
        "policy": {"file": f"{ROOT}/examples/policies/default.yaml"},
        **rest,
    }
    (tmp / "t.yaml").write_bytes(dump(scenario))
    outcome = run_cli("simulate", "--timeline", tmp / "t.yaml", "-o", "json")
    assert outcome.code in (0, 2), outcome
    if outcome.code == 0:
        strict_json(outcome.out)


@FUZZ
@given(chunks=st.lists(st.binary(max_size=300), max_size=8))
def test_fuzz_cron_output(chunks: list[bytes]) -> None:
    from kondor_core.cron import OutputReader
    from kondor_core.cron.jobs import CronJob  # noqa: F401  (the parser's input type)

    reader = OutputReader("hook", limit=1000)
    lines = [line for chunk in chunks for line in reader.feed(chunk)] + reader.finish()
    assert sum(len(line.encode()) for line in lines) <= 1000 + len(lines)
