"""Gradescope's results.json: one test per check, written atomically and as often as wanted.

Gradescope shows each test according to its `visibility` and itself holds back `after_due_date`
and `after_published` tests until then. Their outputs carry no details all the same, as a hidden
test's: the worker that graded them had seen every exercise that is not visible, and its words
could carry those programs (gradcheck.grading.workers); the score stays.
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
import threading
import time
from typing import Any

from gradcheck.engine.wire import cut
from gradcheck.grading.results import CheckResult, GradeReport
from gradcheck.reports import (
    MAX_SHOWN,
    atomic_write,
    by_exercise,
    details_shown,
    root_causes,
    shown_duration,
    shown_message,
    shown_output,
)

#: The note of results written while grading is still going on.
UNFINISHED = "Grading did not finish: these are the results so far."


#: characters of all the tests' outputs together: results.json stays about 1 MB at most, what
#: Gradescope's page shows at ease, whatever the engine said and however many checks there are
MAX_TESTS_OUTPUT = 500_000
#: characters of one check's side-by-side table (`_add_tables`)
MAX_TABLE = 5 * MAX_SHOWN
#: characters of the top of the page: the import failure, what to fix first, the printed output
MAX_SUMMARY = 100_000


def results_json(report: GradeReport, *, incomplete: str = "") -> dict[str, Any]:
    """The results.json document for `report`; `incomplete` says why results may be missing."""
    limit = max(100, min(MAX_SHOWN, MAX_TESTS_OUTPUT // max(len(report.results), 1)))
    exercises = by_exercise(report)
    checks = [r for exercise in exercises for r in exercise.checks]
    tests = [_test(r, f"{i}.{j}", limit)
             for i, exercise in enumerate(exercises, start=1)
             for j, r in enumerate(exercise.checks, start=1)]
    _add_tables(tests, checks)
    return {
        "score": report.score,
        "execution_time": round(shown_duration(report), 2),
        "output": cut(_summary(report, incomplete), MAX_SUMMARY),
        # plain text, said rather than left to the platform's default: the summary holds what
        # the submission printed, and a check's message what it raised (a side-by-side table,
        # escaped, is the one output in HTML, `_test`)
        "output_format": "text",
        "test_output_format": "text",
        "visibility": "visible",
        # The grader's own stdout is a log for the instructor, not feedback.
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def write_results_json(report: GradeReport, path: str | os.PathLike[str], *,
                       incomplete: str = "") -> None:
    """Write results.json; safe to call after every exercise, each call leaves a complete file.

    While grading goes on, pass `incomplete=UNFINISHED`: a run killed before the final write
    then leaves a valid file that says the results are partial. Such a file is the grader's
    alone (0600): a worker of another user, still running, would read there the expected
    values of the checks graded so far.
    """
    text = json.dumps(results_json(report, incomplete=incomplete), indent=2, ensure_ascii=False,
                      allow_nan=False)
    atomic_write(path, text + "\n", 0o600 if incomplete == UNFINISHED else 0o644)


class ResultsFile:
    """results.json kept up to date while grading goes on, at most `every` seconds behind.

    Each write is the whole file, so writing it after every exercise costs a grading time that
    grows with the square of the bank's size (a fifth of a keyed grading's CPU on the bundled
    bank). `update` writes at once if the last write is `every` seconds old, else a timer writes
    the results as they are then, once that time is up: a run killed while a check hangs still
    leaves every result it had a second before. `finish` writes the last time."""

    def __init__(self, path: str | os.PathLike[str], every: float = 1.0) -> None:
        self.path = path
        self.every = every
        self._lock = threading.Lock()
        self._last = -float("inf")
        self._timer: threading.Timer | None = None
        self._done = False

    def update(self, report: GradeReport) -> None:
        """The results so far, marked unfinished: now, or within `every` seconds."""
        with self._lock:
            wait = self._last + self.every - time.monotonic()
            if wait <= 0:
                self._write(report, UNFINISHED)
            elif self._timer is None:
                self._timer = threading.Timer(wait, self._later, (report,))
                self._timer.daemon = True
                self._timer.start()

    def finish(self, report: GradeReport, incomplete: str = "") -> None:
        """The last write; no timer writes after it."""
        with self._lock:
            self._stop()
            self._write(report, incomplete)

    def stop(self) -> None:
        """No more writes from the timer (another writer has the last word)."""
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        self._done = True
        if self._timer is not None:
            self._timer.cancel()

    def _later(self, report: GradeReport) -> None:
        with self._lock:
            self._timer = None
            if not self._done:
                self._write(report, UNFINISHED)

    def _write(self, report: GradeReport, incomplete: str) -> None:
        # a copy of the list: the grading appends to it meanwhile
        write_results_json(dataclasses.replace(report, results=list(report.results)),
                           self.path, incomplete=incomplete)
        self._last = time.monotonic()


def _test(r: CheckResult, number: str, limit: int) -> dict[str, Any]:
    test: dict[str, Any] = {
        "name": f"{r.title} ({r.exercise_id})" if r.title else r.name,
        "number": number,
        "score": r.score,
        "max_score": r.max_score,
        "output": shown_message(r, limit=limit),
        "visibility": r.visibility,
        "tags": [r.topic] if r.topic else [],
    }
    if r.status != "skipped":  # a skipped check is judged by Gradescope's rule: score >= max_score
        test["status"] = "passed" if r.status == "passed" else "failed"
    return test


def _add_tables(tests: list[dict[str, Any]], checks: list[CheckResult]) -> None:
    """Show each failed behaviour or graph check as torch and the engine side by side (an HTML
    table), which reads best, while the tests' outputs stay within MAX_TESTS_OUTPUT: a table
    holds what the engine raised at each step, escaped (a quote is six characters), so its
    length is the engine's to choose; one longer than MAX_TABLE, or than the room left, gives
    way to the plain message."""
    room = MAX_TESTS_OUTPUT - sum(len(test["output"]) for test in tests)
    for test, r in zip(tests, checks):
        if details_shown(r) and "engine" in r.detail:
            # imported here, as the pytest plugin imports this module in every pytest run
            from gradcheck.reports.html import side_by_side

            table = f"<pre>{html.escape(test['output'])}</pre>\n{side_by_side(r)}"
            if len(table) <= MAX_TABLE and len(table) - len(test["output"]) <= room:
                room -= len(table) - len(test["output"])
                test["output"], test["output_format"] = table, "html"


def _summary(report: GradeReport, incomplete: str) -> str:
    parts = [incomplete] if incomplete else []
    if report.import_error:
        parts.append("Your submission could not be imported:\n\n" + report.import_error)
    causes = root_causes(report)
    if causes:  # said once here, as at the top of the terminal report
        parts.append("What to fix first, by the points each fix would unblock:\n" + "\n".join(
            f"{number}. {cause.heading(first=number == 1)}. {cause.lead}"
            for number, cause in enumerate(causes, start=1)))
    if report.results:
        parts.append(f"Seed {report.seed}: grading again with --seed {report.seed} reproduces "
                     "this run.")
    output = shown_output(report)
    if output:
        parts.append("What your submission printed:\n\n" + output)
    return "\n\n".join(parts)
