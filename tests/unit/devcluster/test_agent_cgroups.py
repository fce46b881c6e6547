"""A dev cluster leaves nothing in the host's cgroup trees: at `stop` the cgroup roots its
agents made (`kondor-<node>-<cluster>`, with the supervisors', slots' and jobs' cgroups in
every hierarchy) are removed; one still holding a process stays, and is named."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kondor_agent.execute.cgroups import CgroupError, JobCgroups
from kondor_devcluster import kondor
from kondor_devcluster.components import Layout


def _open(layout: Layout, node: str) -> JobCgroups:
    if os.geteuid() != 0:
        pytest.skip("cgroups can be created only as root here")
    try:
        cgroups = JobCgroups.open(root=kondor.agent_cgroup_root(layout, node))
    except (CgroupError, OSError) as err:
        pytest.skip(f"cgroups are not writable here: {err}")
    if not cgroups.enabled:
        pytest.skip("no cgroup hierarchy is mounted")
    return cgroups


def _roots(cgroups: JobCgroups) -> list[Path]:
    return [p for p in cgroups.procs_files("") if p.parent.is_dir()]


def test_the_agents_cgroup_roots_go_with_the_cluster(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    made = {node: _open(layout, node) for node in ("kwok-a", "kwok-b")}
    for cgroups in made.values():
        cgroups.create(JobCgroups.job_cgroup("slot1_1", "default.job.1"))
    assert all(_roots(c) for c in made.values())

    assert kondor.remove_agent_cgroups(layout, made) == []

    assert [r for c in made.values() for r in _roots(c)] == []


def test_a_cgroup_still_holding_a_process_stays_and_is_named(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    cgroups = _open(layout, "kwok-busy")
    job = JobCgroups.job_cgroup("slot1_1", "default.job.1")
    cgroups.create(job)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        cgroups.add(job, sleeper.pid)
        [left] = kondor.remove_agent_cgroups(layout, ["kwok-busy"])
        assert left.startswith("kwok-busy: ")
        assert cgroups.exists(job)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert kondor.remove_agent_cgroups(layout, ["kwok-busy"]) == []
    assert not cgroups.exists(job)
