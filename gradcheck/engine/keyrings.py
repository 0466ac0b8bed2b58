"""The kernel's keyrings, a channel between workers: a key added to a user's keyring outlives
every process of that user (the persistent keyring for days), so a worker that saw a hidden
exercise could leave its program there for the next worker of that uid to read. `Left` removes
what a worker added when it stops; `new_session` gives a worker a session keyring of its own.
Linux on x86-64 and arm64 only (their system call numbers); elsewhere nothing is done.
"""

from __future__ import annotations

import ctypes
import os
import struct
import warnings

#: keyctl's system call number, by machine
_KEYCTL = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)
#: libc's syscall(), found before any fork: a forked child only calls it
_SYSCALL = ctypes.CDLL(None, use_errno=True).syscall
_USER_KEYRING, _USER_SESSION_KEYRING, _PROCESS_KEYRING = -4, -5, -2
_JOIN_SESSION_KEYRING, _CLEAR, _UNLINK, _READ, _GET_PERSISTENT = 1, 7, 9, 11, 22


def _keyctl(*args: int | None) -> int:
    return -1 if _KEYCTL is None else _SYSCALL(_KEYCTL, *args)


def new_session() -> None:
    """Join a new anonymous session keyring: what the worker adds to its session keyring goes
    with it, not into the grader's."""
    _keyctl(_JOIN_SESSION_KEYRING, None)


def _rings() -> list[int]:
    """The keyrings of this process's user that outlive its processes: the user keyring, the
    user session keyring, and the persistent one (linked into this process's keyring)."""
    rings = [_USER_KEYRING, _USER_SESSION_KEYRING]
    persistent = _keyctl(_GET_PERSISTENT, -1, _PROCESS_KEYRING)
    return rings + [persistent] if persistent > 0 else rings


def _keys(ring: int) -> set[int]:
    """The serial numbers of the keys and keyrings linked into `ring`."""
    size = _keyctl(_READ, ring, None, 0)
    if size <= 0:
        return set()
    buffer = ctypes.create_string_buffer(size)
    size = min(_keyctl(_READ, ring, buffer, size), size)
    return set(struct.unpack(f"{size // 4}i", buffer.raw[:size - size % 4]))


class Left:
    """What a worker of `user` may leave in the keyrings, removed by `remove`. A user of its
    own (`own`) has every key of its keyrings removed; the grader's own user, only the keys
    added since this was made."""

    def __init__(self, user: int, own: bool) -> None:
        self.user, self.own = user, own
        self._before = {} if own else {ring: _keys(ring) for ring in _rings()}

    def remove(self) -> None:
        if not self.own:
            for ring in _rings():
                for key in _keys(ring) - self._before.get(ring, set()):
                    _keyctl(_UNLINK, key, ring)
            return
        with warnings.catch_warnings():  # jax's warning at a fork: this child makes only calls
            warnings.simplefilter("ignore", RuntimeWarning)  # to the kernel, then exits
            child = os.fork()  # the keyrings are the user's: cleared by a process of that uid
        if child == 0:
            try:
                os.setgroups([])
                os.setgid(self.user)
                os.setuid(self.user)
                for ring in _rings():
                    _keyctl(_CLEAR, ring)
            finally:
                os._exit(0)
        os.waitpid(child, 0)
