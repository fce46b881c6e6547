"""`kubectl kondor status`: condor_status over ExecutionPoints recorded from a dev cluster
(two kwok nodes, agents publishing; kwok-gpu-0 under a policy with a partitionable slot and two
static slots in Owner)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from kondor_cli import status
from kondor_cli.files import UserError
from kondor_cli.main import main
from kondor_core.api import ExecutionPointStatus

RECORDED: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "test_status_executionpoints.json").read_text()
)
#: The recorded slots entered their activities at these times (epoch seconds).
ENTERED = {
    "slot1@kwok-gpu-0": 1795309544,
    "slot1@kwok-small-0": 1795309544,
}


def _ads() -> list[Any]:
    return status.slot_ads(RECORDED)


def test_default_output_is_condor_status_table_and_totals() -> None:
    ads = _ads()
    now = ENTERED["slot1@kwok-gpu-0"] + 86400 + 3723
    out = status.default_table(ads, now).splitlines()
    assert out[0].split() == list(status.HEADERS)
    rows = [line.split() for line in out[1:5]]
    assert [row[0] for row in rows] == [
        "slot1@kwok-gpu-0",
        "slot2@kwok-gpu-0",
        "slot3@kwok-gpu-0",
        "slot1@kwok-small-0",
    ]
    assert rows[0] == [
        "slot1@kwok-gpu-0",
        "LINUX",
        "X86_64",
        "Unclaimed",
        "Idle",
        "0.000",
        "32768",
        "1+01:02:03",
    ]
    assert [row[3] for row in rows] == ["Unclaimed", "Owner", "Owner", "Unclaimed"]
    totals = [line.split() for line in out[5:] if line.strip()]
    assert totals[0] == [
        "Total",
        "Owner",
        "Claimed",
        "Unclaimed",
        "Matched",
        "Preempting",
        "Backfill",
        "Drain",
    ]
    assert totals[1] == ["X86_64/LINUX", "4", "2", "0", "2", "0", "0", "0", "0"]
    assert totals[2] == ["Total", "4", "2", "0", "2", "0", "0", "0", "0"]


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0+00:00:00"), (59, "0+00:00:59"), (3600, "0+01:00:00"), (15 * 86400 + 62, "15+00:01:02")],
)
def test_activity_time_is_days_plus_clock(seconds: int, shown: str) -> None:
    assert status.activity_time(seconds) == shown


@pytest.mark.parametrize(
    ("node", "names"),
    [
        ("kwok-gpu-0", ["slot1@kwok-gpu-0", "slot2@kwok-gpu-0", "slot3@kwok-gpu-0"]),
        ("slot2@kwok-gpu-0", ["slot2@kwok-gpu-0"]),
        (None, ["slot1@kwok-gpu-0", "slot2@kwok-gpu-0", "slot3@kwok-gpu-0", "slot1@kwok-small-0"]),
    ],
)
def test_node_selects_a_machine_or_one_slot(node: str | None, names: list[str]) -> None:
    assert [ad.name for ad in status.select(_ads(), node, None)] == names


@pytest.mark.parametrize(
    ("constraint", "names"),
    [
        ('State == "Owner"', ["slot2@kwok-gpu-0", "slot3@kwok-gpu-0"]),
        ("PartitionableSlot && Cpus >= 4", ["slot1@kwok-gpu-0", "slot1@kwok-small-0"]),
        ("GPUs > 0", ["slot1@kwok-gpu-0"]),
        # Requirements and WithinResourceLimits are expressions in the ad, not strings: they
        # evaluate, MY.x resolving in the slot ad and TARGET.x (no job) being UNDEFINED.
        (
            "Requirements",
            ["slot1@kwok-gpu-0", "slot2@kwok-gpu-0", "slot3@kwok-gpu-0", "slot1@kwok-small-0"],
        ),
        ("MY.Cpus >= 8 && WithinResourceLimits", ["slot1@kwok-gpu-0"]),
        ("isString(Requirements)", []),
        ("TotalSlots == 3 && SlotTypeID == 2", ["slot2@kwok-gpu-0", "slot3@kwok-gpu-0"]),
    ],
)
def test_constraint_is_evaluated_by_classad2(constraint: str, names: list[str]) -> None:
    assert [ad.name for ad in status.select(_ads(), None, constraint)] == names


def test_bad_constraint_names_the_expression_and_quotes_the_parser() -> None:
    with pytest.raises(UserError) as caught:
        status.select(_ads(), None, "Cpus >")
    message = str(caught.value)
    assert "-constraint 'Cpus >'" in message
    assert "classad2:" in message


def test_long_prints_whole_ads_in_classad_form() -> None:
    text = status.long_form(status.select(_ads(), "slot1@kwok-small-0", None))
    lines = text.splitlines()
    assert 'Name = "slot1@kwok-small-0"' in lines
    assert 'OpSys = "LINUX"' in lines
    assert "Requirements = START && WithinResourceLimits" in lines
    assert lines == [*sorted(lines[:-1], key=str.lower), ""]


def test_autoformat_prints_values_unquoted() -> None:
    out = status.autoformat(status.select(_ads(), "kwok-gpu-0", None), ["Name", "Cpus", "GPUs"])
    assert out.splitlines() == [
        "slot1@kwok-gpu-0 8 2",
        "slot2@kwok-gpu-0 2 0",
        "slot3@kwok-gpu-0 2 0",
    ]


def test_autoformat_missing_attribute_is_undefined() -> None:
    out = status.autoformat(status.select(_ads(), "slot1@kwok-small-0", None), ["NoSuchAttr"])
    assert out == "undefined\n"


# ---------------------------------------------------------------- through `kondor status`


class _Server:
    """A stand-in API server that lists ExecutionPoints, recording which server was asked."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append(self.path)
                body = json.dumps(
                    {
                        "apiVersion": "kondor.io/v1alpha1",
                        "kind": "ExecutionPointList",
                        "metadata": {},
                        "items": outer.items,
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: Any) -> None:
                pass

        self.httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[tuple[_Server, _Server]]:
    gpu = _Server([ep for ep in RECORDED if ep["metadata"]["name"] == "kwok-gpu-0"])
    small = _Server([ep for ep in RECORDED if ep["metadata"]["name"] == "kwok-small-0"])
    yield gpu, small
    gpu.close()
    small.close()


def _kubeconfig(path: Path, contexts: dict[str, str], current: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": n, "cluster": {"server": url}} for n, url in contexts.items()
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": n, "context": {"cluster": n, "user": "u"}} for n in contexts],
                "current-context": current,
            }
        )
    )
    return path


def _names(out: str) -> list[str]:
    return [line.split()[0] for line in out.splitlines()[1:] if line.startswith("slot")]


def test_honours_kubeconfig_env_flag_and_context(
    servers: tuple[_Server, _Server],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gpu, small = servers
    both = {"gpu": gpu.url, "small": small.url}
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "env", both, "gpu")))
    assert main(["status"]) == 0
    assert _names(capsys.readouterr().out)[0] == "slot1@kwok-gpu-0"
    assert main(["status", "--context", "small"]) == 0
    assert _names(capsys.readouterr().out) == ["slot1@kwok-small-0"]
    flag = _kubeconfig(tmp_path / "flag", both, "small")
    assert main(["status", "--kubeconfig", str(flag)]) == 0
    assert _names(capsys.readouterr().out) == ["slot1@kwok-small-0"]
    # Listed through kondor_kube, in pages.
    assert gpu.requests[0] == "/apis/kondor.io/v1alpha1/executionpoints?limit=500"


def test_command_reports_bad_constraint_and_unknown_node(
    servers: tuple[_Server, _Server],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gpu, _small = servers
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "k", {"gpu": gpu.url}, "gpu")))
    assert main(["status", "-constraint", "Memory > > 3"]) == 2
    err = capsys.readouterr().err
    assert "kondor status: -constraint 'Memory > > 3' is not a ClassAd expression" in err
    assert main(["status", "nope"]) == 2
    assert "no execution point or slot named 'nope'" in capsys.readouterr().err
    assert main(["status", "kwok-gpu-0", "-af", "Name", "State"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "slot2@kwok-gpu-0 Owner"
    assert main(["status", "-l", "slot1@kwok-gpu-0"]) == 0
    assert 'AssignedGPUs = "GPU-0,GPU-1"' in capsys.readouterr().out


def test_a_status_stored_without_the_shared_attributes_shows_the_same_ads() -> None:
    """The recorded statuses hold whole slot ads (an agent before `ExecutionPointStatus.dump`
    left out of them what they share with status.machine); stored the new way, the ads
    `kondor status` shows are the same."""
    stored = []
    for ep in RECORDED:
        parsed = ExecutionPointStatus.model_validate(ep["status"])
        machine = {**parsed.machine, "MyCurrentTime": 1795309600}
        slots = [slot.model_copy(update={"ad": {**slot.ad, **machine}}) for slot in parsed.slots]
        dumped = parsed.model_copy(update={"machine": machine, "slots": slots}).dump()
        assert all("OpSys" not in slot["ad"] for slot in dumped["slots"])
        stored.append({**ep, "status": dumped})
    for before, after in zip(_ads(), status.slot_ads(stored), strict=True):
        assert after.attributes == {**before.attributes, "MyCurrentTime": 1795309600}
        assert after.expressions == before.expressions
