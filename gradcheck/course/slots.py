"""One submission of a batch graded in a process of its own, here or on a cluster's worker.

`gradcheck grade-batch` (gradcheck/course/batch.py) grades on this machine, `-j` job slots at a
time; with `--scheduler`, each grading runs on a Dask worker (gradcheck/course/cluster.py). Both
grade a submission the same way, with what this module owns: the `gradcheck grade` command line a
batch's options make, `grade_one` (that process, killed with everything it started past the
submission's time limit, its results file and grader log), the gradebook `Row` it gives, and the
sha256 digests of the bank and the key a grading used, which every result carries
(`OUT/<name>/grading.json`) so that a resumed batch regrades what was graded against other bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from gradcheck.bank.loader import exercise_files
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


def grade_one(command: list[str], submission: Path, folder: Path, max_score: float,
              options: Options, running: Running) -> Row:
    """Grade one submission in its own `gradcheck grade` process (`command`, the batch's with
    the job slot's worker user), killed after the submission timeout; its reports in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    results, report = folder / "results.json", folder / "junit.xml"
    for stale in (results, report, folder / STAMP):
        stale.unlink(missing_ok=True)  # never read an earlier batch's file as this one's
    if options.junit:
        command = [*command, "--junit", str(report)]
    limit = options.submission_timeout
    started = time.monotonic()
    with open(folder / "grader.log", "wb") as log:
        proc = subprocess.Popen([*command, "--results-json", str(results), str(submission)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        running.add(proc)
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            code = None
        finally:
            running.discard(proc)
    elapsed = time.monotonic() - started
    row = Row(submission.name, 0.0, max_score, "graded", round(elapsed, 2))
    if code is None:
        row.status, row.note = "timeout", f"stopped after {limit:g} s"
    elif code != 0:
        row.status = "error" if code == CANNOT_RUN else "crashed"
        row.note = _last_line(folder / "grader.log") or f"exit status {code}"
    if results.is_file():
        row.score = _score(results)
    else:
        not_graded(row, folder, row.note or "the grader wrote no results")
    return row


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


def _score(results: Path) -> float:
    try:
        return float(json.loads(results.read_text())["score"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def _last_line(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines()
    return lines[-1][:300] if lines else ""
