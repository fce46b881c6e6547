"""The Dockerfile, read as Docker reads it (no engine here to build it)."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from dataclasses import dataclass, field

from chart_support import ROOT

DOCKERFILE = ROOT / "Dockerfile"
#: The runtime packages' source roots; the dev cluster (devcluster/) does not run in the image.
SOURCE_ROOTS = ("core", "kube", "operator", "agent", "cli")
RUNTIME_PACKAGES = ("kondor_core", "kondor_kube", "kondor_operator", "kondor_agent", "kondor_cli")


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def of(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) with comments dropped and continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        out.append((keyword.upper(), args.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued instruction"
    return out


def stages() -> list[Stage]:
    found: list[Stage] = []
    for keyword, args in instructions(DOCKERFILE.read_text()):
        if keyword == "FROM":
            match = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", args, re.I)
            assert match, f"FROM {args}"
            found.append(Stage(name=match[2] or str(len(found)), base=match[1]))
        elif found:
            found[-1].instructions.append((keyword, args))
    return found


def test_builder_and_runtime_stages() -> None:
    names = [s.name for s in stages()]
    assert names == ["builder", "runtime"]
    runtime = stages()[-1]
    assert any(args.startswith("--from=builder ") for args in runtime.of("COPY"))
    # Only the built environment reaches the runtime: no sources, no compilers.
    assert [a for a in runtime.of("COPY") if not a.startswith("--from=")] == []


def test_dependencies_are_installed_before_the_sources_are_copied() -> None:
    builder = stages()[0]
    steps = [(kw, args) for kw, args in builder.instructions if kw in ("COPY", "RUN")]
    positions = {
        "pyproject": next(
            i for i, (kw, a) in enumerate(steps) if kw == "COPY" and "pyproject" in a
        ),
        "deps": next(
            i for i, (kw, a) in enumerate(steps) if kw == "RUN" and "-r requirements" in a
        ),
        "sources": min(
            i for i, (kw, a) in enumerate(steps) if kw == "COPY" and a.split()[0] in SOURCE_ROOTS
        ),
        "install": next(i for i, (kw, a) in enumerate(steps) if kw == "RUN" and "--no-deps ." in a),
    }
    assert positions["pyproject"] < positions["deps"] < positions["sources"] < positions["install"]
    copied = {a.split()[0] for kw, a in steps if kw == "COPY"}
    assert set(SOURCE_ROOTS) <= copied, "a runtime source root is not copied"
    assert "devcluster" not in copied, "the dev cluster does not run in the image"


def test_the_build_imports_every_runtime_module_and_keeps_no_dev_tools() -> None:
    builder = stages()[0]
    [install] = [a for a in builder.of("RUN") if "--no-deps ." in a]
    steps = [step.strip() for step in install.split("&&")]
    assert any(s.startswith("python -m pip uninstall") and "pip setuptools" in s for s in steps)
    [check] = [s for s in steps if "check_imports.py" in s]
    # -I: the sources in the working directory must not stand in for the installed packages.
    assert check.split()[:3] == ["python", "-I", "check_imports.py"]
    assert set(RUNTIME_PACKAGES) <= set(check.split()), "a runtime package is not checked"
    assert "--pyproject pyproject.toml" in check
    # The check runs after the uninstall, so nothing at run time may need pip or setuptools.
    uninstall = next(i for i, s in enumerate(steps) if "pip uninstall" in s)
    assert uninstall < steps.index(check)
    for entry_point in ("kondor-operator", "kondor-agent", "kondor"):
        assert f"{entry_point} --help > /dev/null" in steps
    assert any("tools/check_imports.py" in a for a in builder.of("COPY"))


def test_httpx_is_a_runtime_dependency_the_agent_imports() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=\[ ]", r, maxsplit=1)[0].lower() for r in project["dependencies"]}
    # kondor_agent.fetchwork (URL fetch-work hooks) imports it in the agent's start path.
    assert "import httpx" in (ROOT / "agent/kondor_agent/fetchwork.py").read_text()
    assert "httpx" in names


def test_runtime_runs_as_a_numeric_non_root_user() -> None:
    runtime = stages()[-1]
    [user] = runtime.of("USER")
    uid = user.split(":")[0]
    assert uid.isdigit(), "a numeric USER lets the kubelet check runAsNonRoot"
    assert int(uid) != 0
    # USER comes after the last RUN, so nothing later runs as root.
    keywords = [kw for kw, _ in runtime.instructions]
    assert keywords.index("USER") > max(i for i, kw in enumerate(keywords) if kw == "RUN")


def test_default_command_is_the_operator_and_both_entry_points_exist() -> None:
    runtime = stages()[-1]
    assert runtime.of("CMD") == ['["kondor-operator"]']
    assert not runtime.of("ENTRYPOINT"), "the chart sets `command`; an ENTRYPOINT would prefix it"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert {"kondor-operator", "kondor-agent"} <= scripts.keys()


def test_dockerignore_lets_in_exactly_what_is_copied() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def included(path: str) -> bool:
        keep = True
        for pattern in patterns:
            negated = pattern.startswith("!")
            glob = pattern.lstrip("!").rstrip("/")
            if fnmatch.fnmatch(path, glob) or path.startswith(glob + "/"):
                keep = negated
        return keep

    for stage in stages():
        for args in stage.of("COPY"):
            if args.startswith("--from="):
                continue
            *sources, _ = args.split()
            for source in sources:
                assert included(source), f".dockerignore leaves out {source}, which is copied"
    for private in (".venv", ".git", ".devcluster", "tests", "devcluster", "tools/fetch_helm.py"):
        assert not included(private), f"{private} would be sent to the Docker daemon"
