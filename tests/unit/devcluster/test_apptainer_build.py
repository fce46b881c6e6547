"""kondor_devcluster.apptainer (`make apptainer`): a cached build is reused, a host that
cannot build is reported (not failed), the module's source is made buildable (exec bits,
VERSION), and a relocated copy is one every account can reach."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kondor_devcluster import apptainer as tool
from kondor_devcluster import kondor


def run_tool(cache: Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path, "HOME": str(cache), "KONDOR_CACHE_DIR": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "kondor_devcluster.apptainer"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_an_installed_apptainer_that_runs_is_printed_without_building(tmp_path: Path) -> None:
    binary = tool.prefix(tmp_path) / "bin" / "apptainer"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\necho 'apptainer version 1.5.3'\n")
    binary.chmod(0o755)
    done = run_tool(tmp_path, "/usr/bin:/bin")  # no Go needed: nothing is built
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{binary}\n"
    assert "apptainer version 1.5.3 ready" in done.stderr


def test_a_host_without_go_is_reported_not_failed(tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    done = run_tool(tmp_path, str(empty))
    assert done.returncode == 0 and done.stdout == ""
    assert "reported, not failed" in done.stderr and "`go` is not on PATH" in done.stderr
    assert not (tool.prefix(tmp_path) / "bin").exists()


def test_the_module_source_gets_its_exec_bits_and_a_version(tmp_path: Path) -> None:
    """The module zip drops exec bits and git: mconfig and its helpers are made executable
    again and VERSION written, or mconfig refuses to run."""
    module = tmp_path / "module"
    for name in ("mconfig", "makeit/gengodep", "scripts/go-generate", "README.md"):
        path = module / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o444)  # as the read-only module cache keeps them
    source = tmp_path / "source"
    tool._copy_source(module, source, "1.5.3")
    for name in ("mconfig", "makeit/gengodep", "scripts/go-generate"):
        assert os.access(source / name, os.X_OK), name
    assert not os.access(source / "README.md", os.X_OK)
    assert (source / "VERSION").read_text() == "1.5.3\n"


def test_a_relocated_copy_is_reachable_by_every_account(tmp_path: Path) -> None:
    binary = tool.prefix(tmp_path / "home") / "bin" / "apptainer"
    (binary.parent.parent / "etc" / "apptainer").mkdir(parents=True)
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    (tmp_path / "home").chmod(0o700)  # as /root
    session = tmp_path / "session"
    session.mkdir(mode=0o700)
    copy = tool.relocate(binary, session / "apptainer")
    assert copy == session / "apptainer" / "bin" / "apptainer" and os.access(copy, os.X_OK)
    assert (session / "apptainer" / "etc" / "apptainer").is_dir()
    assert session.stat().st_mode & 0o777 == 0o701  # crossed, never listed
    assert tool.relocate(binary, session / "apptainer") == copy  # once
    # An installation every account reaches (the host's) is run where it is.
    (tmp_path / "home").chmod(0o755)
    assert tool.relocate(binary, tmp_path / "elsewhere") == binary
    assert not (tmp_path / "elsewhere").exists()


def test_an_agent_finds_the_built_apptainer_first_on_its_path() -> None:
    assert kondor.agent_env(None) is None  # not built: the agent's PATH is the cluster's
    added = kondor.agent_env(Path("/state/apptainer/bin"), path="/usr/bin:/bin")
    assert added == {"PATH": "/state/apptainer/bin:/usr/bin:/bin"}
