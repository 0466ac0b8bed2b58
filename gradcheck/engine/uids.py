"""The worker users' uids this machine's gradchecks hold: one grading at a time per uid.

A worker of a user of its own has every process of its uid killed, and every file of that uid in
the shared folders removed, as it starts and stops (gradcheck.engine.census, memory): a second
grading with the same uid at the same time killed the first's worker and removed its folders,
and the first then failed as a fault of gradcheck's. Each command that grades with
--worker-user holds a lock per uid it uses, in a folder of the grader's user alone (`flock`: the
kernel lets it go however its holder ends), for as long as it runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from gradcheck.engine import scratch

#: the locks this process holds
_held: dict[int, IO[bytes]] = {}


class InUse(Exception):
    """Another gradcheck of this machine holds the uid."""


def folder() -> Path:
    """This machine's folder of uid locks for the grader's user (0700)."""
    try:
        return scratch.own_folder(f"gradcheck-uids-{os.geteuid()}")
    except PermissionError as error:
        raise InUse(str(error)) from None


def take(uid: int) -> IO[bytes] | None:
    """The lock of `uid`, taken through a file opened here (so that two threads of one process
    never hold the same uid), held until closed or the process ends; None if held elsewhere."""
    lock = open(folder() / str(uid), "ab")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    return lock


@contextlib.contextmanager
def held(uids: Iterable[int]) -> Iterator[None]:
    """Hold every one of `uids` while the block runs (those this process holds already, as
    long as it did), or raise InUse, saying what to do, for the first one another process
    holds."""
    taken: list[int] = []
    try:
        for uid in uids:
            if uid in _held:
                continue
            lock = take(uid)
            if lock is None:
                raise InUse(f"uid {uid} is in use by another gradcheck on this machine: a "
                            "worker of that uid has every process and file of it removed as it "
                            "starts, so the two would break each other; give each grading that "
                            "runs at the same time uids of its own (grade-batch -j N "
                            "--worker-user UID takes UID to UID+N-1)")
            _held[uid] = lock
            taken.append(uid)
        yield
    finally:
        for uid in taken:
            _held.pop(uid).close()
