"""Import every module of the given packages; fail naming each module that does not import.

    python -I check_imports.py kondor_core kondor_kube kondor_operator kondor_agent kondor_cli \\
        --pyproject pyproject.toml

The image build runs this in the built environment (`Dockerfile`), so a runtime module that
imports a dev-only package (or one whose native library the base image lacks) fails the build
with the module named, not the pod at its first use. With `--pyproject`, every distribution
named only in an extra (test and dev tools, the benchmarks' plotting) must be absent too: the
image keeps no dev tools. It needs only the standard library (it runs before anything is
known to import).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import pkgutil
import re
import sys
import tomllib
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Failure:
    """A module that did not import, and why (the exception's last line)."""

    module: str
    error: str

    def __str__(self) -> str:
        return f"{self.module}: {self.error}"


def _reason(error: BaseException) -> str:
    return traceback.format_exception_only(error)[-1].strip()


def module_names(package: str) -> tuple[list[str], list[Failure]]:
    """`package` and every module under it, as pkgutil walks them (subpackages imported)."""
    failures: list[Failure] = []
    try:
        root = importlib.import_module(package)
    except Exception as error:
        return [], [Failure(package, _reason(error))]
    names = [package]

    def walk_error(name: str) -> None:
        # pkgutil imports each subpackage to walk into it; one that fails lands here.
        error = sys.exc_info()[1]
        failures.append(Failure(name, _reason(error) if error else "cannot be imported"))

    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}.", onerror=walk_error):
        names.append(info.name)
    return names, failures


def import_failures(packages: Iterable[str], checked: list[str] | None = None) -> list[Failure]:
    """Every module of `packages` that fails to import (any exception, not only ImportError).

    A `__main__` module is a program: importing it would run it, so it is left out; what it
    imports is a module of the package and is checked on its own. The modules imported are
    appended to `checked`, when given.
    """
    failures: list[Failure] = []
    for package in packages:
        names, walk_failures = module_names(package)
        failures += walk_failures
        for name in names:
            if name.rsplit(".", 1)[-1] == "__main__":
                continue
            try:
                importlib.import_module(name)
            except Exception as error:
                failures.append(Failure(name, _reason(error)))
            if checked is not None:
                checked.append(name)
    seen: set[str] = set()
    unique = []
    for failure in failures:
        if failure.module not in seen:
            seen.add(failure.module)
            unique.append(failure)
    return unique


def _distribution_name(requirement: str) -> str:
    """The normalized name of a requirement string (PEP 503), without extras or versions."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match[1]).lower()


def extra_only_distributions(pyproject: dict[str, object]) -> list[str]:
    """Distributions named in an optional extra and not in `[project] dependencies`."""
    project = pyproject["project"]
    assert isinstance(project, dict)
    own = _distribution_name(str(project["name"]))
    runtime = {_distribution_name(r) for r in project.get("dependencies", [])}
    names: set[str] = set()
    for requirements in project.get("optional-dependencies", {}).values():
        names |= {_distribution_name(r) for r in requirements}
    return sorted(names - runtime - {own})


def present_distributions(names: Iterable[str]) -> list[str]:
    """Those of `names` installed in this environment."""
    present = []
    for name in names:
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        present.append(name)
    return present


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("packages", nargs="+", help="top-level packages to import entirely")
    parser.add_argument(
        "--pyproject",
        type=Path,
        help="pyproject.toml: distributions only its extras name must not be installed",
    )
    args = parser.parse_args(argv)
    checked: list[str] = []
    failures = import_failures(args.packages, checked)
    for failure in failures:
        print(f"check_imports: module {failure}", file=sys.stderr)
    unwanted: list[str] = []
    if args.pyproject is not None:
        with args.pyproject.open("rb") as handle:
            unwanted = present_distributions(extra_only_distributions(tomllib.load(handle)))
        for name in unwanted:
            print(
                f"check_imports: distribution {name} is installed, but only an extra "
                f"of {args.pyproject} needs it (the image keeps no dev tools)",
                file=sys.stderr,
            )
    if failures or unwanted:
        print(
            f"check_imports: {len(failures)} module(s) do not import, "
            f"{len(unwanted)} dev distribution(s) installed",
            file=sys.stderr,
        )
        return 1
    print(f"check_imports: all {len(checked)} modules of {', '.join(args.packages)} import")
    return 0


if __name__ == "__main__":
    sys.exit(main())
