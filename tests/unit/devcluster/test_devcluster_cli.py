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


def test_operator_and_agents_flags_reach_the_cluster_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[object] = []

    def fake_start(self: object) -> None:
        seen.append(self)
        raise cli.DevClusterError("stop here")

    monkeypatch.setattr(cli.DevCluster, "start", fake_start)
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
            "--operator",
            "--agents",
        ]
    )
    assert code == 1
    spec = seen[0].spec  # type: ignore[attr-defined]
    assert (spec.operator, spec.agents) == (True, True)


def test_agent_command_line_runs_the_node_on_its_machine_file(tmp_path: Path) -> None:
    from kondor_devcluster import kondor
    from kondor_devcluster.components import Layout

    layout = Layout(tmp_path)
    args = kondor.agent_args(layout, "kwok-small-0", Path("/m/kwok-small.yaml"), python="py")
    assert args[:3] == ["py", "-m", "kondor_agent.main"]
    assert args[args.index("--node-name") + 1] == "kwok-small-0"
    assert args[args.index("--machine") + 1] == "/m/kwok-small.yaml"
    # Its own identity (the agent ServiceAccount, bound to its node), not the operator's admin.
    kubeconfig = args[args.index("--kubeconfig") + 1]
    assert kubeconfig == str(kondor.agent_kubeconfig(layout, "kwok-small-0"))
    assert kubeconfig != str(kondor.kondor_kubeconfig(layout))
    assert args[args.index("--state-dir") + 1] == str(tmp_path / "agents" / "kwok-small-0")
    assert kondor.operator_args(layout, "py") == [
        "py",
        "-m",
        "kondor_operator.main",
        "--kubeconfig",
        str(kondor.kondor_kubeconfig(layout)),
    ]


def test_two_clusters_agents_for_one_node_name_get_cgroup_roots_of_their_own(
    tmp_path: Path,
) -> None:
    """pytest -n runs clusters side by side, with the same machine files: a node name alone
    would put their jobs in one cgroup (relative roots sit in the shared parent's cgroup)."""
    from kondor_devcluster import kondor
    from kondor_devcluster.components import Layout

    def root(state: Path) -> str:
        args = kondor.agent_args(Layout(state), "kwok-small-0", None, python="py")
        return args[args.index("--cgroup-root") + 1]

    first, second = root(tmp_path / "a"), root(tmp_path / "b")
    assert first.startswith("kondor-kwok-small-0-") and second.startswith("kondor-kwok-small-0-")
    assert first != second
    assert "/" not in first  # relative: inside the agent's own cgroup
    assert root(tmp_path / "a") == first  # a restart on the same state dir finds its jobs


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
