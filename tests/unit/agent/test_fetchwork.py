"""The agent's fetch-work hooks (`kondor_agent.fetchwork`): hooks as real programs from the
hooks directory and as real HTTP(S) endpoints on the loopback, the agent's loop fetching,
weighing and replying, Events on failures, and EVICT_CLAIM."""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from agent_fakes import FakeAPI, FakeClock, MachineBox, example_machine
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kondor_agent.fetchwork import EventRation, FetchWork, HookCaller
from kondor_agent.loop import Agent, AgentConfig
from kondor_agent.services import FetchService
from kondor_core.api import ExecutionJob
from kondor_core.classads import parse_ad

NODE = "node-a"
JOB = 'Cmd = "/bin/true"\nRequestCpus = 1\nRequestMemory = 16\nWorkId = 4\n'


def script(hooks: Path, name: str, body: str) -> Path:
    path = hooks / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def until(check: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"{what} within {timeout} s")


# -- programs -------------------------------------------------------------------------------


def test_a_program_hook_gets_stdin_and_its_argument_and_its_stdout_is_the_output(
    tmp_path: Path,
) -> None:
    script(tmp_path, "echo.sh", 'cat\necho "Argument = \\"$1\\""\n')
    run = HookCaller(tmp_path).call(
        "echo.sh", "A = 1\n", knob="K_HOOK_REPLY_FETCH", hook="REPLY_FETCH", timeout=5,
        argument="accept",
    )  # fmt: skip
    assert run.failure is None and run.exit_code == 0
    assert parse_ad(run.stdout, field="out")["Argument"] == "accept"


def test_a_program_outside_the_hooks_directory_through_a_symlink_is_not_run(
    tmp_path: Path,
) -> None:
    hooks, elsewhere = tmp_path / "hooks", tmp_path / "elsewhere"
    hooks.mkdir()
    elsewhere.mkdir()
    ran = elsewhere / "ran"
    script(elsewhere, "fetch.sh", f"touch {ran}\n")
    (hooks / "fetch.sh").symlink_to(elsewhere / "fetch.sh")
    run = HookCaller(hooks).call(
        "fetch.sh", "", knob="K_HOOK_FETCH_WORK", hook="FETCH_WORK", timeout=5
    )
    assert run.failure is not None
    assert "K_HOOK_FETCH_WORK" in run.failure and "outside the hooks directory" in run.failure
    assert not ran.exists()


def test_a_program_hook_that_runs_too_long_is_killed(tmp_path: Path) -> None:
    script(tmp_path, "slow.sh", "sleep 30\n")
    started = time.monotonic()
    run = HookCaller(tmp_path).call(
        "slow.sh", "", knob="K_HOOK_FETCH_WORK", hook="FETCH_WORK", timeout=0.5
    )
    assert time.monotonic() - started < 5
    assert run.failure == "K_HOOK_FETCH_WORK ran longer than 0.5 s and was killed"


# -- URLs -----------------------------------------------------------------------------------


class Served:
    """A loopback HTTP(S) server answering POSTs as `answer(path, headers, body)` says."""

    def __init__(
        self,
        answer: Callable[[str, Mapping[str, str], str], tuple[int, str]],
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.seen: list[tuple[str, dict[str, str], str]] = []
        served = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                served.seen.append((self.path, dict(self.headers), body))
                status, text = answer(self.path, dict(self.headers), body)
                data = text.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the hook gave up (its timeout)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[..., Served]]:
    servers: list[Served] = []

    def start(
        answer: Callable[[str, Mapping[str, str], str], tuple[int, str]],
        tls: ssl.SSLContext | None = None,
    ) -> Served:
        servers.append(Served(answer, tls))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_a_url_hook_is_posted_the_ad_and_its_reply_body_is_the_output(
    tmp_path: Path, serve: Callable[..., Served]
) -> None:
    served = serve(lambda _p, _h, body: (200, body.replace("1", "2")))
    run = HookCaller(tmp_path).call(
        f"{served.url}/reply", "A = 1\n", knob="K_HOOK_REPLY_FETCH", hook="REPLY_FETCH",
        timeout=5, argument="reject",
    )  # fmt: skip
    assert (run.exit_code, run.stdout, run.failure) == (0, "A = 2\n", None)
    path, headers, body = served.seen[0]
    assert path == "/reply?argument=reject" and body == "A = 1\n"
    assert headers["Kondor-Hook"] == "REPLY_FETCH"
    assert headers["Kondor-Hook-Argument"] == "reject"
    assert headers["Content-Type"].startswith("text/plain")


@pytest.mark.parametrize(("status", "exit_code", "stdout"), [(204, 0, ""), (503, 503, "")])
def test_a_url_hooks_status_is_its_exit_status(
    tmp_path: Path, serve: Callable[..., Served], status: int, exit_code: int, stdout: str
) -> None:
    served = serve(lambda _p, _h, _b: (status, "" if status == 204 else "busy"))
    run = HookCaller(tmp_path).call(
        served.url, "", knob="K_HOOK_FETCH_WORK", hook="FETCH_WORK", timeout=5
    )
    assert (run.exit_code, run.stdout, run.failure) == (exit_code, stdout, None)


def test_a_url_hook_that_does_not_answer_in_time_fails(
    tmp_path: Path, serve: Callable[..., Served]
) -> None:
    def slow(_p: str, _h: Mapping[str, str], _b: str) -> tuple[int, str]:
        time.sleep(2)
        return 200, ""

    served = serve(slow)
    run = HookCaller(tmp_path).call(
        served.url, "", knob="K_HOOK_FETCH_WORK", hook="FETCH_WORK", timeout=0.3
    )
    assert run.failure == f"K_HOOK_FETCH_WORK ({served.url}) did not answer within 0.3 s"


def test_a_url_hook_nobody_serves_fails_naming_the_knob(tmp_path: Path) -> None:
    run = HookCaller(tmp_path).call(
        "http://127.0.0.1:9/fetch", "", knob="K_HOOK_FETCH_WORK", hook="FETCH_WORK", timeout=2
    )
    assert run.failure is not None and run.failure.startswith("K_HOOK_FETCH_WORK (http://")
    assert "could not be reached" in run.failure


def _self_signed(tmp_path: Path) -> tuple[ssl.SSLContext, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "work-source")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    return context, cert_path


def test_https_hooks_verify_the_server_with_the_ca_file_knob(
    tmp_path: Path, serve: Callable[..., Served]
) -> None:
    tls, ca = _self_signed(tmp_path)
    served = serve(lambda _p, _h, _b: (200, JOB), tls)
    caller = HookCaller(tmp_path)
    # Verified by default: a certificate no trusted CA signed is refused.
    refused = caller.call(served.url, "", knob="K_HOOK_FETCH_WORK", hook="FETCH_WORK", timeout=5)
    assert refused.failure is not None and "CERTIFICATE_VERIFY_FAILED" in refused.failure
    # KONDOR_HOOK_CA_FILE names the CA that signed it.
    trusted = caller.call(
        served.url, "", knob="K_HOOK_FETCH_WORK", hook="FETCH_WORK", timeout=5, ca_file=str(ca)
    )
    assert (trusted.failure, trusted.stdout) == (None, JOB)


# -- the agent's loop -------------------------------------------------------------------------


class FetchRecorder:
    """FetchAPI in memory: jobs created, jobs removed, Events posted."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.removed: list[tuple[str, str]] = []
        self.events: list[tuple[str, str]] = []

    def create_job(self, manifest: Mapping[str, Any]) -> None:
        self.created.append(dict(manifest))

    def remove_job(self, namespace: str, name: str) -> None:
        self.removed.append((namespace, name))

    def post_event(self, node: str, uid: str | None, reason: str, message: str) -> None:
        assert (node, uid) == (NODE, "ep-uid")
        self.events.append((reason, message))


def fetching_node(
    hooks: Path, condor_config: str
) -> tuple[Agent, FetchRecorder, FetchWork, FakeClock]:
    api = FakeAPI()
    clock = FakeClock()
    api.clock = clock
    api.add_policy(
        {
            "apiVersion": "kondor.io/v1alpha1",
            "kind": "SlotPolicy",
            "metadata": {"name": "fetch"},
            "spec": {"condorConfig": condor_config},
        }
    )
    api.add_execution_point(NODE, "fetch")
    api.execution_points[NODE]["metadata"]["uid"] = "ep-uid"
    recorder = FetchRecorder()
    fetch = FetchWork(recorder, HookCaller(hooks), NODE, clock=clock)
    agent = Agent(
        AgentConfig(node_name=NODE, polling_interval=5.0),
        api,
        MachineBox(example_machine("node-a.yaml")),
        clock=clock,
        services=[FetchService(fetch)],
    )
    fetch.on_done = agent.wake
    return agent, recorder, fetch, clock


HOOKS = """STARTD_JOB_HOOK_KEYWORD = T
T_HOOK_FETCH_WORK = fetch.sh
T_HOOK_REPLY_FETCH = reply.sh
T_HOOK_EVICT_CLAIM = evict.sh
FetchWorkDelay = 30
"""
# The reply's input is written before `replies`, which the tests wait for: read the other way
# round, a loaded machine let a test read a half-written reply-accept.in.
REPLY = 'cat > "$(dirname "$0")/reply-$1.in"\necho "$1" >> "$(dirname "$0")/replies"\n'


def steps_until(agent: Agent, check: Callable[[], Any], what: str) -> Any:
    def stepped() -> Any:
        agent.step()
        return check()

    return until(stepped, what)


@pytest.fixture
def hooks(tmp_path: Path) -> Path:
    script(tmp_path, "fetch.sh", f'cat > "$(dirname "$0")/slot.ad"\nprintf \'{JOB}\'\n')
    script(tmp_path, "reply.sh", REPLY)
    script(tmp_path, "evict.sh", 'cat > "$(dirname "$0")/evict.in"\n')
    return tmp_path


def test_the_agent_fetches_accepts_and_creates_the_execution_job(hooks: Path) -> None:
    agent, recorder, fetch, clock = fetching_node(hooks, HOOKS)
    steps_until(agent, lambda: recorder.created, "the fetched job created")
    made = recorder.created[0]
    assert made["metadata"]["labels"] == {
        "kondor.io/hook-keyword": "T",
        "kondor.io/fetched-by": NODE,
    }
    assert made["metadata"]["ownerReferences"][0]["uid"] == "ep-uid"
    assert made["spec"]["attributes"]["WorkId"] == "4"
    replies = until(lambda: (hooks / "replies").exists() and (hooks / "replies").read_text(), "")
    assert replies == "accept\n"
    job_part, slot_part = (hooks / "reply-accept.in").read_text().split("\n-----\n")
    assert parse_ad(job_part, field="job")["HookKeyword"] == "T"
    assert parse_ad(slot_part, field="slot")["Machine"] == NODE
    # FETCH_WORK got the slot ad on stdin.
    assert parse_ad((hooks / "slot.ad").read_text(), field="slot")["State"] == "Unclaimed"
    # While the accepted job waits for its match, the slot fetches no more.
    clock.now += 60
    agent.wake()
    agent.step()
    time.sleep(0.2)
    agent.step()
    assert len(recorder.created) == 1
    fetch.stop()


def test_a_job_start_refuses_is_rejected_and_not_created(hooks: Path) -> None:
    agent, recorder, fetch, _ = fetching_node(hooks, HOOKS + "START = TARGET.WorkId != 4\n")
    replies = steps_until(
        agent, lambda: (hooks / "replies").exists() and (hooks / "replies").read_text(), "reply"
    )
    assert replies == "reject\n" and recorder.created == []
    fetch.stop()


def test_no_output_is_no_work_and_the_next_fetch_waits_for_fetch_work_delay(
    hooks: Path,
) -> None:
    script(hooks, "fetch.sh", 'echo x >> "$(dirname "$0")/fetches"\n')
    agent, recorder, fetch, clock = fetching_node(hooks, HOOKS)
    fetches = hooks / "fetches"
    steps_until(agent, lambda: fetches.exists() and fetches.read_text(), "the first fetch")
    time.sleep(0.2)
    clock.now += 29  # FetchWorkDelay = 30 since the last fetch completed
    agent.wake()
    agent.step()
    time.sleep(0.2)
    assert fetches.read_text() == "x\n"
    clock.now += 2
    steps_until(agent, lambda: fetches.read_text() == "x\nx\n", "the second fetch")
    assert recorder.created == [] and not (hooks / "replies").exists()
    fetch.stop()


def test_a_failing_fetch_is_an_event_on_the_execution_point_rationed(hooks: Path) -> None:
    script(hooks, "fetch.sh", "echo 'this is [ not an ad'\n")
    agent, recorder, fetch, clock = fetching_node(hooks, HOOKS.replace("30", "1"))
    steps_until(agent, lambda: recorder.events, "an Event")
    reason, message = recorder.events[0]
    assert reason == "FetchWorkFailed"
    assert message.startswith("T_HOOK_FETCH_WORK printed no job ClassAd")
    for _ in range(5):  # it fails again every second: one Event a minute for one message
        clock.now += 2
        agent.wake()
        agent.step()
        time.sleep(0.1)
    agent.step()
    assert len(recorder.events) == 1
    fetch.stop()


def test_event_ration() -> None:
    ration = EventRation(quiet=60, burst=3)
    assert ration.allow("R", "a", 0)
    assert not ration.allow("R", "a", 30)  # the same message within a minute
    assert ration.allow("R", "b", 30) and ration.allow("R", "c", 31)
    assert not ration.allow("R", "d", 32)  # three in a minute already
    assert ration.allow("R", "a", 61)


def _job(labels: dict[str, str]) -> ExecutionJob:
    return ExecutionJob.model_validate(
        {
            "apiVersion": "kondor.io/v1alpha1",
            "kind": "ExecutionJob",
            "metadata": {"name": "fetched-t-1", "namespace": "work", "labels": labels},
            "spec": {"process": {"executable": "/bin/true"}, "attributes": {"WorkId": "4"}},
        }
    )


def test_evicting_fetched_work_calls_evict_claim_and_removes_the_job(hooks: Path) -> None:
    agent, recorder, fetch, _ = fetching_node(hooks, HOOKS)
    agent.step()
    fetch.evicted(_job({"kondor.io/hook-keyword": "T"}), f"slot1_1@{NODE}")
    evicted = until(lambda: (hooks / "evict.in").exists() and (hooks / "evict.in").read_text(), "")
    job_part, slot_part = evicted.split("\n-----\n")
    assert parse_ad(job_part, field="job")["WorkId"] == 4
    assert parse_ad(slot_part, field="slot")["Machine"] == NODE
    assert recorder.removed == [("work", "fetched-t-1")]
    # A submitted job (no keyword label) is no fetched work: nothing is called.
    (hooks / "evict.in").unlink()
    fetch.evicted(_job({}), f"slot1_1@{NODE}")
    time.sleep(0.2)
    assert not (hooks / "evict.in").exists() and len(recorder.removed) == 1
    fetch.stop()


EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "hooks"


def test_the_example_spool_hooks_hand_out_take_and_give_back_work(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "7.ad").write_text((EXAMPLE / "fetch-work" / "example-job.ad").read_text())
    caller = HookCaller(EXAMPLE, environment={"KONDOR_WORK_SPOOL": str(spool), "PATH": "/bin"})

    def call(hook: str, stdin: str, argument: str | None = None) -> str:
        program = {"FETCH_WORK": "fetch_work", "REPLY_FETCH": "reply_fetch"}
        program["EVICT_CLAIM"] = "evict_claim"
        run = caller.call(
            f"fetch-work/{program[hook]}", stdin, knob=f"SPOOL_HOOK_{hook}", hook=hook,
            timeout=5, argument=argument,
        )  # fmt: skip
        assert run.failure is None and run.exit_code == 0, run
        return run.stdout

    fetched = call("FETCH_WORK", 'Machine = "node-a"\n')
    assert parse_ad(fetched, field="job")["WorkId"] == 7
    both = f'{fetched}-----\nMachine = "node-a"\n'
    call("REPLY_FETCH", both, "reject")
    assert (spool / "7.ad").exists()
    call("REPLY_FETCH", both, "accept")
    assert not (spool / "7.ad").exists() and (spool / "taken" / "7.ad").exists()
    assert call("FETCH_WORK", "") == ""  # no more work
    call("EVICT_CLAIM", both)
    assert (spool / "7.ad").exists()


class NoCalls(HookCaller):
    def call(self, target: str, stdin: str, **_: Any) -> Any:
        raise AssertionError(f"{target} was run")


def test_a_node_whose_policy_names_no_fetch_hook_fetches_nothing(tmp_path: Path) -> None:
    agent, recorder, fetch, clock = fetching_node(tmp_path, "T_HOOK_PREPARE_JOB = prepare.sh\n")
    fetch.caller = NoCalls(tmp_path)
    for _ in range(3):
        clock.now += 400
        agent.wake()
        agent.step()
    assert agent.startd is not None and fetch.slots == {}
    assert (recorder.created, recorder.events) == ([], [])
    fetch.stop()


def test_a_work_service_answering_an_error_is_an_event_and_no_work(
    tmp_path: Path, serve: Callable[..., Served]
) -> None:
    served = serve(lambda _p, _h, _b: (503, JOB))
    config = HOOKS.replace("fetch.sh", f"{served.url}/fetch")
    agent, recorder, fetch, _ = fetching_node(tmp_path, config)
    steps_until(agent, lambda: recorder.events, "an Event")
    assert recorder.events == [
        ("FetchWorkFailed", f"T_HOOK_FETCH_WORK ({served.url}/fetch) answered 503")
    ]
    assert recorder.created == []
    fetch.stop()


def test_a_released_slot_is_forgotten(hooks: Path) -> None:
    agent, _, fetch, _ = fetching_node(hooks, HOOKS)
    agent.step()
    gone = f"slot1_9@{NODE}"  # a dynamic slot since released
    fetch.slots[gone] = type(fetch.slots[f"slot1@{NODE}"])()
    agent.wake()
    agent.step()
    assert gone not in fetch.slots and f"slot1@{NODE}" in fetch.slots
    fetch.stop()
