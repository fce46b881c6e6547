"""The COD claim model (kondor_core.startd.cod), against the reference's "Computing On Demand
(COD)" text: the claim states and condor_cod's commands, the application built from keyword
knobs or a -jobad, VALID_COD_USERS, the slot chosen at request, and the slot ad."""

from __future__ import annotations

from dataclasses import replace

import classad2
import pytest

from kondor_core.startd import cod
from kondor_core.startd.cod import Act, State, Verb

FRACTGEN = {
    # The reference's FractGen example, as a SlotPolicy's condorConfig sets it.
    "FractGen_Cmd": '"/usr/local/bin/fractgen"',
    "FractGen_Iwd": '"/tmp/cod-fractgen"',
    "FractGen_Out": '"/tmp/cod-fractgen/output"',
    "FractGen_Err": '"/tmp/cod-fractgen/error"',
    "FractGen_Args": '"mandelbrot -0.65865,-0.56254 -0.45865,-0.71254"',
    "VALID_COD_USERS": "alice, dave@example.org",
}


def claim(state: State = State.IDLE, **changes: object) -> cod.Claim:
    made = cod.request(
        claim_id="<n>#1#1", cod_id="COD1", slot="slot1@n", owner="alice", lease=None, now=0.0
    )
    return replace(made, state=state, **changes)  # type: ignore[arg-type]


# ---- the transitions ---------------------------------------------------------------------

#: (state, command) -> (state after, actions): each line is a sentence of the reference.
TABLE = [
    # "the COD claim will move into the Running state"
    (State.IDLE, Verb.ACTIVATE, State.RUNNING, (Act.START,)),
    # "In this case, the claim state becomes Suspended."
    (State.RUNNING, Verb.SUSPEND, State.SUSPENDED, (Act.FREEZE,)),
    # "In this case, the claim state returns to Running."
    (State.SUSPENDED, Verb.RESUME, State.RUNNING, (Act.THAW,)),
    # "the COD claim goes into the Vacating state and ... will send it the KillSig"
    (State.RUNNING, Verb.DEACTIVATE, State.VACATING, (Act.SOFT_KILL,)),
    (State.SUSPENDED, Verb.DEACTIVATE, State.VACATING, (Act.SOFT_KILL,)),
    # "-fast option ... using SIGKILL. In this case the COD claim goes into the Killing state"
    (State.RUNNING, Verb.DEACTIVATE_FAST, State.KILLING, (Act.HARD_KILL,)),
    # "once the COD job has finally exited, the COD claim will go into the Idle state"
    (State.VACATING, Verb.EXITED, State.IDLE, ()),
    (State.KILLING, Verb.EXITED, State.IDLE, ()),
    # An application that exits on its own leaves its claim Idle.
    (State.RUNNING, Verb.EXITED, State.IDLE, ()),
    # Release of an Idle claim destroys it at once; of a running one, shuts it down first.
    (State.IDLE, Verb.RELEASE, State.RELEASED, ()),
    (State.RUNNING, Verb.RELEASE, State.VACATING, (Act.SOFT_KILL,)),
    (State.SUSPENDED, Verb.RELEASE_FAST, State.KILLING, (Act.HARD_KILL,)),
    (State.IDLE, Verb.LEASE_EXPIRED, State.RELEASED, ()),
    (State.RUNNING, Verb.LEASE_EXPIRED, State.VACATING, (Act.SOFT_KILL,)),
    (State.VACATING, Verb.KILLING_TIMEOUT, State.KILLING, (Act.HARD_KILL,)),
]


@pytest.mark.parametrize(("before", "verb", "after", "actions"), TABLE)
def test_the_claim_states_follow_the_reference(
    before: State, verb: Verb, after: State, actions: tuple[Act, ...]
) -> None:
    stepped = cod.step(claim(before), verb, 5.0)
    assert stepped.claim.state is after
    assert stepped.actions == actions
    if after is not before:
        assert stepped.claim.entered == 5.0


@pytest.mark.parametrize(
    ("state", "verb", "message"),
    [
        (State.IDLE, Verb.SUSPEND, "the claim is Idle: only a Running COD job can be suspended"),
        (State.SUSPENDED, Verb.SUSPEND, "only a Running COD job can be suspended"),
        (State.RUNNING, Verb.RESUME, "the claim is Running: only a Suspended COD job"),
        (State.RUNNING, Verb.ACTIVATE, "only an Idle claim can be activated"),
        (State.IDLE, Verb.DEACTIVATE, "only a Running or Suspended claim can be deactivated"),
    ],
)
def test_a_command_the_state_does_not_allow_is_an_error(
    state: State, verb: Verb, message: str
) -> None:
    with pytest.raises(cod.CodError, match=message):
        cod.step(claim(state), verb, 1.0)


def test_a_released_claim_takes_no_command() -> None:
    for verb in Verb:
        with pytest.raises(cod.CodError, match="was released"):
            cod.step(claim(State.RELEASED), verb, 1.0)


def test_release_of_a_running_claim_ends_released_once_the_application_exited() -> None:
    shutting = cod.step(claim(State.RUNNING), Verb.RELEASE, 1.0).claim
    assert shutting.state is State.VACATING and shutting.releasing
    assert cod.step(shutting, Verb.EXITED, 2.0).claim.state is State.RELEASED


def test_the_batch_job_is_suspended_while_a_cod_application_runs_on_its_slot() -> None:
    others = [claim(State.IDLE, slot="slot2@n")]
    for state, suspended in [
        (State.IDLE, False),
        (State.RUNNING, True),
        # "By suspending the COD application, the batch job is allowed to run."
        (State.SUSPENDED, False),
        (State.VACATING, True),
        (State.KILLING, True),
    ]:
        claims = [claim(state), *others]
        assert cod.batch_suspended(claims, "slot1@n") is suspended
        assert cod.batch_suspended(claims, "slot2@n") is False


# ---- leases and the commands a spec asks for -----------------------------------------------


def test_the_lease_expires_unless_renewed_and_is_infinite_by_default() -> None:
    leased = cod.request(
        claim_id="c", cod_id="COD1", slot="s", owner="alice", lease=10.0, now=100.0
    )
    assert leased.lease_expiry == 110.0
    assert not cod.lease_expired(leased, 109.0)
    assert cod.commands(leased, cod.Wanted(), 110.0) == [Verb.LEASE_EXPIRED]
    renewed = cod.step(leased, Verb.RENEW, 105.0).claim
    assert renewed.lease_expiry == 115.0 and not cod.lease_expired(renewed, 110.0)
    forever = claim()
    assert forever.lease_expiry is None and not cod.lease_expired(forever, 1e12)
    expired = cod.step(leased, Verb.LEASE_EXPIRED, 110.0).claim
    assert expired.state is State.RELEASED and "lease expired" in (expired.reason or "")


@pytest.mark.parametrize(
    ("state", "wanted", "commands"),
    [
        (State.IDLE, cod.Wanted("Running", activation=1), [Verb.ACTIVATE]),
        (State.IDLE, cod.Wanted("Suspended", activation=1), [Verb.ACTIVATE, Verb.SUSPEND]),
        # Already activated once, and the application exited by itself: not started again.
        (State.IDLE, cod.Wanted("Running", activation=0), []),
        (State.RUNNING, cod.Wanted("Suspended"), [Verb.SUSPEND]),
        (State.SUSPENDED, cod.Wanted("Running"), [Verb.RESUME]),
        (State.RUNNING, cod.Wanted("Idle"), [Verb.DEACTIVATE]),
        (State.SUSPENDED, cod.Wanted("Idle", fast=True), [Verb.DEACTIVATE_FAST]),
        (State.RUNNING, cod.Wanted("Running", released=True), [Verb.RELEASE]),
        (State.RUNNING, cod.Wanted("Running", fast=True, released=True), [Verb.RELEASE_FAST]),
        (State.IDLE, cod.Wanted(renewal=1), [Verb.RENEW]),
        (State.VACATING, cod.Wanted("Idle"), []),
        (State.VACATING, cod.Wanted("Idle", fast=True), [Verb.DEACTIVATE_FAST]),
    ],
)
def test_the_spec_s_wishes_become_condor_cod_commands(
    state: State, wanted: cod.Wanted, commands: list[Verb]
) -> None:
    assert cod.commands(claim(state, entered=0.0), wanted, 1.0) == commands


def test_a_graceful_shutdown_that_lasts_too_long_is_a_hard_kill() -> None:
    vacating = claim(State.VACATING, entered=0.0)
    assert cod.commands(vacating, cod.Wanted("Idle"), 29.0, killing_timeout=30) == []
    assert cod.commands(vacating, cod.Wanted("Idle"), 30.0, killing_timeout=30) == [
        Verb.KILLING_TIMEOUT
    ]


# ---- who may claim, and which slot -----------------------------------------------------------


@pytest.mark.parametrize(
    ("users", "user", "allowed"),
    [
        ("alice, dave@example.org", "alice", True),
        ("alice, dave@example.org", "dave", True),
        ("alice dave", "dave", True),
        ("alice", "Alice", False),
        ("alice", "bob", False),
        ("*", "bob", True),
        (None, "alice", False),
    ],
)
def test_valid_cod_users_names_who_may_claim(users: str | None, user: str, allowed: bool) -> None:
    macros = {} if users is None else {"valid_cod_users": users}
    assert cod.valid_cod_user(macros, user) is allowed
    refusal = cod.refuse_user(macros, user)
    assert (refusal is None) is allowed
    if refusal is not None:
        assert f"user {user!r} is not authorized to create COD claims here" in refusal
        assert ("VALID_COD_USERS is not set" in refusal) is (users is None)


SLOTS = [
    ("slot1@n", classad2.ClassAd({"State": "Unclaimed", "Cpus": 2})),
    ("slot2@n", classad2.ClassAd({"State": "Claimed", "Cpus": 1})),
]


@pytest.mark.parametrize(
    ("name", "requirements", "chosen"),
    [
        (None, None, "slot1@n"),
        ("slot2", None, "slot2@n"),
        ("slot2@n", None, "slot2@n"),
        (None, 'State != "Claimed"', "slot1@n"),
        (None, "Cpus < 2", "slot2@n"),
        ("slot1", "Cpus >= 2", "slot1@n"),
    ],
)
def test_the_slot_is_chosen_by_name_or_requirements(
    name: str | None, requirements: str | None, chosen: str
) -> None:
    assert cod.choose_slot(SLOTS, name=name, requirements=requirements) == chosen


@pytest.mark.parametrize(
    ("name", "requirements", "message"),
    [
        ("slot9", None, "slot: no slot 'slot9' on this execution point (slots: slot1@n, slot2@n)"),
        (None, "Cpus > 8", "requirements: no slot here satisfies 'Cpus > 8'"),
        ("slot2", "Cpus > 1", "requirements: no slot here satisfies"),
        (None, "Cpus >", "requirements: 'Cpus >' is not a valid ClassAd expression"),
    ],
)
def test_a_request_no_slot_fits_is_refused_with_why(
    name: str | None, requirements: str | None, message: str
) -> None:
    with pytest.raises(cod.CodError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cod.choose_slot(SLOTS, name=name, requirements=requirements)


def test_claim_ids_and_cod_ids_are_htcondor_s_and_unique_on_the_node() -> None:
    assert cod.claim_id("node-1", 1073352104.7, 4) == "<node-1>#1073352104#4"
    assert cod.next_cod_id([]) == "COD1"
    assert cod.next_cod_id([claim(), replace(claim(), cod_id="COD3")]) == "COD2"
    assert cod.parent_slot("slot1_2@n") == "slot1@n"
    assert cod.parent_slot("slot1@n") is None


# ---- the application ---------------------------------------------------------------------------


def test_the_fractgen_keyword_builds_the_manual_s_application() -> None:
    app = cod.application(FRACTGEN, owner="alice", keyword="FractGen")
    assert app.cmd == "/usr/local/bin/fractgen"
    assert app.args == ("mandelbrot", "-0.65865,-0.56254", "-0.45865,-0.71254")
    assert app.iwd == "/tmp/cod-fractgen"
    assert (app.output, app.error, app.input) == (
        "/tmp/cod-fractgen/output",
        "/tmp/cod-fractgen/error",
        "/dev/null",  # "If not specified, the default is /dev/null."
    )
    assert app.kill_sig == "SIGTERM"  # "The default is to use SIGTERM."
    assert app.job_id == "1.0"  # "If not specified, the job ID defaults to 1.0."
    ad = classad2.parseOne(app.ad_text)
    assert ad["Owner"] == "alice" and ad["JobUniverse"] == 5 and ad["JobKeyword"] == "FractGen"


def test_the_keyword_is_case_insensitive_and_cluster_and_proc_come_from_the_command() -> None:
    app = cod.application(FRACTGEN, owner="alice", keyword="fractgen", cluster_id=23, proc_id=5)
    assert app.cmd == "/usr/local/bin/fractgen" and app.job_id == "23.5"


def test_jobad_attributes_join_and_win_over_the_keyword_s_and_relative_paths_take_iwd() -> None:
    job_ad = 'Args = "julia"\nOut = "julia.out"\nEnv = "A=1;B=x=y"\nKillSig = 3\n'
    app = cod.application(FRACTGEN, owner="alice", keyword="FractGen", job_ad=job_ad)
    assert app.args == ("julia",)
    assert app.output == "/tmp/cod-fractgen/julia.out"
    assert dict(app.env) == {"A": "1", "B": "x=y"}
    assert app.kill_sig == "SIGQUIT"
    only_ad = cod.application({}, owner="bob", job_ad='[Cmd = "/bin/true"; ClusterId = 7]')
    assert only_ad.cmd == "/bin/true" and only_ad.job_id == "7.0" and only_ad.iwd is None


@pytest.mark.parametrize(
    ("keyword", "job_ad", "message"),
    [
        (None, 'Cmd = "/bin/true"\nOwner = "bob"', "jobAd: Owner 'bob' does not match the "),
        ("Missing", None, "keyword: no Missing_Cmd"),
        (None, None, "an activation needs a keyword"),
        (None, "Args = 1", "Cmd: the application's Cmd is required"),
        (None, "Cmd = 3", "Cmd: 3 is not a string"),
        (None, 'Cmd = "/x"\nJobUniverse = 10', "JobUniverse: 10 \\(java\\)"),
        (None, 'Cmd = "/x"\nJobUniverse = 7', "JobUniverse: 7 is not 5"),
        (None, 'Cmd = "/x"\nKillSig = "SIGNOPE"', "KillSig: 'SIGNOPE' is not a signal"),
        (None, 'Cmd = "/x"\nEnv = "NOEQUALS"', "Env: 'NOEQUALS' is not NAME=value"),
        (None, 'Cmd = "/x"\nClusterId = "one"', "ClusterId: 'one' is not an integer"),
        (None, "Cmd = ", "jobAd: .* is not a valid ClassAd expression"),
    ],
)
def test_a_bad_application_is_refused_naming_the_attribute(
    keyword: str | None, job_ad: str | None, message: str
) -> None:
    with pytest.raises(cod.CodError, match=message):
        cod.application(FRACTGEN, owner="alice", keyword=keyword, job_ad=job_ad)


# ---- the slot ad and condor_status -cod --------------------------------------------------------


def test_the_slot_ad_shows_the_claims_as_condor_status_cod_reads_them() -> None:
    running = replace(
        claim(State.RUNNING, entered=50.0), keyword="FractGen", job_id="1.0", owner="alice"
    )
    idle = replace(claim(State.IDLE, entered=20.0), cod_id="COD2", claim_id="<n>#1#2")
    gone = replace(claim(State.RELEASED), cod_id="COD3")
    ads = cod.slot_attributes([running, idle, gone])
    assert ads == {
        "slot1@n": {
            "Requirements": False,  # a COD job runs: the slot takes no match meanwhile
            "NumCODClaims": 2,
            "CODClaims": "COD1, COD2",
            "COD1_ClaimID": "<n>#1#1",
            "COD1_ClaimState": "Running",
            "COD1_EnteredCurrentState": 50,
            "COD1_RemoteUser": "alice",
            "COD1_JobKeyword": "FractGen",
            "COD1_JobId": "1.0",
            "COD2_ClaimID": "<n>#1#2",
            "COD2_ClaimState": "Idle",
            "COD2_EnteredCurrentState": 20,
            "COD2_RemoteUser": "alice",
        }
    }
    assert "Requirements" not in cod.slot_attributes([idle])["slot1@n"]
    rows = cod.cod_rows([{"Name": "slot1@n", **ads["slot1@n"]}, {"Name": "slot2@n"}])
    assert [(r.name, r.cod_id, r.state, r.user, r.job_id, r.keyword) for r in rows] == [
        ("slot1@n", "COD1", "Running", "alice", "1.0", "FractGen"),
        ("slot1@n", "COD2", "Idle", "alice", "", ""),
    ]
