"""The grader's side of the worker process: start it, ask it, time it out, kill it, restart it.

A submission never runs in the grader's process. `Worker` keeps one worker subprocess
(:mod:`gradcheck.engine.worker`) per submission alive across requests. `request` returns the worker's
reply, checked against the shape the probe gives (:func:`gradcheck.engine.requests.check_reply`), or a
`Failure` that says plainly what happened ("timed out after 10 s in backward()"). After a failure
the worker's processes are all killed and a new worker starts with the next request; only the
request that failed is lost. A submission that cannot be imported fails every request with the
same `Failure`, which carries the traceback. A worker process is a new interpreter, or, given a
`Zygote` (a grading's Workers keep one), a fork of a clean one: the same process, without the
cost of an interpreter's start.

Limits, and who enforces them:

- wall time, per request: the grader, which kills the worker (and `import_timeout` for the import);
- memory: RLIMIT_DATA in the worker (the engine gets a MemoryError, which ends the request; not
  RLIMIT_AS, because torch and numpy reserve far more address space than they use), and the
  proportional set size of all the worker's processes, polled by the grader (shared memory and
  forks escape RLIMIT_DATA), with the memory it holds outside them (:mod:`gradcheck.engine.memory`:
  memfds, files in memory filesystems, System V segments), removed when it stops; and, where the
  grader can make one, a memory cgroup per Worker (:mod:`gradcheck.engine.cgroup`), which the
  kernel enforces;
- processes and threads: counted by the grader over the worker's session and its descendants;
  RLIMIT_NPROC too when the worker runs as a user of its own (`user`). RLIMIT_NPROC does not
  apply to root, and a writable cgroup v2 `pids` controller cannot be assumed (this machine has
  none), so the count is polled; on a failure every process is stopped, then killed. A process
  orphaned inside the worker's tree is adopted by the worker (a child subreaper, below), unless
  the submission undoes that on purpose: then it escapes, and bounding it is the container's part.
  Finding the worker's processes means reading every process in /proc (per-task children lists
  are a kernel option this machine lacks), so a poll scans again only when the kernel has handed
  out a process id since the last scan, or a second has passed; otherwise no process or thread
  can have been started anywhere, and the processes found last time are looked at again;
- output: stdout and stderr go to files the grader reads (keeping the first `keep_output` bytes of
  each) and empties after every request; more than `max_output` bytes in one request fail it.
  RLIMIT_FSIZE (`max_output` + 1 MB, with SIGXFSZ's default action restored) stops a flood at
  the write that goes past it, and caps any file the worker writes;
- CPU time: RLIMIT_CPU over the worker's life, a backstop for a worker left spinning;
- no core dumps; a session of its own; killed when the grader dies (PR_SET_PDEATHSIG);
- the worker is a child subreaper (PR_SET_CHILD_SUBREAPER), so a process that daemonises (fork,
  setsid, fork, exit) stays its descendant and is killed with it, unless the submission turns
  that off on purpose; the processes are stopped before they are killed, so a fork loop cannot
  outrun the kill.

With CAP_SYS_RESOURCE a submission could raise its own rlimits; the polled limits hold
regardless. Running the grader as an unprivileged user in a container is the platform's part.

A worker of another user (`user`) can fail only late, in its first request, when that user cannot
run its Python or read gradcheck or the submission; `preflight` checks all three beforehand.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import itertools
import json
import math
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from gradcheck.engine import census, cgroup, handler, memory, run, scratch, wire
from gradcheck.engine.worker import (
    BOOTSTRAP,
    HEADER,
    MAX_FRAME,
    PACKAGE,
    PHASE_WIDTH,
    ZYGOTE,
    adopt_orphans,
    pack,
)
from gradcheck.program.memo import Memo

POLL = 0.05  # seconds between checks of a busy worker's processes, memory and output
#: the send buffer asked for the grader's end of a worker's channel (the kernel may give less:
#: net.core.wmem_max)
CHANNEL_BUFFER = 1 << 20
#: the share of the channel's send buffer that requests sent ahead of their turn may take in
#: all: the worker, busy with the request before them, reads none of them meanwhile, so that they
#: must fit in it for sending them never to wait for the worker (a vector request of 3,000
#: elements is about 45 kB; the kernel's default buffer, about 208 kB, is doubled when asked)
AHEAD_SHARE = 4
#: crashes in a row after which the worker is not restarted until the grader moves on to another
#: exercise (`Worker.move_on`): an engine that crashes on every request, and takes seconds to
#: import, would otherwise spend an exercise's time restarting, request after request
MAX_CRASHES = 3
#: the kinds of Failure that are not crashes: the worker hung, or never imported
_NOT_CRASHES = ("timeout", "import", "crashes", "deadline")
MAX_DETAIL = 20_000  # characters kept of a traceback (its end) or an exception's message
_GRADCHECK_DIR = str(Path(__file__).resolve().parent.parent)  # the gradcheck package folder
#: the workers of this process running now: its children that lead a session of their own on
#: purpose, never taken for adopted orphans
_RUNNING: set[int] = set()


@dataclass(frozen=True)
class Failure:
    """A request the worker could not answer.

    `kind` is one of timeout, exit, signal, memory, tasks, output, cpu, raised, protocol, import,
    crashes (MAX_CRASHES in a row: not restarted before `move_on`), deadline (past
    `Worker.deadline`); `message` is a sentence for the student; `phase` is where the engine was
    (a key of :data:`gradcheck.engine.requests.PHASES`); `detail` holds a traceback or an
    exception's message.
    """

    kind: str
    message: str
    phase: str
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


class Worker:
    """One submission's worker process, started on the first request and after each failure.

    The worker dies with the thread that started it (PR_SET_PDEATHSIG): use a Worker from the
    thread that made its first request, or from one that outlives it."""

    def __init__(self, submission: str | Path, *, memory_mb: int | None = 1024,
                 cpu_seconds: int = 3600, max_output: int = 1_000_000,
                 keep_output: int = 20_000, max_tasks: int = 256,
                 import_timeout: float = 60.0, python: str = sys.executable,
                 max_files: int = 128, use_cgroup: bool = True,
                 forbid: Sequence[str] = (), user: int | None = None,
                 zygote: Zygote | None = None) -> None:
        self.submission = Path(submission).resolve()
        #: run the worker as this user and group id, with no other groups (the grader must be
        #: root): it can then neither signal nor trace the grader, nor read or write what that
        #: user may not, and RLIMIT_NPROC caps its processes in the kernel (docs/security.md).
        self.user = user
        #: top-level modules the submission cannot import (torch and jax, when grading from an
        #: answer key): a deterrent, not a wall; see docs/security.md.
        self.forbid = tuple(forbid)
        self.memory_mb = memory_mb
        self.cpu_seconds = cpu_seconds
        self.max_output = max_output
        self._file_limit = max_output + 1_000_000  # RLIMIT_FSIZE: room to see a flood go past
        self._printed = 0  # bytes printed since the output was last collected
        self.keep_output = keep_output
        self.max_tasks = max_tasks
        #: RLIMIT_NOFILE: a scalar engine needs few descriptors, and each open memfd could hold
        #: memory (memory.Held counts them too)
        self.max_files = max_files
        self.import_timeout = import_timeout
        self.python = python
        #: what forks this worker's processes, when it runs as the grader's user (`Zygote`);
        #: else, or when it cannot, each is a new interpreter
        self.zygote = zygote if user is None and zygote is not None and zygote.python == python \
            else None
        #: set once the submission failed to import; every later request returns it.
        self.import_failure: Failure | None = None
        #: how many worker processes were started (1 + restarts).
        self.starts = 0
        #: seconds spent starting workers and importing the submission, over all starts.
        self.import_seconds = 0.0
        self.precompiled = 0  # of the last start: see `_start`
        #: bytes of output not kept.
        self.dropped = 0
        #: requests in a row that ended in a crash (a failure that is not a timeout)
        self.crashes = 0
        #: a time.monotonic() after which no request starts and no wait goes on (the whole
        #: submission's time, `--total-timeout`); None: no such bound
        self.deadline: float | None = None
        self._kept = {"stdout": bytearray(), "stderr": bytearray()}
        self._dir = _folder(user)  # its files, and in "home" its cwd, HOME and TMPDIR
        self._proc: subprocess.Popen[bytes] | _Forked | None = None
        self._sock: socket.socket | None = None
        self._buffer = bytearray()
        #: whether a string of the last frame may be over run.MAX_MESSAGE characters
        self._long = False
        #: what one read from the channel lands in, reused: recv(1 MB) would allocate (and map)
        #: a megabyte for every reply, however short
        self._chunk = memoryview(bytearray(1 << 20))
        self._eof = False
        #: the frames of the requests sent ahead (`request(..., then=...)`) whose replies are not
        #: read yet, in order, each with what it takes of the channel's send buffer (`_cost`)
        self._ahead: collections.deque[tuple[bytes, int]] = collections.deque()
        self._ahead_cost = 0  # theirs in all
        #: what the requests sent ahead may take of the running worker's channel in all
        #: (AHEAD_SHARE)
        self.ahead_bytes = 0
        #: requests sent ahead that the grader did not ask for after all (`request`), those still
        #: waiting when the worker is closed too
        self.unasked = 0
        #: the grader's end of the phase file (`_phase`), open while a worker runs
        self._phase_fd: int | None = None
        self._next_scan = 0.0
        #: the worker sent something since the limits were last polled (`_receive`)
        self._unpolled = False
        self._census = census.Census()  # the worker's processes, as last found in /proc
        #: the memory it holds in files and System V IPC (what the grader's user held before is
        #: not the worker's)
        self._held = self._memory_held()
        #: the worker's memory cgroup, where the grader can make one (`use_cgroup`), kept across
        #: restarts: what an earlier start left in memory counts against the next
        self._cgroup: cgroup.MemoryCgroup | None = None
        made = (cgroup.create(memory_mb << 20) if use_cgroup and memory_mb is not None
                else "no cgroup: not asked for")
        if isinstance(made, cgroup.MemoryCgroup):
            self._cgroup = made
        #: which memory limit applies, in words (for the log)
        self.memory_limit = ("none" if memory_mb is None else f"{memory_mb} MB, polled by the "
                             f"grader, and {made.describe()}" if self._cgroup else
                             f"{memory_mb} MB, polled by the grader ({made})")
        self._oom_kills = 0  # the cgroup's count of kills when the running worker started
        self._since = 0  # when the running worker started (census.start_time)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill the worker and every process it started; remove its files."""
        self.unasked += len(self._ahead)  # sent ahead, and never asked for
        if self._proc is not None:
            self._stop()
        if self._cgroup is not None:
            self._cgroup.close()
            self._cgroup = None
        scratch.remove(self._dir)

    def _memory_held(self) -> memory.Held:
        return memory.Held(os.geteuid() if self.user is None else self.user,
                           own=self.user is not None, home=str(self._home))

    @property
    def _home(self) -> Path:
        """The worker's cwd, HOME and TMPDIR."""
        return self._dir / "home"

    @property
    def pid(self) -> int | None:
        """The running worker's process id (also its session id), if one is running."""
        return self._proc.pid if self._proc is not None else None

    @property
    def output(self) -> str:
        """What the submission printed so far, truncated, with how much was dropped."""
        parts = [f"--- {name} ---\n{data.decode('utf-8', 'replace')}"
                 for name, data in self._kept.items() if data]
        if self.dropped:
            parts.append(f"[gradcheck dropped {self.dropped} more bytes of output]")
        return "\n".join(parts)

    def request(self, request: Mapping[str, Any], timeout: float,
                then: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any] | Failure:
        """The worker's reply to `request` (see gradcheck.engine.requests), or why there is none.
        `then`: the requests the grader will send next, in order, whatever this reply says,
        unless it is a failure (which stops the worker): sent now, as many as the channel takes
        without waiting (AHEAD_SHARE), so that the worker works on them while the grader reads
        this reply; the first of them that are sent ahead already (as many as are still to be
        answered after this request) are not sent again: the grader's plan of what follows is
        the same at every call. A later call with a request of the same bytes as one sent ahead
        (the same object, or one built alike) waits for its reply, its timeout counted from
        that call, having dropped the replies of those sent ahead before it; a request not
        sent ahead drops them all (`unasked` counts them: the engine answered requests the
        grading did not need).

        Raises gradcheck.engine.requests.RequestError for a malformed request (a grader bug)."""
        packed = frame(request)
        if self.import_failure is not None:
            return self.import_failure
        if self.crashes >= MAX_CRASHES:
            return Failure("crashes", f"the engine crashed {MAX_CRASHES} times in a row; not "
                           "restarted for this exercise", "")
        left = math.inf if self.deadline is None else self.deadline - time.monotonic()
        if left <= 0:
            return Failure("deadline", "not run: the submission's time ran out", "")
        reply = self._request(request, packed, min(timeout, left), then)
        if isinstance(reply, Failure) and reply.kind == "timeout" and left < timeout:
            reply = dataclasses.replace(reply, kind="deadline", message=(
                f"the submission's time ran out {_where(reply.phase)}"))
        if isinstance(reply, Failure):
            self.crashes += reply.kind not in _NOT_CRASHES
        else:
            self.crashes = 0
        return reply

    def move_on(self) -> None:
        """The grader moves on to another exercise: an engine that crashed MAX_CRASHES times in
        a row is started once more, as the next exercise may use none of what crashed (a crash
        in one operation must not cost every check after it); another crash there stops it
        again, a reply starts the count afresh."""
        self.crashes = min(self.crashes, MAX_CRASHES - 1)

    def _is_ahead(self, packed: bytes) -> bool:
        """Whether the request of this frame was sent ahead and is still to be answered (most
        often, the first of those)."""
        return bool(self._ahead) and (self._ahead[0][0] == packed
                                      or any(frame == packed for frame, _ in self._ahead))

    def _request(self, request: Mapping[str, Any], packed: bytes, timeout: float,
                 then: Iterable[Mapping[str, Any]]) -> dict[str, Any] | Failure:
        if self._proc is None:
            failure = self._start()
            if failure is not None:
                if failure.kind != "deadline":
                    self.import_failure = failure
                return failure
        assert self._sock is not None
        # the requests sent ahead before this one were not asked for after all (a fault of the
        # grader's in between, or a check whose time ran out): their replies are dropped, each
        # waited for as if asked; all of them, if this one was not sent ahead
        sent = self._is_ahead(packed)
        while self._ahead and not (sent and self._ahead[0][0] == packed):
            self.unasked += 1
            frame = self._wait(time.monotonic() + timeout, timeout)
            if isinstance(frame, Failure):
                return frame
            self._ahead_cost -= self._ahead.popleft()[1]
        deadline = time.monotonic() + timeout
        try:
            self._sock.settimeout(timeout)
            if sent:  # with the requests before, and it may be running
                self._ahead_cost -= self._ahead.popleft()[1]
            else:
                self._phase = "start"
                self._sock.sendall(packed)
        except TimeoutError:  # the worker stopped reading requests
            return self._fail("timeout", f"timed out after {timeout:g} s {self._where()}")
        except OSError:
            if self._exited():
                return self._exit_failure()
            return self._fail("protocol", f"the engine closed the grader's channel "
                              f"{self._where()}")
        self._send_ahead(itertools.islice(then, len(self._ahead), None))
        frame = self._wait(deadline, timeout)
        if isinstance(frame, Failure):
            return frame
        # polled once what came with the reply is in, or POLL s after the last poll: a reply
        # read with those before it was sent before that poll, which saw the worker after it
        if self._unpolled or time.monotonic() >= self._next_scan:
            failure = self._over_limits()
            if failure is not None:
                return failure
        self._collect_output()
        return self._reply(request, frame)

    def _send_ahead(self, requests: Iterator[Mapping[str, Any]]) -> None:
        """Send as many of `requests`, in order, as the channel takes with those sent ahead
        already, in one write: the worker reads none of them while it runs the one before. A
        malformed one (a grader bug) and those after it go in their turn, if ever, and are
        refused then (`request`)."""
        room = self.ahead_bytes - self._ahead_cost
        frames: list[bytes] = []
        size = 0
        for later in requests:
            try:
                packed = frame(later)
            except wire.RequestError:
                break
            if _cost(size + len(packed)) > room:
                break
            frames.append(packed)
            size += len(packed)
        if not frames:
            return
        assert self._sock is not None
        try:
            self._sock.sendall(b"".join(frames))
        except OSError:  # it stopped reading, or died: the wait for the reply finds why
            return
        # the write's cost is charged to its last request: the kernel frees it once that is read
        self._ahead.extend((frame, 0) for frame in frames[:-1])
        self._ahead.append((frames[-1], _cost(size)))
        self._ahead_cost += _cost(size)

    # --- starting ----------------------------------------------------------------------------

    def _start(self) -> Failure | None:
        # Orphans of the worker's tree come back to the grader rather than to init, should the
        # worker die before them, and are killed with the rest (census.adopted).
        adopt_orphans()
        if self.user is not None and self.starts == 0:
            census.kill_user(self.user)  # what a grader killed before its end left behind
            self._held.remove()
        self.starts += 1
        began = time.monotonic()
        spare = _take_spare(self.python) if self.user is None else None
        if spare is not None:  # its folder, fresh and unused, becomes this worker's
            scratch.remove(self._dir)
            self._dir = spare.folder
            self._held = self._memory_held()
        join = self._cgroup.join_descriptor() if self._cgroup is not None else None
        try:
            if spare is not None and join is not None:
                # moved in by the grader before it imports anything of the submission's (what
                # the waiting interpreter holds already stays charged where it was)
                try:
                    os.write(join, str(spare.proc.pid).encode())
                except OSError:  # then it is not in it: said below, as for any worker
                    pass
            started = (spare or (self.zygote.fork(self._dir, join) if self.zygote else None)
                       or _Interpreter.spawn(self.python, self.user, self._dir, join))
        finally:
            if join is not None:
                os.close(join)
        if self._cgroup is not None:
            self._oom_kills = self._cgroup.oom_kills()
        self._proc, self._sock, self._phase_fd = started.proc, started.sock, started.phase_fd
        self.ahead_bytes = self._sock.getsockopt(socket.SOL_SOCKET,
                                                 socket.SO_SNDBUF) // AHEAD_SHARE
        self._since = started.since
        self._buffer.clear()
        self._eof = False
        self._phase = "import"
        try:  # what to import, and the limits, with which the interpreter begins its work
            self._sock.sendall(pack({"submission": str(self.submission),
                                     "limits": self._limits(), "forbid": list(self.forbid)}))
        except OSError:  # it died before it could read them: found by the wait below
            pass
        wait = self.import_timeout
        if self.deadline is not None:
            wait = min(wait, self.deadline - time.monotonic())
        frame = self._wait(time.monotonic() + wait, wait)
        self.import_seconds += time.monotonic() - began
        self._collect_output()
        if isinstance(frame, Failure):
            if frame.kind == "timeout" and wait < self.import_timeout:
                return Failure("deadline", "not run: the submission's time ran out while it "
                               "was being imported", "import")
            return frame
        if frame.get("ready") is True:
            # how many of its modules it found compiled ahead (`precompile`): its word, for
            # the tests and benchmarks of that, and for nothing else
            precompiled = frame.get("precompiled")
            self.precompiled = precompiled if type(precompiled) is int else 0
            if self._cgroup is not None and not self._cgroup.holds(self._proc.pid):
                # it could not join (it wrote to its descriptor before importing anything)
                self.memory_limit += f", but the worker could not join {self._cgroup.path}"
            return None
        record = frame.get("import_error")
        if isinstance(record, dict) and all(isinstance(record.get(k), str)
                                            for k in ("type", "message", "traceback")):
            self._stop()
            return Failure("import", f"the submission could not be imported: "
                           f"{record['type'][:100]}: {record['message'][:run.MAX_MESSAGE]}",
                           "import", record["traceback"][-MAX_DETAIL:])
        return self._fail("protocol", "the engine sent something other than a reply while "
                          "being imported")

    def _limits(self) -> dict[str, tuple[int, int]]:
        limits = {"cpu": (self.cpu_seconds, self.cpu_seconds + 5),  # SIGXCPU before SIGKILL
                  "fsize": (self._file_limit,) * 2, "core": (0, 0),
                  "nofile": (self.max_files,) * 2,
                  "msgqueue": (0, 0)}  # no POSIX message queue: memory outside every page
        if self.memory_mb is not None:
            limits["data"] = (self.memory_mb << 20,) * 2
        if self.user is not None:  # counted per user: it caps only a worker with a user of its own
            limits["nproc"] = (self.max_tasks,) * 2
        return limits

    # --- waiting -----------------------------------------------------------------------------

    def _wait(self, deadline: float, timeout: float) -> dict[str, Any] | Failure:
        """The next frame that is not progress, or the failure that came first."""
        frame = self._pop_frame()  # a reply to a request sent ahead may have come with the last
        if frame is not None:
            return frame
        while True:
            exited = self._exited()  # checked first: frames sent before exiting are read first
            self._receive(0.001 if exited else min(POLL, max(deadline - time.monotonic(), 0.001)))
            frame = self._pop_frame()  # one a request, and no progress frames: see `_phase`
            if frame is not None:
                return frame
            if exited:
                return self._exit_failure()
            if self._eof:  # the channel closed: the worker is exiting, or broke it
                for _ in range(20):
                    time.sleep(POLL)
                    if self._exited():
                        return self._exit_failure()
                return self._fail("protocol", f"the engine closed the grader's channel "
                                  f"{self._where()}")
            failure = self._watch(deadline, timeout)
            if failure is not None:
                return failure

    def _receive(self, wait: float) -> None:
        """Add what the worker sent to the buffer, waiting at most `wait` s for something."""
        assert self._sock is not None
        if self._eof:
            return
        self._sock.settimeout(wait)
        try:
            size = self._sock.recv_into(self._chunk)
        except TimeoutError:
            return
        except ConnectionResetError:  # it died with a request unread: as the end of the channel
            size = 0
        self._eof = not size
        self._unpolled = True
        self._buffer += self._chunk[:size]

    @property
    def _phase(self) -> str:
        """Where the worker is: the phase it last wrote to its phase file, at offset 0, padded
        with spaces to PHASE_WIDTH bytes (`gradcheck.engine.worker`). A file rather than a frame
        per change: a request passes through a few phases per point, and a frame each would
        wake the grader tens of times a request; the grader reads the file only when it names a
        failure."""
        if self._phase_fd is None:
            return "start"
        try:
            said = os.pread(self._phase_fd, PHASE_WIDTH, 0).decode("ascii").strip()
        except (OSError, UnicodeDecodeError):
            return "start"
        return said if said in handler.PHASES else "start"  # anything else is not the worker's

    @_phase.setter
    def _phase(self, phase: str) -> None:
        assert self._phase_fd is not None
        os.pwrite(self._phase_fd, phase.ljust(PHASE_WIDTH).encode("ascii"), 0)

    def _pop_frame(self) -> dict[str, Any] | Failure | None:
        """The first complete frame in the buffer, if there is one."""
        end = self._frame_end()
        if end > HEADER.size + MAX_FRAME:  # refused before it is read: it could be 4 GB
            return self._fail("protocol", f"the engine wrote garbage to the grader's channel "
                              f"{self._where()}")
        if len(self._buffer) < end:
            return None
        body = bytes(memoryview(self._buffer)[HEADER.size:end])  # one copy, not two
        del self._buffer[:end]
        self._long = wire.may_hold_longer(body, run.MAX_MESSAGE)
        try:
            return wire.read_frame(body)
        except wire.ProtocolError:
            return self._fail("protocol", f"the engine wrote garbage to the grader's channel "
                              f"{self._where()}")

    def _frame_end(self) -> int:
        """How many buffered bytes the first frame needs (the header alone, until it is read)."""
        if len(self._buffer) < HEADER.size:
            return HEADER.size
        return HEADER.size + HEADER.unpack(self._buffer[:HEADER.size])[0]

    def _exited(self) -> bool:
        """Whether the worker exited; it stays unreaped, so its pid and group are not reused."""
        assert self._proc is not None
        return os.waitid(os.P_PID, self._proc.pid,
                         os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None

    def _watch(self, deadline: float, timeout: float) -> Failure | None:
        """A failure if the worker ran out of time or broke a polled limit."""
        now = time.monotonic()
        if now >= deadline:
            return self._fail("timeout", f"timed out after {timeout:g} s {self._where()}")
        if now >= self._next_scan:
            return self._over_limits()
        return None

    def _over_limits(self) -> Failure | None:
        assert self._proc is not None
        self._unpolled, self._next_scan = False, time.monotonic() + POLL
        members = self._census.processes(self._proc.pid, self._since, _RUNNING)
        if sum(threads for _, threads, _ in members) > self.max_tasks:
            return self._fail("tasks", f"the engine started more than {self.max_tasks} processes "
                              f"or threads {self._where()}")
        if self._killed_at_the_cgroup_limit():
            return self._fail("memory", self._memory_message(), self._cgroup_kill())
        if self.memory_mb is not None and census.uses_more_than(members, self.memory_mb << 20,
                                                                   self._held):
            return self._fail("memory", self._memory_message())
        printed = sum(os.stat(self._output(name)).st_size for name in self._kept)
        if printed > self.max_output:
            return self._fail("output", f"the engine printed more than {_bytes(self.max_output)} "
                              f"{self._where()}")
        return None

    # --- endings -----------------------------------------------------------------------------

    def _reply(self, request: Mapping[str, Any], frame: dict[str, Any]) -> dict[str, Any] | Failure:
        if set(frame) == {"reply"}:
            try:
                wire.check_reply(request, frame["reply"])
            except wire.ProtocolError as exc:
                return self._fail("protocol", f"the engine sent a {exc} {self._where()}")
            # an honest engine's messages are this short already (run.error_record)
            if not self._long:
                return frame["reply"]
            return wire.cut_strings(frame["reply"], run.MAX_MESSAGE)
        record = frame.get("fatal")
        if set(frame) == {"fatal"} and isinstance(record, dict) and all(
                isinstance(record.get(k), str) for k in ("type", "message")):
            name, text = record["type"][:100], record["message"][:100]
            kind, what = {
                "MemoryError": ("memory", ""),
                "SystemExit": ("exit", f"the engine called sys.exit({text})"),
            }.get(name, ("raised", f"the engine raised {name}"))
            message = self._memory_message() if kind == "memory" else f"{what} {self._where()}"
            return self._fail(kind, message, record["message"][:MAX_DETAIL])
        if set(frame) == {"request_error"}:  # cannot happen: the request was checked here
            return self._fail("protocol", f"the worker refused the request: "
                              f"{str(frame['request_error'])[:run.MAX_MESSAGE]}")
        return self._fail("protocol", f"the engine sent something other than a reply "
                          f"{self._where()}")

    def _exit_failure(self) -> Failure:
        phase = self._phase
        at_limit = self._killed_at_the_cgroup_limit()  # read before the next worker starts
        message = self._memory_message()
        code = self._stop()
        where = _where(phase)
        if at_limit:
            return Failure("memory", message, phase, self._cgroup_kill())
        if code >= 0:
            return Failure("exit", f"the engine exited with code {code} {where}", phase)
        if -code == signal.SIGXCPU:
            return Failure("cpu", f"the engine used more than {self.cpu_seconds} s of CPU time "
                           f"{where}", phase)
        if -code == signal.SIGXFSZ:  # a write went past RLIMIT_FSIZE
            if self._printed > self.max_output:
                return Failure("output", f"the engine printed more than "
                               f"{_bytes(self.max_output)} {where}", phase)
            return Failure("output", f"the engine wrote a file larger than "
                           f"{_bytes(self._file_limit)} {where}", phase)
        return Failure("signal", f"the engine crashed with signal {signal_name(-code)} {where}",
                       phase)

    def _fail(self, kind: str, message: str, detail: str = "") -> Failure:
        phase = self._phase
        self._stop()
        return Failure(kind, message, phase, detail)

    def _stop(self) -> int:
        """Kill the worker and everything it started, reap it, keep its output; its exit code."""
        assert self._proc is not None and self._sock is not None
        orphans = lambda: census.adopted(self._since, _RUNNING)  # noqa: E731
        census.kill_all(self._proc.pid, orphans)
        census.reap(orphans())
        if self.user is not None:  # nothing of that uid outlives its worker, however it hid
            census.kill_user(self.user)
        self._held.remove()  # its files in memory, a channel to the next worker too
        code = self._proc.wait()
        _RUNNING.discard(self._proc.pid)
        self._sock.close()
        self._proc = self._sock = None
        self._ahead.clear()  # unread, with the worker that would have answered them
        self._ahead_cost = 0
        os.close(self._phase_fd)
        self._phase_fd = None
        self._census = census.Census()
        self._collect_output()
        return code

    def _collect_output(self) -> None:
        """Keep the head of what was printed, count the rest, and empty the files."""
        self._printed = 0
        for name, kept in self._kept.items():
            try:
                if os.stat(self._output(name)).st_size == 0:  # most replies print nothing
                    continue
            except OSError:  # as the open below would fail
                pass
            with open(self._output(name), "rb+") as f:
                size = os.fstat(f.fileno()).st_size
                data = f.read(min(size, max(self.keep_output - len(kept), 0)))
                kept += data
                self.dropped += size - len(data)
                self._printed += size
                f.truncate(0)

    def _output(self, name: str) -> str:
        """The file the worker's stdout or stderr goes to: a string, which costs a tenth of a
        Path joined after every reply."""
        return f"{self._dir}/{name}"

    def _where(self) -> str:
        return _where(self._phase)

    def _killed_at_the_cgroup_limit(self) -> bool:
        """Whether the kernel killed a process of the worker's at its cgroup's limit."""
        return self._cgroup is not None and self._cgroup.oom_kills() > self._oom_kills

    def _cgroup_kill(self) -> str:
        """A memory failure's detail when the kernel, not the poll, ended it."""
        assert self._cgroup is not None
        return f"the kernel killed it at the limit of its cgroup (v{self._cgroup.version})"

    def _memory_message(self) -> str:
        limit = f" (limit {self.memory_mb} MB)" if self.memory_mb is not None else ""
        return f"the engine ran out of memory{limit} {self._where()}"


def _command(python: str, program: str, argument: str) -> list[str]:
    """How the sandbox runs a program of gradcheck's: -s -P -B, so no user site, no cwd on
    sys.path, no bytecode written into the submission's folder (not -I, which would ignore
    PYTHONHASHSEED); the gradcheck folder, then one argument."""
    return [python, "-s", "-P", "-B", "-c", program, _GRADCHECK_DIR, argument]


def _environment(home: Path) -> dict[str, str]:
    """The worker's whole environment: nothing of the grader's."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(home),
            "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}  # set iteration order, as in every other run


def _as_user(user: int | None) -> dict[str, Any]:
    """Popen's options that run a process as `user`, with that group and no other."""
    return {} if user is None else {"user": user, "group": user, "extra_groups": []}


# --- before grading: can a worker of another user start at all? --------------------------------

#: what `preflight` runs as the worker's user, given the gradcheck folder and the submission: the
#: worker's own start, up to importing gradcheck.engine.worker and setting its filter of
#: system calls, then a read of every file and folder of the submission, which is not imported. It
#: prints "started" once the interpreter runs, "imported" once gradcheck.engine.worker is, and, as
#: JSON, why the filter could not be set, or the first path it could not reach (or the first
#: folder above it that this user may not enter).
_PREFLIGHT = "print('started', flush=True)\n" + PACKAGE + """import gradcheck.engine.worker
print('imported', flush=True)
import json, os
from gradcheck.engine import syscalls

unfiltered = syscalls.forbid()
if unfiltered:
    print(json.dumps({"filter": unfiltered}))
    raise SystemExit(4)


def unreachable(error):
    path = error.filename
    above = [path]
    while os.path.dirname(above[-1]) != above[-1]:
        above.append(os.path.dirname(above[-1]))
    closed = [folder for folder in above[:0:-1] if not os.access(folder, os.X_OK)]
    print(json.dumps({"path": (closed or [path])[0], "error": error.strerror or str(error)}))
    raise SystemExit(3)


try:
    # os.walk recurses, and a submission can nest folders deeper than it goes; a link to a
    # folder inside it is not followed, as os.walk follows none
    waiting = [(sys.argv[2], True)] if sys.argv[2] else []  # none: the worker alone
    while waiting:
        path, top = waiting.pop()
        if not os.path.isdir(path):  # opened without waiting on a FIFO, a device or a lock
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        elif top or not os.path.islink(path):
            with os.scandir(path) as entries:
                waiting += [(entry.path, False) for entry in entries]
except OSError as error:
    unreachable(error)
"""
_ADVICE = "see docs/security.md, 'The worker as another user'"


def preflight(submission: str | Path | None, user: int, python: str = sys.executable,
              timeout: float = 60.0) -> str:
    """Why a worker run as `user` with `python` could not start, import gradcheck's worker module
    or read every file of `submission` (None: a copy made for it, which it can): a sentence
    naming the uid, the path and what to do; "" if it could. Run once before grading, so that
    such a setup is refused plainly instead of failing in the worker: a PermissionError blamed
    on gradcheck, or an unreadable submission blamed on its author. No code of the submission
    runs."""
    who = f"the worker's user (uid {user})"
    if os.geteuid() != 0:
        return (f"only root may start a worker as another user (uid {user}); run the grader as "
                "root, or leave out --worker-user")
    submission = Path(submission).resolve() if submission is not None else None
    try:
        done = subprocess.run(_command(python, _PREFLIGHT, str(submission or "")),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              errors="replace", cwd="/", env=_environment(Path("/")),
                              timeout=timeout, **_as_user(user))
    except OSError as error:  # exec failed: the interpreter, or a folder above it, is closed
        return _no_python(who, python, error.strerror or str(error))
    except subprocess.TimeoutExpired:
        return f"{python}, run as {who}, did not start within {timeout:g} s"
    said = done.stdout.splitlines()
    why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1][:300]
    if "started" not in said:
        return _no_python(who, python, why)
    if "imported" not in said:
        return (f"{who} cannot import gradcheck from {_GRADCHECK_DIR} ({why}): the worker runs "
                f"the grader's gradcheck, so make it readable by all (chmod -R a+rX "
                f"{_GRADCHECK_DIR}, and chmod a+x each folder above it) or install gradcheck "
                f"outside a private folder; {_ADVICE}")
    if done.returncode == 0:
        return ""
    try:
        closed = json.loads(said[-1])
        if "filter" in closed:
            return (f"a worker cannot be kept from opening sockets or mounting on this machine "
                    f"({closed['filter']}): a submission could reach the network, and on a "
                    "Dask cluster the scheduler, which runs what it is sent as the Dask worker's "
                    "user; grade on Linux for x86_64 or aarch64 with seccomp filters, or leave "
                    f"out --worker-user; {_ADVICE}")
        path, why = closed["path"], closed["error"]
    except (ValueError, KeyError, TypeError):
        return f"{who} cannot read the submission {submission} ({why}); {_ADVICE}"
    assert submission is not None  # only a submission is read
    fix = (f"chmod a+x {path}" if submission.is_relative_to(path) and Path(path) != submission
           else f"chmod -R a+rX {submission}")
    return (f"{who} cannot read {path} ({why}), which the submission {submission} needs: "
            f"{fix}, or grade from a folder every user may enter; {_ADVICE}")


def _no_python(who: str, python: str, why: str) -> str:
    return (f"{who} cannot run {python} ({why}): give --worker-python a Python 3.11 or later "
            f"that this user may run (such as /usr/bin/python3); {_ADVICE}")


def signal_name(number: int) -> str:
    """A signal's name, a real-time one's too (SIGRTMIN+6), which signal.Signals does not know."""
    try:
        return signal.Signals(number).name
    except ValueError:
        if signal.SIGRTMIN <= number <= signal.SIGRTMAX:
            return f"SIGRTMIN+{number - signal.SIGRTMIN}"
        return f"number {number}"


def _where(phase: str) -> str:
    return handler.PHASES.get(phase, f"in {phase}")


def _bytes(n: int) -> str:
    for unit, size in (("MB", 1_000_000), ("kB", 1000)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


# --- interpreters started ahead -----------------------------------------------------------------


@dataclass
class _Interpreter:
    """A worker process started and waiting, with gradcheck's worker modules imported but nothing
    of the submission's: it imports the submission, under the limits it is given, only once a
    Worker sends them (`Worker._start`)."""

    proc: subprocess.Popen[bytes] | _Forked
    sock: socket.socket
    phase_fd: int
    folder: Path
    python: str
    since: int  # census.start_time

    @classmethod
    def spawn(cls, python: str, user: int | None, folder: Path, join: int | None = None
              ) -> _Interpreter:
        """Start one in `folder` (from `_folder`): its output, phase file, and home; `join`:
        the descriptor of the cgroup it joins first (gradcheck.engine.cgroup), if any."""
        parent, child = _channel()
        streams, phase_fd = _worker_files(folder)
        home = folder / "home"
        try:
            proc = subprocess.Popen(
                _command(python, BOOTSTRAP, json.dumps({"fd": child.fileno(),
                                                         "phase_fd": phase_fd,
                                                         "parent": os.getpid(),
                                                         "cgroup": join})),
                stdin=subprocess.DEVNULL, stdout=streams[0], stderr=streams[1],
                cwd=home, env=_environment(home),
                pass_fds=(child.fileno(), phase_fd) + ((join,) if join is not None else ()),
                start_new_session=True, **_as_user(user))
        except BaseException:
            os.close(phase_fd)
            raise
        finally:
            child.close()
            for fd in streams:
                os.close(fd)
        _RUNNING.add(proc.pid)
        return cls(proc, parent, phase_fd, folder, python, census.start_time(proc.pid))

    def alive(self) -> bool:
        return os.waitid(os.P_PID, self.proc.pid,
                         os.WEXITED | os.WNOHANG | os.WNOWAIT) is None

    def discard(self) -> None:
        census.kill_all(self.proc.pid)
        self.proc.wait()
        _RUNNING.discard(self.proc.pid)
        self.sock.close()
        os.close(self.phase_fd)
        scratch.remove(self.folder)


def _cost(size: int) -> int:
    """What one write of `size` bytes may take of a send buffer: the bytes, and the kernel's
    bookkeeping of each piece it is cut into (under 1 kB a piece, pieces of 8 kB or more)."""
    return size + 1024 * (1 + size // 8192)


#: the frames of sealed requests (`wire.Sealed`), by the request, as `frame` made them
_FRAMES: Memo[bytes] = Memo(1024)


def frame(request: Mapping[str, Any]) -> bytes:
    """`request` checked (`wire.check_request`, which raises RequestError) and packed as the
    worker reads it. A sealed request's frame is kept: a grading asks most of its requests
    twice (sent ahead in the plan, then asked by its check), and every grading a batch's job
    slot forks asks the same ones (`gradcheck.grading.grader.warm`)."""
    sealed = type(request) is wire.Sealed
    kept = _FRAMES.get(request) if sealed else None
    if kept is not None:
        return kept
    wire.check_request(request)
    packed = pack(dict(request))
    return _FRAMES.keep(packed, request) if sealed else packed


def _channel() -> tuple[socket.socket, socket.socket]:
    """A worker's channel: the grader's end (with CHANNEL_BUFFER asked for), the worker's."""
    parent, child = socket.socketpair()
    parent.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CHANNEL_BUFFER)
    return parent, child


def _worker_files(folder: Path) -> tuple[tuple[int, int], int]:
    """A worker's stdout and stderr files in `folder`, opened for it, and its phase file, open
    for the grader and the worker both."""
    streams = tuple(os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                    for name in ("stdout", "stderr"))
    phase_fd = os.open(folder / "phase", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.pwrite(phase_fd, b" " * PHASE_WIDTH, 0)  # as long as the worker maps it
    return (streams[0], streams[1]), phase_fd


class _Forked:
    """A worker forked by a Zygote, adopted by this process: what Worker uses of a Popen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode


class Zygote:
    """An interpreter kept by one grading that forks its workers, so that a grading starts one
    Python, not one per worker (a worker per side of the bank, and one after each failure).

    It imports gradcheck's worker modules and nothing else (gradcheck.engine.worker.zygote): no
    program, no submission, no reply ever reaches it, so a worker forked from it holds nothing a
    new interpreter would not, and each is forked anew, from the zygote itself, never from
    another worker. A forked worker is this process's child (the zygote forks it twice and this
    process, a child subreaper, adopts it), so it is waited for, counted, limited and killed as
    any other. Only for workers of the grader's own user; where the zygote cannot fork (it died,
    or was killed), the worker is started as a new interpreter."""

    #: seconds the zygote may take to start or to fork a worker before it is given up
    WAIT = 10.0

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python
        self._proc: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._folder: Path | None = None
        self._broken = False

    def fork(self, folder: Path, join: int | None = None) -> _Interpreter | None:
        """A worker in `folder` (from `_folder`), as `_Interpreter.spawn` starts one, or None."""
        if self._broken or (self._control is None and not self._start()):
            return None
        assert self._control is not None
        parent, child = _channel()
        streams, phase_fd = _worker_files(folder)
        home = folder / "home"
        order = {"home": str(home), "env": _environment(home), "parent": os.getpid()}
        fds = [child.fileno(), phase_fd, *streams, *([join] if join is not None else [])]
        pid = 0
        try:
            socket.send_fds(self._control, [json.dumps(order).encode()], fds)
            if select.select([self._control], [], [], self.WAIT)[0]:
                pid = int(self._control.recv(32) or b"0")
        except (OSError, ValueError):
            pass
        finally:
            child.close()
            for fd in streams:
                os.close(fd)
        if pid <= 0:
            parent.close()
            os.close(phase_fd)
            self.close()
            self._broken = True
            return None
        _RUNNING.add(pid)
        return _Interpreter(_Forked(pid), parent, phase_fd, folder, self.python,
                            census.start_time(pid))

    def _start(self) -> bool:
        adopt_orphans()  # what it forks comes to this process
        ours, its = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._folder = _folder(None)
        home = self._folder / "home"
        try:
            self._proc = subprocess.Popen(
                _command(self.python, ZYGOTE, json.dumps({"fd": its.fileno(),
                                                          "parent": os.getpid()})),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                cwd=home, env=_environment(home), pass_fds=(its.fileno(),),
                start_new_session=True)
        except OSError:
            ours.close()
            self._broken = True
            return False
        finally:
            its.close()
        _RUNNING.add(self._proc.pid)
        self._control = ours
        return True

    def close(self) -> None:
        """Stop the zygote (the workers it forked are this process's, and go on)."""
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._proc is not None:
            census.kill_all(self._proc.pid)
            self._proc.wait()
            _RUNNING.discard(self._proc.pid)
            self._proc = None
        if self._folder is not None:
            scratch.remove(self._folder)
            self._folder = None


#: interpreters started ahead (`prestart`), each taken by the next Worker to start
_SPARES: list[_Interpreter] = []


def prestart(count: int, python: str = sys.executable,
             programs: Sequence[Mapping[str, Any]] = ()) -> None:
    """Have `count` worker interpreters of `python` started and waiting, so that a Worker that
    starts next needs only import the submission (`gradcheck grade --watch` calls this while it
    waits for a change); each parses `programs` (`Program.spec()`s) meanwhile. None of them has
    run any code of a submission: each grading still gets processes of its own, fresh. Call it
    from the thread that will grade, which the workers die with (PR_SET_PDEATHSIG). Only for
    workers of the grader's own user: those of another are killed with everything of that
    user's (`census.kill_user`)."""
    adopt_orphans()
    while sum(spare.python == python for spare in _SPARES) < count:
        spare = _Interpreter.spawn(python, None, _folder(None))
        if programs:
            try:
                spare.sock.sendall(pack({"warm": list(programs)}))
            except OSError:  # it died already: dropped when taken
                pass
        _SPARES.append(spare)


def precompile(paths: Sequence[Path]) -> None:
    """Have every interpreter started ahead compile the submission's files `paths` now, while
    `gradcheck grade --watch` waits for a save to settle and the grading's first workers run:
    compiling runs nothing of the submission's, and a worker's import then finds its modules
    compiled (the reference engine's 1,200 lines take 15 ms, half a worker's start).
    Each keeps a file's code with the bytes it compiled, and uses it only for a module whose
    source it reads is those same bytes: a file saved again meanwhile is compiled anew
    (`gradcheck.engine.worker`)."""
    order = pack({"compile": [str(path) for path in paths]})
    for spare in _SPARES:
        try:
            spare.sock.sendall(order)
        except OSError:  # it died already: dropped when taken
            pass


def _take_spare(python: str) -> _Interpreter | None:
    """A waiting interpreter of `python` (one that died meanwhile is dropped), or None."""
    for spare in [spare for spare in _SPARES if spare.python == python]:
        _SPARES.remove(spare)
        if spare.alive():
            return spare
        spare.discard()
    return None


@atexit.register
def discard_spares() -> None:
    """Stop every interpreter started ahead and not taken, and remove its folder."""
    while _SPARES:
        _SPARES.pop().discard()


def _folder(user: int | None) -> Path:
    """A new folder for a worker's files, with the empty "home" it runs in."""
    folder = scratch.make(scratch.WORKERS)
    (folder / "home").mkdir()
    if user is not None:
        os.chmod(folder, 0o711)  # the worker may enter its home, not list the grader's files
        os.chown(folder / "home", user, user)
    return folder
