"""No new socket for the worker: a seccomp filter, set before the submission is imported.

A worker needs no network: it talks to its grader over a socket pair it inherits. A submission
that could open sockets could reach what the machine reaches. On a Dask cluster that includes the
scheduler, which runs any code a client sends on every worker, as the worker's user (root): a
submission of another user would become root there and rewrite every grade (docs/security.md).

The filter makes `socket()` fail with EACCES for every address family, and `io_uring_setup()`
too (an io_uring can make sockets without `socket()`). A system call of another architecture's
numbering, which a 64-bit process can still make (`int 0x80`, x32), fails likewise. The filter is
inherited by every process the worker starts and cannot be lifted (PR_SET_NO_NEW_PRIVS). It is
set with the seccomp system call and SECCOMP_FILTER_FLAG_TSYNC, so that it holds for every thread
of the worker.

Only this module's standard-library imports: the worker imports it (gradcheck.engine.worker).
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

#: Per machine: the audit architecture seccomp reports, then the numbers of `socket`,
#: `io_uring_setup` and `seccomp` (asm/unistd.h).
MACHINES = {
    "x86_64": (0xC000003E, 41, 425, 317),
    "aarch64": (0xC00000B7, 198, 425, 277),
}
_X32 = 0x40000000  # x86_64's x32 system calls carry this bit

_LD_W_ABS, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06  # classic BPF opcodes (linux/filter.h)
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO
_PR_SET_NO_NEW_PRIVS, _SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 38, 1, 1


def _filter(arch: int, socket: int, io_uring: int) -> bytes:
    """The BPF program: another architecture, an x32 call, socket() and io_uring_setup() fail
    with EACCES; every other call is allowed. Each jump counts the instructions it skips."""
    deny = _ERRNO | errno.EACCES
    program = [
        (_LD_W_ABS, 0, 0, 4),     # 0: the architecture (seccomp_data.arch)
        (_JEQ, 0, 5, arch),       # 1: another one: to 7
        (_LD_W_ABS, 0, 0, 0),     # 2: the call's number (seccomp_data.nr)
        (_JGE, 3, 0, _X32),       # 3: x32: to 7
        (_JEQ, 2, 0, socket),     # 4: socket(): to 7
        (_JEQ, 1, 0, io_uring),   # 5: io_uring_setup(): to 7
        (_RET, 0, 0, _ALLOW),     # 6
        (_RET, 0, 0, deny),       # 7
    ]
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)


def forbid() -> str | None:
    """Set the filter on this process; None once it holds, else why it could not be set (a
    machine this module has no numbers for, or a kernel without seccomp filters)."""
    machine = os.uname().machine
    if machine not in MACHINES:
        return f"no seccomp numbers for {machine}"
    arch, socket, io_uring, seccomp = MACHINES[machine]
    code = _filter(arch, socket, io_uring)
    instructions = ctypes.create_string_buffer(code, len(code))
    # struct sock_fprog: the count of instructions, then a pointer to them (native alignment)
    fprog = ctypes.create_string_buffer(
        struct.pack("@HP", len(code) // 8, ctypes.addressof(instructions)))
    libc = ctypes.CDLL(None, use_errno=True)
    word = ctypes.c_ulong  # both calls take unsigned longs, through C's `...`
    if libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), word(1), word(0), word(0), word(0)) != 0:
        return os.strerror(ctypes.get_errno())
    if libc.syscall(ctypes.c_long(seccomp), word(_SECCOMP_SET_MODE_FILTER),
                    word(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.c_void_p(ctypes.addressof(fprog))):
        return os.strerror(ctypes.get_errno())
    return None
