"""The size check: no function over 80 lines, no class over 400, in core/ and agent/.

    python tools/check_sizes.py [ROOT ...]     # core agent by default

Every .py file under the roots is parsed (nothing is imported); a function's or class's
length is its lines from its `def`/`class` line (decorators not counted) to its last line,
docstring and comments included, as a reader scrolls it. Methods and nested functions are
functions too, named by where they sit (`Compiler.layout`, `outer.<locals>.inner`).

It prints the ten longest functions and the ten longest classes with their lengths and
where they are, then names each function over 80 lines and each class over 400 and exits
1; 0 when there is none.

Generated files are skipped, since nobody edits them by hand: GENERATED below lists them
(today only core/kondor_core/config/htcondor_defaults.py, HTCondor's knob defaults written
by `make condor-defaults`, one long table). It needs only the standard library.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

#: The longest a function (or method) and a class may be, in lines.
FUNCTION_LIMIT = 80
CLASS_LIMIT = 400
#: How many of the longest of each kind are printed.
TOP = 10
#: Files written by a generator, relative to the repository root.
GENERATED = frozenset({"core/kondor_core/config/htcondor_defaults.py"})
#: The roots checked when none is given.
DEFAULT_ROOTS = ("core", "agent")
#: The repository root: GENERATED's paths and the printed ones are relative to it.
REPOSITORY = Path(__file__).resolve().parents[1]

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class Definition:
    """One function or class: how long it is and where."""

    kind: str  # "function" or "class"
    name: str  # qualified within its module
    path: str
    line: int
    length: int

    @property
    def limit(self) -> int:
        """The most lines this kind of definition may have."""
        return CLASS_LIMIT if self.kind == "class" else FUNCTION_LIMIT

    def __str__(self) -> str:
        return f"{self.length:5d}  {self.path}:{self.line}  {self.name}"


def definitions(tree: ast.AST, path: str) -> Iterator[Definition]:
    """Every function and class in a parsed module, nested ones included."""

    def visit(node: ast.AST, prefix: str) -> Iterator[Definition]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (*_FUNCTIONS, ast.ClassDef)):
                name = prefix + child.name
                kind = "class" if isinstance(child, ast.ClassDef) else "function"
                end = child.end_lineno if child.end_lineno is not None else child.lineno
                yield Definition(kind, name, path, child.lineno, end - child.lineno + 1)
                inner = f"{name}." if kind == "class" else f"{name}.<locals>."
                yield from visit(child, inner)
            else:
                yield from visit(child, prefix)

    yield from visit(tree, "")


def python_files(
    roots: Sequence[Path], base: Path, generated: frozenset[str] = GENERATED
) -> Iterator[tuple[Path, str]]:
    """The .py files under the roots, with their paths as printed; generated ones skipped."""
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            shown = _shown(path, base)
            if shown not in generated:
                yield path, shown


def _shown(path: Path, base: Path) -> str:
    """The path relative to the repository root where it is under it, else as given."""
    try:
        return path.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def measure(
    roots: Sequence[Path], base: Path, generated: frozenset[str] = GENERATED
) -> list[Definition]:
    """Every definition in the roots' files, longest first."""
    found = [
        definition
        for path, shown in python_files(roots, base, generated)
        for definition in definitions(ast.parse(path.read_text(), filename=str(path)), shown)
    ]
    return sorted(found, key=lambda d: (-d.length, d.path, d.line))


def report(found: Sequence[Definition], top: int = TOP) -> tuple[list[str], list[Definition]]:
    """The lines to print, and the definitions over their limit."""
    lines: list[str] = []
    for kind, plural, limit in (
        ("function", "functions", FUNCTION_LIMIT),
        ("class", "classes", CLASS_LIMIT),
    ):
        longest = [d for d in found if d.kind == kind][:top]
        lines.append(f"The {len(longest)} longest {plural} (limit {limit} lines):")
        lines.extend(str(d) for d in longest)
    over = [d for d in found if d.length > d.limit]
    return lines, over


def main(argv: Sequence[str] | None = None, base: Path = REPOSITORY) -> int:
    """Print the longest definitions; 1 when one is over its limit, naming each."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "roots", nargs="*", default=[base / root for root in DEFAULT_ROOTS], type=Path
    )
    args = parser.parse_args(argv)
    lines, over = report(measure(args.roots, base))
    print("\n".join(lines))
    if not over:
        print("No function over 80 lines and no class over 400.")
        return 0
    print(f"\n{len(over)} over the limit:", file=sys.stderr)
    for d in over:
        print(
            f"{d.path}:{d.line}: {d.kind} {d.name} is {d.length} lines (limit {d.limit})",
            file=sys.stderr,
        )
    return 1


if __name__ == "__main__":
    sys.exit(main())
