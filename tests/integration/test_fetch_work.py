"""Job hooks that fetch work, on the dev cluster (the reference's "Job Hooks That Fetch Work").

Two one-core nodes fetch from a work source that knows nothing of Kondor: one from an HTTP
service the test serves on the loopback (`<Keyword>_HOOK_FETCH_WORK = http://...`), one
from executables in its hooks directory reading a queue of job ads. No ExecutionJob is
submitted: the agents fetch the jobs, REPLY_FETCH hears `accept`, the jobs appear as
ExecutionJobs owned by the ExecutionPoint and run; a fetched job the slot's RANK prefers
preempts the running one, whose EVICT_CLAIM is called. A SlotPolicy naming a hook outside
the hooks directory, a symlink out of it, or a non-http URL is refused at `kubectl apply`.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest
import yaml

from kondor_core.classads import parse_ad
from kondor_devcluster import kondor
from kondor_devcluster.components import Layout

from .conftest import skip_reason
from .test_jobs_end_to_end import Cluster, eventually, job_cluster, slot_policy

HTTP_NODE = "kwok-fetch-http-0"
EXEC_NODE = "kwok-fetch-exec-0"
#: Fetch every second; a slot's RANK prefers `Urgent` work; preempted work is vacated at once.
COMMON = """POLLING_INTERVAL = 1
FetchWorkDelay = 1
RANK = ifThenElse(TARGET.Urgent =?= true, 10, 0)
MAXJOBRETIREMENTTIME = 0
MachineMaxVacateTime = 1
"""
EXEC_HOOKS = {
    # The first ad of the queue, if any; the work source is a directory of ads.
    "fetch.sh": '#!/bin/sh\ncat > "$0.slot"\nfor f in "$(dirname "$0")"/queue/*.ad; do\n'
    '  [ -e "$f" ] && cat "$f"\n  exit 0\ndone\n',
    # accept takes the job off the queue; every reply is logged with its WorkId.
    "reply.sh": '#!/bin/sh\nad=$(cat)\nid=$(printf "%s\\n" "$ad" | sed -n "s/^WorkId = //p" '
    '| head -1)\necho "$1 $id" >> "$(dirname "$0")/replies.log"\n'
    'if [ "$1" = accept ]; then rm -f "$(dirname "$0")/queue/$id.ad"; fi\n',
    "evict.sh": '#!/bin/sh\ncat > "$(dirname "$0")/evicted-$(date +%s%N).ad"\n',
    # The starter's JOB_EXIT under the keyword that fetched the job (its HookKeyword).
    "exit.sh": '#!/bin/sh\necho "$1" > "$_CONDOR_SCRATCH_DIR/exit-how"\n'
    'cat > "$_CONDOR_SCRATCH_DIR/exit-ad"\n',
}


def work(work_id: int, seconds: float, *, urgent: bool = False) -> str:
    """A fetched job's ClassAd: a shell command, 1 core, and a WorkId the source knows it by."""
    return (
        'Cmd = "/bin/sh"\n'
        f"Arguments = \"-c 'echo work {work_id}; sleep {seconds}'\"\n"
        "RequestCpus = 1\nRequestMemory = 32\n"
        f'Out = "out.txt"\nWorkId = {work_id}\nUrgent = {"true" if urgent else "false"}\n'
    )


class WorkSource(Protocol):
    def offer(self, work_id: int, ad: str) -> None: ...

    def replies(self) -> list[tuple[str, int]]: ...

    def evicted(self) -> list[str]: ...


@dataclass
class HttpSource:
    """The HTTP work source: /fetch hands out the first queued ad, /reply?argument=accept
    takes it off the queue, /evict records the ads."""

    queue: dict[int, str] = field(default_factory=dict)
    said: list[tuple[str, int]] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    slot_ads: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def offer(self, work_id: int, ad: str) -> None:
        with self.lock:
            self.queue[work_id] = ad

    def replies(self) -> list[tuple[str, int]]:
        with self.lock:
            return list(self.said)

    def evicted(self) -> list[str]:
        with self.lock:
            return list(self.gone)

    def serve(self) -> tuple[http.server.ThreadingHTTPServer, int]:
        source = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                path, _, query = self.path.partition("?")
                out = ""
                with source.lock:
                    if path == "/fetch":
                        source.slot_ads.append(body)
                        out = next(iter(source.queue.values()), "")
                    elif path == "/reply":
                        job = body.split("\n-----\n")[0]
                        work_id = int(parse_ad(job, field="reply")["WorkId"])
                        argument = query.removeprefix("argument=")
                        source.said.append((argument, work_id))
                        if argument == "accept":
                            source.queue.pop(work_id, None)
                    elif path == "/evict":
                        source.gone.append(body)
                data = out.encode()
                self.send_response(200 if data else 204)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, server.server_address[1]


@dataclass
class ExecSource:
    """The executable hooks' work source: a directory of ads beside the scripts."""

    hooks: Path

    def offer(self, work_id: int, ad: str) -> None:
        (self.hooks / "queue" / f"{work_id}.ad.tmp").write_text(ad)
        (self.hooks / "queue" / f"{work_id}.ad.tmp").rename(self.hooks / "queue" / f"{work_id}.ad")

    def replies(self) -> list[tuple[str, int]]:
        log = self.hooks / "replies.log"
        lines = log.read_text().split("\n") if log.exists() else []
        return [(word, int(n)) for word, n in (line.split() for line in lines if line.strip())]

    def evicted(self) -> list[str]:
        return [path.read_text() for path in sorted(self.hooks.glob("evicted-*.ad"))]


@dataclass
class FetchCluster:
    cluster: Cluster
    sources: dict[str, WorkSource]
    #: The cluster's state directory: its hooks/ is every agent's --hooks-dir and the
    #: operator's KONDOR_HOOKS_DIR (kondor.hooks_dir).
    state: Path


def machine(tmp: Path, name: str, pool: str) -> Path:
    path = tmp / f"{name}.yaml"
    spec = {"name": name, "cpus": 1, "memory": "2Gi", "disk": 10485760, "labels": {}}
    spec["labels"] = {"kondor.io/pool": pool}
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module")
def fetching(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FetchCluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("fetch")
    source = HttpSource()
    server, port = source.serve()
    url = f"http://127.0.0.1:{port}"
    http_config = (
        COMMON + "STARTD_JOB_HOOK_KEYWORD = WEB\n"
        f"WEB_HOOK_FETCH_WORK = {url}/fetch\nWEB_HOOK_REPLY_FETCH = {url}/reply\n"
        f"WEB_HOOK_EVICT_CLAIM = {url}/evict\nWEB_HOOK_FETCH_WORK_TIMEOUT = 5\n"
    )
    exec_config = (
        COMMON + "STARTD_JOB_HOOK_KEYWORD = QUEUE\nQUEUE_HOOK_FETCH_WORK = fetch.sh\n"
        "QUEUE_HOOK_REPLY_FETCH = reply.sh\nQUEUE_HOOK_EVICT_CLAIM = evict.sh\n"
        "QUEUE_HOOK_JOB_EXIT = exit.sh\n"
    )
    hooks = kondor.hooks_dir(Layout(tmp / "state"))
    (hooks / "queue").mkdir(parents=True)
    for name, text in EXEC_HOOKS.items():
        (hooks / name).write_text(text)
        (hooks / name).chmod(0o755)
    machines = [machine(tmp, HTTP_NODE, "fetch-http"), machine(tmp, EXEC_NODE, "fetch-exec")]
    policies = [
        slot_policy("fetch-http", {"kondor.io/pool": "fetch-http"}, http_config),
        slot_policy("fetch-exec", {"kondor.io/pool": "fetch-exec"}, exec_config),
    ]
    try:
        with job_cluster(tmp, machines, policies) as made:
            yield FetchCluster(
                made, {HTTP_NODE: source, EXEC_NODE: ExecSource(hooks)}, tmp / "state"
            )
    finally:
        server.shutdown()


def fetched_jobs(cluster: Cluster, node: str) -> dict[int, dict[str, Any]]:
    """The ExecutionJobs `node` fetched, by their WorkId."""
    selector = f"kondor.io/fetched-by={node}"
    listed = cluster.kubectl("get", "executionjobs", "-n", "default", "-l", selector, "-o", "json")
    found = json.loads(listed)["items"]
    return {int(job["spec"]["attributes"]["WorkId"]): job for job in found}


@pytest.mark.parametrize("node", [HTTP_NODE, EXEC_NODE])
def test_fetched_work_runs_and_a_better_ranked_job_preempts(
    fetching: FetchCluster, node: str
) -> None:
    cluster, source = fetching.cluster, fetching.sources[node]
    base = 100 if node == HTTP_NODE else 200
    # No ExecutionJob is submitted for this node: three come from the work source.
    assert fetched_jobs(cluster, node) == {}
    for n in range(3):
        source.offer(base + n, work(base + n, 0.5))

    def three_completed() -> dict[int, dict[str, Any]] | None:
        jobs = fetched_jobs(cluster, node)
        done = [j for j in jobs.values() if j.get("status", {}).get("jobStatus") == "Completed"]
        return jobs if len(done) == 3 else None

    jobs = eventually(three_completed, 45, f"three fetched jobs Completed on {node}")
    accepted = sorted(n for word, n in source.replies() if word == "accept")
    assert accepted == [base, base + 1, base + 2]
    ep = cluster.get("executionpoints", node, None)
    for work_id, job in jobs.items():
        metadata = job["metadata"]
        assert metadata["labels"]["kondor.io/hook-keyword"] in ("WEB", "QUEUE")
        owner = metadata["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"]) == (
            "ExecutionPoint",
            node,
            ep["metadata"]["uid"],
        )
        assert job["status"]["executionPoint"] == node
        out = Path(job["status"]["execution"]["directory"]) / "scratch" / "out.txt"
        assert out.read_text() == f"work {work_id}\n"

    # A long job runs; then work the slot's RANK prefers comes and preempts it.
    long_id, urgent_id = base + 10, base + 11
    source.offer(long_id, work(long_id, 300))
    eventually(
        lambda: (
            fetched_jobs(cluster, node).get(long_id, {}).get("status", {}).get("jobStatus")
            == "Running"
        ),
        30,
        "the long fetched job Running",
    )
    source.offer(urgent_id, work(urgent_id, 0.5, urgent=True))
    eventually(
        lambda: (
            fetched_jobs(cluster, node).get(urgent_id, {}).get("status", {}).get("jobStatus")
            == "Completed"
        ),
        40,
        "the urgent fetched job Completed after preempting the long one",
    )
    assert ("accept", urgent_id) in source.replies()
    evicted = eventually(source.evicted, 15, "EVICT_CLAIM called")
    job_part, _, slot_part = evicted[0].partition("\n-----\n")
    assert parse_ad(job_part, field="evicted job")["WorkId"] == long_id
    assert parse_ad(slot_part, field="evicted slot")["Machine"] == node
    # The evicted work went back to its source: its ExecutionJob is removed, not re-run.
    long_job = eventually(
        lambda: (
            (j := fetched_jobs(cluster, node)[long_id])["status"]["jobStatus"] == "Removed" and j
        ),
        20,
        "the evicted fetched job Removed",
    )
    assert long_job["status"]["numJobStarts"] == 1
    if node == EXEC_NODE:
        # The fetched job's starter hooks use the keyword that fetched it: JOB_EXIT was told
        # the job was evicted, with the signal that ended it.
        scratch = Path(long_job["status"]["execution"]["directory"]) / "scratch"
        assert (scratch / "exit-how").read_text() == "evict\n"
        exit_ad = parse_ad((scratch / "exit-ad").read_text(), field="exit")
        assert exit_ad["ExitBySignal"] is True and exit_ad["HookKeyword"] == "QUEUE"


BAD_HOOKS = [
    ("outside", "BAD_HOOK_FETCH_WORK = /usr/local/bin/fetch", "BAD_HOOK_FETCH_WORK"),
    ("symlink", "BAD_HOOK_EVICT_CLAIM = escape.sh", "BAD_HOOK_EVICT_CLAIM"),
    ("url", "BAD_HOOK_REPLY_FETCH = ftp://work.example/reply", "BAD_HOOK_REPLY_FETCH"),
]


@pytest.mark.parametrize(("case", "line", "knob"), BAD_HOOKS, ids=[c[0] for c in BAD_HOOKS])
def test_a_bad_hook_is_refused_at_apply_naming_the_knob(
    fetching: FetchCluster, case: str, line: str, knob: str
) -> None:
    if case == "symlink":  # a name inside the hooks directory, a file outside it
        # The agents' hooks directory, which the operator checks too (kondor.hooks_dir).
        hooks, outside = kondor.hooks_dir(Layout(fetching.state)), fetching.state / "outside"
        hooks.mkdir(exist_ok=True)
        outside.mkdir(exist_ok=True)
        (outside / "evict.sh").write_text("#!/bin/sh\n")
        (hooks / "escape.sh").unlink(missing_ok=True)
        (hooks / "escape.sh").symlink_to(outside / "evict.sh")
        # ... the directory each running agent reads, as its command line says.
        for agent in _agents(fetching.state):
            arguments = Path(f"/proc/{agent['pid']}/cmdline").read_bytes().split(b"\0")
            assert arguments[arguments.index(b"--hooks-dir") + 1] == bytes(hooks), agent
    policy = slot_policy(f"bad-{case}", {"kondor.io/pool": "none"}, f"{line}\n")
    with pytest.raises(AssertionError) as refused:
        fetching.cluster.apply(policy)
    assert knob in str(refused.value)
    assert "denied the request" in str(refused.value)
    if case == "symlink":
        assert "a symlink leads out of it" in str(refused.value)


def _agents(state: Path) -> list[dict[str, Any]]:
    """The dev cluster's running agents (`dev-cluster ps`): their node and pid."""
    listed = subprocess.run(
        [sys.executable, "-m", "kondor_devcluster", "dev-cluster", "ps", "--state-dir", str(state),
         "-o", "json"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    agents = [row for row in json.loads(listed) if row.get("node")]
    assert {row["node"] for row in agents} == {HTTP_NODE, EXEC_NODE}, listed
    return agents
