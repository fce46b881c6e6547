"""The cgroup v2 device program: its instructions (pure), and the kernel running it.

The instruction tables are read against the kernel's encoding (instruction-set.rst: code,
dst in the low and src in the high nibble, a signed 16-bit offset, a 32-bit immediate); a
small interpreter of those opcodes runs the program over device accesses. The real test
loads it on this machine and attaches it to a fresh v2 cgroup: a forked child moved into it
opens stand-in device nodes made with mknod (root and a writable v2 hierarchy, else
skipped).
"""

from __future__ import annotations

import errno
import json
import os
import platform
import stat
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kondor_agent.detect import CgroupFS, HostFS
from kondor_agent.execute import bpf_devices
from kondor_agent.execute.bpf_devices import BpfError, deny_program
from kondor_agent.execute.cgroups import parse_self_cgroup

CHAR, BLOCK = 2, 1
READ, WRITE, MKNOD = 2, 4, 1  # BPF_DEVCG_ACC_*

# (code, dst, src, off, imm)
PREAMBLE = [
    (0x61, 2, 1, 0, 0),  # r2 = ctx->access_type
    (0x54, 2, 0, 0, 0xFFFF),  # w2 &= 0xffff: the type
]
LOADS = [
    (0x61, 3, 1, 4, 0),  # r3 = ctx->major
    (0x61, 4, 1, 8, 0),  # r4 = ctx->minor
]
ALLOW = [(0xB7, 0, 0, 0, 1), (0x95, 0, 0, 0, 0)]  # r0 = 1; exit


def deny(major: int, minor: int) -> list[tuple[int, int, int, int, int]]:
    return [
        (0x55, 3, 0, 3, major),  # if r3 != major goto the next device
        (0x55, 4, 0, 2, minor),  # if r4 != minor goto the next device
        (0xB7, 0, 0, 0, 0),  # r0 = 0
        (0x95, 0, 0, 0, 0),  # exit
    ]


def instructions(program: bytes) -> list[tuple[int, int, int, int, int]]:
    return [
        (code, regs & 0xF, regs >> 4, off, imm)
        for code, regs, off, imm in struct.iter_unpack("<BBhi", program)
    ]


def run(program: bytes, access_type: int, major: int, minor: int) -> int:
    """What the kernel's interpreter returns for the program on one device access."""
    ctx = (access_type, major, minor)
    regs = [0] * 11
    code = instructions(program)
    pc = 0
    while True:
        op, dst, src, off, imm = code[pc]
        pc += 1
        if op == 0x61:
            assert src == 1 and off in (0, 4, 8)
            regs[dst] = ctx[off // 4]
        elif op == 0x54:
            regs[dst] = (regs[dst] & imm) & 0xFFFFFFFF
        elif op == 0x55:
            pc += off if regs[dst] != imm else 0
        elif op == 0xB7:
            regs[dst] = imm
        elif op == 0x95:
            return regs[0]
        else:
            raise AssertionError(f"unexpected opcode {op:#x}")


def test_no_device_is_a_program_that_allows_everything() -> None:
    program = deny_program([])
    assert instructions(program) == ALLOW
    assert run(program, CHAR | READ << 16, 195, 0) == 1


def test_one_device() -> None:
    program = deny_program([(195, 1)])
    # not a character device: jump over the loads and the one device to `allow`
    jump = (0x55, 2, 0, 2 + 4, 2)
    assert instructions(program) == [*PREAMBLE, jump, *LOADS, *deny(195, 1), *ALLOW]
    assert run(program, CHAR | (READ | WRITE) << 16, 195, 1) == 0
    assert run(program, CHAR | MKNOD << 16, 195, 1) == 0  # rwm: every access
    assert run(program, BLOCK | READ << 16, 195, 1) == 1
    assert run(program, CHAR | READ << 16, 195, 0) == 1
    assert run(program, CHAR | READ << 16, 1, 1) == 1


def test_three_devices_in_order_and_each_once() -> None:
    program = deny_program([(195, 1), (195, 2), (195, 3), (195, 2)])
    jump = (0x55, 2, 0, 2 + 4 * 3, 2)
    assert instructions(program) == [
        *PREAMBLE,
        jump,
        *LOADS,
        *deny(195, 1),
        *deny(195, 2),
        *deny(195, 3),
        *ALLOW,
    ]
    denied = {(195, 1), (195, 2), (195, 3)}
    for major, minor in [(195, m) for m in range(6)] + [(1, 3), (0, 1), (4095, (1 << 20) - 1)]:
        expected = 0 if (major, minor) in denied else 1
        assert run(program, CHAR | READ << 16, major, minor) == expected, (major, minor)
        assert run(program, BLOCK | READ << 16, major, minor) == 1


@pytest.mark.parametrize("device", [(4096, 0), (195, 1 << 20), (-1, 0)])
def test_a_number_linux_cannot_have_is_refused(device: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match=rf"device {device[0]}:{device[1]}: not a Linux device"):
        deny_program([device])


def test_a_machine_without_a_known_bpf_number_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(platform, "machine", lambda: "riscv64")
    with pytest.raises(BpfError, match="no syscall number known for machine 'riscv64'") as err:
        bpf_devices.load_program(deny_program([]))
    assert err.value.errno == errno.ENOSYS
    assert "riscv64" in str(bpf_devices.probe())


# -- the kernel ---------------------------------------------------------------------------


@pytest.fixture
def v2_cgroup() -> Iterator[Path]:
    """A fresh cgroup in this process's own cgroup of the unified hierarchy."""
    if os.geteuid() != 0:
        pytest.skip("loading device programs and mknod need root")
    unified = CgroupFS(HostFS(Path("/"))).unified
    if unified is None:
        pytest.skip("no cgroup v2 hierarchy here")
    refused = bpf_devices.probe()
    if refused is not None:
        pytest.skip(refused)
    own = parse_self_cgroup(Path("/proc/self/cgroup").read_text()).get("", "/")
    where = Path(unified) / own.strip("/") / f"kondor-test-bpf-{uuid.uuid4().hex[:8]}"
    try:
        where.mkdir()
    except OSError as err:
        pytest.skip(f"the v2 hierarchy is not writable here: {err}")
    yield where
    where.rmdir()


def open_errors(cgroup: Path, paths: list[Path]) -> list[int]:
    """The errno of opening each path (0: it opened) in a child moved into `cgroup`."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read_end)
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))
            codes = []
            for path in paths:
                try:
                    os.close(os.open(path, os.O_RDONLY))
                    codes.append(0)
                except OSError as err:
                    codes.append(err.errno or -1)
            os.write(write_end, json.dumps(codes).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        text = answer.read()
    os.waitpid(pid, 0)
    assert text, "the child could not join the cgroup"
    return list(json.loads(text))


def test_the_kernel_refuses_the_denied_device_nodes_and_opens_the_others(
    v2_cgroup: Path, tmp_path: Path
) -> None:
    nodes = {
        "zero": (stat.S_IFCHR, 1, 5),  # /dev/zero's numbers
        "full": (stat.S_IFCHR, 1, 7),  # /dev/full's
        "nvidia0": (stat.S_IFCHR, 195, 0),  # an NVIDIA GPU's, without the driver
        "block-1-7": (stat.S_IFBLK, 1, 7),  # a block device with /dev/full's numbers
    }
    for name, (kind, major, minor) in nodes.items():
        os.mknod(tmp_path / name, 0o666 | kind, os.makedev(major, minor))
    paths = [tmp_path / name for name in nodes]
    # before: everything but the absent NVIDIA driver's and ramdisk's nodes opens
    before = open_errors(v2_cgroup, paths)
    assert before[:2] == [0, 0] and before[2] != errno.EPERM and before[3] != errno.EPERM
    bpf_devices.attach_deny_program(v2_cgroup, [(1, 7), (195, 0)])
    assert open_errors(v2_cgroup, [*paths, Path("/dev/null")]) == [
        0,
        errno.EPERM,
        errno.EPERM,
        before[3],  # block devices are not the program's
        0,
    ]


def test_attaching_to_a_cgroup_that_is_not_there_names_it(tmp_path: Path) -> None:
    with pytest.raises(BpfError, match="cannot open the cgroup"):
        bpf_devices.attach(tmp_path / "absent", 0)
