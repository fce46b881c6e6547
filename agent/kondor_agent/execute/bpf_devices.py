"""Device access on cgroup v2: an eBPF program of type BPF_PROG_TYPE_CGROUP_DEVICE.

Cgroup v2 has no devices controller. Instead the kernel runs the BPF_CGROUP_DEVICE programs
attached to a process's cgroup and to each of its ancestors whenever the process opens
(or mknods) a device node; the access is refused with EPERM unless every one of them returns
1 (Documentation/admin-guide/cgroup-v2.rst, "Device controller"). runc and systemd do this
for containers and units, and HTCondor's starter for STARTER_HIDE_GPU_DEVICES on v2
(proc_family_direct_cgroup_v2.cpp, `install_bpf_gpu_filter`); unlike the starter's, this
program checks the device's type too, so a block device with a GPU's numbers stays open, as
v1's `c <major>:<minor>` rule leaves it.

The program is assembled here from a deny list (`deny_program`, a pure function), loaded
and attached with the raw bpf(2) syscall through ctypes, so the agent needs no libbpf and no
compiler. It is attached with BPF_F_ALLOW_MULTI: a program above (a container runtime's,
systemd's) still applies, and one attached without that flag above makes the attach fail
(EPERM) rather than replace it. The program's file descriptor is closed once attached: the
cgroup holds the program, which goes when the cgroup is removed, so nothing is detached by
hand.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from collections.abc import Iterable
from pathlib import Path

__all__ = ["BpfError", "attach_deny_program", "deny_program", "probe"]

#: bpf(2)'s number, by machine (asm-generic/unistd.h for aarch64; x86_64's syscall_64.tbl).
SYSCALL_NUMBERS = {"x86_64": 321, "aarch64": 280}

# include/uapi/linux/bpf.h
BPF_PROG_LOAD = 5
BPF_PROG_ATTACH = 8
BPF_PROG_TYPE_CGROUP_DEVICE = 15
BPF_CGROUP_DEVICE = 6
BPF_F_ALLOW_MULTI = 2
BPF_DEVCG_DEV_CHAR = 2

# Opcodes (Documentation/bpf/standardization/instruction-set.rst).
LDX_MEM_W = 0x61  # dst = *(u32 *)(src + off)
AND32_K = 0x54  # dst = (u32)dst & imm
JNE_K = 0x55  # if dst != imm: pc += off
MOV64_K = 0xB7  # dst = imm
EXIT = 0x95  # return r0
#: One instruction: code, dst and src registers in one byte (src high), offset, immediate.
INSTRUCTION = struct.Struct("<BBhi")

#: Linux's device numbers: a 12-bit major and a 20-bit minor (include/linux/kdev_t.h), so
#: every one fits a signed 32-bit immediate.
MAJOR_MAX = (1 << 12) - 1
MINOR_MAX = (1 << 20) - 1

#: The license the program is loaded under (the cgroup device helpers need no GPL symbol).
LICENSE = b"Apache-2.0"
#: The name `bpftool prog` shows (at most 15 characters).
PROGRAM_NAME = b"kondor_devices"
_LOG_SIZE = 1 << 18


class BpfError(Exception):
    """bpf(2) refused: the message names the step and why; `log` is the verifier's."""

    def __init__(self, message: str, code: int = 0, log: str = "") -> None:
        super().__init__(message)
        self.errno = code
        self.log = log


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return INSTRUCTION.pack(code, (src << 4) | dst, off, imm)


def deny_program(char_devices: Iterable[tuple[int, int]]) -> bytes:
    """The instructions of a device program that refuses the character devices
    `(major, minor)` every access (HTCondor's `c <major>:<minor> rwm`) and allows the rest.

    r1 points at `struct bpf_cgroup_dev_ctx { u32 access_type; u32 major; u32 minor; }`; the
    device's type is the low 16 bits of access_type. For each device: if major and minor
    match, return 0. Then return 1. With no device it is `return 1` alone."""
    devices = list(dict.fromkeys(char_devices))
    for major, minor in devices:
        if not (0 <= major <= MAJOR_MAX and 0 <= minor <= MINOR_MAX):
            raise ValueError(
                f"device {major}:{minor}: not a Linux device number "
                f"(major 0..{MAJOR_MAX}, minor 0..{MINOR_MAX})"
            )
    allow = _insn(MOV64_K, 0, imm=1) + _insn(EXIT)
    if not devices:
        return allow
    program = [
        _insn(LDX_MEM_W, 2, 1, off=0),  # r2 = access_type
        _insn(AND32_K, 2, imm=0xFFFF),  # r2 = the device's type
        _insn(JNE_K, 2, off=2 + 4 * len(devices), imm=BPF_DEVCG_DEV_CHAR),  # not char: allow
        _insn(LDX_MEM_W, 3, 1, off=4),  # r3 = major
        _insn(LDX_MEM_W, 4, 1, off=8),  # r4 = minor
    ]
    for major, minor in devices:
        program += [
            _insn(JNE_K, 3, off=3, imm=major),  # another major: the next device
            _insn(JNE_K, 4, off=2, imm=minor),
            _insn(MOV64_K, 0, imm=0),
            _insn(EXIT),
        ]
    return b"".join(program) + allow


def _syscall_number(machine: str) -> int:
    number = SYSCALL_NUMBERS.get(machine)
    if number is None:
        raise BpfError(
            f"bpf(2): no syscall number known for machine {machine!r} "
            f"(known: {', '.join(SYSCALL_NUMBERS)})",
            errno.ENOSYS,
        )
    return number


def _bpf(command: int, attr: bytes) -> tuple[int, int]:
    """bpf(command, attr): the result and errno (0 when it worked)."""
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ctypes.set_errno(0)
    result = libc.syscall(
        ctypes.c_long(_syscall_number(platform.machine())),
        ctypes.c_int(command),
        buffer,
        ctypes.c_uint(len(attr)),
    )
    return int(result), (ctypes.get_errno() if result < 0 else 0)


def _why(code: int, step: str) -> str:
    """What an errno from bpf(2) most likely means here."""
    if code == errno.EPERM and step == "attach":
        return (
            "a cgroup above has a device program attached without BPF_F_ALLOW_MULTI, "
            "or this process lacks CAP_BPF/CAP_SYS_ADMIN"
        )
    if code == errno.EPERM:
        return "this process lacks CAP_BPF and CAP_SYS_ADMIN, or a seccomp filter refuses bpf(2)"
    if code == errno.ENOSYS:
        return "the kernel has no bpf(2) (CONFIG_BPF_SYSCALL), or a seccomp filter refuses it"
    if code == errno.EACCES and step == "load":
        return "the verifier refused the program"
    if code == errno.EINVAL and step == "load":
        return "the kernel has no cgroup device programs (CONFIG_CGROUP_BPF)"
    return ""


def _error(step: str, code: int, log: str = "") -> BpfError:
    why = _why(code, step)
    message = f"bpf(2) {step} of a cgroup device program: {os.strerror(code)}"
    if why:
        message += f" ({why})"
    if log.strip():
        message += "; the verifier said:\n" + log.strip()[-2000:]
    return BpfError(message, code, log)


def load_program(program: bytes) -> int:
    """Load `program` as BPF_PROG_TYPE_CGROUP_DEVICE; its file descriptor. When the kernel
    refuses it, it is loaded again with the verifier's log, which the BpfError carries."""
    instructions = ctypes.create_string_buffer(program, len(program))
    license_text = ctypes.create_string_buffer(LICENSE)
    log = ctypes.create_string_buffer(_LOG_SIZE)

    def attempt(log_level: int) -> tuple[int, int]:
        attr = struct.pack(
            "<IIQQIIQII16s",
            BPF_PROG_TYPE_CGROUP_DEVICE,
            len(program) // INSTRUCTION.size,
            ctypes.addressof(instructions),
            ctypes.addressof(license_text),
            log_level,
            _LOG_SIZE if log_level else 0,
            ctypes.addressof(log) if log_level else 0,
            0,  # kern_version: not checked for this type
            0,  # prog_flags
            PROGRAM_NAME,
        )
        return _bpf(BPF_PROG_LOAD, attr)

    fd, code = attempt(0)
    if fd >= 0:
        return fd
    if code in (errno.EINVAL, errno.EACCES):  # the verifier's answers: ask it why
        fd, code = attempt(1)
        if fd >= 0:
            return fd
    raise _error("load", code, log.value.decode(errors="replace"))


def attach(cgroup_dir: Path, program_fd: int) -> None:
    """Attach the loaded program to the v2 cgroup `cgroup_dir` (BPF_F_ALLOW_MULTI)."""
    try:
        target = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as err:
        message = f"{cgroup_dir}: cannot open the cgroup ({err.strerror})"
        raise BpfError(message, err.errno or 0) from None
    try:
        attr = struct.pack("<IIII", target, program_fd, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI)
        result, code = _bpf(BPF_PROG_ATTACH, attr)
    finally:
        os.close(target)
    if result < 0:
        error = _error("attach", code)
        raise BpfError(f"{cgroup_dir}: {error}", code)


def attach_deny_program(cgroup_dir: Path, char_devices: Iterable[tuple[int, int]]) -> None:
    """Refuse the processes of `cgroup_dir` (and its descendants) the character devices
    `(major, minor)`. The program lives as long as the cgroup does."""
    fd = load_program(deny_program(char_devices))
    try:
        attach(cgroup_dir, fd)
    finally:
        os.close(fd)  # the cgroup holds the program now


def probe() -> str | None:
    """Why this process cannot use cgroup device programs (None: it can): loads one that
    allows everything, attaching it nowhere."""
    try:
        os.close(load_program(deny_program(())))
    except BpfError as err:
        return str(err)
    return None
