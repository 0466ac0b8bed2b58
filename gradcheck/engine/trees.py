"""Folder trees a submission made or handed in, removed and copied whatever their depth.

A submission can nest folders far deeper than Python recurses (a thousand `mkdir`s and `chdir`s
in /dev/shm take a millisecond), and a `RecursionError` is no `OSError`: `shutil.rmtree(...,
ignore_errors=True)` and `shutil.copytree` raise it all the same, which stopped the grader's
clean-up, scored every later grading on the machine 0, and aborted a whole batch. Nothing here
recurses; `remove` and `walk` never raise, and `copy_for_group` raises `CopyRefused` (why a
submission is not copied) or the `OSError` of a copy that failed.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

#: what `copy_for_group` copies at most: bytes of files, entries, and folders one inside another
COPY_BYTES = 100 << 20
COPY_ENTRIES = 10_000
COPY_DEPTH = 64


class CopyRefused(Exception):
    """A submission `copy_for_group` will not copy, and why, in words for the gradebook."""


#: why a submission over COPY_BYTES is not copied
_TOO_LARGE = f"its files are larger than {COPY_BYTES >> 20} MB in all"


def remove(path: str | Path) -> None:
    """Remove `path` and everything under it, following no symbolic link; never raises. The
    standard library's walk recurses, so a tree deeper than it goes is left to `rm -rf`, which
    walks any depth and keeps to `path`'s filesystem."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        pass
    if os.path.lexists(path):
        try:
            subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
        except OSError:  # no rm: what is left stays
            pass


def walk(top: str | Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """`os.walk(top)` without its recursion: each folder, its subfolders and its other entries,
    top-down, a subfolder removed from the list left unwalked; links are not followed, and a
    folder that cannot be read is passed over."""
    waiting = [str(top)]
    while waiting:
        folder = waiting.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError:
            continue
        subfolders = [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
        yield folder, subfolders, [entry.name for entry in entries
                                   if not entry.is_dir(follow_symlinks=False)]
        waiting += [os.path.join(folder, name) for name in reversed(subfolders)]


def copy_for_group(source: Path, target: Path, group: int) -> None:
    """Copy `source` (a file or a folder) to `target`, owned by this process's user with group
    `group`, which may read it (and run what the owner may run) but write nothing; others get
    nothing. Each file is read through a descriptor opened without following a link and checked
    to be a regular file, so a FIFO, a device or a link swapped in meanwhile is never read; a
    symbolic link is copied as a link; sockets, FIFOs and devices inside a folder are left out.
    Raises `CopyRefused` past `COPY_BYTES`, `COPY_ENTRIES` or `COPY_DEPTH`, or for a `source`
    that is none of a file, a folder or a link; `target` may then hold a part of the copy."""
    info = os.lstat(source)
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)
            or stat.S_ISLNK(info.st_mode)):
        raise CopyRefused(f"{source.name} is not a file or a folder")
    budget = [COPY_BYTES, COPY_ENTRIES]
    _copy_entry(source, target, info, group, budget)
    folders = [(source, target, 1)] if stat.S_ISDIR(info.st_mode) else []
    while folders:
        here, there, depth = folders.pop()
        if depth > COPY_DEPTH:
            raise CopyRefused(f"it nests folders more than {COPY_DEPTH} deep")
        with os.scandir(here) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                if _copy_entry(Path(entry.path), there / entry.name, info, group, budget):
                    folders.append((Path(entry.path), there / entry.name, depth + 1))


def _copy_entry(source: Path, target: Path, info: os.stat_result, group: int,
                budget: list[int]) -> bool:
    """Copy one entry as `copy_for_group` says; whether it is a folder to copy the entries of."""
    budget[1] -= 1
    if budget[1] < 0:
        raise CopyRefused(f"it holds more than {COPY_ENTRIES:,} files and folders")
    mode = info.st_mode
    # the group may read what the owner may read and run what the owner may run
    shared = 0o600 | (0o040 | (mode & 0o100) >> 3 if stat.S_ISREG(mode) else 0o050)
    if stat.S_ISLNK(mode):
        os.symlink(os.readlink(source), target)
        os.chown(target, -1, group, follow_symlinks=False)
    elif stat.S_ISDIR(mode):
        os.mkdir(target, 0o700)
        os.chown(target, -1, group)
        os.chmod(target, 0o700 | shared)
        return True
    elif stat.S_ISREG(mode):
        if info.st_size > budget[0]:  # before a byte is read: a sparse file can claim terabytes
            raise CopyRefused(_TOO_LARGE)
        budget[0] -= _copy_file(source, target, group, shared, budget[0])
    return False


def _copy_file(source: Path, target: Path, group: int, mode: int, room: int) -> int:
    """Copy a regular file's bytes, at most `room` of them; how many were copied."""
    reading = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(reading).st_mode):  # swapped since it was listed
            return 0
        writing = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                          | os.O_CLOEXEC, 0o600)
        copied = 0
        try:
            os.fchown(writing, -1, group)
            os.fchmod(writing, mode)
            while chunk := os.read(reading, 1 << 20):
                copied += len(chunk)
                if copied > room:
                    raise CopyRefused(_TOO_LARGE)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(writing, view):]
        finally:
            os.close(writing)
        return copied
    finally:
        os.close(reading)
