"""The Apptainer command line as HTCondor's starter builds it (the reference's "Apptainer
and Singularity Support"): the manual's example, then each knob the section names."""

from __future__ import annotations

from typing import Any

import pytest

from kondor_core.api import SlotPolicySpec
from kondor_core.classads import parse_ad
from kondor_core.config import PolicyError, compile_policy
from kondor_core.jobs.apptainer import (
    ApptainerError,
    ApptainerSettings,
    apptainer_command,
    container_environment,
    job_wants_apptainer,
)

SCRATCH = "/execute/dir_462373"
#: The manual's example: no GPUs, MOUNT_UNDER_SCRATCH at its default, the executable
#: transferred into the scratch directory, its argument 3.
MANUAL = (
    "/usr/bin/singularity -s exec -S /tmp -S /var/tmp --pwd /execute/dir_462373 "
    "-B /execute/dir_462373 --no-home -C /images/debian /execute/dir_462373/demo 3"
)


def command_line(
    knobs: dict[str, str] | None = None,
    *,
    job: str = 'Owner = "alice"\nSingularityImage = "/images/debian"',
    machine: str = 'Name = "slot1_1@ep"\nCpus = 1',
    iwd: str = SCRATCH,
    pid_namespaces: bool = True,
    existing: frozenset[str] = frozenset({"/nfs", "/data"}),
) -> str:
    command = apptainer_command(
        ApptainerSettings.from_macros(knobs or {}),
        program="/usr/bin/singularity",
        machine_ad=parse_ad(machine, field="machine"),
        job_ad=parse_ad(job, field="job"),
        executable=f"{SCRATCH}/demo",
        arguments=["3"],
        iwd=iwd,
        scratch=SCRATCH,
        environment={"_CONDOR_SCRATCH_DIR": SCRATCH},
        pid_namespaces=pid_namespaces,
        is_dir=lambda path: path in existing,
    )
    return " ".join(command.argv)


def test_the_manuals_example_inputs_give_the_manuals_command_line() -> None:
    assert command_line() == MANUAL


def _manual_with(replacement: str, original: str) -> str:
    assert original in MANUAL
    return MANUAL.replace(original, replacement)


CASES: list[tuple[str, dict[str, Any], str]] = [
    (
        "GPUs assigned: --nv",
        {"machine": 'Cpus = 1\nAssignedGPUs = "GPU-0"'},
        _manual_with("-B /execute/dir_462373 --nv", "-B /execute/dir_462373"),
    ),
    (
        "SINGULARITY_TARGET_DIR = /srv maps the scratch directory to /srv",
        {"knobs": {"SINGULARITY_TARGET_DIR": "/srv"}},
        "/usr/bin/singularity -s exec -S /tmp -S /var/tmp --pwd /srv "
        "-B /execute/dir_462373:/srv --no-home -C /images/debian /srv/demo 3",
    ),
    (
        "the job's ContainerTargetDir when the knob is unset",
        {"job": 'SingularityImage = "/images/debian"\nContainerTargetDir = "/work"'},
        "/usr/bin/singularity -s exec -S /tmp -S /var/tmp --pwd /work "
        "-B /execute/dir_462373:/work --no-home -C /images/debian /work/demo 3",
    ),
    (
        'SINGULARITY_EXTRA_ARGUMENTS = "-w"',
        {"knobs": {"SINGULARITY_EXTRA_ARGUMENTS": '"-w"'}},
        _manual_with("-C -w /images/debian", "-C /images/debian"),
    ),
    (
        "SINGULARITY_EXTRA_ARGUMENTS unquoted (not an expression: the raw text)",
        {"knobs": {"SINGULARITY_EXTRA_ARGUMENTS": "--writable-tmpfs --cleanenv"}},
        _manual_with("-C --writable-tmpfs --cleanenv /images", "-C /images"),
    ),
    (
        'SINGULARITY_BIND_EXPR = "/nfs"',
        {"knobs": {"SINGULARITY_BIND_EXPR": '"/nfs"'}},
        _manual_with(
            "-B /execute/dir_462373 -B /nfs --no-home", "-B /execute/dir_462373 --no-home"
        ),
    ),
    (
        "a bind whose source is missing on the host is skipped",
        {"knobs": {"SINGULARITY_BIND_EXPR": '"/nfs /cvmfs,/data:/in:ro"'}},
        _manual_with(
            "-B /execute/dir_462373 -B /nfs -B /data:/in:ro --no-home",
            "-B /execute/dir_462373 --no-home",
        ),
    ),
    (
        "the trusted user's bind expression, for the trusted user",
        {
            "knobs": {
                "SINGULARITY_BIND_EXPR": '(Target.Owner == "TrustedUser") ? '
                'SomeExpressionFromJob : ""'
            },
            "job": 'Owner = "TrustedUser"\nSingularityImage = "/images/debian"\n'
            'SomeExpressionFromJob = "/data"',
        },
        _manual_with(
            "-B /execute/dir_462373 -B /data --no-home", "-B /execute/dir_462373 --no-home"
        ),
    ),
    (
        "the trusted user's bind expression, for another user",
        {
            "knobs": {
                "SINGULARITY_BIND_EXPR": '(Target.Owner == "TrustedUser") ? '
                'SomeExpressionFromJob : ""'
            },
            "job": 'Owner = "alice"\nSingularityImage = "/images/debian"\n'
            'SomeExpressionFromJob = "/data"',
        },
        MANUAL,
    ),
    (
        "the job's SingularityBind by default",
        {"job": 'SingularityImage = "/images/debian"\nSingularityBind = "/nfs"'},
        _manual_with(
            "-B /execute/dir_462373 -B /nfs --no-home", "-B /execute/dir_462373 --no-home"
        ),
    ),
    (
        "MOUNT_UNDER_SCRATCH = /tmp (a list, not an expression)",
        {"knobs": {"MOUNT_UNDER_SCRATCH": "/tmp"}},
        _manual_with("exec -S /tmp --pwd", "exec -S /tmp -S /var/tmp --pwd"),
    ),
    (
        "MOUNT_UNDER_SCRATCH empty: no -S",
        {"knobs": {"MOUNT_UNDER_SCRATCH": ""}},
        _manual_with("exec --pwd", "exec -S /tmp -S /var/tmp --pwd"),
    ),
    (
        "no PID namespaces: --contain --ipc --cleanenv instead of -C",
        {"pid_namespaces": False},
        _manual_with("--no-home --contain --ipc --cleanenv /images", "--no-home -C /images"),
    ),
    (
        "SINGULARITY_MOUNT_HOME = true: no --no-home",
        {"knobs": {"SINGULARITY_MOUNT_HOME": "true"}},
        _manual_with("-B /execute/dir_462373 -C", "-B /execute/dir_462373 --no-home -C"),
    ),
    (
        "SINGULARITY_VERBOSITY = -d",
        {"knobs": {"SINGULARITY_VERBOSITY": "-d"}},
        _manual_with("singularity -d exec", "singularity -s exec"),
    ),
    (
        "an initial directory elsewhere is bound and is the --pwd",
        {"iwd": "/home/alice/run"},
        _manual_with(
            "-B /home/alice/run --pwd /home/alice/run -B /execute/dir_462373 --no-home",
            "--pwd /execute/dir_462373 -B /execute/dir_462373 --no-home",
        ),
    ),
    (
        "SINGULARITY_IMAGE_EXPR over the slot ad",
        {
            "knobs": {"SINGULARITY_IMAGE_EXPR": 'strcat("/images/", MY.OpSysName)'},
            "machine": 'Cpus = 1\nOpSysName = "rocky9"',
        },
        _manual_with("-C /images/rocky9 ", "-C /images/debian "),
    ),
    (
        "the job's ContainerImage when SINGULARITY_IMAGE_EXPR is not a string",
        {"job": 'ContainerImage = "docker://ubuntu:20"'},
        _manual_with("-C docker://ubuntu:20 ", "-C /images/debian "),
    ),
    (
        "a relative image is in the scratch directory (transferred with the job)",
        {"job": 'SingularityImage = "image"'},
        _manual_with("-C /execute/dir_462373/image ", "-C /images/debian "),
    ),
]


@pytest.mark.parametrize(("inputs", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_knob_changes_the_line_as_the_starter_does(
    inputs: dict[str, Any], expected: str
) -> None:
    assert command_line(**inputs) == expected


def test_a_job_with_no_image_cannot_run_saying_why() -> None:
    with pytest.raises(ApptainerError, match="SINGULARITY_IMAGE_EXPR = SingularityImage"):
        command_line(job='Owner = "alice"')


def test_the_image_test_has_the_jobs_options_and_the_image() -> None:
    command = apptainer_command(
        ApptainerSettings.from_macros({"SINGULARITY_EXTRA_ARGUMENTS": '"-w"'}),
        program="/usr/bin/apptainer",
        machine_ad=parse_ad("Cpus = 1", field="m"),
        job_ad=parse_ad('ContainerImage = "/images/debian"', field="j"),
        executable=f"{SCRATCH}/demo",
        arguments=["3"],
        iwd=SCRATCH,
        scratch=SCRATCH,
        environment={},
        pid_namespaces=True,
    )
    assert command.test_argv == [
        "/usr/bin/apptainer", "-s", "-q", "test", "-S", "/tmp", "-S", "/var/tmp",
        "--pwd", SCRATCH, "-B", SCRATCH, "--no-home", "-C", "-w", "/images/debian",
    ]  # fmt: skip


def test_the_environment_crosses_into_the_container_prefixed() -> None:
    env = container_environment(
        {"_CONDOR_SCRATCH_DIR": SCRATCH, "X": "1", "HOME": "/root", "APPTAINER_BIND": "/"},
        scratch=SCRATCH,
        target="",
    )
    assert env == {
        "_CONDOR_SCRATCH_DIR": SCRATCH,
        "X": "1",
        "APPTAINER_CACHEDIR": SCRATCH,
        "APPTAINER_TEMPDIR": SCRATCH,
        "APPTAINERENV__CONDOR_SCRATCH_DIR": SCRATCH,
        "APPTAINERENV_X": "1",
        "APPTAINERENV_APPTAINER_CACHEDIR": SCRATCH,
        "APPTAINERENV_APPTAINER_TEMPDIR": SCRATCH,
    }
    # With a target directory the container sees the target; the host's path is kept aside.
    moved = container_environment(
        {"_CONDOR_SCRATCH_DIR": SCRATCH, "TMPDIR": SCRATCH}, scratch=SCRATCH, target="/srv"
    )
    assert moved["APPTAINERENV__CONDOR_SCRATCH_DIR"] == "/srv"
    assert moved["APPTAINERENV_TMPDIR"] == "/srv"
    assert moved["_CONDOR_SCRATCH_DIR_OUTSIDE_CONTAINER"] == SCRATCH
    assert moved["_CONDOR_SCRATCH_DIR"] == SCRATCH
    # A Singularity that is not Apptainer reads SINGULARITYENV_.
    old = container_environment({"X": "1"}, scratch=SCRATCH, target="", prefix="SINGULARITYENV_")
    assert old["SINGULARITYENV_X"] == "1" and "APPTAINERENV_X" not in old


@pytest.mark.parametrize(
    ("knob", "job", "wanted"),
    [
        (None, 'Owner = "alice"', False),  # HTCondor's default: SINGULARITY_JOB = false
        ("true", 'Owner = "alice"', True),  # the manual: "Forces _all_ jobs"
        ("!isUndefined(TARGET.SingularityImage)", 'SingularityImage = "/cvmfs/x"', True),
        ("!isUndefined(TARGET.SingularityImage)", 'Owner = "alice"', False),
        (None, "WantSIF = true", True),
    ],
)
def test_singularity_job_decides_for_jobs_without_an_image_runtime(
    knob: str | None, job: str, wanted: bool
) -> None:
    settings = ApptainerSettings.from_macros({} if knob is None else {"SINGULARITY_JOB": knob})
    machine = parse_ad("Cpus = 1", field="m")
    assert job_wants_apptainer(settings, machine, parse_ad(job, field="j")) is wanted


def test_defaults_come_from_htcondors_table() -> None:
    settings = ApptainerSettings.from_macros()
    assert (settings.image_expr, settings.verbosity) == ("SingularityImage", "-s")
    assert settings.mount_under_scratch == '"/tmp,/var/tmp"'
    assert (settings.use_pid_namespaces, settings.mount_home, settings.job) == (
        "auto",
        "false",
        "false",
    )
    assert settings.program == ""  # the node's PATH; HTCondor's own is $(LIBEXEC)/apptainer
    assert settings.pid_namespaces(lambda: False) is False  # auto: as the probe says
    assert ApptainerSettings.from_macros({"SINGULARITY_USE_PID_NAMESPACES": "true"}).pid_namespaces(
        lambda: False
    )


def test_the_knobs_are_kept_for_the_agent_without_warnings() -> None:
    snippet = "\n".join(
        [
            "SINGULARITY = /opt/apptainer/bin/apptainer",
            "SINGULARITY_JOB = !isUndefined(TARGET.SingularityImage)",
            "SINGULARITY_IMAGE_EXPR = TARGET.SingularityImage",
            'SINGULARITY_BIND_EXPR = "/nfs"',
            "SINGULARITY_TARGET_DIR = /srv",
            'SINGULARITY_EXTRA_ARGUMENTS = "-w"',
            "MOUNT_UNDER_SCRATCH = /tmp,/var/tmp,/scratch",
        ]
    )
    policy = compile_policy_from(snippet)
    assert not policy.warnings, policy.warnings
    settings = ApptainerSettings.from_macros(policy.macros)
    assert settings.program == "/opt/apptainer/bin/apptainer"
    assert settings.target_dir == "/srv"
    assert settings.mount_under_scratch == "/tmp,/var/tmp,/scratch"
    with pytest.raises(PolicyError, match="SINGULARITY_IMAGE_EXPR"):
        compile_policy_from("SINGULARITY_IMAGE_EXPR = (TARGET.SingularityImage")


def compile_policy_from(snippet: str) -> Any:
    return compile_policy(SlotPolicySpec.model_validate({"condorConfig": snippet}))
