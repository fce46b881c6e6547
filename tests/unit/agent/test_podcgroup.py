"""Finding a pod's cgroup from its UID and QoS class, and freezing it
(kondor_agent.runtimes.pod_cgroup).

The trees are laid out as the kubelet makes them: cgroupfs and systemd drivers, v1 (one tree per
controller) and v2 (one tree); the cgroupfs v1 one is as the dev cluster's real node makes it.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from kondor_agent.runtimes import pod_cgroup

UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
UNIT = UID.replace("-", "_")


@pytest.mark.parametrize(
    ("qos", "cgroupfs", "systemd"),
    [
        (
            "Guaranteed",
            f"kubepods/pod{UID}",
            f"kubepods.slice/kubepods-pod{UNIT}.slice",
        ),
        (
            "Burstable",
            f"kubepods/burstable/pod{UID}",
            f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UNIT}.slice",
        ),
        (
            "BestEffort",
            f"kubepods/besteffort/pod{UID}",
            f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UNIT}.slice",
        ),
    ],
)
def test_the_kubelets_names_for_each_qos_class(qos: str, cgroupfs: str, systemd: str) -> None:
    assert pod_cgroup.pod_cgroup_paths(UID, qos) == (
        PurePosixPath(cgroupfs),
        PurePosixPath(systemd),
    )


def test_an_unknown_qos_class_is_refused_naming_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="Guaranteed, Burstable, BestEffort"):
        pod_cgroup.pod_cgroup_paths(UID, "Gold")


def _v1_tree(root: Path, relative: str) -> None:
    for controller in ("memory", "cpu,cpuacct", "freezer", "pids"):
        directory = root / controller / relative
        directory.mkdir(parents=True)
        (directory / "cgroup.procs").write_text("")
    (root / "freezer" / relative / "freezer.state").write_text("THAWED\n")


def _v2_tree(root: Path, relative: str) -> None:
    directory = root / relative
    directory.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    (directory / "cgroup.freeze").write_text("0\n")
    (directory / "cgroup.events").write_text("populated 1\nfrozen 0\n")


@pytest.mark.parametrize("driver", [0, 1], ids=["cgroupfs", "systemd"])
@pytest.mark.parametrize("qos", pod_cgroup.QOS_CLASSES)
def test_v1_trees_give_one_directory_per_controller_and_the_freezer(
    tmp_path: Path, driver: int, qos: str
) -> None:
    relative = str(pod_cgroup.pod_cgroup_paths(UID, qos)[driver])
    _v1_tree(tmp_path, relative)
    found = pod_cgroup.find_pod_cgroups(UID, qos, tmp_path)
    assert sorted(found) == sorted(
        tmp_path / c / relative for c in ("memory", "cpu,cpuacct", "freezer", "pids")
    )
    directory = pod_cgroup.freezer(UID, qos, tmp_path)
    assert directory == tmp_path / "freezer" / relative
    pod_cgroup.set_frozen(directory, True)
    assert pod_cgroup.is_frozen(directory)
    pod_cgroup.set_frozen(directory, False)
    assert (directory / "freezer.state").read_text() == "THAWED"


@pytest.mark.parametrize("driver", [0, 1], ids=["cgroupfs", "systemd"])
@pytest.mark.parametrize("qos", pod_cgroup.QOS_CLASSES)
def test_v2_trees_give_the_one_directory_and_cgroup_freeze(
    tmp_path: Path, driver: int, qos: str
) -> None:
    relative = str(pod_cgroup.pod_cgroup_paths(UID, qos)[driver])
    _v2_tree(tmp_path, relative)
    assert pod_cgroup.find_pod_cgroups(UID, qos, tmp_path) == [tmp_path / relative]
    directory = pod_cgroup.freezer(UID, qos, tmp_path)
    assert directory == tmp_path / relative
    pod_cgroup.set_frozen(directory, True)
    assert (directory / "cgroup.freeze").read_text() == "1"
    assert not pod_cgroup.is_frozen(directory)  # the kernel has not said so yet
    (directory / "cgroup.events").write_text("populated 1\nfrozen 1\n")
    assert pod_cgroup.is_frozen(directory)


def test_another_pods_cgroup_is_not_found(tmp_path: Path) -> None:
    _v1_tree(tmp_path, "kubepods/besteffort/podother")
    assert pod_cgroup.find_pod_cgroups(UID, "BestEffort", tmp_path) == []
    assert pod_cgroup.freezer(UID, "BestEffort", tmp_path) is None
