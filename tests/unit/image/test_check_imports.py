"""tools/check_imports.py: every module of a package imports, or the check names the module."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

TOOL = Path(__file__).resolve().parents[3] / "tools" / "check_imports.py"


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_imports", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


check = load_tool()


def write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path for tiny packages; what they import is forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_a_module_importing_a_missing_package_is_named_with_the_error(packages: Path) -> None:
    write(
        packages,
        {
            "fakepkg_a/__init__.py": "",
            "fakepkg_a/good.py": "import json\n",
            "fakepkg_a/sub/__init__.py": "",
            "fakepkg_a/sub/fetch.py": "import kondor_no_such_dev_tool\n",
        },
    )
    failures = check.import_failures(["fakepkg_a"])
    assert [failure.module for failure in failures] == ["fakepkg_a.sub.fetch"]
    assert "No module named 'kondor_no_such_dev_tool'" in failures[0].error


def test_a_clean_package_passes_and_its_main_module_is_not_run(packages: Path) -> None:
    write(
        packages,
        {
            "fakepkg_b/__init__.py": "",
            "fakepkg_b/one.py": "VALUE = 1\n",
            # Importing a __main__ would run the program (here: exit the checker).
            "fakepkg_b/__main__.py": "raise SystemExit(3)\n",
        },
    )
    assert check.import_failures(["fakepkg_b"]) == []


def test_a_subpackage_that_fails_is_named_and_any_exception_counts(packages: Path) -> None:
    write(
        packages,
        {
            "fakepkg_c/__init__.py": "",
            "fakepkg_c/broken/__init__.py": "from ctypes import CDLL\nCDLL('libkondor-none.so')\n",
            "fakepkg_c/config.py": "raise RuntimeError('a setting is missing')\n",
        },
    )
    failures = {failure.module: failure.error for failure in check.import_failures(["fakepkg_c"])}
    assert set(failures) == {"fakepkg_c.broken", "fakepkg_c.config"}
    assert "libkondor-none.so" in failures["fakepkg_c.broken"]
    assert failures["fakepkg_c.config"] == "RuntimeError: a setting is missing"


def test_the_command_fails_naming_the_module(
    packages: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(packages, {"fakepkg_d/__init__.py": "", "fakepkg_d/hooks.py": "import pytest_nope\n"})
    assert check.main(["fakepkg_d"]) == 1
    err = capsys.readouterr().err
    assert "module fakepkg_d.hooks: ModuleNotFoundError: No module named 'pytest_nope'" in err


def test_a_package_that_is_not_installed_is_a_failure(packages: Path) -> None:
    [failure] = check.import_failures(["fakepkg_not_there"])
    assert failure.module == "fakepkg_not_there"


def test_distributions_only_an_extra_names_are_the_dev_tools() -> None:
    pyproject = {
        "project": {
            "name": "kondor",
            "dependencies": ["httpx>=0.26", "PyYAML>=6.0"],
            "optional-dependencies": {
                "dev": ["kondor[bench]", "pytest>=8", "types-PyYAML", "httpx"],
                "bench": ["matplotlib>=3.8"],
            },
        }
    }
    assert check.extra_only_distributions(pyproject) == ["matplotlib", "pytest", "types-pyyaml"]


def test_the_projects_own_runtime_dependencies_are_not_dev_tools() -> None:
    import tomllib

    pyproject = tomllib.loads((TOOL.parents[1] / "pyproject.toml").read_text())
    dev_only = check.extra_only_distributions(pyproject)
    assert "pytest" in dev_only and "ruff" in dev_only
    # The agent fetches work over HTTP in the image: httpx is a runtime dependency.
    assert "httpx" not in dev_only


def test_installed_dev_distributions_fail_the_check(
    packages: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(packages, {"fakepkg_e/__init__.py": ""})
    pyproject = tmp_path / "pyproject.toml"
    # pytest runs this test, so it is installed here: as in an image that kept it.
    pyproject.write_text(
        '[project]\nname = "x"\ndependencies = []\n'
        '[project.optional-dependencies]\ndev = ["pytest", "kondor-no-such-dist"]\n'
    )
    assert check.main(["fakepkg_e", "--pyproject", str(pyproject)]) == 1
    err = capsys.readouterr().err
    assert "distribution pytest is installed" in err
    assert "kondor-no-such-dist" not in err
