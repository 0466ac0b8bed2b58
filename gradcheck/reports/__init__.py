"""Reports: every format is written from a GradeReport, under one rule about what students see.

The rule: a check's details (its message) are shown only when its exercise is visible, unless
the instructor asks for everything (`show_hidden`). Gradescope is the one exception, in
gradescope.py: it holds back `after_due_date` and `after_published` tests itself, so only
`hidden` ones lose their details there. The submission's captured output is treated the same
way, because an engine can print what a hidden exercise asked of it.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gradcheck.grading.results import CheckResult, GradeReport
from gradcheck.grading.score import total

WITHHELD = "Details are not shown for this exercise."


def atomic_write(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` so that `path` holds either its old content or all of the new, never a part.

    A grading run killed mid-write (a global timeout) must not leave a truncated results file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a report is meant to be read
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def details_shown(result: CheckResult, show_hidden: bool = False) -> bool:
    """Whether a student-facing report may show this result's message."""
    return show_hidden or result.visibility == "visible"


def shown_message(result: CheckResult, show_hidden: bool = False) -> str:
    """The result's message, or a note that it is withheld."""
    return result.message if details_shown(result, show_hidden) else WITHHELD


def shown_output(report: GradeReport, show_hidden: bool = False) -> str:
    """The submission's captured output, unless some exercise it ran is not visible."""
    if not report.output or show_hidden or all(r.visibility == "visible" for r in report.results):
        return report.output
    return f"({len(report.output)} characters, not shown because some exercises are not visible)"


@dataclass
class ExerciseSummary:
    """One exercise's line in a summary table: its checks taken together."""

    exercise_id: str
    topic: str
    score: float
    max_score: float
    checks: list[CheckResult]

    @property
    def status(self) -> str:
        if all(r.status in ("passed", "skipped") for r in self.checks):
            return "passed"
        return "partial" if self.score > 0 else "failed"


def by_exercise(report: GradeReport) -> list[ExerciseSummary]:
    """The report's results grouped by exercise, in the order they were graded."""
    groups: dict[str, list[CheckResult]] = {}
    for r in report.results:
        groups.setdefault(r.exercise_id, []).append(r)
    return [ExerciseSummary(exercise_id=eid, topic=checks[0].topic,
                            score=total(r.score for r in checks),
                            max_score=total(r.max_score for r in checks), checks=checks)
            for eid, checks in groups.items()]


def failures(report: GradeReport) -> list[CheckResult]:
    """The checks that failed or could not run, in the report's order."""
    return [r for r in report.results if r.status in ("failed", "error")]


def points(value: float) -> str:
    """A score as a person writes it: 4, 1.5, 0.33."""
    return f"{value:.2f}".rstrip("0").rstrip(".")
