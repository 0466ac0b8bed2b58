"""One submission of a batch graded in a process of its own, here or on a cluster's worker.

`gradcheck grade-batch` (gradcheck/course/batch.py) grades on this machine, `-j` job slots at a
time; with `--scheduler`, each grading runs on a Dask worker (gradcheck/course/cluster.py). Both
grade a submission the same way, with what this module owns: the `gradcheck grade` command line a
batch's options make, a job slot's long-lived grader (`Server`, which is `gradcheck grade
--serve`: gradcheck, the bank and the key loaded once, and, for each submission, a fresh process
forked from it that grades it with its own sandboxed worker, killed with everything it started
past the submission's time limit), the gradebook `Row` a grading gives, and the sha256 digests of
the bank and the key it used, which every result carries (`OUT/<name>/grading.json`) so that a
resumed batch regrades what was graded against other bytes.

Why a fork per submission rather than one grader for all: whatever a grading does to gradcheck's
state (a fault of gradcheck's that corrupts the loaded bank or key, a patched module, a thread
left behind, a crash) ends with its process; the server that forks the next one grades nothing
itself. What the fork saves is the imports, the bank's and key's loading, and what every grading
with the key works out alike, whatever the submission: its answers decoded, the oracles'
agreement on them and what the comparison reads of it (`Key.prepare`), each exercise's shares of
its points, and the requests its checks send first, built, checked and packed
(`gradcheck.grading.grader.warm`): about half a second of CPU a submission (BENCHMARKS.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gradcheck.bank.loader import exercise_files
from gradcheck.engine import census, scratch, trees
from gradcheck.engine.worker import adopt_orphans
from gradcheck.grading.results import GradeReport
from gradcheck.reports import atomic_write
from gradcheck.reports.gradescope import write_results_json

#: The exit status of `gradcheck grade` when it could not run.
CANNOT_RUN = 2
#: What each submission's folder holds besides its reports: how and against what it was graded.
STAMP = "grading.json"
#: The files of a submission's folder that a grading writes (junit.xml only with --junit).
REPORTS = ("results.json", "grader.log", "junit.xml")


@dataclass
class Row:
    """One submission's line in the gradebook."""

    submission: str
    score: float
    max: float
    status: str  # graded | timeout | error | crashed | lost
    time: float
    note: str = ""  # why it is not graded, for the progress line


@dataclass
class Options:
    """How every submission of a batch is graded: the same for each, here or on a worker."""

    seed: int
    exercises: list[Path]
    key: Path | None
    timeout: float | None = None
    memory_mb: int | None = None
    total_timeout: float | None = None
    submission_timeout: float = 900.0
    junit: bool = False
    worker_python: str | None = None

    def command(self) -> list[str]:
        """The `gradcheck grade` command line, less the submission and its reports."""
        command = [sys.executable, "-m", "gradcheck", "grade", "--quiet", "--seed", str(self.seed)]
        for path in self.exercises:
            command += ["--exercises", str(path)]
        if self.key:
            command += ["--key", str(self.key)]
        if self.timeout:
            command += ["--timeout", str(self.timeout)]
        if self.memory_mb:
            command += ["--memory-mb", str(self.memory_mb)]
        if self.total_timeout:
            command += ["--total-timeout", str(self.total_timeout)]
        if self.junit:
            command += ["--show-hidden"]
        if self.worker_python:
            command += ["--worker-python", self.worker_python]
        return command


@dataclass
class Stamp:
    """`OUT/<name>/grading.json`: a submission's row and the bytes it was graded against."""

    row: Row
    bank_sha256: str
    key_sha256: str  # "" when graded live, without a key
    seed: int
    host: str = ""  # where it was graded: a Dask worker's address, or "" for this machine

    def write(self, folder: Path) -> None:
        data = {**asdict(self), "row": asdict(self.row)}
        atomic_write(folder / STAMP, json.dumps(data, indent=1) + "\n")

    @classmethod
    def read(cls, folder: Path) -> Stamp | None:
        """The stamp in `folder`, or None if there is none or it is not one."""
        try:
            data = json.loads((folder / STAMP).read_text())
            return cls(**{**data, "row": Row(**data["row"])})
        except (OSError, ValueError, TypeError, KeyError):
            return None


def bank_digest(paths: list[Path]) -> str:
    """The sha256 of a bank as given: each exercise file's bytes and its place under its path,
    so that a copy of the same files elsewhere (on a worker) has the same digest."""
    digest = hashlib.sha256()
    for number, root in enumerate(paths):
        for path in exercise_files([root]):
            place = path.relative_to(root) if root.is_dir() else Path(path.name)
            digest.update(f"{number}\0{place.as_posix()}\0{file_digest(path)}\n".encode())
    return digest.hexdigest()


def file_digest(path: Path | None) -> str:
    """The sha256 of a file's bytes; "" for no file."""
    return hashlib.sha256(path.read_bytes()).hexdigest() if path is not None else ""


class Running:
    """The graders running now, so that an interrupted batch leaves none behind."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._stopped = False

    def add(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._procs.add(proc)
            if self._stopped:  # started just as the batch stopped
                kill_group(proc)

    def discard(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._procs.discard(proc)

    def stop(self) -> None:
        """Kill every running grader, and any started from now on."""
        with self._lock:
            self._stopped = True
            for proc in self._procs:
                kill_group(proc)


class Server:
    """A job slot's long-lived grader: `gradcheck grade --serve` with the batch's options, which
    loads gradcheck, the bank and the key once, then forks a fresh grading process per
    submission (`serve`). Started when first needed, and again after it dies."""

    def __init__(self, command: list[str], running: Running) -> None:
        self.command = [*command, "--serve"]
        self.running = running
        self.proc: subprocess.Popen[bytes] | None = None
        #: the pid of the grading the server forked and has not reported on yet
        self.grading: int | None = None

    def grade(self, submission: Path, folder: Path, max_score: float, options: Options,
              worker_user: int | None = None, stopped: Callable[[], bool] | None = None,
              within: str = "") -> Row:
        """Grade one submission (the file `within` it, if given: `graded_within`) in a process
        of its own forked by the server, killed with everything it started after the submission
        timeout, or as soon as `stopped()` (asked every STOP_POLL seconds) says the batch that
        wanted it is gone; its reports in `folder`."""
        folder.mkdir(parents=True, exist_ok=True)
        for stale in (folder / "results.json", folder / "junit.xml", folder / STAMP):
            stale.unlink(missing_ok=True)  # never read an earlier batch's file as this one's
        (folder / "grader.log").write_bytes(b"")
        limit = options.submission_timeout
        started = time.monotonic()
        try:
            with private_copy(submission, worker_user) as copy:
                graded = copy / within if within else copy
                request = {"submission": str(graded), "results": str(folder / "results.json"),
                           "log": str(folder / "grader.log"), "worker_user": worker_user,
                           "junit": str(folder / "junit.xml") if options.junit else None}
                code: int | None | str = self._ask(request, started + limit, stopped)
        except (trees.CopyRefused, OSError) as error:
            code = CANNOT_RUN
            why = (str(error) if isinstance(error, trees.CopyRefused)
                   else error.strerror or str(error))
            (folder / "grader.log").write_text(f"its worker's copy of it was not made: {why}\n")
        elapsed = time.monotonic() - started
        row = Row(submission.name, 0.0, max_score, "graded", round(elapsed, 2))
        if code is None:
            row.status, row.note = "timeout", f"stopped after {limit:g} s"
        elif isinstance(code, str):
            row.status, row.note = "crashed", code
        elif code != 0:
            row.status = "error" if code == CANNOT_RUN else "crashed"
            row.note = _last_line(folder / "grader.log") or f"exit status {code}"
        if (folder / "results.json").is_file():
            row.score = results_score(folder / "results.json") or 0.0
        else:
            not_graded(row, folder, row.note or "the grader wrote no results")
        return row

    def let_go(self) -> None:
        """End the server's input from any thread, without waiting: it kills a grading still
        running and exits (`serve`); `close`, or the next grading, reaps it."""
        proc = self.proc
        if proc is not None:
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.close()

    def close(self) -> None:
        """Let the server go: it exits when its input ends. Called from another thread (an
        interrupted batch closes every slot's) while the slot's own may be stopping it
        (`_stop`), so each field is read once."""
        proc, grading = self.proc, self.grading
        if proc is not None:
            with contextlib.suppress(OSError, ValueError):  # closed, or its reader gone
                proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                kill_group(proc)
            self.running.discard(proc)
            self.proc = None
        if grading is not None:  # killed with its server: remove its workers' folders
            _await_exit(grading, SERVER_PATIENCE)
            scratch.sweep(scratch.WORKERS)
            self.grading = None

    def _ask(self, request: dict[str, object], deadline: float,
             stopped: Callable[[], bool] | None = None) -> int | None | str:
        """The grading's exit status, None if it ran past `deadline` (then killed), or why the
        server failed (then stopped, to be started again for the next submission)."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         start_new_session=True)
            self.running.add(self.proc)
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
            pid = self.grading = self._reply(time.monotonic() + SERVER_PATIENCE)["pid"]
            try:
                code = self._reply(deadline, stopped)["exit"]
            except TimeoutError:
                _kill_pid_group(pid)
                self._reply(time.monotonic() + SERVER_PATIENCE)  # the server saw it die
                code = None
            self.grading = None
            return code
        except (OSError, ValueError, KeyError, TimeoutError) as error:
            why = self._stop()
            return f"the job slot's grader failed ({why or error})"

    def _reply(self, deadline: float, stopped: Callable[[], bool] | None = None
               ) -> dict[str, int]:
        """The server's next line, waited for until `deadline` or until `stopped()`."""
        out = self.proc.stdout
        while not select.select([out], [], [], max(0.0, min(
                deadline, time.monotonic() + STOP_POLL) - time.monotonic()))[0]:
            if time.monotonic() >= deadline or (stopped is not None and stopped()):
                raise TimeoutError("no reply")
        line = out.readline()
        if not line:
            raise ValueError("it exited")
        return json.loads(line)

    def _stop(self) -> str:
        """Stop a failed server; the last line it wrote on stderr."""
        proc, self.proc = self.proc, None
        kill_group(proc)
        self.running.discard(proc)
        lines = proc.stderr.read().decode(errors="replace").strip().splitlines()
        return lines[-1][:300] if lines else ""


def graded_within(entry: Path, engine: str) -> str | None:
    """What of a batch's `entry` is graded, as a path within it: "" for a module or a package
    (the entry itself); for a folder that is not a package (a folder per student, as Gradescope
    and GitHub Classroom download them, whose other modules the engine may import) `engine`,
    the course's submission file, or else the package of its name (`engine/`, which
    Gradescope's run_autograder takes too); None when the folder holds neither."""
    if not entry.is_dir() or (entry / "__init__.py").is_file():
        return ""
    if (entry / engine).is_file():
        return engine
    package = engine.removesuffix(".py")
    return package if (entry / package / "__init__.py").is_file() else None


@contextlib.contextmanager
def private_copy(submission: Path, user: int | None) -> Iterator[Path]:
    """Where a submission's worker reads it: a copy alone in a folder of its own, so that what
    else is in the batch's folder is not beside it. A worker puts the folder that holds the
    submission on its import path (for the submission's own helper modules), and in a batch
    that folder is the batch's: `from student02 import *` must fail as it does on a cluster's
    worker, which unpacks each submission alone. For a worker of another user, only that uid's
    group may read the copy, and none may write it, so that no submission of the batch reads
    another's code while they grade side by side (docs/security.md, "To other submissions"); the
    copy stays root's: what the worker's user owns in the temporary folder is removed before its
    worker starts. A symbolic link is copied as a link, which the worker then follows with its
    own rights, never the grader's; anything but files, folders and links is left out, and a
    submission too large or too deep to copy is refused (`trees.CopyRefused`)."""
    with scratch.folder(scratch.SUBMISSIONS) as folder:
        if user is None:
            trees.copy_for_group(submission, folder / submission.name, os.getgid())
            yield folder / submission.name
            return
        folder.chmod(0o711)  # the worker passes through to its copy; it lists nothing
        own = folder / "in"
        own.mkdir(mode=0o750)
        os.chown(own, -1, user)  # the worker runs in group uid
        trees.copy_for_group(submission, own / submission.name, user)
        yield own / submission.name


#: Seconds a server has to answer a request or report a killed grading.
SERVER_PATIENCE = 60.0
#: Seconds between two questions whether the batch that asked for a grading is gone.
STOP_POLL = 1.0


def serve(grade: Callable[[dict[str, Any]], int]) -> int:
    """`gradcheck grade --serve`: for each request line on stdin (a submission and where its
    reports go), fork; the child, in a session of its own, its output in the request's log,
    grades (`grade(request)`: the same code as `gradcheck grade`, with the bank and key this
    process loaded) and exits. Its pid, then its exit status, go back on stdout as JSON lines.

    Each grading is a fresh process, so what it does to gradcheck's state (the bank, the key,
    a module) ends with it; the next is forked from this process, which grades nothing itself.
    When stdin ends (the batch, or the Dask worker, is gone) a grading still running is killed
    and the server exits."""
    adopt_orphans()  # what a grading killed at its timeout leaves behind comes back here
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    quiet = os.open(os.devnull, os.O_RDWR)
    os.dup2(quiet, 1)  # nothing printed here may pass for a reply
    requests = sys.stdin.buffer
    # What is loaded now is never collected: the collector of each fork then does not walk it,
    # writing to, and so copying, every page of it (about 0.07 s of CPU a grading).
    gc.freeze()
    for line in iter(requests.readline, b""):
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            replies.close()
            _child(request, grade, quiet)
        print(json.dumps({"pid": pid}), file=replies)
        code = _wait(pid, requests.fileno())
        _sweep()
        if code is None:  # stdin ended while it graded
            return 0
        print(json.dumps({"exit": code}), file=replies)
    return 0


def _child(request: dict[str, Any], grade: Callable[[dict[str, Any]], int], quiet: int) -> None:
    """A forked grading: its own session, dies with the server, its output in its log."""
    code = 70  # EX_SOFTWARE, if even the redirection fails
    try:
        os.setsid()
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(quiet, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        code = grade(request)
    except BaseException:  # a fault of gradcheck's: in its log, and this process only
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


PR_SET_PDEATHSIG = 1


def _wait(pid: int, requests: int) -> int | None:
    """A grading's exit status as subprocess gives it (-N for signal N), or None if the batch
    went away first (the grading is then killed)."""
    child = os.pidfd_open(pid)
    try:
        ready = select.select([child, requests], [], [])[0]
        if child not in ready:
            _kill_pid_group(pid)
        status = os.waitpid(pid, 0)[1]
        return os.waitstatus_to_exitcode(status) if child in ready else None
    finally:
        os.close(child)


def _sweep() -> None:
    """Kill what the last grading left behind: with it reaped, every child of the server's
    outside its session is an orphan the server adopted (a daemon of a worker whose grader was
    killed at its timeout), and so is everything below it. Then remove the folders of its
    workers, which a grading killed had no time to remove (`gradcheck.engine.scratch`)."""
    orphans = lambda: census.adopted(0)  # noqa: E731
    census.kill_all(-1, orphans)  # no session is -1: the orphans and theirs alone
    census.reap(orphans())
    scratch.sweep(scratch.WORKERS)


def _await_exit(pid: int, seconds: float) -> None:
    """Wait until process `pid`, not a child of this one, has ended, for `seconds` at most."""
    try:
        handle = os.pidfd_open(pid)
    except OSError:  # gone already
        return
    try:
        select.select([handle], [], [], seconds)
    finally:
        os.close(handle)


def _kill_pid_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def not_graded(row: Row, folder: Path, why: str) -> None:
    """Leave a results file that says why `row`'s submission has no grade."""
    write_results_json(GradeReport(submission=row.submission, seed=0), folder / "results.json",
                       incomplete=f"The grader did not finish: {why}.")


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill a grader and its process group; its worker dies with it (PR_SET_PDEATHSIG)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def results_score(results: Path) -> float | None:
    """The score a results file gives, or None for a file that is not one (cut short, say)."""
    try:
        return float(json.loads(results.read_text())["score"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _last_line(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines()
    return lines[-1][:300] if lines else ""
