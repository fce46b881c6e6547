"""The `kondor dev-cluster` command line (kondor_devcluster.cli)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kondor_devcluster import cli


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kondor")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_up_takes_the_documented_options() -> None:
    args = parse(
        "dev-cluster",
        "up",
        "--port",
        "16443",
        "--kubeconfig",
        "k",
        "--state-dir",
        "s",
        "--nodes",
        "a.yaml",
        "b.yaml",
        "--detach",
    )
    assert (args.port, args.kubeconfig, args.state_dir) == (16443, Path("k"), Path("s"))
    assert args.nodes == [Path("a.yaml"), Path("b.yaml")]
    assert args.detach
    assert args.func is cli.up_command


@pytest.mark.parametrize("flag", ["--operator", "--agents"])
def test_operator_and_agents_say_when_they_arrive(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        [
            "dev-cluster",
            "up",
            "--port",
            "1",
            "--kubeconfig",
            str(tmp_path / "k"),
            "--state-dir",
            str(tmp_path),
            flag,
        ]
    )
    assert code == 2
    assert "issue 5" in capsys.readouterr().err


def test_down_without_a_running_cluster_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["dev-cluster", "down", "--state-dir", str(tmp_path)]) == 0
    assert "nothing runs" in capsys.readouterr().out


def test_nodes_may_be_given_in_one_list_or_repeated() -> None:
    args = parse(
        "dev-cluster",
        "up",
        "--port",
        "1",
        "--kubeconfig",
        "k",
        "--state-dir",
        "s",
        "--nodes",
        "a.yaml",
        "b.yaml",
        "--nodes",
        "c.yaml",
    )
    assert args.nodes == [Path("a.yaml"), Path("b.yaml"), Path("c.yaml")]
