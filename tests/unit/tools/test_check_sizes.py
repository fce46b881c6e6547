"""tools/check_sizes.py: the ten longest functions and classes, and a failure naming each one
over its limit (80 lines for a function, 400 for a class), generated files skipped."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOL = Path(__file__).resolve().parents[3] / "tools" / "check_sizes.py"


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_sizes", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


check = load_tool()


def function(name: str, lines: int, indent: str = "") -> str:
    """A function of exactly `lines` lines (its def line included)."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 2))
    return f"{indent}def {name}() -> int:\n{body}{indent}    return 0\n"


def klass(name: str, methods: int, method_lines: int) -> str:
    """A class of 1 + methods * method_lines lines."""
    return f"class {name}:\n" + "".join(
        function(f"m{i}", method_lines, indent="    ") for i in range(methods)
    )


def tree(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def run(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = check.main([str(root / "core"), str(root / "agent")], base=root)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_tree_within_the_limits_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tree(
        tmp_path,
        {
            "core/pkg/a.py": function("short", 10) + function("longest_allowed", 80),
            "agent/b.py": klass("Fits", methods=5, method_lines=79),  # 396 lines
        },
    )
    code, out, err = run(root, capsys)
    assert code == 0, err
    assert "   80  core/pkg/a.py:11  longest_allowed" in out
    assert "  396  agent/b.py:1  Fits" in out
    assert err == ""


def test_a_tree_over_the_limits_fails_naming_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tree(
        tmp_path,
        {
            "core/pkg/a.py": function("fine", 80) + function("too_long", 81),
            "agent/b.py": klass("Giant", methods=5, method_lines=81),  # 406 lines
        },
    )
    code, out, err = run(root, capsys)
    assert code == 1
    assert "core/pkg/a.py:81: function too_long is 81 lines (limit 80)" in err
    assert "agent/b.py:1: class Giant is 406 lines (limit 400)" in err
    for method in range(5):
        assert f"function Giant.m{method} is 81 lines" in err
    assert "fine" not in err
    assert "\n7 over the limit:\n" in err  # the class, its five methods, too_long
    assert "   81  core/pkg/a.py:81  too_long" in out


def test_only_the_ten_longest_are_printed_longest_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = "".join(function(f"f{n}", n) for n in range(3, 15))
    root = tree(tmp_path, {"core/a.py": source, "agent/empty.py": ""})
    code, out, _ = run(root, capsys)
    assert code == 0
    listed = [line.split()[-1] for line in out.splitlines() if line.startswith(" ")]
    assert listed == [f"f{n}" for n in range(14, 4, -1)]


def test_generated_files_are_skipped(tmp_path: Path) -> None:
    root = tree(tmp_path, {"core/gen.py": function("table", 500), "core/ok.py": ""})
    found = check.measure([root / "core"], root, generated=frozenset({"core/gen.py"}))
    assert found == []
    assert [d.name for d in check.measure([root / "core"], root)] == ["table"]


def test_the_repository_skips_htcondor_defaults() -> None:
    assert "core/kondor_core/config/htcondor_defaults.py" in check.GENERATED
    assert (check.REPOSITORY / "core/kondor_core/config/htcondor_defaults.py").is_file()


def test_nested_definitions_are_named_by_where_they_sit() -> None:
    source = "class A:\n    def m(self):\n        def inner():\n            pass\n"
    names = [d.name for d in check.definitions(ast.parse(source), "x.py")]
    assert names == ["A", "A.m", "A.m.<locals>.inner"]
