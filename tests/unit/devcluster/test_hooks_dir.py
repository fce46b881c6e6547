"""The dev cluster's hooks directory: the one every agent runs hooks from is the one the
operator's SlotPolicy admission checks, so a symlink out of it is refused at `kubectl apply`
(issue 29: the operator checked `<state>/hooks` while each agent read a directory of its own)."""

from __future__ import annotations

from pathlib import Path

from kondor_devcluster import kondor
from kondor_devcluster.components import Layout


def test_every_agent_reads_the_hooks_directory_the_operator_checks(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    checked = kondor.operator_env(layout, metrics_port=1, webhook_port=2)["KONDOR_HOOKS_DIR"]
    assert checked == str(kondor.hooks_dir(layout)) == str(tmp_path / "hooks")
    for node, machine in (("kwok-small-0", Path("/m/kwok-small.yaml")), ("real", None)):
        args = kondor.agent_args(layout, node, machine, python="py")
        assert args[args.index("--hooks-dir") + 1] == checked, node
