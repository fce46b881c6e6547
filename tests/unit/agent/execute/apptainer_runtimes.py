"""The `apptainer` the Apptainer tests run: the real one where it is built, else the stand-in.

Real Apptainer is `$KONDOR_APPTAINER` (a path to its `apptainer`) or the one `make apptainer`
installs (`kondor_devcluster.apptainer`: ~/.cache/kondor/apptainer/<version>/). Its images
are SIFs built in the test from a busybox sandbox with `apptainer build`; a failing image
test is the image's `%test`. Where it is absent the stand-in runs (`apptainer_stand_in`,
directory images), and every test id says which ran: `[real-apptainer]` or `[stand-in]`.

Jobs never run as root: a root launcher drops the job, and Apptainer with it, to the slot's
account, so the session runs a copy of the installation that account can reach
(`kondor_devcluster.apptainer.relocate`), as the dev cluster does. Two things real Apptainer
asks of that account, which the stand-in does not:

- an entry in the node's password file: it refuses a uid it cannot look up ("Couldn't
  determine user account information: user: unknown userid 101003"), and Kondor's own slot
  users are bare numbers. The real runtime's jobs run as `nobody` (NOBODY_SLOT_USER =
  nobody, `account`), as an HTCondor node's slots run as accounts that exist;
- a /dev/fuse it may open, to mount a SIF with squashfuse; where it may not (this project's
  machines have it 0600), SINGULARITY_EXTRA_ARGUMENTS = --unsquash extracts the SIF into the
  job's scratch directory (APPTAINER_TEMPDIR) instead (`settings`);
- a scratch directory outside MOUNT_UNDER_SCRATCH (/tmp, /var/tmp): `-S /tmp` mounts a fresh
  /tmp over the one the `-B <scratch>` target was made in ("destination ... doesn't exist in
  container"), so the real runtime's jobs run under /var/lib (`execute_dir`), as an HTCondor
  node's execute directory is /var/lib/condor/execute.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import apptainer_stand_in

from kondor_agent.execute.privileges import ensure_traversable
from kondor_core.jobs.apptainer import ApptainerSettings
from kondor_core.jobs.runas import Account
from kondor_devcluster import apptainer as apptainer_build

REAL = "real-apptainer"
STAND_IN = "stand-in"


#: The account real Apptainer's jobs run as where the tests are root (one the password file has).
NOBODY = Account("nobody", None, None, "slot-user", "NOBODY_SLOT_USER = nobody")


def fuse_usable(path: Path = Path("/dev/fuse")) -> bool:
    """Whether a job's account may open /dev/fuse (any account's, where the tests are root)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    if os.geteuid() != 0:
        return os.access(path, os.R_OK | os.W_OK)
    return mode & (stat.S_IROTH | stat.S_IWOTH) == stat.S_IROTH | stat.S_IWOTH


def which() -> str:
    """REAL where Apptainer is built, else STAND_IN: the id of the tests' `apptainer`."""
    return REAL if apptainer_build.built() is not None else STAND_IN


@dataclass(frozen=True)
class Apptainer:
    """The tests' `apptainer`: `bin_dir` is the launcher's search path; `kind` REAL or STAND_IN."""

    kind: str
    bin_dir: Path
    #: Where the real runtime's execute directories go (None: in each test's tmp_path).
    execute_base: Path | None = None

    @property
    def real(self) -> bool:
        return self.kind == REAL

    @property
    def contained(self) -> bool:
        """Whether jobs run inside their image (the real one, or the stand-in with bwrap)."""
        return self.real or apptainer_stand_in.BWRAP

    @classmethod
    def start(cls, kind: str, scratch: Path) -> Apptainer:
        """The `apptainer` of `kind` in a bin directory under `scratch` (a session's)."""
        if kind == STAND_IN:
            bin_dir = scratch / "bin"
            apptainer_stand_in.install(bin_dir)
            ensure_traversable(bin_dir / "apptainer")
            return cls(STAND_IN, bin_dir)
        binary = apptainer_build.built()
        assert binary is not None, "real Apptainer went away during the session"
        bin_dir = apptainer_build.relocate(binary, scratch / "apptainer").parent
        base = Path("/var/lib") if os.access("/var/lib", os.W_OK) else scratch
        return cls(REAL, bin_dir, Path(tempfile.mkdtemp(prefix="kondor-apptainer-", dir=base)))

    def stop(self) -> None:
        """Remove what the session left outside its temporary directory."""
        if self.execute_base is not None:
            shutil.rmtree(self.execute_base, ignore_errors=True)

    def execute_dir(self, tmp_path: Path) -> Path:
        """A test's execute directory: outside /tmp for the real runtime (see the module)."""
        if self.execute_base is None:
            return tmp_path / "execute"
        return self.execute_base / tmp_path.name

    @property
    def program(self) -> Path:
        return self.bin_dir / "apptainer"

    @property
    def account(self) -> Account | None:
        """Who jobs run as: `nobody` for real Apptainer where the tests are root (see the
        module's docstring), else the slot's own user (None)."""
        return NOBODY if self.real and os.geteuid() == 0 else None

    @property
    def extra_arguments(self) -> list[str]:
        """SINGULARITY_EXTRA_ARGUMENTS the node needs: `--unsquash` without a usable FUSE."""
        return ["--unsquash"] if self.real and not fuse_usable() else []

    def macros(self, macros: Mapping[str, str] | None = None) -> dict[str, str]:
        """A SlotPolicy's `macros` with what this node needs for Apptainer added: the
        account (NOBODY_SLOT_USER) and SINGULARITY_EXTRA_ARGUMENTS."""
        knobs = dict(macros or {})
        if self.extra_arguments:
            knobs.setdefault("SINGULARITY_EXTRA_ARGUMENTS", " ".join(self.extra_arguments))
        if self.account is not None:
            knobs.setdefault("NOBODY_SLOT_USER", self.account.name)
        return knobs

    def settings(self, macros: Mapping[str, str] | None = None) -> ApptainerSettings:
        """The SINGULARITY knobs of `macros`, with what this node needs added."""
        return ApptainerSettings.from_macros(self.macros(macros))

    def image(self, path: Path, *, test: str | None = None, dirs: tuple[str, ...] = ()) -> Path:
        """A busybox image at `path` (plus `.sif` for the real one) with the extra `dirs`;
        `test` is the image's test script (`%test`), run by `apptainer test`."""
        sandbox = apptainer_stand_in.busybox_image(path.with_name(path.name + ".dir"))
        for directory in dirs:
            (sandbox / directory).mkdir(parents=True, exist_ok=True)
        # As any image has them: real Apptainer adds the job's account to them (and warns on
        # stderr, which an image test's hold reason would show, where they are missing).
        (sandbox / "etc").mkdir(exist_ok=True)
        (sandbox / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        (sandbox / "etc" / "group").write_text("root:x:0:\n")
        if not self.real:
            if test is not None:
                (sandbox / ".singularity.d").mkdir(parents=True, exist_ok=True)
                script = sandbox / ".singularity.d" / "test"
                script.write_text(f"#!/bin/sh\n{test}\n")
                script.chmod(0o755)
            ensure_traversable(sandbox)
            return sandbox
        sif = path.with_name(path.name + ".sif")
        definition = path.with_name(path.name + ".def")
        text = f"Bootstrap: localimage\nFrom: {sandbox}\n"
        if test is not None:
            text += "\n%test\n" + "".join(f"    {line}\n" for line in test.splitlines())
        definition.write_text(text)
        # --notest: a failing %test is what a test wants to see at run time, not at build.
        argv = [str(self.program), "-q", "build", "--notest", str(sif), str(definition)]
        if os.geteuid() != 0:
            argv.insert(3, "--fakeroot")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, f"apptainer build failed:\n{done.stdout}{done.stderr}"
        sif.chmod(0o644)
        ensure_traversable(sif)  # the job's account reads it
        return sif
