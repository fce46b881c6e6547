"""The stand-in `apptainer` the tests run where real Apptainer is not built (apptainer_runtimes).

It takes the command line HTCondor's starter builds (`[-s|-d|-v] [-q] exec|test OPTIONS
IMAGE [COMMAND ARGS]`) on a directory image. Where bubblewrap is installed (`bwrap`, as in
CI: `apt-get install bubblewrap`) the command runs inside the image as Apptainer would run
it, unprivileged in a user namespace as the job's user (jobs never run as root): the image's
top directories on a fresh root (Apptainer's underlay), `-B` binds, `-S` a fresh tmpfs, `--pwd`
the working directory,
`-C` new PID and IPC namespaces, and only the `APPTAINERENV_` variables (unprefixed) make
up the environment. Without bwrap it runs the command on the host in `--pwd` with those
variables. `test` runs the image's `.singularity.d/test`, else succeeds.
"""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

#: Whether the stand-in runs jobs inside their image (bubblewrap is installed).
BWRAP = shutil.which("bwrap") is not None

SCRIPT = r"""#!/bin/bash
set -e
while :; do case "$1" in -s|-q|-d|-v) shift;; *) break;; esac; done
verb="$1"; shift || true
[[ $verb == exec || $verb == test ]] || { echo "expected exec or test, got $verb" >&2; exit 255; }
pwd_dir=$PWD; wrap=(); contain=0
while [ $# -gt 0 ]; do
  case "$1" in
    --pwd) pwd_dir="$2"; shift 2;;
    -S|--scratch) wrap+=(--tmpfs "$2"); shift 2;;
    -B|--bind) IFS=: read -r src dst _ <<<"$2"; wrap+=(--bind "$src" "${dst:-$src}"); shift 2;;
    -C|--containall) contain=1; shift;;
    --contain|--ipc|--cleanenv|--no-home|--nv|-w|--writable|--writable-tmpfs) shift;;
    -*) echo "unknown option $1" >&2; exit 255;;
    *) break;;
  esac
done
image="$1"; shift || true
[ -d "$image" ] || { echo "FATAL: could not open image $image" >&2; exit 255; }
if [ "$verb" = test ]; then
  [ -x "$image/.singularity.d/test" ] || exit 0
  set -- /.singularity.d/test
fi
env_args=()
while IFS= read -r line; do env_args+=("$line"); done < <(env | sed -n 's/^APPTAINERENV_//p')
if ! command -v bwrap >/dev/null 2>&1; then
  [ "$verb" = test ] && exec "$image/.singularity.d/test"
  cd "$pwd_dir"
  exec env -i "${env_args[@]}" "$@"
fi
# Jobs run unprivileged (never root): as Apptainer's underlay does, the root is a fresh
# tmpfs holding the image's top directories, so that bind points can be made in it.
run=(bwrap --tmpfs /)
shopt -s dotglob nullglob
for entry in "$image"/*; do run+=(--bind "$entry" "/${entry##*/}"); done
shopt -u dotglob nullglob
run+=(--proc /proc --dev /dev "${wrap[@]}" --chdir "$pwd_dir" --clearenv)
for pair in "${env_args[@]}"; do run+=(--setenv "${pair%%=*}" "${pair#*=}"); done
[ $contain = 1 ] && run+=(--unshare-pid --unshare-ipc)
exec "${run[@]}" -- "$@"
"""

#: The busybox applets a test image has (busybox is statically linked on Debian).
APPLETS = ("sh", "echo", "cat", "pwd", "sleep", "env", "ls", "true", "false", "ps", "kill")


def install(bin_dir: Path) -> Path:
    """Write the stand-in as `bin_dir/apptainer`; returns its path."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    program = bin_dir / "apptainer"
    program.write_text(SCRIPT)
    program.chmod(program.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return program


def busybox_image(path: Path) -> Path:
    """A directory image with busybox as its /bin (its sh, echo, cat, ...)."""
    busybox = shutil.which("busybox")
    assert busybox is not None, "the test images need busybox (apt-get install busybox-static)"
    (path / "bin").mkdir(parents=True)
    shutil.copy2(busybox, path / "bin" / "busybox")
    for applet in APPLETS:
        (path / "bin" / applet).symlink_to("busybox")
    return path
