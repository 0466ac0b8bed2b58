"""A memory cgroup of the worker's own, where the grader can make one: the kernel then counts
every page the worker's processes are charged for (files in memory filesystems whoever owns them,
kernel memory, page cache) and kills at the limit, which no poll can match. The grader's poll
(:mod:`gradcheck.engine.census`, :mod:`gradcheck.engine.memory`) applies either way.

cgroup v2 is used when the grader's own cgroup delegates the memory controller to its children
(`memory` in its cgroup.subtree_control, or written there when the kernel allows); else cgroup v1,
when the memory hierarchy is mounted and the grader's cgroup in it is writable (as root,
usually). The worker joins its cgroup itself, before it imports the submission, through a
descriptor of the cgroup's cgroup.procs that the grader opened (the kernel checks the opener's
rights, so a worker of another user may join it, and only that one).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

#: a cgroup this module makes is named so: PREFIX, the grader's pid, a number
PREFIX = "gradcheck-"
_made = 0  # cgroups made by this process so far


class MemoryCgroup:
    """One worker's memory cgroup, with its limit; removed by `close`."""

    def __init__(self, path: Path, version: int, limit: int) -> None:
        self.path = path
        self.version = version
        self.limit = limit
        #: the file that counts its kills, open for reading again after every reply
        self._events: int | None = None

    def describe(self) -> str:
        return f"a cgroup v{self.version} memory limit ({self.path})"

    def join_descriptor(self) -> int:
        """A descriptor to write a pid to (the worker writes its own), opened with the grader's
        rights: the caller passes it to the worker and closes its own copy."""
        return os.open(self.path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)

    def holds(self, pid: int) -> bool:
        """Whether `pid` is in this cgroup."""
        try:
            return str(pid) in (self.path / "cgroup.procs").read_text().split()
        except OSError:
            return False

    def oom_kills(self) -> int:
        """How many processes the kernel killed in this cgroup for passing its limit."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            if self._events is None:
                self._events = os.open(self.path / name, os.O_RDONLY | os.O_CLOEXEC)
            lines = os.pread(self._events, 4096, 0).decode().splitlines()
        except OSError:
            return 0
        return next((int(line.split()[1]) for line in lines if line.startswith("oom_kill ")), 0)

    def usage(self) -> int:
        """The bytes charged to this cgroup now."""
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        try:
            return int((self.path / name).read_text())
        except (OSError, ValueError):
            return 0

    def close(self) -> None:
        """Remove the cgroup (its processes must be dead: a dying one may take a moment)."""
        if self._events is not None:
            os.close(self._events)
            self._events = None
        _remove(self.path)


def create(limit: int, versions: tuple[int, ...] = (2, 1)) -> MemoryCgroup | str:
    """A new memory cgroup limited to `limit` bytes (swap included), under the grader's own, of
    the first of `versions` the grader can use; or why there can be none, in a sentence."""
    global _made
    found = _parent(versions)
    if isinstance(found, str):
        return found
    parent, version = found
    _remove_stale(parent)
    _made += 1
    path = parent / f"{PREFIX}{os.getpid()}-{_made}"
    try:
        path.mkdir()
    except OSError as error:
        return f"cannot make a cgroup in {parent} ({error.strerror or error})"
    try:
        if version == 2:
            (path / "memory.max").write_text(str(limit))
            if (path / "memory.swap.max").exists():
                (path / "memory.swap.max").write_text("0")
            (path / "memory.oom.group").write_text("1")  # the whole tree dies at the limit
        else:
            (path / "memory.limit_in_bytes").write_text(str(limit))
            if (path / "memory.memsw.limit_in_bytes").exists():  # swap accounting is on
                (path / "memory.memsw.limit_in_bytes").write_text(str(limit))
    except OSError as error:
        _remove(path)
        return f"cannot set the memory limit of the cgroup {path} ({error.strerror or error})"
    return MemoryCgroup(path, version, limit)


def describe(limit_mb: int | None) -> str:
    """Which memory limit a worker of this grader gets, for the log."""
    if limit_mb is None:
        return "no memory limit"
    found = _parent()
    if isinstance(found, str):
        return (f"memory limit {limit_mb} MB per worker, polled by the grader ({found}); the "
                "poll cannot see what the kernel holds for a worker (socket and pipe buffers): "
                "give the container a memory limit")
    parent, version = found
    return (f"memory limit {limit_mb} MB per worker, by a cgroup v{version} under {parent} and "
            "polled by the grader")


def _parent(versions: tuple[int, ...] = (2, 1)) -> tuple[Path, int] | str:
    """The grader's own memory cgroup under which a worker's may be made, and its version (the
    first of `versions` that can be used); or why there is none."""
    mounts = _mounts()
    groups = _own_groups()
    why = []
    if 2 in versions and "cgroup2" in mounts and "" in groups:
        here = Path(mounts["cgroup2"] + groups[""])
        try:
            delegated = "memory" in (here / "cgroup.subtree_control").read_text().split()
            if not delegated and "memory" in (here / "cgroup.controllers").read_text().split():
                (here / "cgroup.subtree_control").write_text("+memory")
                delegated = True
            if delegated:
                if os.access(here, os.W_OK):
                    return here, 2
                why.append(f"the grader may not write its cgroup v2 {here}")
            else:
                controllers = (here / "cgroup.controllers").read_text().split()
                why.append(f"the grader's cgroup v2 {here} has no memory controller (its "
                           f"controllers: {', '.join(controllers) or 'none'})")
        except OSError as error:
            why.append(f"the grader's cgroup v2 {here} does not delegate the memory controller "
                       f"({error.strerror or error})")
    if 1 in versions and "memory" in mounts and "memory" in groups:
        here = Path(mounts["memory"] + groups["memory"])
        if os.access(here, os.W_OK):
            return here, 1
        why.append(f"the grader may not write its cgroup v1 {here}")
    if not why:
        why.append("no cgroup memory controller (version "
                   f"{' or '.join(map(str, versions))}) is mounted")
    return "no cgroup: " + "; ".join(why)


def _mounts() -> dict[str, str]:
    """Where the cgroup v2 hierarchy ("cgroup2") and the v1 memory one ("memory") are mounted."""
    found: dict[str, str] = {}
    for line in _lines("/proc/self/mounts"):
        fields = line.split()
        if len(fields) < 4:
            continue
        if fields[2] == "cgroup2":
            found.setdefault("cgroup2", fields[1])
        elif fields[2] == "cgroup" and "memory" in fields[3].split(","):
            found.setdefault("memory", fields[1])
    return found


def _own_groups() -> dict[str, str]:
    """This process's cgroup: in v2 (key ""), and in the v1 memory hierarchy (key "memory")."""
    found: dict[str, str] = {}
    for line in _lines("/proc/self/cgroup"):
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            found[""] = path.rstrip("/")
        elif "memory" in controllers.split(","):
            found["memory"] = path.rstrip("/")
    return found


def _lines(path: str) -> list[str]:
    try:
        with open(path) as f:
            return f.read().splitlines()
    except OSError:
        return []


def _remove_stale(parent: Path) -> None:
    """Remove the cgroups of graders that died before they could (their pid is gone)."""
    try:
        children = list(parent.glob(f"{PREFIX}*-*"))
    except OSError:
        return
    for child in children:
        pid = child.name[len(PREFIX):].partition("-")[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            _remove(child, tries=1)


def _remove(path: Path, tries: int = 100) -> None:
    for _ in range(tries):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # EBUSY: a process in it is still dying
            time.sleep(0.01)
