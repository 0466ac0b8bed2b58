"""Temporary folders that do not outlive the process that made them, even one killed with
SIGKILL (a grading `grade-batch` stops at `--submission-timeout`, a Dask worker lost mid-batch).

Each folder holds a lock file that its maker keeps locked (`flock`) until it removes the folder.
The kernel lets go of a lock when the last process holding it ends, however it ends, so a folder
whose lock can be taken is a dead process's leftover: the first folder a process makes with a
prefix first removes every such leftover of that prefix and of this user from the temporary
folder. A lock is made under another name and renamed into place once locked, so a folder being
made is never taken for a leftover, and removed after everything else in its folder, so a folder
being removed always has one.

`own_folder` is the other kind: a folder of the temporary folder that one user keeps to itself
across processes (a Dask worker machine's banks, the locks of worker users' uids).
"""

from __future__ import annotations

import atexit
import fcntl
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gradcheck.engine import trees

#: the prefixes of gradcheck's folders: a worker's files and home; a submission unpacked on a
#: Dask worker; `grade --watch`'s answer key
WORKERS = "gradcheck-worker-"
SUBMISSIONS = "gradcheck-submission-"
WATCH = "gradcheck-watch-"
#: the name of the lock file in each folder
LOCK = ".gradcheck-lock"

#: every folder this process made and has not removed: the descriptor of its lock, and the pid
#: of its maker (a forked child inherits the table, and must not remove its parent's folders)
_MADE: dict[Path, tuple[int, int]] = {}
#: the prefixes whose leftovers a process (its pid) has already removed
_SWEPT: set[tuple[str, int]] = set()


def make(prefix: str) -> Path:
    """A new, empty folder (0700) in the temporary folder, named `prefix` and a random part,
    locked for as long as this process lives or until `remove`."""
    if (prefix, os.getpid()) not in _SWEPT:
        sweep(prefix)
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    fd = os.open(folder / (LOCK + ".new"), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(folder / (LOCK + ".new"), folder / LOCK)
    _MADE[folder] = (fd, os.getpid())
    return folder


@contextmanager
def folder(prefix: str) -> Iterator[Path]:
    """`make`, removed at the end of the block."""
    made = make(prefix)
    try:
        yield made
    finally:
        remove(made)


def remove(folder: Path) -> None:
    """Remove a folder `make` made, everything in it, and its lock."""
    _remove_lock_last(folder)
    fd, _ = _MADE.pop(folder, (None, 0))
    if fd is not None:
        os.close(fd)


def sweep(prefix: str) -> list[Path]:
    """Remove every folder of this user in the temporary folder named with `prefix` whose maker
    has ended (its lock is free); the folders removed. A folder without a lock (one of an older
    gradcheck) or locked (its maker still runs) is left alone."""
    _SWEPT.add((prefix, os.getpid()))
    removed = []
    try:
        names = [name for name in os.listdir(tempfile.gettempdir()) if name.startswith(prefix)]
    except OSError:
        return removed
    for name in names:
        folder = Path(tempfile.gettempdir()) / name
        try:
            info = folder.lstat()
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                continue
            fd = os.open(folder / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its maker still runs
            os.close(fd)
            continue
        _remove_lock_last(folder)
        os.close(fd)
        removed.append(folder)
    return removed


def _remove_lock_last(folder: Path) -> None:
    """Remove `folder`, its lock file last: a process killed as it removes one (a Dask worker
    lost, a grading stopped) leaves a folder whose lock the next sweep can still take, never
    one without a lock, which no sweep would remove."""
    try:
        with os.scandir(folder) as entries:
            inside = [(entry.path, entry.is_dir(follow_symlinks=False)) for entry in entries
                      if entry.name != LOCK]
    except OSError:
        inside = []
    for path, is_folder in inside:
        if is_folder:
            trees.remove(path)
        else:
            try:
                os.unlink(path)
            except OSError:  # what is left goes with the folder below
                pass
    trees.remove(folder)


def own_folder(name: str) -> Path:
    """The folder `name` of the temporary folder, this user's alone (0700), made if need be;
    PermissionError if another user made it, or opened it to others."""
    place = Path(tempfile.gettempdir()) / name
    place.mkdir(mode=0o700, exist_ok=True)
    info = place.lstat()
    if info.st_uid != os.geteuid() or info.st_mode & 0o077 or not stat.S_ISDIR(info.st_mode):
        raise PermissionError(f"{place} is not this user's alone: remove it and grade again")
    return place


@atexit.register
def _remove_left() -> None:
    """The folders a run ended before it removed them (Ctrl-C, or SIGTERM, which `gradcheck`
    turns into one): never in a forked process for its parent's folders."""
    for folder, (_, pid) in list(_MADE.items()):
        if pid == os.getpid():
            remove(folder)
