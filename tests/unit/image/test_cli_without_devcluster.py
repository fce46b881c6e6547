"""The image leaves the dev cluster out: `kondor` works there, without `dev-cluster`."""

from __future__ import annotations

from importlib.metadata import EntryPoint
from typing import Any

import pytest

from kondor_cli import main as cli_main


def subcommands(parser: Any) -> set[str]:
    [commands] = [a for a in parser._actions if a.dest == "command"]
    return set(commands.choices)


def test_without_kondor_devcluster_the_cli_offers_its_own_commands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As installed in the image: the entry point is declared, its module is not there.
    missing = EntryPoint("dev-cluster", "kondor_devcluster_not_installed.cli:register", "x")
    monkeypatch.setattr(cli_main, "entry_points", lambda group: [missing])
    commands = subcommands(cli_main.build_parser())
    assert "dev-cluster" not in commands
    assert {"simulate", "policy", "status", "q"} <= commands


def test_with_the_dev_cluster_installed_its_command_is_offered() -> None:
    assert "dev-cluster" in subcommands(cli_main.build_parser())
