"""compile_policy: the reference's examples, bad input, and structured fields' precedence."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from kondor_core.api.slotpolicy import SlotPolicySpec
from kondor_core.classads import ClassAd, evaluate
from kondor_core.config import EffectivePolicy, PolicyError, compile_policy
from kondor_core.config.effective import DEFAULT_CONSUMPTION, DEFAULT_MODIFY_REQUEST
from kondor_core.config.shares import ShareSpec


def _compile(config: str = "", **fields: Any) -> EffectivePolicy:
    return compile_policy(SlotPolicySpec.model_validate({"condorConfig": config, **fields}))


def _problems(config: str = "", **fields: Any) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        _compile(config, **fields)
    return caught.value.problems


# -- "Dividing System Resources in Multi-core Machines" ------------------------------------

#: The manual's example machine: 4 cores and 256 MB of RAM.
_TOTALS = {"cpus": Fraction(4), "memory": Fraction(256)}


def _amounts(shares: ShareSpec) -> dict[str, Fraction | str]:
    """Each standard resource's amount on the example machine (swap and disk stay fractions)."""
    amounts: dict[str, Fraction | str] = {}
    for resource in ("cpus", "memory", "swap", "disk"):
        share = shares.share_for(resource)
        if share.kind == "auto":
            amounts[resource] = "auto"
        elif share.kind == "absolute" or resource not in _TOTALS:
            amounts[resource] = share.amount
        else:
            amounts[resource] = share.amount * _TOTALS[resource]
    return amounts


_SLOT_TYPES_1_TO_6 = """
SLOT_TYPE_1 = cpus=2, ram=128, swap=25%, disk=1/2
SLOT_TYPE_2 = cpus=1/2, memory=128, virt=25%, disk=50%
SLOT_TYPE_3 = c=1/2, m=50%, v=1/4, disk=1/2
SLOT_TYPE_4 = c=25%, m=64, v=1/4, d=25%
SLOT_TYPE_5 = 25%
SLOT_TYPE_6 = 1/4
"""


def _types_1_to_6() -> dict[int, dict[str, Fraction | str]]:
    counts = "".join(f"NUM_SLOTS_TYPE_{n} = 1\n" for n in range(1, 7))
    policy = _compile(_SLOT_TYPES_1_TO_6 + counts)
    return {slot_type.id: _amounts(slot_type.shares) for slot_type in policy.slot_types}


@pytest.mark.parametrize(
    ("type_id", "expected"),
    [
        (n, {"cpus": 2, "memory": 128, "swap": Fraction(1, 4), "disk": Fraction(1, 2)})
        for n in (1, 2, 3)
    ]
    + [
        (n, {"cpus": 1, "memory": 64, "swap": Fraction(1, 4), "disk": Fraction(1, 4)})
        for n in (4, 5, 6)
    ],
)
def test_slot_types_1_to_6_of_the_reference(type_id: int, expected: dict[str, Any]) -> None:
    """ "Types 1-3 are all equivalent to each other, as are types 4-6" on 4 cores, 256 MB."""
    assert _types_1_to_6()[type_id] == expected


def test_slot_types_without_counts_create_no_slots_and_say_so() -> None:
    policy = _compile(_SLOT_TYPES_1_TO_6)
    assert policy.slot_types == ()
    assert any("NUM_SLOTS_TYPE_1 is not set" in w for w in policy.warnings)
    assert any("the node gets the default: one partitionable slot" in w for w in policy.warnings)


@pytest.mark.parametrize("share", ["mem=64", "mem=1/2", "mem=50%"])
def test_memory_shares_of_a_128_mb_machine_agree(share: str) -> None:
    policy = _compile(f"SLOT_TYPE_1 = {share}\nNUM_SLOTS_TYPE_1 = 1")
    memory = policy.slot_types[0].shares.share_for("memory")
    amount = memory.amount if memory.kind == "absolute" else memory.amount * 128
    assert amount == 64


@pytest.mark.parametrize(
    "text", ["cpus=1, ram=1/2, swap=50%", "cpus=1, disk=auto, 50%"], ids=["listed", "blanket"]
)
def test_auto_examples_of_the_reference(text: str) -> None:
    """ "the disk share is set to auto, number of cores is 1, and everything else is 50%"."""
    policy = _compile(f"SLOT_TYPE_1 = {text}\nNUM_SLOTS_TYPE_1 = 1")
    assert _amounts(policy.slot_types[0].shares) == {
        "cpus": 1,
        "memory": 128,
        "swap": Fraction(1, 2),
        "disk": "auto",
    }


def test_one_partitionable_slot_with_everything() -> None:
    policy = _compile(
        "NUM_SLOTS = 1\nNUM_SLOTS_TYPE_1 = 1\nSLOT_TYPE_1 = 100%\nSLOT_TYPE_1_PARTITIONABLE = TRUE"
    )
    (slot_type,) = policy.slot_types
    assert (slot_type.id, slot_type.count, slot_type.partitionable) == (1, 1, True)
    assert slot_type.shares.default.amount == 1
    assert any("NUM_SLOTS is ignored" in w for w in policy.warnings)


@pytest.mark.parametrize(
    ("config", "count"),
    [("NUM_SLOTS = 4", 4), ("NUM_SLOTS = $(DETECTED_CPUS) - 1", "DetectedCpus - 1")],
)
def test_num_slots_makes_evenly_divided_static_slots(config: str, count: int | str) -> None:
    (slot_type,) = _compile(config).slot_types
    assert (slot_type.id, slot_type.count, slot_type.partitionable) == (0, count, False)
    assert slot_type.shares.default.kind == "auto"


_COGS = """
MACHINE_RESOURCE_Cogs = 16
MACHINE_RESOURCE_actuator = 8

if defined MACHINE_RESOURCE_NAMES
  MACHINE_RESOURCE_NAMES = $(MACHINE_RESOURCE_NAMES) Cogs actuator
endif

# declare one partitionable slot with half of the Cogs, 6 actuators, and
# 50% of all other resources:
SLOT_TYPE_1 = cogs=50%,actuator=6,50%
SLOT_TYPE_1_PARTITIONABLE = TRUE
NUM_SLOTS_TYPE_1 = 1

# declare two static slots, each with 25% of the Cogs, 1 actuator, and
# 25% of all other resources:
SLOT_TYPE_2 = cogs=25%,actuator=1,25%
SLOT_TYPE_2_PARTITIONABLE = FALSE
NUM_SLOTS_TYPE_2 = 2
"""


def test_cogs_and_actuators_partitionable_and_static() -> None:
    policy = _compile(_COGS)
    assert policy.warnings == ()
    assert policy.machine_resources == {"Cogs": 16, "actuator": 8}
    assert policy.machine_resource_names is None
    first, second = policy.slot_types
    assert (first.id, first.count, first.partitionable) == (1, 1, True)
    assert (second.id, second.count, second.partitionable) == (2, 2, False)
    assert first.shares.share_for("cogs").amount == Fraction(1, 2)
    assert first.shares.share_for("actuator").kind == "absolute"
    assert first.shares.share_for("actuator").amount == 6
    assert first.shares.share_for("memory").amount == Fraction(1, 2)
    assert second.shares.share_for("Cogs").amount == Fraction(1, 4)
    assert second.shares.share_for("actuator").amount == 1


def test_machine_resource_names_when_in_use_enables_only_the_listed() -> None:
    """With MACHINE_RESOURCE_NAMES in use, the Cogs example adds its names to the list."""
    policy = _compile("MACHINE_RESOURCE_NAMES = Cogs\n" + _COGS)
    assert policy.machine_resource_names == ("Cogs", "actuator")
    assert policy.machine_resources == {"Cogs": 16, "actuator": 8}
    only = _compile(
        "MACHINE_RESOURCE_NAMES = Cogs\nMACHINE_RESOURCE_Cogs = 4\nMACHINE_RESOURCE_Bolts = 2"
    )
    assert only.machine_resources == {"Cogs": 4}
    assert any("Bolts is not in MACHINE_RESOURCE_NAMES (Cogs)" in w for w in only.warnings)


def test_machine_resource_as_a_list_of_ids() -> None:
    policy = _compile("MACHINE_RESOURCE_Cogs = c0, c1 c2")
    assert policy.machine_resources == {"Cogs": 3}
    assert policy.machine_resource_ids == {"Cogs": ("c0", "c1", "c2")}


_GPU_SLOTS = """
# declare a partitionable slot that has the 2 powerful GPUs
# and 90% of the other resources:
SLOT_TYPE_1 @=slot
   GPUs = 2 : Capability >= 8.0
   90%
@slot
SLOT_TYPE_1_PARTITIONABLE = TRUE
NUM_SLOTS_TYPE_1 = 1

# declare a small static slot and assign it a specific GPU by id
SLOT_TYPE_2 @=slot
   GPUs = 1 : "GPU-6a96bd13"
   CPUs = 1
           Memory = 10
@slot
SLOT_TYPE_2_PARTITIONABLE = FALSE
NUM_SLOTS_TYPE_2 = 1

# declare two static slots that split up the remaining resources which may or may not include GPUs
SLOT_TYPE_3 = auto
SLOT_TYPE_3_PARTITIONABLE = FALSE
NUM_SLOTS_TYPE_3 = 2
"""


def test_gpu_slot_types_with_constraints() -> None:
    """ "Configuring GPUs": multi-line SLOT_TYPE values with a constraint per GPU share."""
    policy = _compile("use feature : GPUs\n" + _GPU_SLOTS)
    assert policy.inventory_resources == ("GPUs",)
    assert policy.templates[0] == "FEATURE : GPUs"
    powerful, by_id, rest = policy.slot_types
    gpus = powerful.shares.share_for("GPUs")
    assert (gpus.amount, gpus.constraint) == (Fraction(2), "Capability >= 8.0")
    assert powerful.shares.default.amount == Fraction(9, 10)
    assert powerful.partitionable and not by_id.partitionable
    assert by_id.shares.share_for("GPUs").constraint == '"GPU-6a96bd13"'
    assert by_id.shares.share_for("cpus").amount == 1
    assert by_id.shares.share_for("memory").amount == 10
    assert (rest.count, rest.shares.default.kind) == (2, "auto")
    assert any("use feature : GPUs" in w and "STARTD_CRON" in w for w in policy.warnings)


# -- consumption policies ------------------------------------------------------------------


def test_consumption_policy_on_one_partitionable_slot_type() -> None:
    policy = _compile(
        """
SLOT_TYPE_1 = cpus=8
SLOT_TYPE_1_PARTITIONABLE = True
NUM_SLOTS_TYPE_1 = 1
SLOT_TYPE_1_CONSUMPTION_POLICY = True
SLOT_TYPE_1_CONSUMPTION_CPUS = TARGET.RequestCpus
SLOT_WEIGHT = Cpus
"""
    )
    (slot_type,) = policy.slot_types
    assert slot_type.consumption_policy and not policy.consumption_policy
    assert slot_type.consumption == {**DEFAULT_CONSUMPTION, "cpus": "TARGET.RequestCpus"}
    assert any(
        "SLOT_WEIGHT is an HTCondor knob Kondor does not implement" in w for w in policy.warnings
    )


def test_consumption_policy_with_a_custom_resource() -> None:
    policy = _compile(
        """
MACHINE_RESOURCE_NAMES = gpus
MACHINE_RESOURCE_gpus = 4
SLOT_TYPE_2 = cpus=8, gpus=4
SLOT_TYPE_2_PARTITIONABLE = True
NUM_SLOTS_TYPE_2 = 1
SLOT_TYPE_2_CONSUMPTION_POLICY = True
SLOT_TYPE_2_CONSUMPTION_gpus = TARGET.RequestGpu
"""
    )
    assert policy.machine_resources == {"gpus": 4}
    assert policy.machine_resource_names == ("gpus",)
    (slot_type,) = policy.slot_types
    assert slot_type.consumption == {**DEFAULT_CONSUMPTION, "gpus": "TARGET.RequestGpu"}


def test_machine_wide_consumption_policy_applies_to_partitionable_types() -> None:
    policy = _compile(
        "CONSUMPTION_POLICY = True\nCONSUMPTION_MEMORY = quantize(target.RequestMemory,{512})\n"
        "use FEATURE : PartitionableSlot"
    )
    (slot_type,) = policy.slot_types
    assert policy.consumption_policy and slot_type.consumption_policy
    assert slot_type.consumption["memory"] == "quantize(target.RequestMemory,{512})"
    assert slot_type.consumption["cpus"] == DEFAULT_CONSUMPTION["cpus"]


# -- STARTD_ATTRS --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "every_slot", "per_slot"),
    [
        pytest.param(
            'favorite_color = "blue"\nfavorite_season = "spring"\n'
            'favorite_movie = "Vertigo"\nfavorite_song = "Blue Moon"\n'
            "STARTD_ATTRS = favorite_color, favorite_season\n"
            "SLOT1_STARTD_ATTRS = favorite_movie\nSLOT2_STARTD_ATTRS = favorite_song\n",
            {"favorite_color": '"blue"', "favorite_season": '"spring"'},
            {1: {"favorite_movie": '"Vertigo"'}, 2: {"favorite_song": '"Blue Moon"'}},
            id="per-slot lists",
        ),
        pytest.param(
            'favorite_color = "blue"\nfavorite_season = "spring"\n'
            "STARTD_ATTRS = favorite_color, favorite_season\n"
            'SLOT2_favorite_color = "green"\nSLOT3_favorite_season = "summer"\n',
            {"favorite_color": '"blue"', "favorite_season": '"spring"'},
            {2: {"favorite_color": '"green"'}, 3: {"favorite_season": '"summer"'}},
            id="per-slot values",
        ),
        pytest.param(
            'GenomeDBPath = "/path/to/db"\nSTARTD_ATTRS = GenomeDBPath $(STARTD_ATTRS)\n',
            {"GenomeDBPath": '"/path/to/db"'},
            {},
            id="appending convention",
        ),
        pytest.param(
            "use POLICY : Startd_Publish_CpusUsage",
            {
                "CpusUsage": 'ifthenelse(TotalLoadAvg > 0.0 && Activity!="Idle", '
                "CondorLoadAvg/TotalLoadAvg*MIN({TotalLoadAvg, DetectedCpus}), 0)"
            },
            {},
            id="from a template",
        ),
    ],
)
def test_startd_attrs(
    config: str, every_slot: dict[str, str], per_slot: dict[int, dict[str, str]]
) -> None:
    policy = _compile(config)
    assert policy.startd_attrs == every_slot
    assert policy.slot_attrs == per_slot
    assert policy.warnings == ()


# -- policy templates ----------------------------------------------------------------------

_DESKTOP_EXPRESSIONS = {
    "START": "((KeyboardIdle > 15 * 60) && ( ((LoadAvg - CondorLoadAvg) <= 0.3) || "
    '(State != "Unclaimed" && State != "Owner")) )',
    "IS_OWNER": "(START =?= False)",
    # CpuBusyTimer reads CpuBusyTime as the duration the engine publishes (templates.py).
    "WANT_SUSPEND": "((TARGET.ImageSize <  (15 * 1024)) || ((KeyboardIdle < 60) == False) || "
    "(TARGET.JobUniverse == 5) ) && ( ((KeyboardIdle < 60) || ( (ifThenElse(CpuIsBusy =?= true, "
    "CpuBusyTime, 0) > 120) && ifThenElse(JobStart =!= UNDEFINED, (time() - JobStart), "
    "0) > 90)))",
    "SUSPEND": "((KeyboardIdle < 60) || ( (ifThenElse(CpuIsBusy =?= true, CpuBusyTime, "
    "0) > 120) && ifThenElse(JobStart =!= UNDEFINED, (time() - JobStart), 0) > 90))",
    "CONTINUE": "(((LoadAvg - CondorLoadAvg) <= 0.3) && ((time() - EnteredCurrentActivity) > 10) "
    "&& (KeyboardIdle > 5 * 60))",
    "PREEMPT": '(((Activity == "Suspended") && ((time() - EnteredCurrentActivity) > 10 * 60)) || '
    "(SUSPEND && (WANT_SUSPEND == False)))",
    "WANT_VACATE": "ifThenElse(JobStart =!= UNDEFINED, (time() - JobStart), 0) > 600 || "
    "(TARGET.JobUniverse == 5)",
    "KILL": "False",
    "MAXJOBRETIREMENTTIME": "0",
}


def test_policy_desktop_gives_htcondors_expressions() -> None:
    policy = _compile("use POLICY : Desktop")
    assert policy.expressions == _DESKTOP_EXPRESSIONS
    assert policy.templates == ("POLICY : Desktop", "FEATURE : POLICY_EXPR_FRAGMENTS")
    assert policy.macros["STARTD_LATCH_EXPRS"] == "CpuBusy"
    assert "CLAIM_WORKLIFE" not in policy.expressions  # Desktop sets it empty: the default
    (warning,) = policy.warnings
    assert "SLOTS_CONNECTED_TO_KEYBOARD" in warning and "line 1 (use POLICY : Desktop)" in warning


@pytest.mark.parametrize(
    ("facts", "starts"),
    [
        ({"KeyboardIdle": 3600, "LoadAvg": 0.1, "CondorLoadAvg": 0.0, "State": "Unclaimed"}, True),
        ({"KeyboardIdle": 30, "LoadAvg": 0.1, "CondorLoadAvg": 0.0, "State": "Unclaimed"}, False),
        ({"KeyboardIdle": 3600, "LoadAvg": 1.0, "CondorLoadAvg": 0.0, "State": "Unclaimed"}, False),
        ({"KeyboardIdle": 3600, "LoadAvg": 1.0, "CondorLoadAvg": 0.0, "State": "Claimed"}, True),
    ],
)
def test_desktop_start_runs_jobs_only_on_an_idle_desktop(
    facts: dict[str, Any], starts: bool
) -> None:
    start = _compile("use POLICY : Desktop").expressions["START"]
    assert evaluate(start, my=ClassAd(facts)) is starts


def test_policy_uwcs_desktop_uses_the_uwcs_values() -> None:
    policy = _compile("use POLICY : UWCS_Desktop")
    assert policy.expressions["KILL"] == "false"
    assert policy.expressions["START"].startswith("( (KeyboardIdle > 15 * 60)")
    assert "CLAIM_WORKLIFE" not in policy.expressions
    assert policy.macros["UWCS_KILL"] == "false"
    (warning,) = policy.warnings
    for knob in ("PERIODIC_CHECKPOINT", "PREEMPTION_REQUIREMENTS", "NEGOTIATOR_PRE_JOB_RANK"):
        assert knob in warning


def test_static_slots_one_per_core() -> None:
    policy = _compile("use FEATURE : StaticSlots")
    (slot_type,) = policy.slot_types
    assert (slot_type.id, slot_type.count, slot_type.partitionable) == (1, "TotalCpus", False)
    assert slot_type.shares == ShareSpec()
    assert policy.warnings == ()


@pytest.mark.parametrize(
    ("config", "count"),
    [
        ("NUM_CPUS = 6\nuse FEATURE : StaticSlots", 6),
        ("use FEATURE : StaticSlots(1, $(DETECTED_CPUS) / 2)", "DetectedCpus / 2"),
        ("use FEATURE : StaticSlots(1, 2 * 4)", 8),
    ],
)
def test_static_slots_count(config: str, count: int | str) -> None:
    assert _compile(config).slot_types[0].count == count


def test_hold_if_memory_exceeded_builds_the_hold_policy() -> None:
    """As in HTCondor, PREEMPT_IF builds on the default PREEMPT and WANT_SUSPEND (False)."""
    policy = _compile("use POLICY : Hold_If_Memory_Exceeded")
    exceeded = "(JobUniverse != 13 && MemoryUsage =!= UNDEFINED && MemoryUsage > Memory)"
    assert policy.expressions["PREEMPT"] == f"{exceeded} || False"
    assert policy.expressions["WANT_SUSPEND"] == f"{exceeded} =!= true && False"
    assert policy.expressions["MAXJOBRETIREMENTTIME"] == f"ifthenelse({exceeded},-1,0)"
    assert policy.macros["WANT_HOLD"] == f"(JobUniverse != 1 && {exceeded})"
    assert '"memory usage exceeded request_memory"' in policy.macros["WANT_HOLD_REASON"]
    assert policy.warnings == ()


def test_machine_overrides() -> None:
    policy = _compile("NUM_CPUS = 8\nMEMORY = 4096\nRESERVED_MEMORY = 512")
    assert (policy.num_cpus, policy.memory_mib, policy.reserved_memory_mib) == (8, 4096, 512)
    assert _compile("NUM_CPUS = $(DETECTED_CPUS)").num_cpus is None


def test_modify_request_defaults_and_overrides() -> None:
    assert _compile().modify_request == DEFAULT_MODIFY_REQUEST
    policy = _compile("MODIFY_REQUEST_EXPR_REQUESTMEMORY = quantize(RequestMemory,{512})")
    assert policy.modify_request == {
        **DEFAULT_MODIFY_REQUEST,
        "RequestMemory": "quantize(RequestMemory,{512})",
    }


# -- structured fields win -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "fields", "check", "warning"),
    [
        pytest.param(
            "START = KeyboardIdle > 60",
            {"start": "true"},
            lambda p: p.expressions["START"] == "true",
            "spec.start overrides condorConfig line 1 (START)",
            id="start",
        ),
        pytest.param(
            "use POLICY : Desktop",
            {"continue": "false"},
            lambda p: p.expressions["CONTINUE"] == "false",
            "spec.continue overrides condorConfig line 1 (CONTINUE, from use POLICY : Desktop)",
            id="continue from a template",
        ),
        pytest.param(
            "SLOT_TYPE_1 = 50%\nNUM_SLOTS_TYPE_1 = 2\nSLOT_TYPE_2 = 25%\nNUM_SLOTS_TYPE_2 = 2",
            {"slotTypes": [{"id": 1, "count": 1, "partitionable": True, "resources": "cpus=4"}]},
            lambda p: (
                [(t.id, t.count, t.partitionable) for t in p.slot_types]
                == [(1, 1, True), (2, 2, False)]
            ),
            "spec.slotTypes[0] overrides slot type 1 of condorConfig (condorConfig line 2 "
            "(NUM_SLOTS_TYPE_1), condorConfig line 1 (SLOT_TYPE_1))",
            id="slot type of the same id",
        ),
        pytest.param(
            "use POLICY : Desktop\nStartIdleTime = 5 * $(MINUTE)",
            {"macros": {"StartIdleTime": "60"}},
            lambda p: p.expressions["START"].startswith("((KeyboardIdle > 60)"),
            None,
            id="macros",
        ),
        pytest.param(
            "MODIFY_REQUEST_EXPR_RequestCpus = quantize(RequestCpus,{2})",
            {"modifyRequest": {"RequestCpus": "quantize(RequestCpus,{4})"}},
            lambda p: p.modify_request["RequestCpus"] == "quantize(RequestCpus,{4})",
            "spec.modifyRequest.RequestCpus overrides condorConfig line 1 "
            "(MODIFY_REQUEST_EXPR_RequestCpus)",
            id="modify request",
        ),
        pytest.param(
            'Color = "blue"\nSTARTD_ATTRS = Color',
            {"attributes": {"Color": '"red"'}, "slotAttributes": {"2": {"Color": '"green"'}}},
            lambda p: (
                p.startd_attrs == {"Color": '"red"'} and p.slot_attrs == {2: {"Color": '"green"'}}
            ),
            None,
            id="attributes",
        ),
        pytest.param(
            "RESERVED_MEMORY = 512",
            {"reserved": {"memory": "1Gi"}},
            lambda p: p.reserved_memory_mib == 1024,
            "spec.reserved.memory overrides condorConfig line 1 (RESERVED_MEMORY)",
            id="reserved",
        ),
        pytest.param(
            "MACHINE_RESOURCE_Cogs = 4",
            {"machineResources": {"cogs": 8}},
            lambda p: p.machine_resources == {"Cogs": 4, "cogs": 8},
            "spec.machineResources.cogs overrides MACHINE_RESOURCE_Cogs from condorConfig",
            id="machine resources",
        ),
    ],
)
def test_structured_fields_win(
    config: str, fields: dict[str, Any], check: Any, warning: str | None
) -> None:
    policy = _compile(config, **fields)
    assert check(policy), policy
    if warning is not None:
        assert warning in policy.warnings


# -- what is reported ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "warning"),
    [
        pytest.param(
            "A = 1\nFOO_BAR = 3",
            "condorConfig line 2 (FOO_BAR): FOO_BAR is not a knob Kondor knows, and nothing "
            "Kondor reads refers to it as $(FOO_BAR); it has no effect",
            id="unknown knob",
        ),
        pytest.param(
            "PREEMPTION_REQUIREMENTS = True",
            "condorConfig line 1 (PREEMPTION_REQUIREMENTS): PREEMPTION_REQUIREMENTS is an "
            "HTCondor knob Kondor does not implement (it configures the negotiator, which a "
            "SlotPolicy does not); it has no effect",
            id="unimplemented knob",
        ),
        pytest.param(
            "BENCHMARKS_JOBLIST = mips",
            "the agent measures Mips and KFlops with its own built-in benchmarks",
            id="unimplemented family",
        ),
        pytest.param(
            "SLOT1_EXECUTE = /scratch",
            "SLOT<N>_EXECUTE is an HTCondor knob Kondor does not implement",
            id="per-slot knob",
        ),
        pytest.param(
            "SLOT2_Color = 1",
            "condorConfig line 1 (SLOT2_Color): Color is not in STARTD_ATTRS or "
            "SLOT2_STARTD_ATTRS, so slot 2 does not advertise it; it has no effect",
            id="per-slot attribute nobody lists",
        ),
        pytest.param(
            "SCHEDD.MAX_JOBS_RUNNING = 10",
            "SCHEDD.MAX_JOBS_RUNNING applies to SCHEDD, not the startd; ignored",
            id="another daemon",
        ),
        pytest.param(
            "SLOT_TYPE_1 = 50%", "NUM_SLOTS_TYPE_1 is not set, so no slots of type 1", id="count"
        ),
        pytest.param(
            "use feature : GPUs\nGPU_DISCOVERY_EXTRA = -extra",
            "condorConfig line 2 (GPU_DISCOVERY_EXTRA): GPU_DISCOVERY_EXTRA is an HTCondor knob "
            "Kondor does not implement (the Kondor agent discovers GPUs",
            id="used by a template but without effect",
        ),
    ],
)
def test_knobs_without_effect_are_reported(config: str, warning: str) -> None:
    warnings = _compile(config).warnings
    assert any(warning in w for w in warnings), warnings


@pytest.mark.parametrize(
    "config",
    [
        pytest.param("Idle = KeyboardIdle > 600\nSTART = $(Idle)", id="helper of START"),
        pytest.param("POLLING_INTERVAL = 5\nUPDATE_INTERVAL = 30", id="startd knobs"),
        pytest.param("X = 1\nIs = $(X)\nSTARTD_ATTRS = Is", id="helper of an attribute"),
        pytest.param("use POLICY : Desktop\nKILL = True", id="overriding a template"),
    ],
)
def test_knobs_kondor_reads_are_not_reported(config: str) -> None:
    policy = _compile(config)
    assert not [w for w in policy.warnings if "not a knob Kondor knows" in w]


def test_startd_knobs_are_kept_for_the_policy_engine() -> None:
    policy = _compile(
        "polling_interval = 5\nENABLE_BACKFILL = $(IsWindows)\nHelper = 1\nSTART = $(Helper) == 1"
    )
    assert policy.macros == {"POLLING_INTERVAL": "5", "ENABLE_BACKFILL": "false", "Helper": "1"}


@pytest.mark.parametrize(
    ("config", "fields", "problem"),
    [
        pytest.param(
            "\n\n\nSTART = KeyboardIdle >",
            {},
            "condorConfig line 4 (START): 'KeyboardIdle >' is not a valid ClassAd expression "
            "(classad2:",
            id="bad expression",
        ),
        pytest.param(
            "Idle = KeyboardIdle > \nSTART = $(Idle) && true",
            {},
            "condorConfig line 2 (START): 'KeyboardIdle > && true' is not a valid ClassAd",
            id="bad expression after expansion",
        ),
        pytest.param(
            "SLOT_TYPE_1 = cpus=2, ram=lots\nNUM_SLOTS_TYPE_1 = 1",
            {},
            "condorConfig line 1 (SLOT_TYPE_1): 'lots' is not a share; use a fraction (1/4), a "
            "percentage (25%), an absolute amount or auto",
            id="bad share",
        ),
        pytest.param(
            "SLOT_TYPE_1 = 150%\nNUM_SLOTS_TYPE_1 = 1",
            {},
            "condorConfig line 1 (SLOT_TYPE_1): '150%' is more than 100% of the machine",
            id="over 100%",
        ),
        pytest.param(
            "",
            {"slotTypes": [{"id": 1, "resources": "cpus=1/0"}]},
            "spec.slotTypes[0].resources: '1/0' divides by zero",
            id="bad structured share",
        ),
        pytest.param(
            "START = $(IdleTime) > 5",
            {},
            "condorConfig line 1 (START): $(IdleTime) is not defined",
            id="missing macro",
        ),
        pytest.param(
            "A = $(B)\nB = $(A)\nSTART = $(A)",
            {},
            "refers back to itself: START -> A -> B -> A",
            id="cycle",
        ),
        pytest.param(
            "STARTD_ATTRS = favorite_color, favorite_season\nfavorite_color = 1",
            {},
            "condorConfig line 1 (STARTD_ATTRS): lists favorite_season, but nothing defines it",
            id="undefined attribute",
        ),
        pytest.param(
            "NUM_SLOTS_TYPE_1 = many",
            {},
            "condorConfig line 1 (NUM_SLOTS_TYPE_1): 'many' refers to many; a slot count is a "
            "whole number or an expression over the machine's Detected*/Total* attributes",
            id="count not about the machine",
        ),
        pytest.param(
            "NUM_SLOTS_TYPE_1 = 1.5",
            {},
            "condorConfig line 1 (NUM_SLOTS_TYPE_1): '1.5' is not a number of slots",
            id="fractional count",
        ),
        pytest.param(
            "NUM_SLOTS_TYPE_1 = -2",
            {},
            "condorConfig line 1 (NUM_SLOTS_TYPE_1): '-2' is not a number of slots",
            id="negative count",
        ),
        pytest.param(
            "SLOT_TYPE_1_PARTITIONABLE = sometimes\nNUM_SLOTS_TYPE_1 = 1",
            {},
            "condorConfig line 1 (SLOT_TYPE_1_PARTITIONABLE): 'sometimes' is not a boolean",
            id="bad boolean",
        ),
        pytest.param(
            "SLOT_TYPE_0 = 50%",
            {},
            "condorConfig line 1 (SLOT_TYPE_0): slot type 0 cannot be configured",
            id="type 0",
        ),
        pytest.param(
            "NUM_CPUS = lots",
            {},
            "condorConfig line 1 (NUM_CPUS): 'lots' refers to lots; NUM_CPUS is a number of CPUs",
            id="NUM_CPUS",
        ),
        pytest.param(
            "MACHINE_RESOURCE_Cogs = -1",
            {},
            "condorConfig line 1 (MACHINE_RESOURCE_Cogs): '-1' is not a quantity of Cogs",
            id="bad resource",
        ),
        pytest.param(
            "STARTD_ATTRS = 1bad",
            {},
            "condorConfig line 1 (STARTD_ATTRS): '1bad' is not an attribute name",
            id="bad attribute name",
        ),
        pytest.param(
            "PERIODIC_X = 1\nSTART = $ENV(HOME) > 1",
            {},
            "condorConfig line 2 (START): $ENV(HOME) reads the environment of the daemon",
            id="config function not known at compile time",
        ),
        pytest.param(
            "START = $INT(Memory) > 1",
            {},
            "condorConfig line 1 (START): $INT(Memory): 'TotalMemory' is UNDEFINED when the "
            "policy is compiled",
            id="config function over the slot",
        ),
        pytest.param(
            "START = $RANDOM_INTEGER(3,1) > 1",
            {},
            "condorConfig line 1 (START): $RANDOM_INTEGER(3, 1): min > max",
            id="config function with bad arguments",
        ),
        pytest.param(
            "START = $SOMETHING(1) > 1",
            {},
            "condorConfig line 1 (START): '$SOMETHING(1) > 1' uses $SOMETHING(...), which is "
            "not a configuration function HTCondor documents",
            id="unknown config function",
        ),
        pytest.param(
            "START = $(NOPE)",
            {"macros": {"Loop": "$(Loop2)", "Loop2": "$(Loop)"}},
            "spec.macros.Loop2: $(Loop) refers back to itself",
            id="spec.macros",
        ),
        pytest.param(
            "use FEATURE : Nope",
            {},
            "condorConfig line 1: 'use FEATURE : Nope': there is no template FEATURE : Nope",
            id="unknown template",
        ),
        pytest.param(
            "MyPolicy @=end\n  KeyboardIdle > 600\n",
            {},
            "condorConfig line 1: 'MyPolicy @=end': the multi-line value of MyPolicy has no "
            "closing @end line",
            id="unterminated block",
        ),
        pytest.param("endif", {}, "condorConfig line 1: 'endif': endif without an if", id="endif"),
    ],
)
def test_bad_policies_name_the_field_the_value_and_what_is_allowed(
    config: str, fields: dict[str, Any], problem: str
) -> None:
    problems = _problems(config, **fields)
    assert any(p.startswith(problem) or problem in p for p in problems), problems


_MANY_PROBLEMS = (
    "use FEATURE : Nope\nSTART = KeyboardIdle >\nSLOT_TYPE_1 = 2x\nNUM_SLOTS_TYPE_1 = 1\n"
    "RANK = $(Missing)\nendif"
)


def test_every_problem_is_reported_in_snippet_order() -> None:
    bad_type = [{"id": 2, "resources": "cpus=1/0"}]
    problems = _problems(_MANY_PROBLEMS, slotTypes=bad_type)
    assert [p.split(":", 1)[0].split(" (")[0] for p in problems] == [
        "condorConfig line 1",
        "condorConfig line 2",
        "condorConfig line 3",
        "condorConfig line 5",
        "condorConfig line 6",
        "spec.slotTypes[0].resources",
    ]
    with pytest.raises(PolicyError, match="the SlotPolicy has 6 problems"):
        _compile(_MANY_PROBLEMS, slotTypes=bad_type)


def test_an_empty_policy_is_htcondors_default() -> None:
    policy = _compile()
    assert policy == EffectivePolicy()


def test_startd_attrs_may_name_a_built_in_macro() -> None:
    assert _compile("STARTD_ATTRS = StateTimer").startd_attrs == {
        "StateTimer": "(time() - EnteredCurrentState)"
    }


@pytest.mark.parametrize(
    "config",
    [
        "Helper = $(Typo)\nSTART = $(Helper)\nRANK = $(Helper)",
        "A = $(B)\nB = $(A)\nSTART = $(A)\nRANK = $(B)",
    ],
    ids=["missing", "cycle"],
)
def test_one_mistake_is_one_problem(config: str) -> None:
    assert len(_problems(config)) == 1


def test_num_cpus_and_memory_over_the_machine() -> None:
    """The reference's "Job Suspension" lies about the cores: NUM_CPUS = $(DETECTED_CORES)*2,
    MEMORY = $(DETECTED_MEMORY)*2; the layout evaluates them on each node."""
    from kondor_core.api.machine import Machine
    from kondor_core.slots.layout import machine_totals

    policy = _compile("NUM_CPUS = $(DETECTED_CORES)*2\nMEMORY = $(DETECTED_MEMORY)*2")
    assert (policy.num_cpus, policy.memory_mib) == ("DetectedCpus*2", "DetectedMemory*2")
    machine = Machine(name="pair", cpus=2, memory=4096, disk=0, swap=0)
    totals = machine_totals(machine, policy)
    assert (totals.total["cpus"], totals.total["memory"]) == (4, 8192)
    assert (totals.detected["cpus"], totals.detected["memory"]) == (2, 4096)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("NUM_CPUS = Foo * 2", "'Foo * 2' refers to Foo; NUM_CPUS is a number of CPUs or an"),
        ("MEMORY = plenty", "'plenty' refers to plenty; MEMORY is an amount of memory in MiB"),
        ("MEMORY = -5", "'-5' is not an amount of memory in MiB; use a whole number >= 1"),
        ("NUM_CPUS = 0", "'0' is not a number of CPUs; use a whole number >= 1"),
    ],
)
def test_num_cpus_and_memory_refused(config: str, message: str) -> None:
    with pytest.raises(PolicyError) as refused:
        _compile(config)
    assert any(message in problem for problem in refused.value.problems), refused.value.problems


def test_startd_cron_templates() -> None:
    """FEATURE : StartdCronOneShot / StartdCronPeriodic / StartdCronContinuous, as HTCondor's
    OneShotCronHook, PeriodicCronHook and ContinuousCronHook define them."""
    policy = _compile(
        "use FEATURE : StartdCronOneShot(hw, /usr/local/bin/hardware, --short)\n"
        "use FEATURE : StartdCronPeriodic(load, 2m, /usr/local/bin/load)\n"
        "use FEATURE : StartdCronContinuous(watch, /usr/local/bin/watch)"
    )
    jobs = {job.name: job for job in policy.cron_jobs}
    assert list(jobs) == ["hw", "load", "watch"]
    hw, load, watch = jobs["hw"], jobs["load"], jobs["watch"]
    assert (hw.mode.value, hw.kill, hw.reconfig_rerun, hw.args) == (
        "OneShot",
        True,
        True,
        ("--short",),
    )
    assert (load.mode.value, load.period, load.executable) == (
        "Periodic",
        120,
        "/usr/local/bin/load",
    )
    assert (watch.mode.value, watch.period) == ("WaitForExit", 0)
    assert policy.warnings == ()


def test_startd_cron_template_without_enough_arguments() -> None:
    with pytest.raises(PolicyError) as refused:
        _compile("use FEATURE : StartdCronPeriodic(load, 2m)")
    assert "use FEATURE : PeriodicCronHook requires at least 4 arguments" in str(refused.value)


def test_pod_mode_from_the_field_or_the_knob_and_a_bad_one_refused() -> None:
    assert "KONDOR_POD_MODE" not in _compile().macros
    assert _compile(podMode="harvest").macros["KONDOR_POD_MODE"] == "harvest"
    assert _compile("KONDOR_POD_MODE = harvest").macros["KONDOR_POD_MODE"] == "harvest"
    # The structured field wins over the snippet's knob.
    field_wins = _compile("KONDOR_POD_MODE = harvest", podMode="dedicated")
    assert field_wins.macros["KONDOR_POD_MODE"] == "dedicated"
    assert _problems("KONDOR_POD_MODE = greedy") == [
        "KONDOR_POD_MODE = greedy: expected one of dedicated, harvest"
    ]
