"""Detection over recorded hosts: never more than the hardware, the cgroup or the kubelet allow."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kondor_agent.detect import (
    DetectionError,
    FakeNvml,
    HostFS,
    detect,
    detect_machine,
    render_machine,
)
from kondor_core.api import Machine, validate

GiB = 1 << 30
NO_GPUS = {"nvmlInit": {"error": "NVML_ERROR_LIBRARY_NOT_FOUND"}}


def run(host: HostFS, statvfs: Any, runner: Any, **kwargs: Any) -> Machine:
    kwargs.setdefault("node_name", "node-a")
    kwargs.setdefault("execute_dir", "/var/lib/kondor/execute")
    kwargs.setdefault("nvml", FakeNvml(NO_GPUS))
    return detect_machine(host, statvfs=statvfs, runner=runner, **kwargs)


@pytest.mark.parametrize(
    ("tree", "allocatable", "reserved", "cpus", "memory_mib"),
    [
        # No limits anywhere: the hardware, and the kubelet's memory limit on kubepods.
        ("v2-debian12", {}, {}, 16, (65844048 * 1024 - GiB) // 2**20),
        # The kubepods quota (4 cores) and memory.max (8 GiB) bound a 16-core, 31 GiB host.
        ("v2-limited-ubuntu2204-arm64", {}, {}, 4, 8192),
        ("v1-rhel9", {}, {}, 32, 131621112 // 1024),
        ("v1-limited-rocky9", {}, {}, 6, 12288),
        ("hybrid-debian12", {}, {}, 8, 32779780 // 1024),
        # Allocatable lower than the host: the kubelet's answer wins, cores rounded down.
        ("v2-debian12", {"cpu": "15900m", "memory": "60Gi"}, {}, 15, 61440),
        ("v1-rhel9", {"cpu": "31", "memory": "120Gi"}, {}, 31, 122880),
        ("hybrid-debian12", {"cpu": "7500m", "memory": "28Gi"}, {}, 7, 28672),
        # Allocatable higher than a cgroup limit does not lift the limit.
        ("v2-limited-ubuntu2204-arm64", {"cpu": "16", "memory": "30Gi"}, {}, 4, 8192),
        # Reserved comes off the smallest bound, before rounding down.
        ("v2-debian12", {"cpu": "15900m", "memory": "60Gi"}, {"cpu": "500m"}, 15, 61440),
        ("v2-debian12", {"cpu": "15900m"}, {"cpu": "1", "memory": "2Gi"}, 14, None),
        ("v1-limited-rocky9", {}, {"memory": "512Mi", "cpu": 2}, 4, 11776),
    ],
)
def test_cpus_and_memory_are_the_smallest_bound(
    recorded: Callable[[str], HostFS],
    *,
    roomy_disk: Any,
    no_apptainer: Any,
    tree: str,
    allocatable: dict[str, str],
    reserved: dict[str, str],
    cpus: int,
    memory_mib: int | None,
) -> None:
    machine = run(
        recorded(tree), roomy_disk, no_apptainer, allocatable=allocatable, reserved=reserved
    )
    assert machine.cpus == cpus
    if memory_mib is not None:
        assert machine.memory_mib == memory_mib


def test_explicit_cgroup_bounds_with_its_own_and_its_parents_limits(
    recorded: Callable[[str], HostFS], roomy_disk: Any, no_apptainer: Any
) -> None:
    machine = run(
        recorded("v2-limited-ubuntu2204-arm64"),
        roomy_disk,
        no_apptainer,
        cgroup="/kubepods.slice/kubepods-burstable.slice",
    )
    assert machine.cpus == 2  # 2.5 cores of quota, whole cores only
    assert machine.memory_mib == 8192


def test_disk_is_free_space_of_the_execute_dir_within_allocatable(
    recorded: Callable[[str], HostFS], statvfs_of: Any, no_apptainer: Any
) -> None:
    seen: list[str] = []
    statvfs = statvfs_of(200 * GiB)

    def measured(path: str) -> Any:
        seen.append(path)
        return statvfs(path)

    host = recorded("v2-debian12")
    machine = run(host, measured, no_apptainer, execute_dir=Path("/scratch/kondor"))
    assert seen == ["/scratch/kondor"]  # the agent's own path, not one under the host root
    assert machine.disk_kib == 200 * 1024 * 1024
    machine = run(host, statvfs, no_apptainer, allocatable={"ephemeral-storage": "100Gi"})
    assert machine.disk_kib == 100 * 1024 * 1024
    machine = run(
        host,
        statvfs,
        no_apptainer,
        allocatable={"ephemeral-storage": "100Gi"},
        reserved={"ephemeral-storage": "10Gi"},
    )
    assert machine.disk_kib == 90 * 1024 * 1024


def test_swap_is_swaptotal(
    recorded: Callable[[str], HostFS], roomy_disk: Any, no_apptainer: Any
) -> None:
    assert run(recorded("v1-rhel9"), roomy_disk, no_apptainer).swap_mib == 8388604 // 1024
    assert run(recorded("v2-debian12"), roomy_disk, no_apptainer).swap_mib == 0


@pytest.mark.parametrize(
    ("tree", "expected"),
    [
        (
            "v2-debian12",
            {
                "OpSys": "LINUX",
                "OpSysName": "Debian",
                "OpSysShortName": "Debian",
                "OpSysLongName": "Debian GNU/Linux 12",
                "OpSysMajorVer": 12,
                "OpSysVer": 1200,
                "OpSysAndVer": "Debian12",
                "OpSysLegacy": "LINUX",
                "Arch": "X86_64",
                "UtsnameMachine": "x86_64",
                "UtsnameSysname": "Linux",
                "UtsnameRelease": "6.1.0-18-amd64",
            },
        ),
        (
            "v2-limited-ubuntu2204-arm64",
            {
                "OpSysName": "Ubuntu",
                "OpSysLongName": "Ubuntu 22.04.4 LTS",
                "OpSysMajorVer": 22,
                "OpSysVer": 2204,
                "OpSysAndVer": "Ubuntu22",
                # HTCondor has no name for ARM and passes uname -m through.
                "Arch": "aarch64",
                "UtsnameRelease": "5.15.0-1058-aws",
            },
        ),
        (
            "v1-rhel9",
            {
                # /etc/issue is "\S": HTCondor goes on to /etc/redhat-release.
                "OpSysName": "RedHat",
                "OpSysLongName": "Red Hat Enterprise Linux release 9.4 (Plow)",
                "OpSysMajorVer": 9,
                "OpSysVer": 904,
                "OpSysAndVer": "RedHat9",
                "UtsnameRelease": "5.14.0-427.13.1.el9_4.x86_64",
            },
        ),
        (
            "v1-limited-rocky9",
            {
                "OpSysName": "Rocky",
                "OpSysLongName": "Rocky Linux release 9.4 (Blue Onyx)",
                "OpSysAndVer": "Rocky9",
                "OpSysVer": 904,
            },
        ),
    ],
)
def test_os_attributes_as_htcondor_names_them(
    recorded: Callable[[str], HostFS],
    *,
    roomy_disk: Any,
    no_apptainer: Any,
    tree: str,
    expected: dict[str, Any],
) -> None:
    attributes = run(recorded(tree), roomy_disk, no_apptainer).attributes
    assert {key: attributes.get(key) for key in expected} == expected


@pytest.mark.parametrize(
    ("files", "long_name", "and_ver"),
    [
        # A minimal host with only os-release: its PRETTY_NAME.
        ({"etc/os-release": 'ID=debian\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n'},
         "Debian GNU/Linux 12 (bookworm)", "Debian12"),
        ({"usr/lib/os-release": 'PRETTY_NAME="Rocky Linux 9.4 (Blue Onyx)"\n'},
         "Rocky Linux 9.4 (Blue Onyx)", "Rocky9"),
        # A distribution HTCondor does not know: LINUX and the first number.
        ({"etc/os-release": 'PRETTY_NAME="Talos (v1.7.4)"\n'}, "Talos (v1.7.4)", "LINUX1"),
        # A customised /etc/issue banner that names no distribution falls through.
        ({"etc/issue": "Authorised access only\n",
          "etc/os-release": 'PRETTY_NAME="Ubuntu 24.04 LTS"\n'}, "Ubuntu 24.04 LTS", "Ubuntu24"),
        ({}, "Unknown", "LINUX0"),
    ],
)  # fmt: skip
def test_os_release_fallbacks(
    tmp_path: Path,
    *,
    roomy_disk: Any,
    no_apptainer: Any,
    files: dict[str, str],
    long_name: str,
    and_ver: str,
) -> None:
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/arch").write_text("x86_64\n")
    (tmp_path / "sys/devices/system/cpu").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/online").write_text("0-3\n")
    (tmp_path / "proc/meminfo").write_text("MemTotal:        8000000 kB\nSwapTotal: 0 kB\n")
    attributes = run(HostFS(tmp_path), roomy_disk, no_apptainer).attributes
    assert attributes["OpSysLongName"] == long_name
    assert attributes["OpSysAndVer"] == and_ver


def test_node_labels_become_attributes_and_stay_labels(
    recorded: Callable[[str], HostFS], roomy_disk: Any, no_apptainer: Any
) -> None:
    labels = {
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "p4d.24xlarge",
        "kondor.io/pool": "gpu",
        "kondor.io/desktop": "true",
    }
    machine = run(recorded("v2-debian12"), roomy_disk, no_apptainer, labels=labels)
    assert machine.labels == labels
    assert machine.attributes["K8sLabel_kubernetes_io_arch"] == "amd64"
    assert machine.attributes["K8sLabel_node_kubernetes_io_instance_type"] == "p4d.24xlarge"
    assert machine.attributes["K8sLabel_kondor_io_pool"] == "gpu"
    assert machine.attributes["K8sLabel_kondor_io_desktop"] == "true"  # a string, as in Kubernetes


def test_labels_that_make_the_same_attribute_are_reported(
    recorded: Callable[[str], HostFS], roomy_disk: Any, no_apptainer: Any
) -> None:
    detected = detect(
        recorded("v2-debian12"),
        node_name="n",
        labels={"example.com/a-b": "1", "example.com/a.b": "2", "Example.com/A_B": "3"},
        execute_dir="/x",
        nvml=FakeNvml(NO_GPUS),
        runner=no_apptainer,
        statvfs=roomy_disk,
    )
    # ClassAd names are case-insensitive: one attribute, the first key in sorted order.
    label_attrs = {k: v for k, v in detected.machine.attributes.items() if k.startswith("K8s")}
    assert label_attrs == {"K8sLabel_Example_com_A_B": "3"}
    assert sum("is not advertised" in note for note in detected.notes) == 2


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        ({}, {}),
        (
            {"apptainer": (0, "apptainer version 1.3.4-1.el9\n", "")},
            {"HasSingularity": True, "SingularityVersion": "apptainer version 1.3.4-1.el9"},
        ),
        (
            {"singularity": (0, "singularity-ce version 4.1.3-jammy\n", "")},
            {"HasSingularity": True, "SingularityVersion": "singularity-ce version 4.1.3-jammy"},
        ),
        (
            {"apptainer": (0, "1.2.5\n", "")},
            {"HasSingularity": True, "SingularityVersion": "apptainer version 1.2.5"},
        ),
        (
            {"apptainer": (255, "", "FATAL: could not open configuration file\n")},
            {
                "HasSingularity": False,
                "SingularityOfflineReason": "apptainer --version failed: "
                "FATAL: could not open configuration file",
            },
        ),
    ],
)
def test_apptainer_as_the_starter_advertises_it(
    recorded: Callable[[str], HostFS],
    *,
    roomy_disk: Any,
    runner_of: Any,
    answers: dict[str, tuple[int, str, str]],
    expected: dict[str, Any],
) -> None:
    from kondor_agent.detect import RunResult

    runner = runner_of({name: RunResult(*answer) for name, answer in answers.items()})
    attributes = run(recorded("v2-debian12"), roomy_disk, runner).attributes
    found = {key: value for key, value in attributes.items() if "Singularity" in key}
    assert found == expected


def test_gpus_come_from_nvml(
    recorded: Callable[[str], HostFS], roomy_disk: Any, no_apptainer: Any, nvml: Any
) -> None:
    machine = run(recorded("v2-debian12"), roomy_disk, no_apptainer, nvml=nvml("h100x2"))
    assert [gpu.id for gpu in machine.gpus] == ["GPU-3f1a6c2e", "GPU-b82d0c47"]


def test_the_printed_machine_file_reads_back_as_the_same_machine(
    recorded: Callable[[str], HostFS], roomy_disk: Any, no_apptainer: Any, nvml: Any
) -> None:
    detected = detect(
        recorded("v2-debian12"),
        node_name="gpu-0",
        labels={"kondor.io/pool": "gpu"},
        allocatable={"cpu": "15900m", "memory": "60Gi"},
        execute_dir="/x",
        nvml=nvml("a100x4-one-mig"),
        runner=no_apptainer,
        statvfs=roomy_disk,
    )
    text = render_machine(detected)
    assert text.startswith("# Detected by `kondor-agent detect` on gpu-0.\n")
    assert "# cpus 15: smallest of online 16, cpuset 16, quota none, allocatable 15.9 <" in text
    data = yaml.safe_load(text)
    assert list(data) == ["name", "cpus", "memory", "disk", "gpus", "labels", "attributes"]
    assert data["memory"] == "60Gi"
    assert validate(Machine, data, what="detect output") == detected.machine


def test_detection_runs_on_this_machine(tmp_path: Path) -> None:
    """For real, against HostFS("/"): only sane things can be asserted."""
    machine = detect_machine(
        HostFS(Path("/")), node_name="this-host", execute_dir=tmp_path, runner=lambda argv: None
    )
    assert machine.cpus >= 1
    assert machine.memory_mib > 0
    assert machine.disk_kib > 0
    assert machine.attributes["OpSys"] == "LINUX"
    assert isinstance(machine.attributes["Arch"], str) and machine.attributes["Arch"]
    # No libnvidia-ml here means no GPUs and no error; with one, ids follow HTCondor's form.
    assert all(gpu.id.startswith(("GPU-", "MIG-")) for gpu in machine.gpus)


@pytest.mark.parametrize(
    ("change", "kwargs", "message"),
    [
        (lambda root: (root / "proc/meminfo").unlink(), {}, "/proc/meminfo: missing"),
        (
            lambda root: (root / "proc/meminfo").write_text("MemFree: 1 kB\n"),
            {},
            "no MemTotal",
        ),
        (
            lambda root: (root / "proc/meminfo").write_text("MemTotal: lots kB\n"),
            {},
            "'MemTotal: lots kB' has no number",
        ),
        (
            lambda root: (root / "sys/fs/cgroup/kubepods.slice/cpu.max").write_text("x y\n"),
            {},
            "/sys/fs/cgroup/kubepods.slice/cpu.max: 'x' is not a quota",
        ),
        (None, {"allocatable": {"cpu": "lots"}}, "allocatable.cpu: 'lots' is not a quantity"),
        (None, {"reserved": {"gpus": "1"}}, "reserved: gpus cannot be reserved"),
        (None, {"allocatable": {"cpu": "500m"}}, "cpus: no whole core is left"),
        (None, {"reserved": {"cpu": "16"}}, "cpus: no whole core is left"),
        (None, {"node_name": ""}, "name"),
        (None, {"cgroup": "/kubepods.slice/typo"}, "cgroup /kubepods.slice/typo: no such cgroup"),
    ],
)
def test_bad_input_is_a_clear_error(
    host_tree: Callable[[str], Path],
    *,
    roomy_disk: Any,
    no_apptainer: Any,
    change: Callable[[Path], object] | None,
    kwargs: dict[str, Any],
    message: str,
) -> None:
    root = host_tree("v2-debian12")
    if change is not None:
        change(root)
    with pytest.raises(DetectionError, match=message):
        run(HostFS(root), roomy_disk, no_apptainer, **kwargs)


def test_an_execute_dir_that_cannot_be_measured_is_a_clear_error(
    recorded: Callable[[str], HostFS], no_apptainer: Any, tmp_path: Path
) -> None:
    with pytest.raises(DetectionError, match=r"execute directory .*/missing: cannot measure"):
        detect_machine(
            recorded("v2-debian12"),
            node_name="n",
            execute_dir=tmp_path / "missing",
            nvml=FakeNvml(NO_GPUS),
            runner=no_apptainer,
        )
