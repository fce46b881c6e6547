"""`kubectl kondor q`, `rm`, `hold`, `release`: condor_q and its job commands over ExecutionJobs
(a fixture list in namespace `physics`: alice's and bob's jobs in every JobStatus, one of alice's
not yet numbered by the operator)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from kondor_cli import jobs
from kondor_cli.files import UserError
from kondor_cli.main import build_parser, main
from kondor_core.api import ExecutionJob, apply_merge_patch, validate

RECORDED: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "test_jobs_executionjobs.json").read_text()
)
#: The fixture's "now": 2026-03-17 12:00 UTC.
NOW = datetime(2026, 3, 17, 12, 0, tzinfo=UTC).timestamp()


def _jobs() -> list[ExecutionJob]:
    listed, problems = jobs.read_jobs(RECORDED)
    assert problems == []
    return listed


def _by_label(label: str) -> ExecutionJob:
    return next(job for job in _jobs() if jobs.job_label(job) == label)


# ------------------------------------------------------------------------------- condor_q's view


def test_default_view_has_condor_q_columns_in_cluster_order() -> None:
    out = jobs.default_table(_jobs(), NOW, UTC).splitlines()
    assert out[0] == " ID        OWNER            SUBMITTED     RUN_TIME ST PRI     SIZE CMD"
    ids = [line.split()[0] for line in out[1:]]
    # by ClusterId; a job the operator has not numbered yet shows its name, after them
    assert ids == ["11.0", "12.0", "13.0", "14.0", "15.0", "16.0", "web-render"]
    assert [line.split()[5] for line in out[1:]] == ["X", "R", "I", "H", "C", "S", "I"]


def test_a_running_job_line_is_condor_q_s() -> None:
    out = jobs.default_table([_by_label("12.0")], NOW, UTC).splitlines()
    assert out == [
        " ID      OWNER            SUBMITTED     RUN_TIME ST PRI SIZE CMD",
        "  12.0   alice           3/14 10:20   3+01:38:30 R  0   37.0 sleep 600",
    ]


@pytest.mark.parametrize(
    ("label", "run_time", "size", "command"),
    [
        ("12.0", "3+01:38:30", "37.0", "sleep 600"),  # running: peak memory, to now
        ("13.0", "0+00:00:00", "512000.0", "analyse.py --input 'run 7.dat'"),  # RequestMemory
        ("14.0", "0+00:00:00", "1024.0", "root -b -q"),  # apptainer: the executable
        ("15.0", "1+01:03:03", "3.0", "sleep 600"),  # exited: startTime to endTime
        ("web-render", "0+00:00:00", "128.0", "ghcr.io/example/render:1.2"),  # pod: the image
    ],
)
def test_run_time_size_and_command(label: str, run_time: str, size: str, command: str) -> None:
    job = _by_label(label)
    assert jobs.cpu_time(jobs.run_time(job, NOW)).strip() == run_time
    assert jobs.size(job) == size
    assert jobs.command(job) == command


@pytest.mark.parametrize(
    ("when", "shown"),
    [
        (datetime(2026, 1, 2, 3, 4, tzinfo=UTC), " 1/2  03:04"),
        (datetime(2026, 12, 25, 23, 59, tzinfo=UTC), "12/25 23:59"),
        (None, "    ???    "),
    ],
)
def test_submitted_is_condor_format_date(when: datetime | None, shown: str) -> None:
    stamp = int(when.timestamp()) if when is not None else None
    assert jobs.submitted(stamp, UTC) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "  0+00:00:00"),
        (59, "  0+00:00:59"),
        (86400 + 3723, "  1+01:02:03"),
        (-5, "  0+00:00:00"),
    ],
)
def test_run_time_is_days_plus_clock(seconds: int, shown: str) -> None:
    assert jobs.cpu_time(seconds) == shown


def test_totals_for_the_query_for_me_and_for_all_users() -> None:
    everyone = _jobs()
    mine = jobs.select(everyone, user="alice")
    assert jobs.totals(mine, everyone, "alice").splitlines() == [
        "Total for query: 4 jobs; 0 completed, 1 removed, 2 idle, 1 running, 0 held, 0 suspended",
        "Total for alice: 4 jobs; 0 completed, 1 removed, 2 idle, 1 running, 0 held, 0 suspended",
        "Total for all users: 7 jobs; 1 completed, 1 removed, 2 idle, 1 running, 1 held, "
        "1 suspended",
    ]
    # -all: no line for one user
    assert len(jobs.totals(everyone, everyone, None).splitlines()) == 2


# ------------------------------------------------------------------------------- selection


def test_only_my_jobs_unless_all_or_jobs_are_named() -> None:
    everyone = _jobs()
    assert {jobs.owner(job) for job in jobs.select(everyone, user="alice")} == {"alice"}
    assert len(jobs.select(everyone, user=None)) == 7
    # naming a job shows it whoever owns it, as condor_q does
    named = jobs.select(everyone, user="alice", refs=[jobs.job_ref("14"), jobs.job_ref("paused")])
    assert [jobs.job_label(job) for job in named] == ["14.0", "16.0"]


@pytest.mark.parametrize(
    ("text", "cluster"), [("12", 12), ("12.0", 12), ("sleep-600", None), ("12a", None)]
)
def test_a_job_is_a_cluster_id_or_a_name(text: str, cluster: int | None) -> None:
    assert jobs.job_ref(text) == jobs.JobRef(text, cluster)


def test_a_proc_id_other_than_zero_is_refused() -> None:
    with pytest.raises(UserError, match=r"'12.3': each ExecutionJob is one job, ProcId 0"):
        jobs.job_ref("12.3")


@pytest.mark.parametrize(
    ("constraint", "labels"),
    [
        ("JobStatus == 5", ["14.0"]),
        ('Owner == "bob" && RequestMemory >= 1024', ["14.0"]),
        ("RemoteHost =!= undefined", ["12.0", "16.0"]),
        ("ExitCode == 0", ["15.0"]),
        ('regexp("500 GiB", LastRejMatchReason)', ["13.0"]),
        ("NoSuchAttribute", []),  # UNDEFINED is not TRUE
    ],
)
def test_constraint_is_evaluated_in_the_job_ad(constraint: str, labels: list[str]) -> None:
    chosen = jobs.select(_jobs(), user=None, constraint=constraint)
    assert [jobs.job_label(job) for job in chosen] == labels


def test_bad_constraint_names_the_expression() -> None:
    with pytest.raises(UserError, match=r"-constraint 'JobStatus == = 2' is not a ClassAd"):
        jobs.select(_jobs(), user=None, constraint="JobStatus == = 2")


def test_an_object_the_model_refuses_is_reported_not_dropped() -> None:
    bad = json.loads(json.dumps(RECORDED[0]))
    bad["metadata"]["name"] = "broken"
    bad["spec"]["requestCpus"] = -1
    listed, problems = jobs.read_jobs([bad, RECORDED[1]])
    assert [job.metadata.name for job in listed] == ["big-memory"]
    assert len(problems) == 1
    assert "executionjob physics/broken" in problems[0]
    assert "requestCpus" in problems[0]


# ------------------------------------------------------------------------------- -long and -af


def test_long_prints_the_job_ad_with_status_attributes() -> None:
    out = jobs.long_form([_by_label("12.0"), _by_label("15.0")])
    first, second = out.split("\n\n")[:2]
    lines = first.splitlines()
    assert lines == sorted(lines, key=str.lower)
    for expected in (
        "ClusterId = 12",
        "ProcId = 0",
        'Owner = "alice"',
        "JobStatus = 2",
        "QDate = 1773483600",
        'RemoteHost = "slot1_1@kwok-small-0"',
        "MemoryUsage = 37",
        "RequestMemory = 2048",
        'Cmd = "/bin/sleep"',
        # HTCondor's form, <schedd>#<ClusterId>.<ProcId>#<QDate>; the schedd is the Pool's.
        'GlobalJobId = "default#12.0#1773483600"',
        "NumJobStarts = 1",
        "JobUniverse = 5",
    ):
        assert expected in lines
    assert "ExitCode = 0" in second.splitlines()
    assert "ExitBySignal = false" in second.splitlines()
    assert "RemoteHost" not in second  # only while it runs
    assert out.endswith("\n\n")


def test_autoformat_prints_values_unquoted_and_undefined() -> None:
    chosen = [_by_label("12.0"), _by_label("13.0"), _by_label("web-render")]
    out = jobs.autoformat(chosen, ["ClusterId", "Owner", "RemoteHost", "RequestMemory > 1000"])
    assert out.splitlines() == [
        "12 alice slot1_1@kwok-small-0 true",
        "13 alice undefined true",
        "undefined alice undefined false",
    ]


def test_autoformat_refuses_a_bad_expression() -> None:
    with pytest.raises(UserError, match=r"-af 'Owner ==' is not a ClassAd expression"):
        jobs.autoformat(_jobs(), ["Owner =="])


# ------------------------------------------------------------------------------- rm, hold, release


@pytest.mark.parametrize(
    ("action", "label", "message", "sends"),
    [
        ("rm", "12.0", "Job 12.0 marked for removal", True),
        ("rm", "11.0", "Job 11.0 already marked for removal", False),
        ("hold", "13.0", "Job 13.0 held", True),
        ("hold", "14.0", "Job 14.0 already held", False),
        ("hold", "15.0", "Job 15.0 is completed and cannot be held", False),
        ("hold", "11.0", "Job 11.0 is marked for removal and cannot be held", False),
        ("release", "14.0", "Job 14.0 released", True),
        ("release", "13.0", "Job 13.0 not held to be released", False),
        ("hold", "web-render", "Job web-render held", True),
    ],
)
def test_commands_say_what_condor_says(
    action: jobs.Action, label: str, message: str, sends: bool
) -> None:
    step = jobs.plan(action, _by_label(label))
    assert step.message == message
    assert (step.patch is not None) == sends


@pytest.mark.parametrize(
    ("action", "field", "value"),
    [("rm", "remove", True), ("hold", "hold", True), ("release", "hold", False)],
)
def test_each_patch_sets_the_spec_field_the_model_defines(
    action: jobs.Action, field: str, value: bool
) -> None:
    # The patch applied as the API server applies a merge patch, read back through the model:
    # a misspelt key would be refused (extra="forbid") or leave the field unchanged.
    before = RECORDED[2] if action == "release" else RECORDED[1]
    after = validate(ExecutionJob, apply_merge_patch(before, jobs.PATCHES[action]), what="job")
    assert getattr(after.spec, field) is value
    assert after.spec.model_dump(exclude={field}) == validate(
        ExecutionJob, before, what="job"
    ).spec.model_dump(exclude={field})


def test_all_acts_on_my_jobs_that_the_command_changes() -> None:
    everyone = _jobs()
    held = jobs.steps_for_all("hold", everyone, "alice")
    assert [jobs.job_label(step.job) for step in held] == ["12.0", "13.0", "web-render"]
    assert jobs.steps_for_all("release", everyone, "alice") == []
    assert [jobs.job_label(s.job) for s in jobs.steps_for_all("release", everyone, "bob")] == [
        "14.0"
    ]


def test_resolve_reports_unknown_and_ambiguous_jobs() -> None:
    other = json.loads(json.dumps(RECORDED[0]))
    other["metadata"]["namespace"] = "chemistry"
    other["status"]["clusterId"] = 99
    listed, _ = jobs.read_jobs([*RECORDED, other])
    refs = [jobs.job_ref(text) for text in ("13", "nope", "77.0", "sleep-600", "99")]
    found, problems = jobs.resolve(listed, refs)
    assert [jobs.job_label(job) for job in found] == ["13.0", "99.0"]
    assert problems == [
        "Job nope not found",
        "Job 77.0 not found",
        "Job sleep-600 is in several namespaces (chemistry, physics): give -n",
    ]


# ------------------------------------------------------------------------------- the commands


class FakeApi:
    """The API server as the commands see it: `physics` holds the fixture jobs; patches of
    `forbidden` names are refused with the API server's 403."""

    def __init__(self, user: str = "alice", forbidden: tuple[str, ...] = ()) -> None:
        self.namespace = "physics"
        self.user = user
        self.forbidden = forbidden
        self.patches: list[tuple[str, str, dict[str, Any]]] = []
        self.listed: list[str | None] = []

    def list_jobs(self, namespace: str | None) -> list[dict[str, Any]]:
        self.listed.append(namespace)
        return [item for item in RECORDED if namespace in (None, item["metadata"]["namespace"])]

    def patch_job(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        if name in self.forbidden:
            raise jobs.ApiError(
                f"cannot patch executionjob {namespace}/{name}: 403 Forbidden: "
                f'executionjobs.kondor.io "{name}" is forbidden: User "{self.user}" cannot '
                f'patch resource "executionjobs" in API group "kondor.io" in the namespace '
                f'"{namespace}"',
                403,
            )
        self.patches.append((namespace, name, dict(patch)))

    def whoami(self) -> str:
        return self.user


def _run(argv: list[str], api: FakeApi) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args, connect=lambda _args: api))


def test_q_shows_my_jobs_with_totals(capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeApi("bob")
    assert _run(["q"], api) == 0
    out = capsys.readouterr().out
    assert [line.split()[1] for line in out.splitlines()[1:4]] == ["bob", "bob", "bob"]
    assert (
        "Total for bob: 3 jobs; 1 completed, 0 removed, 0 idle, 0 running, 1 held, 1 suspended"
        in out
    )
    assert "Total for query: 3 jobs;" in out
    assert api.listed == ["physics"]


def test_q_all_shows_everyones_and_other_namespaces(capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeApi("bob")
    assert _run(["q", "-all", "-n", "elsewhere"], api) == 0
    assert "Total for query: 0 jobs;" in capsys.readouterr().out
    assert _run(["q", "-all", "-A", "-af", "Owner", "ClusterId"], api) == 0
    assert capsys.readouterr().out.splitlines()[:2] == ["alice 11", "alice 12"]
    assert api.listed == ["elsewhere", None]


def test_q_bad_constraint_exits_2_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["q", "-constraint", "Owner == == 1"]) == 2
    err = capsys.readouterr().err
    assert "kondor q: -constraint 'Owner == == 1' is not a ClassAd expression" in err


def test_rm_hold_release_patch_and_print_condor_messages(
    capsys: pytest.CaptureFixture[str],
) -> None:
    api = FakeApi("alice")
    assert _run(["hold", "12", "big-memory"], api) == 0
    assert capsys.readouterr().out.splitlines() == ["Job 12.0 held", "Job 13.0 held"]
    assert _run(["rm", "12.0"], api) == 0
    assert capsys.readouterr().out == "Job 12.0 marked for removal\n"
    assert api.patches == [
        ("physics", "sleep-600", {"spec": {"hold": True}}),
        ("physics", "big-memory", {"spec": {"hold": True}}),
        ("physics", "sleep-600", {"spec": {"remove": True}}),
    ]
    # the fixture is not changed by the fake: 13 is still not held, 14 is
    assert _run(["release", "13", "14"], api) == 1
    captured = capsys.readouterr()
    assert captured.out == "Job 14.0 released\n"
    assert captured.err == "Job 13.0 not held to be released\n"
    assert api.patches[-1] == ("physics", "container", {"spec": {"hold": False}})


def test_all_patches_each_of_my_jobs_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeApi("alice")
    assert _run(["hold", "-all"], api) == 0
    assert capsys.readouterr().out == "All jobs have been held\n"
    assert [name for _, name, _ in api.patches] == ["sleep-600", "big-memory", "web-render"]
    assert _run(["release", "-all"], api) == 1
    assert "There are no jobs of alice to release in namespace physics" in capsys.readouterr().err


def test_permission_denied_says_who_and_what(capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeApi("bob", forbidden=("sleep-600",))
    assert _run(["rm", "12", "nope"], api) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "Job nope not found"
    assert err[1].startswith("Permission denied to remove job 12.0: cannot patch executionjob ")
    assert 'User "bob" cannot patch resource "executionjobs"' in err[1]
    assert api.patches == []


def test_job_commands_refuse_unclear_requests(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rm"]) == 2
    assert "you did not specify any jobs" in capsys.readouterr().err
    assert main(["hold", "-all", "12"]) == 2
    assert "can't mix -all with job names or ids" in capsys.readouterr().err


# ------------------------------------------------------------------------------- over HTTP


class _Server:
    """A stand-in API server: lists the fixture jobs, answers a SelfSubjectReview as `user`,
    and records each request (method, path, content type, body)."""

    def __init__(self, user: str) -> None:
        self.requests: list[tuple[str, str, str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, document: Any, status: int = 200) -> None:
                body = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _record(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                kind = self.headers.get("Content-Type") or ""
                outer.requests.append((self.command, self.path, kind, body))
                return body

            def do_GET(self) -> None:
                self._record()
                namespace = self.path.split("/namespaces/")[1].split("/")[0]
                items = [i for i in RECORDED if i["metadata"]["namespace"] == namespace]
                self._reply({"kind": "ExecutionJobList", "metadata": {}, "items": items})

            def do_POST(self) -> None:
                body = self._record()
                body["status"] = {"userInfo": {"username": user, "groups": ["kondor:users"]}}
                self._reply(body, 201)

            def do_PATCH(self) -> None:
                self._record()
                self._reply(RECORDED[0])

            def log_message(self, *_args: Any) -> None:
                pass

        self.httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[_Server]:
    server = _Server("bob")
    yield server
    server.close()


def test_through_the_kubernetes_client(
    server: _Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server.url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {
                        "name": "lab",
                        "context": {"cluster": "c", "user": "u", "namespace": "physics"},
                    }
                ],
                "current-context": "lab",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert main(["q"]) == 0
    out = capsys.readouterr().out
    assert "Total for bob: 3 jobs;" in out  # who: the API server's SelfSubjectReview
    assert main(["release", "14"]) == 0
    assert capsys.readouterr().out == "Job 14.0 released\n"
    methods = [(method, path) for method, path, _, _ in server.requests]
    # Through kondor_kube: a listing is paged, and every write names the CLI's field manager.
    jobs = "/apis/kondor.io/v1alpha1/namespaces/physics/executionjobs"
    assert methods == [
        ("GET", f"{jobs}?limit=500"),
        ("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews?fieldManager=kondor-cli"),
        ("GET", f"{jobs}?limit=500"),
        ("PATCH", f"{jobs}/container?fieldManager=kondor-cli"),
    ]
    _, _, kind, body = server.requests[-1]
    assert kind == "application/merge-patch+json"
    assert body == {"spec": {"hold": False}}


def test_an_unreachable_api_server_is_a_message_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = _Server("bob")
    url = server.url
    server.close()  # nothing listens there now
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert main(["q", "-all"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        "kondor q: cannot reach the API server to list executionjobs in namespace default: "
    )
