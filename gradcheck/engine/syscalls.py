"""What the worker may not ask of the kernel: a seccomp filter, set before the submission is
imported, that refuses new sockets, mounts and namespaces.

A worker needs none of them: it talks to its grader over a socket pair it inherits, and an
engine does arithmetic. A submission that could open sockets could reach what the machine
reaches. On a Dask cluster that includes the scheduler, which runs any code a client sends on
every worker, as the worker's user (root): a submission of another user would become root there
and rewrite every grade (docs/security.md). One that could mount, in a user and mount namespace
of its own, could serve a FUSE filesystem and never answer it: a read of a page mapped from it
holds its process's memory map, and the grader's next read of that process's memory
(`/proc/PID/smaps_rollup`) waited with it, past every time limit.

The filter makes these fail with EACCES: `socket()` and `socketpair()` of every address family,
`io_uring_setup()` (an io_uring can make sockets without `socket()`), `userfaultfd()` (a fault
it holds stalls a read of that memory as FUSE's does), `unshare()`, `setns()`, every call of
mounting (`mount()`, `umount2()`, `pivot_root()` and the newer `fsopen()`, `fsconfig()`,
`fsmount()`, `fspick()`, `move_mount()`, `open_tree()`, `mount_setattr()`), and `clone()` with a
flag of a new namespace. `clone3()`, whose flags a filter cannot read, fails with ENOSYS: the C
library then makes its threads and processes with `clone()`. A system call of another
architecture's numbering, which a 64-bit process can still make (`int 0x80`, x32), fails too. The
filter is inherited by every process the worker starts and cannot be lifted
(PR_SET_NO_NEW_PRIVS, which also keeps a set-user-id `fusermount` from mounting for it). It is
set with the seccomp system call and SECCOMP_FILTER_FLAG_TSYNC, so that it holds for every thread
of the worker.

Only this module's standard-library imports: the worker imports it (gradcheck.engine.worker).
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from typing import NamedTuple


class Numbers(NamedTuple):
    """One machine's audit architecture, as seccomp reports it, and its system call numbers
    (asm/unistd.h)."""

    arch: int
    seccomp: int
    clone: int
    clone3: int
    refused: tuple[int, ...]  # socket, socketpair, io_uring_setup, userfaultfd, unshare, setns,
    # mount, umount2, pivot_root, open_tree, move_mount, fsopen, fsconfig, fsmount, fspick,
    # mount_setattr


MACHINES = {
    "x86_64": Numbers(0xC000003E, 317, 56, 435,
                      (41, 53, 425, 323, 272, 308, 165, 166, 155, 428, 429, 430, 431, 432, 433,
                       442)),
    "aarch64": Numbers(0xC00000B7, 277, 220, 435,
                       (198, 199, 425, 282, 97, 268, 40, 39, 41, 428, 429, 430, 431, 432, 433,
                        442)),
}
#: clone()'s flags of a new namespace: mount, cgroup, UTS, IPC, user, PID, network (linux/sched.h)
NEW_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 \
    | 0x40000000
_X32 = 0x40000000  # x86_64's x32 system calls carry this bit

# classic BPF (linux/filter.h): load a word of seccomp_data, jumps, return
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in seccomp_data; an argument's low word first (LE)
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO
_PR_SET_NO_NEW_PRIVS, _SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 38, 1, 1


def _filter(numbers: Numbers) -> bytes:
    """The BPF program. Each jump is written to a label and counted when the program is known:
    classic BPF counts the instructions it skips."""
    program: list[tuple[int, str | int, str | int, int]] = [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ, 0, "deny", numbers.arch),
        (_LD_W_ABS, 0, 0, _NR),
        (_JGE, "deny", 0, _X32),
        *[(_JEQ, "deny", 0, number) for number in numbers.refused],
        (_JEQ, "nosys", 0, numbers.clone3),
        (_JEQ, 0, "allow", numbers.clone),
        (_LD_W_ABS, 0, 0, _ARG0),
        (_JSET, "deny", "allow", NEW_NAMESPACES),
    ]
    labels = {"allow": len(program), "deny": len(program) + 1, "nosys": len(program) + 2}
    program += [(_RET, 0, 0, _ALLOW), (_RET, 0, 0, _ERRNO | errno.EACCES),
                (_RET, 0, 0, _ERRNO | errno.ENOSYS)]

    def skip(at: int, to: str | int) -> int:
        return to if isinstance(to, int) else labels[to] - at - 1

    return b"".join(struct.pack("=HBBI", code, skip(at, yes), skip(at, no), k)
                    for at, (code, yes, no, k) in enumerate(program))


def forbid() -> str | None:
    """Set the filter on this process; None once it holds, else why it could not be set (a
    machine this module has no numbers for, or a kernel without seccomp filters)."""
    machine = os.uname().machine
    if machine not in MACHINES:
        return f"no seccomp numbers for {machine}"
    numbers = MACHINES[machine]
    code = _filter(numbers)
    instructions = ctypes.create_string_buffer(code, len(code))
    # struct sock_fprog: the count of instructions, then a pointer to them (native alignment)
    fprog = ctypes.create_string_buffer(
        struct.pack("@HP", len(code) // 8, ctypes.addressof(instructions)))
    libc = ctypes.CDLL(None, use_errno=True)
    word = ctypes.c_ulong  # both calls take unsigned longs, through C's `...`
    if libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), word(1), word(0), word(0), word(0)) != 0:
        return os.strerror(ctypes.get_errno())
    if libc.syscall(ctypes.c_long(numbers.seccomp), word(_SECCOMP_SET_MODE_FILTER),
                    word(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.c_void_p(ctypes.addressof(fprog))):
        return os.strerror(ctypes.get_errno())
    return None
