"""OpSys, Arch and the kernel, named exactly as the condor_startd names them.

HTCondor (condor_sysapi `arch.cpp`, "Machine ClassAd Attributes") derives, on Linux:

- `OpSys` = `"LINUX"`, `OpSysLegacy` = `"LINUX"`.
- `OpSysLongName`: the first line of the first of `/etc/issue`, `/etc/redhat-release`,
  `/etc/system-release`, `/etc/issue.net` that names a known distribution (trailing
  `\\n`, `\\l` escapes and blanks stripped), else `PRETTY_NAME` of `/etc/os-release`,
  else `"Unknown"`.
- `OpSysName` = `OpSysShortName`: the distribution found in the long name
  (`RedHat`, `Fedora`, `Ubuntu`, `Debian`, `SLCern`, `SLFermi`, `SL`, `CentOS`,
  `Rocky`, `AlmaLinux`, `AmazonLinux`, `openSUSE`, `SUSE`), `"LINUX"` when none is.
- `OpSysMajorVer`: the first run of digits in the long name; `OpSysVer`:
  major * 100 + (at most two digits of) minor.
- `OpSysAndVer` = `OpSysName` followed by `OpSysMajorVer` (`Debian12`, `RedHat9`).
- `Arch`: `uname -m` translated (`x86_64` -> `X86_64`, `i686` -> `INTEL`, ...), and
  passed through unchanged where HTCondor has no name for it (so `aarch64` stays
  `aarch64`, as on HTCondor's own ARM execution points).
- The kernel: `UtsnameSysname`, `UtsnameRelease` (`uname -r`), `UtsnameVersion`
  (`uname -v`), `UtsnameMachine` (`uname -m`), read from `/proc/sys/kernel`.
"""

from __future__ import annotations

import os
import re

from kondor_agent.detect._hostfs import HostFS

#: The files condor_sysapi reads, in its order, before falling back to os-release.
ISSUE_FILES = ("/etc/issue", "/etc/redhat-release", "/etc/system-release", "/etc/issue.net")

_DISTROS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("red", "hat"), "RedHat"),
    (("fedora",), "Fedora"),
    (("ubuntu",), "Ubuntu"),
    (("debian",), "Debian"),
    (("scientific", "cern"), "SLCern"),
    (("scientific", "slf"), "SLFermi"),
    (("scientific",), "SL"),
    (("centos",), "CentOS"),
    (("rocky",), "Rocky"),
    (("almalinux",), "AlmaLinux"),
    (("amazon linux",), "AmazonLinux"),
    (("opensuse",), "openSUSE"),
    (("suse",), "SUSE"),
)

_ARCH = {
    "i86pc": "INTEL",
    "i686": "INTEL",
    "i586": "INTEL",
    "i486": "INTEL",
    "i386": "INTEL",
    "ia64": "IA64",
    "x86_64": "X86_64",
    "amd64": "X86_64",
    "ppc": "PPC",
    "ppc32": "PPC",
    "ppc64": "PPC64",
}


def linux_name(long_name: str) -> str:
    """The distribution named in a release string, as HTCondor spells it, or `LINUX`."""
    lowered = long_name.lower()
    for words, name in _DISTROS:
        if all(word in lowered for word in words):
            return name
    return "LINUX"


def clean_issue_line(text: str) -> str:
    """The first line without trailing blanks and the `\\n`/`\\l` getty escapes."""
    line = text.split("\n", 1)[0]
    while True:
        line = line.rstrip()
        if len(line) > 2 and line[-2] == "\\" and line[-1] in "nl":
            line = line[:-2]
        else:
            return line


def major_version(long_name: str) -> int:
    """The first run of digits (0 when there is none), as sysapi_find_major_version."""
    match = re.search(r"\d+", long_name)
    return int(match.group()) if match else 0


def opsys_version(long_name: str) -> int:
    """major * 100 + minor (at most two digits), as sysapi_translate_opsys_version."""
    match = re.search(r"(\d+)(?:\.(\d{1,2}))?", long_name)
    if not match:
        return 0
    return int(match.group(1)) * 100 + int(match.group(2) or 0)


def pretty_name(os_release: str) -> str | None:
    """PRETTY_NAME of an os-release file, without its quotes."""
    for line in os_release.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "PRETTY_NAME":
            return value.strip().strip("\"'") or None
    return None


def long_name(host: HostFS) -> str:
    """OpSysLongName: the issue files in HTCondor's order, then os-release's PRETTY_NAME."""
    for path in ISSUE_FILES:
        text = host.read_optional(path)
        if text is None:
            continue
        line = clean_issue_line(text) or "Unknown"
        if linux_name(line) != "LINUX":
            return line
    os_release = host.read_optional("/etc/os-release")
    if os_release is None:
        os_release = host.read_optional("/usr/lib/os-release")
    name = pretty_name(os_release) if os_release is not None else None
    return name or "Unknown"


def translate_arch(machine: str) -> str:
    """HTCondor's Arch for a `uname -m` value (sysapi_translate_arch)."""
    return _ARCH.get(machine, machine)


def _kernel(host: HostFS, name: str) -> str | None:
    text = host.read_optional(f"/proc/sys/kernel/{name}")
    return text.strip() if text is not None and text.strip() else None


def uname_machine(host: HostFS) -> str:
    """`uname -m` of the host: `/proc/sys/kernel/arch`, else this process's kernel.

    The agent shares the node's kernel, so `os.uname()` is the node's answer too
    when the kernel is too old to have `/proc/sys/kernel/arch`.
    """
    return _kernel(host, "arch") or os.uname().machine


def os_attributes(host: HostFS) -> dict[str, str | int]:
    """The OpSys*, Arch and Utsname* attributes of the host."""
    long = long_name(host)
    name = linux_name(long)
    major = major_version(long) if long != "Unknown" else 0
    machine = uname_machine(host)
    attributes: dict[str, str | int] = {
        "OpSys": "LINUX",
        "OpSysLegacy": "LINUX",
        "OpSysName": name,
        "OpSysShortName": name,
        "OpSysLongName": long,
        "OpSysMajorVer": major,
        "OpSysVer": opsys_version(long) if long != "Unknown" else 0,
        "OpSysAndVer": f"{name}{major}",
        "Arch": translate_arch(machine),
        "UtsnameMachine": machine,
        "UtsnameSysname": _kernel(host, "ostype") or "Linux",
    }
    for attribute, name_ in (("UtsnameRelease", "osrelease"), ("UtsnameVersion", "version")):
        value = _kernel(host, name_)
        if value is not None:
            attributes[attribute] = value
    return attributes
