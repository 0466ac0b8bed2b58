"""The submission's two workers: one whose every word may reach the student, and a fresh one
for the exercises whose details are not shown.

A worker that was sent a hidden program (or an `after_due_date` or `after_published` one, whose
programs students may not see yet) can carry it in anything it says: a traceback, an exception's
message, what it prints, an error record, a protocol error, the numbers of a visible check's
message, or files it leaves in its home for the next worker to find. So the visible exercises
are graded by one worker, and every other exercise by another, started afresh (its own HOME and
TMPDIR, nothing carried over) once the first is closed. What the second says (its import
failure and its printed output) is kept apart, for the instructor's reports only
(`GradeReport.withheld`); the reports show its checks' pass or fail and points alone
(`gradcheck.reports.shown_message`). Every grading command grades the visible exercises first
(the pytest plugin runs the others' items last). Should a visible exercise be graded after such
an exercise all the same (a caller of `Grader.grade_exercise`, pytest's items reordered as they
run), the grader takes it for one whose details are withheld (`Grader.shown`): a worker of the
shown side could read what the withheld side left on disk. The feedback `grade --watch`
works out after every score gets a new worker of the shown side: no restart brings a tainted
worker's files or processes back to a worker whose words are shown.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Mapping

from gradcheck.bank.models import Exercise
from gradcheck.engine.sandbox import Worker, Zygote


def details_shown(exercise: Exercise) -> bool:
    """Whether what the worker says while grading `exercise` may reach a student."""
    return exercise.visibility == "visible"


class Workers:
    """One worker at a time, for the side (shown or withheld) of the exercise being graded."""

    def __init__(self, submission: Path, options: Mapping[str, Any]) -> None:
        self._submission = submission
        #: forks every worker of this grading, both sides' and every restart (sandbox.Zygote)
        self._zygote = Zygote(options.get("python", sys.executable))
        self._options = {"zygote": self._zygote, **options}
        self._worker: Worker | None = None
        self._shown = True
        self._exercises: set[str] = set()  # the ids of those the worker was asked about
        #: Worker.deadline of every worker: the submission's time, shared by both sides
        self.deadline: float | None = None
        #: per side (shown: True), each closed worker's import failure and output
        self._said: dict[bool, list[tuple[str, str]]] = {True: [], False: []}
        #: whether a worker of the withheld side has started: every worker after it could read
        #: what it left
        self.withheld_started = False

    def for_exercise(self, exercise: Exercise, shown: bool) -> Worker:
        """The worker that grades `exercise` on the `shown` side (`details_shown`, unless the
        grader withholds more): the current one if it is on the same side, else a new one (the
        other side's is closed first, with everything it started)."""
        if self._worker is not None and shown != self._shown:
            self._retire()
        if self._worker is None:
            self._worker, self._shown = Worker(self._submission, **self._options), shown
            self.withheld_started = self.withheld_started or not shown
            self._worker.deadline = self.deadline
            self._exercises = set()
        elif exercise.id not in self._exercises:  # moving on to it: see Worker.move_on
            self._worker.move_on()
        self._exercises.add(exercise.id)
        return self._worker

    def fresh(self) -> Worker | None:
        """A new worker of the shown side beside the current one, forked by the same zygote, in
        which nothing has run: for a question whose answer must not depend on what the engine
        ran before (`Grader._passes_alone`). None once a worker of the withheld side has
        started (what that one left could reach it), and for workers of a user of their own,
        whose start ends every process of that user, the current worker's too. The caller
        closes it; nothing it says is kept, only what the caller makes of its replies."""
        if self.withheld_started or self._options.get("user") is not None:
            return None
        worker = Worker(self._submission, **self._options)
        worker.deadline = self.deadline
        return worker

    def close(self) -> None:
        if self._worker is not None:
            self._retire()
        self._zygote.close()

    def _retire(self) -> None:
        assert self._worker is not None
        self._worker.close()
        if not self._shown:  # what a withheld side's worker could reach, the next side's cannot
            self._zygote.close()  # a new one forks the next worker
        self._said[self._shown].append(_words(self._worker))
        self._worker = None

    def _all(self, shown: bool) -> list[tuple[str, str]]:
        now = [_words(self._worker)] if self._worker is not None and self._shown == shown else []
        return self._said[shown] + now

    def import_error(self, shown: bool = True) -> str:
        """The first import failure of a worker of that side (its traceback), or ''."""
        return next((failure for failure, _ in self._all(shown) if failure), "")

    def output(self, shown: bool = True) -> str:
        """What the workers of that side printed, truncated."""
        return "\n".join(output for _, output in self._all(shown) if output)

    def withheld(self) -> str:
        """Everything the workers of the exercises not shown said, for the instructor."""
        parts = []
        if self.import_error(False):
            parts.append(f"The submission could not be imported:\n{self.import_error(False)}")
        if self.output(False):
            parts.append(f"It printed:\n{self.output(False)}")
        return "\n\n".join(parts)


def _words(worker: Worker) -> tuple[str, str]:
    failure = worker.import_failure
    return ((failure.detail or failure.message) if failure is not None else "", worker.output)
