"""The HTCondor configuration language: definitions, expansion, conditionals, templates, errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kondor_core.api.slotpolicy import SlotPolicySpec
from kondor_core.config import PolicyError, compile_policy
from kondor_core.config.snippet import (
    MacroError,
    MacroTable,
    SnippetError,
    parse_snippet,
    substitute_template_args,
)


def _table(text: str) -> MacroTable:
    snippet = parse_snippet(text)
    assert snippet.errors == (), [str(e) for e in snippet.errors]
    return snippet.table


def _value(text: str, name: str) -> str | None:
    expansion = _table(text).value(name)
    return None if expansion is None else expansion.value


@pytest.mark.parametrize(
    ("text", "name", "expected"),
    [
        pytest.param("A = 1", "A", "1", id="plain"),
        pytest.param("a=1", "A", "1", id="names are case-insensitive"),
        pytest.param("A = 1\na = 2", "A", "2", id="a later definition wins"),
        pytest.param("A = x\nA = $(A) y", "A", "x y", id="self reference appends"),
        pytest.param("A = $(A) y", "A", "y", id="appending to nothing"),
        pytest.param("A = y $(a)\nA = x $(A)", "A", "x y", id="prepend, any case"),
        pytest.param("B = $(A)\nA = 1", "B", "1", id="expansion is lazy"),
        pytest.param("A = 1\nB = $(A)\nA = 2", "B", "2", id="the last definition is used"),
        pytest.param("C = 3\nB = $(C)0\nA = <$(B)>", "A", "<30>", id="recursive"),
        pytest.param("A = $(NOPE:7)", "A", "7", id="default"),
        pytest.param("E =\nA = $(E:7)", "A", "7", id="default for an empty macro"),
        pytest.param("D = 2\nA = $(NOPE:$(D)1)", "A", "21", id="default holds a macro"),
        pytest.param("N = 2\nX2 = two\nA = $(X$(N))", "A", "two", id="nested name"),
        pytest.param("A = $(DOLLAR)(B)", "A", "$(B)", id="DOLLAR"),
        pytest.param("A = $$(OpSys)", "A", "$$(OpSys)", id="match-time substitution kept"),
        pytest.param("A = 1 + \\\n  2", "A", "1 + 2", id="continuation"),
        pytest.param("A = 1 \\\n  + 2 \\\n  + 3", "A", "1 + 2 + 3", id="two continuations"),
        pytest.param("A @=end\n  x\n  y\n@end", "A", "x\n  y", id="multi-line value"),
        pytest.param("# A = 1\nA = 2", "A", "2", id="comment"),
        pytest.param("  # indented comment\nA = 2", "A", "2", id="indented comment"),
        pytest.param("A = 1\nSTARTD.A = 2\nA = 3", "A", "2", id="STARTD. prefix wins"),
        pytest.param("A = $(MINUTE) * 2", "A", "60 * 2", id="built-in macro"),
        pytest.param("A = $(DETECTED_CPUS)", "A", "DetectedCpus", id="machine fact"),
        pytest.param("A = $(NUM_CPUS)", "A", "TotalCpus", id="NUM_CPUS unset"),
        pytest.param("NUM_CPUS = 4\nA = $(NUM_CPUS)", "A", "4", id="NUM_CPUS set"),
    ],
)
def test_definitions_and_expansion(text: str, name: str, expected: str) -> None:
    assert _value(text, name) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("if defined A\nR = yes\nendif", None, id="undefined"),
        pytest.param("A = 1\nif defined A\nR = yes\nendif", "yes", id="defined"),
        pytest.param("A =\nif defined A\nR = yes\nendif", None, id="empty is undefined"),
        pytest.param("if ! defined A\nR = yes\nendif", "yes", id="negated"),
        pytest.param("if true\nR = yes\nelse\nR = no\nendif", "yes", id="true"),
        pytest.param("if false\nR = yes\nelse\nR = no\nendif", "no", id="else"),
        pytest.param("if 0\nR = a\nelif 2\nR = b\nelse\nR = c\nendif", "b", id="elif"),
        pytest.param("if 1\nR = a\nelif 1\nR = b\nendif", "a", id="first branch only"),
        pytest.param("F = no\nif $(F)\nR = a\nelse\nR = b\nendif", "b", id="macro"),
        pytest.param("F = 1\nif !$(F)\nR = a\nelse\nR = b\nendif", "b", id="negated macro"),
        pytest.param("if true\nif false\nR = a\nelse\nR = b\nendif\nendif", "b", id="nested if"),
        pytest.param(
            "if false\nif true\nR = a\nendif\nelse\nR = c\nendif", "c", id="nested skipped"
        ),
        pytest.param("if false\nR = $(NOPE)\nendif\nR = ok", "ok", id="skipped not expanded"),
        pytest.param("IF TRUE\nR = yes\nENDIF", "yes", id="keywords any case"),
    ],
)
def test_conditionals(text: str, expected: str | None) -> None:
    assert _value(text, "R") == expected


def test_cogs_example_if_defined_machine_resource_names() -> None:
    """The reference's "Dividing System Resources": append only where the list is in use."""
    example = (
        "if defined MACHINE_RESOURCE_NAMES\n"
        "  MACHINE_RESOURCE_NAMES = $(MACHINE_RESOURCE_NAMES) Cogs actuator\n"
        "endif\n"
    )
    assert _value(example, "MACHINE_RESOURCE_NAMES") is None
    assert _value("MACHINE_RESOURCE_NAMES = gpus\n" + example, "MACHINE_RESOURCE_NAMES") == (
        "gpus Cogs actuator"
    )


@pytest.mark.parametrize(
    ("text", "args", "expected"),
    [
        ("N=$(1)", ["a"], "N=a"),
        ("N=$(1:1)", [], "N=1"),
        ("N=$(2:x)", ["a", ""], "N=x"),
        ("N=$(2+)", ["a", "b", "c"], "N=b, c"),
        ("N=$(3+:1/$(NUM_SLOTS_TYPE_$(1:1)))", [], "N=1/$(NUM_SLOTS_TYPE_1)"),
        ("N=$(1?) $(2?)", ["a"], "N=1 0"),
        ("N=$(0#)", ["a", "b"], "N=2"),
        ("N=$(0)", ["a", "b"], "N=a, b"),
        ("N=$($(1))", ["X"], "N=$(X)"),
        ("N=$(NAME:1)", ["a"], "N=$(NAME:1)"),
    ],
)
def test_template_arguments(text: str, args: list[str], expected: str) -> None:
    assert substitute_template_args(text, args) == expected


@pytest.mark.parametrize(
    ("text", "name", "expected"),
    [
        ("use FEATURE : StaticSlots", "NUM_SLOTS_TYPE_1", "TotalCpus"),
        ("use FEATURE : StaticSlots", "SLOT_TYPE_1", ""),
        ("use FEATURE : StaticSlots", "SLOT_TYPE_1_PARTITIONABLE", "false"),
        ("use FEATURE : StaticSlots(2, 4, cpus=1, 10%)", "NUM_SLOTS_TYPE_2", "4"),
        ("use FEATURE : StaticSlots(2, 4, cpus=1, 10%)", "SLOT_TYPE_2", "cpus=1, 10%"),
        ("use feature : partitionableslot", "SLOT_TYPE_1", "100%"),
        ("use FEATURE : PartitionableSlot(3, 50%)", "NUM_SLOTS_TYPE_3", "1"),
        ("use FEATURE : GPUs", "STARTD_CRON_GPUs_MONITOR_PERIOD", "300"),
        ("use POLICY : Desktop", "KILL", "False"),
        ("use POLICY : Desktop", "IS_OWNER", "(START =?= False)"),
        ("use POLICY : UWCS_Desktop", "KILL", "false"),
        ("use POLICY : Always_Run_Jobs", "START", "True"),
        ("use POLICY : Limit_Job_Runtimes(600)", "MAX_JOB_RUNTIME", "600"),
    ],
)
def test_templates(text: str, name: str, expected: str) -> None:
    assert _value(text, name) == expected


def test_use_lists_several_templates_and_records_them() -> None:
    snippet = parse_snippet("use POLICY : Desktop\nuse FEATURE : GPUs, StaticSlots")
    assert snippet.errors == ()
    assert snippet.templates == (
        "POLICY : Desktop",
        "FEATURE : POLICY_EXPR_FRAGMENTS",
        "FEATURE : GPUs",
        "FEATURE : GPUsMonitor",
        "FEATURE : Monitor",
        "FEATURE : StaticSlots",
    )


def test_template_definitions_remember_the_use_line() -> None:
    table = _table("# policy\nuse POLICY : Desktop")
    start = table.get("START")
    assert start is not None
    assert (start.origin.line, start.origin.template) == (2, "POLICY : Desktop")
    assert start.origin.label("START") == "condorConfig line 2 (START, from use POLICY : Desktop)"


def test_a_later_definition_overrides_a_template() -> None:
    table = _table("use POLICY : Desktop\nStartIdleTime = 60\nKILL = True")
    start = table.value("START")
    assert start is not None and "(KeyboardIdle > 60)" in start.value
    assert _value("use POLICY : Desktop\nKILL = True", "KILL") == "True"


def _errors(text: str) -> list[str]:
    return [str(error) for error in parse_snippet(text).errors]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "use FEATURE : Nope",
            "condorConfig line 1: 'use FEATURE : Nope': there is no template FEATURE : Nope; "
            "Kondor knows FEATURE : ContinuousCronHook, FEATURE : GPUs,",
            id="unknown template",
        ),
        pytest.param(
            "use THING : Desktop", "there is no template THING : Desktop", id="unknown category"
        ),
        pytest.param(
            "A = 1\nSLOT_TYPE_1 @=slot\n  cpus=1\n",
            "condorConfig line 2: 'SLOT_TYPE_1 @=slot': the multi-line value of SLOT_TYPE_1 has "
            "no closing @slot line",
            id="unterminated block",
        ),
        pytest.param(
            "A = 1\nendif", "condorConfig line 2: 'endif': endif without an if", id="endif"
        ),
        pytest.param("else", "condorConfig line 1: 'else': else without an if", id="else"),
        pytest.param("elif true", "elif without an if", id="elif"),
        pytest.param(
            "if true\nelse\nelif true\nendif", "condorConfig line 3: 'elif true': elif after else"
        ),
        pytest.param("if true\nelse\nelse\nendif", "a second else for the same if"),
        pytest.param(
            "if defined A\nB = 1", "condorConfig line 1: 'if defined A': this if has no endif"
        ),
        pytest.param(
            "if maybe\nendif",
            "condorConfig line 1: 'if maybe': the condition 'maybe' is not true, false",
            id="bad condition",
        ),
        pytest.param("if $(NOPE)\nendif", "$(NOPE) is not defined", id="undefined condition"),
        pytest.param("if version >= nine\nendif", "a version condition is `version <op> X.Y"),
        pytest.param("if version == 25\nendif", "a version literal needs at least two parts"),
        pytest.param(
            "include : /etc/condor/extra.conf",
            "condorConfig line 1: 'include : /etc/condor/extra.conf': include is not supported",
        ),
        pytest.param(
            "START is True",
            "condorConfig line 1: 'START is True': not a configuration statement",
            id="not a statement",
        ),
        pytest.param(
            "error : this node is not ready",
            "condorConfig line 1: 'error : this node is not ready': error: this node is not ready",
        ),
        pytest.param(
            "use POLICY : PREEMPT_IF",
            "condorConfig line 1: 'use POLICY : PREEMPT_IF': in use POLICY : PREEMPT_IF: error: "
            "use POLICY : PREEMPT_IF requires an argument",
            id="template error",
        ),
    ],
)
def test_errors_name_the_line_and_its_text(text: str, message: str) -> None:
    errors = _errors(text)
    assert len(errors) == 1, errors
    assert errors[0].startswith(message) or message in errors[0], errors[0]


def test_an_error_inside_a_template_stops_that_template_only() -> None:
    snippet = parse_snippet("use POLICY : PREEMPT_IF\nA = 1")
    assert len(snippet.errors) == 1
    assert snippet.table.user_definitions()[0].name == "A"


def test_every_bad_line_is_reported() -> None:
    errors = parse_snippet("endif\nuse FEATURE : Nope\nwhat is this\nA = 1\nelse").errors
    assert [error.line for error in errors] == [1, 2, 3, 5]
    assert all(isinstance(error, SnippetError) for error in errors)


@pytest.mark.parametrize(
    ("text", "name", "message"),
    [
        pytest.param(
            "A = 1\nSTART = $(Typo) && true",
            "START",
            "condorConfig line 2 (START): $(Typo) is not defined",
            id="missing",
        ),
        pytest.param(
            "Helper = $(Typo)\nSTART = $(Helper)",
            "START",
            "condorConfig line 1 (Helper): $(Typo) is not defined (reached by START -> Helper)",
            id="missing in a helper",
        ),
        pytest.param(
            "A = $(B)\nB = $(C)\nC = $(A)",
            "A",
            "refers back to itself: A -> B -> C -> A",
            id="cycle",
        ),
        pytest.param("A = x $(A", "A", "'$(' has no closing ')'", id="unbalanced"),
        pytest.param("A = $(no good)", "A", "$(no good) does not name a macro", id="bad name"),
    ],
)
def test_expansion_errors_name_the_macro_and_where_it_was_used(
    text: str, name: str, message: str
) -> None:
    table = _table(text)
    with pytest.raises(MacroError) as caught:
        table.value(name)
    assert message in str(caught.value)


def test_other_daemons_knobs_are_noted_and_ignored() -> None:
    snippet = parse_snippet("SCHEDD.START = False\nwarning : check me")
    assert snippet.errors == ()
    assert snippet.table.user_definitions() == []
    assert snippet.notes == (
        "condorConfig line 1 (SCHEDD.START): SCHEDD.START applies to SCHEDD, not the startd; "
        "ignored",
        "condorConfig line 2 (warning): check me",
    )


def test_spec_macros_are_defined_last_and_can_append() -> None:
    table = _table("Extra = a\nuse POLICY : Desktop").with_macros(
        {"StartIdleTime": "60", "extra": "$(Extra) b"}, source="spec.macros"
    )
    start = table.value("START")
    assert start is not None and "(KeyboardIdle > 60)" in start.value
    assert table.value("EXTRA") == table.value("Extra")
    extra = table.get("Extra")
    assert extra is not None and extra.value == "a b"
    assert extra.origin.label("extra") == "spec.macros.extra"


_FRAGMENTS = st.sampled_from(
    [
        "A = 1",
        "A = $(A) x",
        "B = $(A)",
        "B = $(B:2)",
        "START = $(B) > 0",
        "if defined A",
        "if $(B)",
        "elif true",
        "else",
        "endif",
        "X @=end",
        "@end",
        "  line",
        "C = 1 \\",
        "use POLICY : Desktop",
        "use FEATURE : StaticSlots(2)",
        "use FEATURE : Nope",
        "SLOT_TYPE_1 = cpus=2, 50%",
        "NUM_SLOTS_TYPE_1 = $(NUM_CPUS)",
        "STARTD_ATTRS = A B",
        "# comment",
        "$(",
        "error : stop",
        "",
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_FRAGMENTS, max_size=12))
def test_any_snippet_compiles_or_raises_policy_error(lines: list[str]) -> None:
    """Whatever the text, the user gets a policy or a PolicyError, never a crash."""
    text = "\n".join(lines)
    snippet = parse_snippet(text)
    assert all(isinstance(error, SnippetError) for error in snippet.errors)
    try:
        compile_policy(SlotPolicySpec(condor_config=text))
    except PolicyError as err:
        assert err.problems


# -- bounds (issue 18: hostile input) ---------------------------------------------------------


def _doubling(levels: int) -> str:
    lines = ["A0 = x"]
    lines += [f"A{n} = $(A{n - 1})$(A{n - 1})" for n in range(1, levels + 1)]
    return "\n".join([*lines, f"START = $(A{levels}) == 1"])


def _problems(text: str, **spec: object) -> list[str]:
    with pytest.raises(PolicyError) as refused:
        compile_policy(SlotPolicySpec.model_validate({"condorConfig": text, **spec}))
    return refused.value.problems


def test_a_doubling_macro_is_refused_naming_the_knob() -> None:
    problems = _problems(_doubling(40))
    assert len(problems) == 1, problems
    assert problems[0].startswith("condorConfig line 20 (A19): expands to more than 262144")
    assert "reached by START -> A40 -> A39" in problems[0]


def test_a_value_that_doubles_itself_line_by_line_is_refused() -> None:
    text = "A = x\n" + "A = $(A)$(A)\n" * 40
    problems = _problems(text)
    assert any("appending to its own value makes it longer" in p for p in problems), problems
    assert problems[0].startswith("condorConfig line 19: 'A = $(A)$(A)': A: appending")


def test_spec_macros_that_double_themselves_are_refused() -> None:
    big = "y" * 200_000
    problems = _problems(f"A = {big}", macros={"A": "$(A)$(A)"})
    assert problems == [
        "spec.macros.A: appending to its own value makes it longer than 262144 characters; "
        "a value that repeats $(A) doubles with every line"
    ]


def test_a_long_chain_of_macros_is_refused_naming_the_knob() -> None:
    lines = [f"M{n} = $(M{n + 1})" for n in range(5000)] + ["M5000 = 1", "START = $(M0)"]
    problems = _problems("\n".join(lines))
    assert len(problems) == 1, problems
    assert "macros nest more than 64 deep" in problems[0]


def test_deeply_nested_references_in_one_value_are_refused() -> None:
    problems = _problems("START = " + "$(" * 3000 + "A" + ")" * 3000)
    assert len(problems) == 1, problems
    assert "macros nest more than 64 deep" in problems[0]


def test_a_chain_within_the_bound_expands() -> None:
    lines = [f"M{n} = $(M{n + 1})" for n in range(40)] + ["M40 = True", "START = $(M0)"]
    policy = compile_policy(SlotPolicySpec.model_validate({"condorConfig": "\n".join(lines)}))
    assert policy.expressions["START"] == "True"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("A = 7\nB = $INT(A)", "7", id="INT of a macro"),
        pytest.param("B = $INT(3*4, %03d)", "012", id="INT with a format"),
        pytest.param("B = $REAL(1/4.0)", "0.25", id="REAL"),
        pytest.param("B = $EVAL(2 + 3)", "5", id="EVAL"),
        pytest.param('B = $STRING("x")', "x", id="STRING"),
        pytest.param("L = a, b, c\nB = $CHOICE(1, L)", "b", id="CHOICE of a list macro"),
        pytest.param("B = $CHOICE(2, x, y, z)", "z", id="CHOICE of arguments"),
        pytest.param("S = abcdef\nB = $SUBSTR(S, 2, 3)", "cde", id="SUBSTR"),
        pytest.param("S = abcdef\nB = $SUBSTR(S, -2)", "ef", id="SUBSTR from the end"),
        pytest.param("B = $NOTAFUNC(1)", "$NOTAFUNC(1)", id="not a function: text"),
    ],
)
def test_configuration_functions(text: str, expected: str) -> None:
    assert _value(text, "B") == expected


def test_random_functions_are_stable_and_in_range() -> None:
    """The same policy compiles to the same value; a different knob may pick another."""
    first = _value("B = $RANDOM_INTEGER(-30, 30, 2)", "B")
    assert first == _value("B = $RANDOM_INTEGER(-30, 30, 2)", "B")
    assert first is not None and -30 <= int(first) <= 30 and int(first) % 2 == 0
    picks = {_value(f"K{n} = $RANDOM_CHOICE(a, b, c)", f"K{n}") for n in range(30)}
    assert picks == {"a", "b", "c"}
