"""The `apptainer exec` command line of a job, as HTCondor's starter builds it.

The reference's "Apptainer and Singularity Support" is the specification: the
image (SINGULARITY_IMAGE_EXPR, else the job's ContainerImage) and the extra bind
mounts (SINGULARITY_BIND_EXPR) are ClassAd expressions evaluated with the slot
ad as MY and the job ad as TARGET; `-S` for each directory of MOUNT_UNDER_SCRATCH;
`--pwd` and `-B` of the scratch directory (mapped to SINGULARITY_TARGET_DIR, or the
job's ContainerTargetDir, when one is set); `--nv` when the slot has GPUs assigned;
`--no-home` unless SINGULARITY_MOUNT_HOME; `-C` when PID namespaces can be used,
else `--contain --ipc --cleanenv`; SINGULARITY_EXTRA_ARGUMENTS; then the image, the
executable and its arguments. The job's environment reaches the container as
`APPTAINERENV_<name>` (`SINGULARITYENV_` for a Singularity that is not Apptainer).

For the manual's example inputs the line is the manual's example:
`singularity -s exec -S /tmp -S /var/tmp --pwd /execute/dir_462373 -B /execute/dir_462373
--no-home -C /images/debian /execute/dir_462373/demo 3`. (HTCondor 25's starter also
adds `-W <scratch>`, which the manual's example predates; Kondor follows the manual.)

Everything here is pure: the host is reached only through the `is_dir` predicate the
caller passes (HTCondor skips a bind whose source is missing).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kondor_core.classads import evaluate, is_error, is_undefined, match_scope
from kondor_core.config.templates import BUILTIN_MACROS
from kondor_core.errors import KondorError

#: The knobs, with HTCondor's names; their defaults come from `BUILTIN_MACROS`.
SINGULARITY = "SINGULARITY"
JOB_KNOB = "SINGULARITY_JOB"
IMAGE_EXPR = "SINGULARITY_IMAGE_EXPR"
BIND_EXPR = "SINGULARITY_BIND_EXPR"
TARGET_DIR = "SINGULARITY_TARGET_DIR"
EXTRA_ARGUMENTS = "SINGULARITY_EXTRA_ARGUMENTS"
VERBOSITY = "SINGULARITY_VERBOSITY"
MOUNT_HOME = "SINGULARITY_MOUNT_HOME"
USE_PID_NAMESPACES = "SINGULARITY_USE_PID_NAMESPACES"
RUN_TEST_BEFORE_JOB = "SINGULARITY_RUN_TEST_BEFORE_JOB"
IGNORE_MISSING_BIND_TARGET = "SINGULARITY_IGNORE_MISSING_BIND_TARGET"
MOUNT_UNDER_SCRATCH = "MOUNT_UNDER_SCRATCH"
KNOBS = (
    SINGULARITY,
    JOB_KNOB,
    IMAGE_EXPR,
    BIND_EXPR,
    TARGET_DIR,
    EXTRA_ARGUMENTS,
    VERBOSITY,
    MOUNT_HOME,
    USE_PID_NAMESPACES,
    RUN_TEST_BEFORE_JOB,
    IGNORE_MISSING_BIND_TARGET,
    MOUNT_UNDER_SCRATCH,
)
#: The knobs whose value is a ClassAd expression (checked when the policy compiles).
EXPRESSION_KNOBS = (JOB_KNOB, IMAGE_EXPR, BIND_EXPR)

#: The starter's defaults for knobs its param table does not list (it passes them inline).
_INLINE_DEFAULTS: Mapping[str, str] = {
    BIND_EXPR: "SingularityBind",
    TARGET_DIR: "",
    EXTRA_ARGUMENTS: "",
    RUN_TEST_BEFORE_JOB: "true",
    IGNORE_MISSING_BIND_TARGET: "false",
}

#: With GPUs assigned, the host's OpenCL drivers are bound too, where it has them.
OPENCL_VENDORS = "/etc/OpenCL/vendors"
#: Variables the runtime refuses or that would change its binds: never passed on.
_DROPPED_ENVIRONMENT = frozenset(
    {"HOME", "APPTAINER_BIND", "APPTAINER_BINDDIR", "SINGULARITY_BIND", "SINGULARITY_BINDDIR"}
)
_LIST_SEPARATORS = re.compile(r"[\s,]+")
_BUILTIN_UPPER = {name.upper(): value for name, value in BUILTIN_MACROS.items()}


class ApptainerError(KondorError):
    """The job cannot be run in Apptainer as configured (no image, a bad knob)."""


def _boolean(text: str) -> bool | None:
    """HTCondor's boolean knob words; None when `text` is not one (`auto`, an expression)."""
    word = text.strip().lower()
    if word in ("true", "yes", "t", "y", "1"):
        return True
    if word in ("false", "no", "f", "n", "0"):
        return False
    return None


@dataclass(frozen=True)
class ApptainerSettings:
    """The SINGULARITY knobs as a SlotPolicy snippet sets them (text, unevaluated).

    A knob the snippet leaves unset has HTCondor's default (`BUILTIN_MACROS`, the one
    table of defaults), but for SINGULARITY: HTCondor's is its own bundled
    `$(LIBEXEC)/apptainer`, which a Kondor node does not have, so unset it is "" and the
    agent runs the `apptainer` (else `singularity`) its PATH finds, as detection does.
    """

    program: str
    job: str
    image_expr: str
    bind_expr: str
    target_dir: str
    extra_arguments: str
    verbosity: str
    mount_home: str
    use_pid_namespaces: str
    run_test_before_job: str
    ignore_missing_bind_target: str
    mount_under_scratch: str

    @classmethod
    def from_macros(cls, macros: Mapping[str, str] = {}) -> ApptainerSettings:
        upper = {name.upper(): value for name, value in macros.items()}

        def knob(name: str) -> str:
            value = upper.get(name, _BUILTIN_UPPER.get(name, _INLINE_DEFAULTS.get(name, "")))
            return value.strip()

        return cls(
            program=upper.get(SINGULARITY, "").strip(),
            job=knob(JOB_KNOB),
            image_expr=knob(IMAGE_EXPR),
            bind_expr=knob(BIND_EXPR),
            target_dir=knob(TARGET_DIR),
            extra_arguments=knob(EXTRA_ARGUMENTS),
            verbosity=knob(VERBOSITY),
            mount_home=knob(MOUNT_HOME),
            use_pid_namespaces=knob(USE_PID_NAMESPACES),
            run_test_before_job=knob(RUN_TEST_BEFORE_JOB),
            ignore_missing_bind_target=knob(IGNORE_MISSING_BIND_TARGET),
            mount_under_scratch=knob(MOUNT_UNDER_SCRATCH),
        )

    def pid_namespaces(self, works: Callable[[], bool]) -> bool:
        """Whether to pass `-C`: SINGULARITY_USE_PID_NAMESPACES when it is true or false;
        `auto` (the default) asks `works`, whether PID namespaces work on this node."""
        explicit = _boolean(self.use_pid_namespaces)
        return works() if explicit is None else explicit

    @property
    def test_before_job(self) -> bool:
        """SINGULARITY_RUN_TEST_BEFORE_JOB (default true)."""
        return _boolean(self.run_test_before_job) is not False


def _scope(machine_ad: Any, job_ad: Any) -> Any:
    return match_scope(machine_ad, job_ad)


def _eval_string(text: str, machine_ad: Any, job_ad: Any | None, *, knob: str) -> str | None:
    """`param_eval_string`: the knob's expression with the slot ad as MY and the job ad as
    TARGET (MY alone without a job ad); None unless it is a string."""
    if not text:
        return None
    try:
        if job_ad is None:
            value = evaluate(text, my=machine_ad, field=knob)
        else:
            value = evaluate(text, my=_scope(machine_ad, job_ad), target=job_ad, field=knob)
    except KondorError:
        return None
    return value if isinstance(value, str) else None


def _eval_boolean(text: str, machine_ad: Any, job_ad: Any, *, knob: str) -> bool:
    """`param_boolean` over the ads: a boolean word, else the expression's value; false when
    it is neither true nor false (undefined, an error)."""
    word = _boolean(text)
    if word is not None:
        return word
    if not text:
        return False
    try:
        value = evaluate(text, my=_scope(machine_ad, job_ad), target=job_ad, field=knob)
    except KondorError:
        return False
    if is_undefined(value) or is_error(value):
        return False
    return bool(value) if isinstance(value, bool | int | float) else False


def job_wants_apptainer(settings: ApptainerSettings, machine_ad: Any, job_ad: Any) -> bool:
    """Whether a job without an Apptainer runtime runs in Apptainer all the same: the job
    asks for an image (WantSIF, WantSandboxImage, WantDockerImage) or SINGULARITY_JOB is true
    over the slot and job ads (the manual's "Forces _all_ jobs to run inside singularity")."""
    for attribute in ("WantSIF", "WantSandboxImage", "WantDockerImage"):
        if job_ad.get(attribute) is True:
            return True
    return _eval_boolean(settings.job, machine_ad, job_ad, knob=JOB_KNOB)


def _split_list(text: str) -> list[str]:
    """HTCondor's StringList: items separated by commas and white space."""
    return [item for item in _LIST_SEPARATORS.split(text) if item]


@dataclass(frozen=True)
class ApptainerCommand:
    """What the starter runs: `argv` (the program first), the environment it runs in,
    the image, and the `apptainer test` line run before the job."""

    argv: list[str]
    environment: dict[str, str]
    image: str
    test_argv: list[str]


def apptainer_command(
    settings: ApptainerSettings,
    *,
    program: str,
    machine_ad: Any,
    job_ad: Any,
    executable: str,
    arguments: list[str],
    iwd: str,
    scratch: str,
    environment: Mapping[str, str],
    pid_namespaces: bool,
    is_dir: Callable[[str], bool] = lambda _path: True,
) -> ApptainerCommand:
    """The command line and environment of a job run with `program` (the SINGULARITY found).

    `executable` is the job's executable as the host sees it (in the scratch directory
    when transferred), `iwd` its initial directory, `scratch` the job's scratch directory
    (HTCondor's execute dir), `environment` the job's environment with the starter's
    variables; `machine_ad` and `job_ad` are classad2 ads. A relative image is in the
    scratch directory. ApptainerError when no image can be determined.
    """
    image = _image(settings, machine_ad, job_ad, scratch)
    target = settings.target_dir
    if not target:
        chosen = job_ad.get("ContainerTargetDir")
        target = chosen if isinstance(chosen, str) else ""
    if target and executable.startswith(scratch):
        executable = target.rstrip("/") + "/" + executable[len(scratch) :].lstrip("/")

    argv = [program]
    if settings.verbosity:
        argv.append(settings.verbosity)
    verb_at = len(argv)
    argv.append("exec")
    argv += _directory_options(settings, job_ad, iwd=iwd, scratch=scratch, target=target)
    argv += _device_and_bind_options(settings, machine_ad, job_ad, image, is_dir)
    if not _eval_boolean(settings.mount_home, machine_ad, job_ad, knob=MOUNT_HOME):
        argv.append("--no-home")
    argv += ["-C"] if pid_namespaces else ["--contain", "--ipc", "--cleanenv"]

    extra = _eval_string(settings.extra_arguments, machine_ad, job_ad, knob=EXTRA_ARGUMENTS)
    argv += (settings.extra_arguments if extra is None else extra).split()
    options = argv[verb_at + 1 :]
    argv += [image, executable, *arguments]

    test_argv = [*argv[:verb_at], "-q", "test", *options, image]
    return ApptainerCommand(
        argv=argv,
        environment=container_environment(
            environment, scratch=scratch, target=target, prefix=_prefix(machine_ad)
        ),
        image=image,
        test_argv=test_argv,
    )


def _image(settings: ApptainerSettings, machine_ad: Any, job_ad: Any, scratch: str) -> str:
    """SINGULARITY_IMAGE_EXPR, else the job's ContainerImage; a relative one is in scratch."""
    image = _eval_string(settings.image_expr, machine_ad, job_ad, knob=IMAGE_EXPR)
    if not image:
        contained = job_ad.get("ContainerImage")
        image = contained if isinstance(contained, str) else None
    if not image:
        raise ApptainerError(
            f"the job runs in Apptainer but no image was found ({IMAGE_EXPR} = "
            f"{settings.image_expr or '(unset)'} is not a string, and the job has no "
            "ContainerImage)"
        )
    if "://" not in image and not image.startswith("/"):
        image = f"{scratch.rstrip('/')}/{image}"
    return image


def _directory_options(
    settings: ApptainerSettings, job_ad: Any, *, iwd: str, scratch: str, target: str
) -> list[str]:
    """SINGULARITY_MOUNT_UNDER_SCRATCH (-S), the initial and scratch directories bound (-B),
    and the directory the job starts in (--pwd)."""
    argv: list[str] = []
    under = _eval_string(settings.mount_under_scratch, job_ad, None, knob=MOUNT_UNDER_SCRATCH)
    for directory in _split_list(settings.mount_under_scratch if under is None else under):
        argv += ["-S", directory]
    if iwd != scratch:
        argv += ["-B", iwd]
    bind = scratch
    if target:
        bind = f"{scratch}:{target}"
        if iwd == scratch:
            argv += ["--pwd", target]
    else:
        argv += ["--pwd", iwd]
    argv += ["-B", bind]
    return argv


def _device_and_bind_options(
    settings: ApptainerSettings,
    machine_ad: Any,
    job_ad: Any,
    image: str,
    is_dir: Callable[[str], bool],
) -> list[str]:
    """--nv for a slot with GPUs (and the OpenCL vendors bound), and SINGULARITY_BIND_EXPR's
    binds whose source the host has (and, where asked, whose target the image has)."""
    argv: list[str] = []
    extra_binds: list[str] = []
    gpus = machine_ad.get("AssignedGPUs")
    if isinstance(gpus, str) and gpus.strip():
        argv.append("--nv")
        if is_dir(OPENCL_VENDORS):
            extra_binds.append(OPENCL_VENDORS)
    binds_text = _eval_string(settings.bind_expr, machine_ad, job_ad, knob=BIND_EXPR)
    if binds_text is None:
        return argv
    binds = _split_list(binds_text)
    binds += [b for b in extra_binds if b not in binds]
    ignore_missing_target = _boolean(settings.ignore_missing_bind_target)
    for spec in binds:
        source, _, rest = spec.partition(":")
        if not is_dir(source):
            continue  # HTCondor skips a bind whose source is missing on the host
        if ignore_missing_target and is_dir(image):
            inside = (rest.partition(":")[0] if rest else source).lstrip("/")
            if not is_dir(f"{image}/{inside}"):
                continue
        argv += ["-B", spec]
    return argv


def _prefix(machine_ad: Any) -> str:
    """APPTAINERENV_, or SINGULARITYENV_ where the node's runtime is a Singularity."""
    version = machine_ad.get("SingularityVersion")
    if isinstance(version, str) and "apptainer" not in version.lower() and version.strip():
        return "SINGULARITYENV_"
    return "APPTAINERENV_"


def container_environment(
    environment: Mapping[str, str], *, scratch: str, target: str, prefix: str = "APPTAINERENV_"
) -> dict[str, str]:
    """The environment `apptainer exec` runs in: the job's (less HOME and bind variables),
    the runtime's cache and temporary directories in the scratch directory, and every
    variable again as `<prefix><name>` so that it crosses `-C`'s clean environment; with a
    target directory the prefixed copies name the target directory instead of the scratch
    directory, and `_CONDOR_SCRATCH_DIR_OUTSIDE_CONTAINER` keeps the host's path."""
    env = {k: v for k, v in environment.items() if k not in _DROPPED_ENVIRONMENT}
    runtime = "APPTAINER" if prefix == "APPTAINERENV_" else "SINGULARITY"
    env[f"{runtime}_CACHEDIR"] = scratch
    env[f"{runtime}_TEMPDIR"] = scratch
    prefixed: dict[str, str] = {}
    if target:
        for name, value in env.items():
            if scratch in value:
                prefixed[prefix + name] = value.replace(scratch, target, 1)
        env["_CONDOR_SCRATCH_DIR_OUTSIDE_CONTAINER"] = environment.get(
            "_CONDOR_SCRATCH_DIR", scratch
        )
    for name, value in list(env.items()):
        if not name.startswith(prefix) and prefix + name not in prefixed:
            prefixed[prefix + name] = value
    env.update(prefixed)
    return env
