"""Write HTCondor's built-in knob defaults, read from the installed htcondor wheel, into
core/kondor_core/config/htcondor_defaults.py (or --check that file).

HTCondor's bindings expand a knob when it is read (`htcondor2.param["MaxVacateTime"]` is
`10 * 60`, not `10 * $(MINUTE)`), but Kondor needs the unexpanded text, so that a snippet
which sets MINUTE or MaxVacateTime changes the knobs built on them, as in HTCondor. So each
knob is read once with every other knob defined as a sentinel (`@@KONDOR:MINUTE@@`): what
comes back is its default with each reference in place. A reference written with a default
(`$(X:0)`) comes back as a bare `$(X)`; the text is then looked up among the strings of
HTCondor's library (where the param table is compiled in) to restore the default.

Knobs whose value HTCondor computes when it starts (the host's name, the detected CPUs and
memory, the process id, ...) are not defaults and are left out: see `LIVE`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "core" / "kondor_core" / "config" / "htcondor_defaults.py"

#: Macros HTCondor fills in at start-up from the host, its environment or the process
#: ("Pre-Defined Macros"), not from the param table.
LIVE = re.compile(
    r"(ARCH|OPSYS\w*|UNAME_\w+|UTSNAME_\w+|DETECTED_\w+|HOSTNAME|FULL_HOSTNAME|"
    r"IP_ADDRESS\w*|IPV4_ADDRESS|IPV6_ADDRESS|TILDE|USERNAME|PID|PPID|CONFIG_ROOT|SUBSYSTEM|"
    r"LOCALNAME|REAL_UID|REAL_GID|CONDOR_VERSION|COMPILER\w*|PROCESSOR\w*|"
    r"HAS_\w+_FEATURE|CPU_\w+_COUNT|NUM_CPUS|MEMORY)",
    re.IGNORECASE,
)

#: Texts the library's strings could not settle, with the candidates (printed by the script).
AMBIGUOUS: dict[str, list[str]] = {}

_SENTINEL = re.compile(r"@@KONDOR:([A-Za-z0-9_.]+)@@")
_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.]*)\)")

#: Run in a subprocess (HTCondor keeps its configuration in the process): argv[1] is a
#: folder to write configurations in, stdin the JSON list of names to give sentinels.
_READER = r"""
import json, os, sys
import htcondor2

folder = sys.argv[1]
extra = json.load(sys.stdin)

def read(text):
    path = os.path.join(folder, "condor_config")
    with open(path, "w") as file:
        file.write(text)
    os.environ["CONDOR_CONFIG"] = path
    htcondor2.reload_config()

read("")
names = sorted(name for name in htcondor2.param.keys() if name)
expanded = {}
for name in names:
    try:
        expanded[name] = str(htcondor2.param.get(name))
    except Exception as err:
        expanded[name] = None
read("")
again = {}
for name in names:
    try:
        again[name] = str(htcondor2.param.get(name))
    except Exception as err:
        again[name] = None
random = sorted(name for name in names if again[name] != expanded[name])
sentinels = {name: f"{name} = @@KONDOR:{name}@@" for name in [*names, *extra]}
raw = {}
for name in names:
    lines = [line for other, line in sentinels.items() if other.upper() != name.upper()]
    read("\n".join([*lines, f"KONDOR_RAW = $({name})", ""]))
    raw[name] = htcondor2.param.get("KONDOR_RAW")
result = {"version": htcondor2.version(), "raw": raw, "expanded": expanded, "random": random}
print(json.dumps(result))
"""


def _library_strings() -> list[str]:
    """The printable strings of HTCondor's utility library, where its param table lives."""
    import htcondor2  # noqa: PLC0415 - the generator's one dependency on the wheel

    libs = Path(htcondor2.__file__).resolve().parent.parent / "htcondor.libs"
    found: list[str] = []
    for library in sorted(libs.glob("libcondor_utils*.so*")):
        data = library.read_bytes()
        found += [m.decode() for m in re.findall(rb"[\x09\x20-\x7e]{3,}", data)]
    return found


def _referenced(strings: list[str]) -> list[str]:
    """Every name some string of the library refers to as $(NAME) or $(NAME:default)."""
    names = set()
    for text in strings:
        names.update(re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)[:)]", text))
    return sorted(names)


def _restore_defaults(
    text: str, strings: set[str], live: dict[str, str], *, random: bool = False
) -> str:
    """`text` as the library's string has it: each bare $(NAME) given back its `:default`,
    and each value of a live macro (`live`: value -> name) that may stand for a reference
    to it (HTCondor fills those in after reading the configuration, so no sentinel hides
    them: UID_DOMAIN comes back as the host's name, not $(FULL_HOSTNAME)). With `random`, a
    number may stand for a $RANDOM_INTEGER(...) or $RANDOM_CHOICE(...) that HTCondor
    evaluated when it read the default."""
    words = re.compile(r"(?<![\w])(" + "|".join(re.escape(value) for value in live) + r")(?![\w])")
    if "$(" not in text and not words.search(text) and not random:
        return text

    def number(piece: str) -> str:
        if not random:
            return re.escape(piece)
        parts = re.split(r"(-?\d+)", piece)
        return "".join(
            re.escape(part) if index % 2 == 0 else rf"(?:{part}|\$RANDOM_[A-Z]+\([^()]*\))"
            for index, part in enumerate(parts)
        )

    def literal(part: str) -> str:
        pieces = words.split(part)
        out = ""
        for index, piece in enumerate(pieces):
            if index % 2 == 0:
                out += number(piece)
            else:
                out += f"(?:{re.escape(piece)}|\\$\\((?:{live[piece]})[^()]*\\))"
        return out

    parts = _REFERENCE.split(text)
    pattern = ""
    for index, part in enumerate(parts):
        if index % 2 == 0:
            pattern += literal(part)
        else:
            pattern += r"\$\(" + re.escape(part) + r"(?::[^()]*(?:\([^()]*\)[^()]*)*)?\)"
    # The linker keeps one copy of a string that ends another ("$(FULL_HOSTNAME)" inside
    # "root@$(FULL_HOSTNAME)"), so a default may be the tail of a longer string.
    compiled = re.compile(f"(?:^|(?<=[\\s=@:,]))({pattern})$", re.IGNORECASE)
    matches = {m.group(1) for candidate in strings if (m := compiled.search(candidate))}
    if len(matches) > 1:
        AMBIGUOUS[text] = sorted(matches)
    return matches.pop() if len(matches) == 1 else text


def read_defaults() -> tuple[str, dict[str, str]]:
    """HTCondor's version and its defaults (name -> unexpanded text), live macros left out."""
    strings = _library_strings()
    env = {
        key: value
        for key, value in os.environ.items()
        if key != "CONDOR_CONFIG" and not key.upper().startswith("_CONDOR_")
    }
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            [sys.executable, "-c", _READER, folder],
            input=json.dumps(_referenced(strings)),
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            check=True,
        )
    result = json.loads(done.stdout)
    candidates = {text.strip() for text in strings if "$" in text}
    live: dict[str, str] = {}
    for name in ("FULL_HOSTNAME", "HOSTNAME", "USERNAME", "IP_ADDRESS", "TILDE"):
        value = result["expanded"].get(name)
        if value and len(value) > 1:
            live[value] = f"{live[value]}|{name}" if value in live else name
    defaults = {}
    for name, text in result["raw"].items():
        if LIVE.fullmatch(name) or text is None:
            continue
        unexpanded = _SENTINEL.sub(lambda m: f"$({m.group(1)})", text)
        # A default with a $RANDOM_INTEGER(...) comes back with a different number each read.
        random = name in result["random"] or (
            "@@KONDOR:" not in text and text != result["expanded"].get(name)
        )
        defaults[name] = _restore_defaults(unexpanded, candidates, live, random=random)
    version = re.search(r"\d+\.\d+\.\d+", result["version"])
    return (version.group(0) if version else result["version"]), defaults


def _literal(text: str) -> str:
    """A Python string literal as `ruff format` writes it (double quotes unless the text has
    double quotes and no single ones), so the generated file passes the format check."""
    if '"' in text and "'" not in text:
        return repr(text)
    return json.dumps(text)


def render(version: str, defaults: dict[str, str]) -> str:
    lines = [
        "# ruff: noqa: E501",
        f'"""HTCondor {version}\'s built-in knob defaults, unexpanded, by knob name.',
        "",
        "Generated by `make condor-defaults` (tools/gen_condor_defaults.py) from the installed",
        "htcondor wheel's param table; do not edit. Kondor's deliberate differences are in",
        "kondor_core.config.templates (KONDOR_DEFAULTS), beside it.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from collections.abc import Mapping",
        "",
        f'HTCONDOR_VERSION = "{version}"',
        "",
        "HTCONDOR_DEFAULTS: Mapping[str, str] = {",
    ]
    for name in sorted(defaults, key=str.upper):
        lines.append(f"    {_literal(name)}: {_literal(defaults[name])},")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the file differs")
    args = parser.parse_args()
    text = render(*read_defaults())
    if args.check:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET.relative_to(ROOT)} drifted from HTCondor; run `make condor-defaults`")
            return 1
        print(f"checked {TARGET.relative_to(ROOT)}")
        return 0
    TARGET.write_text(text)
    for unsettled, candidates in AMBIGUOUS.items():
        print(f"kept {unsettled!r}; the library has {candidates}")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
