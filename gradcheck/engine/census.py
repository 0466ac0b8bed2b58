"""The census of a worker's processes, and the limits read from it: which processes belong to the
worker (its session and every descendant, a child that called setsid() included), how much memory
they use with each shared page counted once, and how to stop and kill them all, fork loops too.

The grader is a child subreaper (`gradcheck.engine.worker.adopt_orphans`), so every process of
its workers stays below it, whoever dies first: the census looks only there, walking the
children the kernel lists for each thread (`/proc/PID/task/TID/children`), not at every process
of the machine, whose count grows with the job slots of a cluster's worker machine. On a kernel
that does not list children, it reads every process of the machine, as it did before.
"""

from __future__ import annotations

import os
import signal
import time
import warnings
from typing import Callable, Iterable

from gradcheck.engine import memory

RESCAN = 1.0  # seconds after which the worker's processes are looked for afresh regardless
_PAGE = os.sysconf("SC_PAGE_SIZE")


class Census:
    """The worker's processes, as last found in /proc.

    A walk of the processes below the grader (`below`) costs a few reads per process and thread,
    after every request; it is skipped when the kernel's last process id is the one seen before
    the previous walk (no process or thread was created anywhere since, so the worker's can only
    be fewer) and that walk is recent: only the processes it found are read again.
    """

    def __init__(self) -> None:
        self.last_pid: int | None = None
        self.at = -RESCAN
        self.pids: frozenset[int] | None = None

    def processes(self, session: int, since: int,
                  exclude: Iterable[int] = ()) -> list[tuple[int, int, int]]:
        """(pid, threads, resident bytes) of the session's processes now, and of the orphans
        this process adopted since the clock tick `since` (but `exclude`), as :func:`members`.
        (An orphan keeps its pid: it was found through its parent in the scan before.)"""
        last, now = _last_pid(), time.monotonic()
        among = self.pids
        if last is None or among is None or self.last_pid != last or now - self.at >= RESCAN:
            among = None
        found = members(session, among=among, orphans_since=since, exclude=exclude)
        if among is None:
            self.last_pid, self.at, self.pids = last, now, frozenset(pid for pid, *_ in found)
        return found


def _last_pid() -> int | None:
    """The process id the kernel handed out last (a thread takes one too), or None if unknown."""
    try:
        return int(memory.read_whole("/proc/loadavg").split()[4])
    except (OSError, IndexError, ValueError):
        return None


def members(session: int, roots: set[int] = frozenset(),
            among: Iterable[int] | None = None, orphans_since: int | None = None,
            exclude: Iterable[int] = ()) -> list[tuple[int, int, int]]:
    """(pid, threads, resident bytes) of each live process in `session`, in `roots`, adopted by
    this process since `orphans_since` (as :func:`adopted`, but `exclude`), or descending from
    one of those (a child that called setsid() is found through its parent); looked for among
    the processes below this one (`below`), or only `among` these pids."""
    stats: dict[int, tuple[int, int, int, int]] = {}
    own = set(exclude)
    for pid in (below(os.getpid()) if among is None else among):
        fields = _stat(pid)
        if fields is None:  # it exited meanwhile
            continue
        if fields[0] != b"Z":  # zombies hold no memory and run nothing
            stats[pid] = (int(fields[1]), int(fields[3]), int(fields[17]),
                          int(fields[21]) * _PAGE)
            if orphans_since is not None and _adopted(pid, fields, orphans_since, own):
                roots = roots | {pid}
    found = {pid for pid, (_, sid, _, _) in stats.items() if sid == session or pid in roots}
    while True:
        more = {pid for pid, (ppid, *_) in stats.items() if ppid in found} - found
        if not more:
            break
        found |= more
    return [(pid, stats[pid][2], stats[pid][3]) for pid in found]


def below(root: int) -> list[int]:
    """Every process below `root` (its children, theirs, and so on), as the kernel lists each
    thread's children; or, where it does not, every process of the machine but `root`."""
    if not LISTS_CHILDREN:
        return _every_process(root)
    seen = {root}
    todo = [root]
    while todo:
        for child in _children(todo.pop()):
            if child not in seen:  # else a pid handed out again meanwhile: never go round
                seen.add(child)
                todo.append(child)
    seen.discard(root)
    return list(seen)


def _children(pid: int) -> list[int]:
    """The children of `pid` as each of its threads lists them; none once it has exited (they
    are then found through their new parent)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in threads:
        try:
            found += map(int, memory.read_whole(f"/proc/{pid}/task/{tid}/children").split())
        except OSError:  # the thread ended meanwhile
            continue
    return found


def _every_process(but: int) -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit() and name != str(but)]


#: whether this kernel lists a thread's children (CONFIG_PROC_CHILDREN)
LISTS_CHILDREN = os.path.exists(f"/proc/self/task/{os.getpid()}/children")


def uses_more_than(members: list[tuple[int, int, int]], limit: int,
                   held: memory.Held | None = None) -> bool:
    """Whether the processes use more than `limit` bytes, each shared page counted once (the sum
    of their PSS; a sum of resident sizes would count the pages of every fork again), together
    with the memory `held` finds outside their pages. A PSS is never above the resident size,
    so while the resident sizes add up to less than half the limit (room for the kernel's
    lagging counters) the PSS, which takes a walk of each process's pages to read, is not
    read."""
    outside = held.bytes(pid for pid, *_ in members) if held is not None else 0
    if sum(rss for _, _, rss in members) + outside < limit // 2:
        return False
    total = outside
    for pid, _, rss in members:
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
                pss = next(line for line in f if line.startswith(b"Pss:"))
            total += int(pss.split()[1]) << 10
        except (OSError, StopIteration):  # gone, or a kernel without smaps_rollup
            total += rss
    return total > limit


def _stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command's name (state first), or None."""
    try:
        data = memory.read_whole(f"/proc/{pid}/stat")
    except OSError:
        return None
    return data[data.rindex(b")") + 2:].split()


def start_time(pid: int) -> int:
    """When `pid` started, in clock ticks since boot (0 if it is gone)."""
    fields = _stat(pid)
    return int(fields[19]) if fields else 0


def adopted(since: int, exclude: Iterable[int] = ()) -> set[int]:
    """The processes this one adopted as a child subreaper: its children outside its own
    session that started at `since` or later, but for `exclude` (the workers it started
    itself, in sessions of their own). An orphan of a worker that died first (a child that
    called setsid(), then its parent exited) comes back here instead of to init; this finds it,
    dead or alive, and its descendants are found through it."""
    own = set(exclude)
    me = os.getpid()
    return {pid for pid in (_children(me) if LISTS_CHILDREN else _every_process(me))
            if _adopted(pid, _stat(pid), since, own)}


def _adopted(pid: int, fields: list[bytes] | None, since: int, exclude: set[int]) -> bool:
    """Whether the process of these /proc stat `fields` is an orphan this process adopted: its
    child, in another session, started at `since` or later, not one of `exclude`."""
    return (fields is not None and pid not in exclude and int(fields[1]) == os.getpid()
            and int(fields[3]) != os.getsid(0) and int(fields[19]) >= since)


def reap(pids: Iterable[int]) -> None:
    """Collect the exit status of those of `pids` that are this process's dead children, so
    that adopted orphans leave no zombie."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def kill_all(session: int, more: Callable[[], set[int]] = set) -> None:
    """Stop every process of the worker's session and its descendants, and of `more()` (asked
    again on every round: the orphans the grader adopted) and theirs, until no new one appears
    (a stopped process cannot fork, and a stopped parent keeps its children findable even after
    they leave the session), then kill them all. A process orphaned by a double fork is found
    too: the worker is a child subreaper, so such orphans become its children.

    `more()` is asked again after each scan, and a round that finds nothing ends the search only
    if it names no one new: a process dying already (a worker killed with its grader) may hand
    its children over to this process between `more()` and the scan, so that neither saw them."""
    stopped: set[int] = set()
    roots = more()
    for _ in range(1000):
        new = {pid for pid, *_ in members(session, stopped | roots)} - stopped
        later = more()
        if not new and later <= roots:
            break
        roots = later
        for pid in new:
            _signal_quietly(pid, signal.SIGSTOP)
        stopped |= new
        # Trusted as stopped only once /proc says so: a fork under way when SIGSTOP came still
        # makes its child, and the next scan must see that child.
        _wait_for(new, lambda state: state in (None, b"T", b"t", b"Z", b"X"))
    for pid in stopped:
        _signal_quietly(pid, signal.SIGKILL)
    _wait_for(stopped, lambda state: state in (None, b"Z", b"X"))  # dying takes a moment


def _wait_for(pids: set[int], done: Callable[[bytes | None], bool]) -> None:
    """Poll the state of `pids` (None once gone) for up to a second until `done` holds for all:
    soon at first, as a signal takes effect within a fraction of a millisecond on an idle core
    (a worker is stopped and killed at every change of side, on the way to the report), then
    every 5 ms."""
    pause, waited = 0.0002, 0.0
    while not all(done(_state(pid)) for pid in pids):
        if waited >= 1.0:
            return
        time.sleep(pause)
        waited += pause
        pause = min(2 * pause, 0.005)


def _state(pid: int) -> bytes | None:
    fields = _stat(pid)
    return fields[0] if fields else None


def _signal_quietly(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def processes_of(uid: int) -> set[int]:
    """Every live process whose real user is `uid`."""
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                status = f.read()
        except OSError:
            continue
        uids = next((line.split() for line in status.splitlines() if line.startswith(b"Uid:")),
                    None)
        state = next((line.split() for line in status.splitlines()
                      if line.startswith(b"State:")), None)
        if uids and int(uids[1]) == uid and not (state and state[1] in (b"Z", b"X")):
            found.add(int(name))
    return found


def kill_user(uid: int) -> bool:
    """Kill every process of `uid` (the caller must be root), until none is left: from a child
    that takes that uid, kill(-1, SIGKILL), which reaches all of that user's processes at once,
    so a fork loop cannot outrun it one pid at a time. Whether none is left."""
    for _ in range(50):
        if not processes_of(uid):
            return True
        with warnings.catch_warnings():  # jax's warning at a fork: this child makes only calls
            warnings.simplefilter("ignore", RuntimeWarning)  # to the kernel, then exits
            child = os.fork()
        if child == 0:  # only system calls here: this process has other threads' locks
            try:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(child, 0)
        time.sleep(0.01)
    return not processes_of(uid)
