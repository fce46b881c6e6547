"""The Kubernetes conventions every edge shares: times, conditions, kubeconfig, machine files."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from kondor_core.api import (
    Condition,
    InvalidObjectError,
    KubeConfigSource,
    condition,
    condition_status,
    format_micro_time,
    format_time,
    kube_config_source,
    parse_machine_file,
    parse_time,
    set_condition,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, 60, tzinfo=UTC)


def test_times_are_written_as_kubernetes_writes_them() -> None:
    assert format_time(NOW) == "2026-01-02T03:04:05Z"
    assert format_time(NOW.timestamp()) == "2026-01-02T03:04:05Z"  # epoch seconds, as the agent
    assert format_time(NOW.astimezone(timezone(timedelta(hours=2)))) == "2026-01-02T03:04:05Z"
    assert format_micro_time(NOW) == "2026-01-02T03:04:05.000060Z"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-02T03:04:05Z", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02T03:04:05.000060Z", NOW),
        ("2026-01-02T05:04:05+02:00", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02T03:04:05", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("yesterday", None),
    ],
)
def test_times_are_read_back(text: str, expected: datetime | None) -> None:
    assert parse_time(text) == expected


def test_a_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    ready = set_condition([], condition("Ready", True, "Carved", "3 slots"), NOW)
    assert ready[0].last_transition_time == "2026-01-02T03:04:05Z"
    later = NOW + timedelta(minutes=1)
    still = set_condition(ready, condition("Ready", True, "Carved", "4 slots"), later)
    assert still[0].last_transition_time == "2026-01-02T03:04:05Z" and still[0].message == "4 slots"
    other = set_condition(still, Condition(type="Drained", status="False"), later.timestamp())
    assert [c.type for c in other] == ["Ready", "Drained"]
    flipped = set_condition(other, condition("Ready", None, "NoPolicy", "?"), later)
    assert flipped[-1].last_transition_time == "2026-01-02T03:05:05Z"
    assert condition_status(flipped, "Ready") == "Unknown"
    assert condition_status(flipped, "Missing") is None


@pytest.mark.parametrize(
    ("flag", "context", "environ", "expected"),
    [
        ("k.yaml", None, {"KUBECONFIG": "env.yaml"}, KubeConfigSource("k.yaml")),
        (None, None, {"KUBECONFIG": "a.yaml:b.yaml"}, KubeConfigSource("a.yaml:b.yaml")),
        (None, "dev", {"KUBECONFIG": "a.yaml"}, KubeConfigSource("a.yaml", "dev")),
        (None, None, {}, KubeConfigSource("~/.kube/config", in_cluster=True)),
        (None, None, {"KUBECONFIG": ""}, KubeConfigSource("~/.kube/config", in_cluster=True)),
        (None, "dev", {}, KubeConfigSource("~/.kube/config", "dev")),
        (Path("k.yaml"), "dev", {}, KubeConfigSource("k.yaml", "dev")),
    ],
)
def test_the_kubeconfig_is_found_as_controller_runtime_finds_it(
    flag: str | Path | None,
    context: str | None,
    environ: dict[str, str],
    expected: KubeConfigSource,
) -> None:
    assert kube_config_source(flag, context, environ) == expected


MACHINE_FILE = """\
name: node-a
cpus: 8
memory: 16Gi
gpus:
  - id: GPU-0
    properties: {Capability: 8.0}
"""


def test_a_machine_file_parses() -> None:
    machine = parse_machine_file(MACHINE_FILE, "node-a.yaml")
    assert (machine.name, machine.cpus, machine.memory_mib) == ("node-a", 8, 16384)
    assert machine.gpus[0].properties == {"Capability": 8.0}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: n\ncpus: 0\nmemory: 1Gi\n", "cpus: Input should be greater than or equal to 1"),
        ("name: n\ncpus: 2\nmemory: lots\n", "memory: 'lots' is not a quantity"),
        ("name: n\ncpus: 2\nmemory: 1Gi\nram: 2\n", "ram: Extra inputs are not permitted"),
        ("name: [unclosed", "not valid YAML"),
        ("- a list\n", "expected a machine description (a YAML mapping"),
        ("", "got an empty file"),
    ],
)
def test_a_bad_machine_file_names_the_file_the_field_and_the_value(
    text: str, expected: str
) -> None:
    with pytest.raises(InvalidObjectError) as error:
        parse_machine_file(text, "machines/m.yaml")
    assert str(error.value).startswith("machines/m.yaml is invalid")
    assert expected in str(error.value)
