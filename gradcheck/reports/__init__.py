"""Reports: every format is written from a GradeReport, under one rule about what students see.

The rule, the same in every format (results.json too): a check's details (its message) are
shown only when its exercise is visible, unless the instructor asks for everything
(`show_hidden`). The exercises that are not visible (`hidden`, `after_due_date`,
`after_published`) are graded by a worker of their own (gradcheck.grading.workers), and anything
it says can carry their programs: their checks show pass or fail and points alone, and what that
worker printed or raised while importing (`GradeReport.withheld`) is shown only to the
instructor. What the worker of the visible exercises printed is shown to all.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gradcheck.bank.bundled import bank_dir
from gradcheck.engine.wire import cut
from gradcheck.grading.results import CheckResult, GradeReport
from gradcheck.grading.score import total

WITHHELD = "Details are not shown for this exercise."
#: a visible exercise's note, when it was graded after a hidden one (`CheckResult.after_withheld`)
WITHHELD_AFTER = ("Details are not shown for this exercise: it was graded after a hidden "
                  "exercise, whose program the submission could have carried over to it.")
#: a broken exercise file's note, where its problems would quote what is not shown
WITHHELD_BROKEN = ("This exercise file of the course could not be loaded, so it was not graded: "
                   "this is not your engine's fault; tell your instructor.")
#: characters of one check's message in any report, and of the submission's output: an engine
#: decides the length of what it says, and a report must stay readable (and within Gradescope's
#: and GitHub's limits, about 1 MB for a step summary)
MAX_SHOWN = 4_000
MAX_OUTPUT = 50_000


#: what could drive a terminal or mislead its reader, in text an engine or a file name chose:
#: control characters (ANSI and OSC escapes, carriage returns, backspaces), Unicode's format
#: characters (category Cf, as of Unicode 14: the marks that reorder or hide text, such as bidi
#: overrides, isolates and the Arabic letter mark, zero-width spaces and joiners, the byte
#: order mark, invisible operators, tag characters), its line and paragraph separators, and
#: the surrogates a file name that is not UTF-8 is read into
_UNPRINTABLE = ("\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff"
                "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f"
                "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd"
                "\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
                "\U000e0001\U000e0020-\U000e007f")
_UNPRINTABLE_TEXT = re.compile(f"[{_UNPRINTABLE}]")
_UNPRINTABLE_LINE = re.compile(f"[\t\n{_UNPRINTABLE}]")


def printable(text: str, one_line: bool = False) -> str:
    """`text` with every character `_UNPRINTABLE` names written out as an escape (`\\x1b`,
    `\\u202e`; a byte a file name holds that is not UTF-8, as `\\xff`), and newlines and tabs
    too if `one_line`. Whatever a submission says (an exception's message, a grad_fn's name, what
    it prints, its file's name) passes through it before a terminal, a CI log or a one-line
    field shows it, so that it cannot clear the screen, forge a line or hide one."""
    return (_UNPRINTABLE_LINE if one_line else _UNPRINTABLE_TEXT).sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte Python read from a name that is not UTF-8
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def atomic_write(path: str | os.PathLike[str], text: str, mode: int = 0o644) -> None:
    """Write `text` so that `path` holds either its old content or all of the new, never a part.

    A grading run killed mid-write (a global timeout) must not leave a truncated results file.
    `mode`: a report is meant to be read; one written while a worker of another user still runs
    is the grader's alone (0600).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, mode)  # mkstemp makes it private
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def details_shown(result: CheckResult, show_hidden: bool = False) -> bool:
    """Whether a student-facing report may show this result's message: not a hidden
    exercise's, nor a visible one's graded after a hidden one (`CheckResult.after_withheld`)."""
    return show_hidden or (result.visibility == "visible" and not result.after_withheld)


def shown_duration(report: GradeReport, show_hidden: bool = False) -> float:
    """The grading's time as a student-facing report gives it: all of it, or, where some
    checks' details are withheld, only the time of the checks it shows. A withheld check's time
    is the worker's to choose, and could spell out what it saw (a delay per character of a
    hidden program's source)."""
    if show_hidden or all(details_shown(r) for r in report.results):
        return report.duration
    return sum(r.duration for r in report.results if details_shown(r))


def shown_message(result: CheckResult, show_hidden: bool = False, limit: int = MAX_SHOWN) -> str:
    """The result's message, cut to `limit` characters, or a note that it is withheld (and
    why, for a visible exercise)."""
    if details_shown(result, show_hidden):
        return cut(result.message, limit)
    if result.check == "load":
        return WITHHELD_BROKEN
    return WITHHELD_AFTER if result.after_withheld else WITHHELD


def shown_output(report: GradeReport, show_hidden: bool = False) -> str:
    """What the worker of the visible exercises printed; with `show_hidden`, what the worker of
    the others said as well."""
    if not (show_hidden and report.withheld):
        return cut(report.output, MAX_OUTPUT)
    return cut("\n\n".join(part for part in (report.output, "--- the worker of the exercises "
                                              "not visible ---\n" + report.withheld) if part),
               MAX_OUTPUT)


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
        """passed (every check), partial (some points), skipped (no point, and no check failed:
        what is left could not be graded, which scores 0 and is never a pass) or failed."""
        if all(r.status == "passed" for r in self.checks):
            return "passed"
        if self.score > 0:
            return "partial"
        return "skipped" if all(r.status in ("passed", "skipped") for r in self.checks) \
            else "failed"


def by_exercise(report: GradeReport) -> list[ExerciseSummary]:
    """The report's results grouped by exercise, in the order they were graded."""
    groups: dict[str, list[CheckResult]] = {}
    for r in report.results:
        groups.setdefault(r.exercise_id, []).append(r)
    return [ExerciseSummary(exercise_id=eid, topic=checks[0].topic,
                            score=total(r.score for r in checks),
                            max_score=total(r.max_score for r in checks), checks=checks)
            for eid, checks in groups.items()]


@dataclass
class ModuleSummary:
    """One course module (an exercise's `topic`) in a report: its exercises and subtotal."""

    name: str
    exercises: list[ExerciseSummary]

    @property
    def score(self) -> float:
        return total(e.score for e in self.exercises)

    @property
    def max_score(self) -> float:
        return total(e.max_score for e in self.exercises)

    @property
    def uniform(self) -> str:
        """"passed" when every exercise passed, "failed" when none earned a point, else ""."""
        statuses = {e.status for e in self.exercises}
        return statuses.pop() if len(statuses) == 1 and statuses <= {"passed", "failed"} else ""


def by_module(report: GradeReport) -> list[ModuleSummary]:
    """The report's exercises grouped by module, modules in the order first graded."""
    modules: dict[str, list[ExerciseSummary]] = {}
    for exercise in by_exercise(report):
        modules.setdefault(exercise.topic or "(no module)", []).append(exercise)
    return [ModuleSummary(name, exercises) for name, exercises in modules.items()]


#: Checks that fail at the same place of the engine (`CheckResult.detail["cause"]`), or with the
#: same lead, without a `blocked_by`, form a root cause from this many on: fewer read better one
#: by one.
SHARED = 3


@dataclass
class RootCause:
    """A missing or broken piece of the protocol and the failed checks it blocks."""

    piece: str  # CheckResult.blocked_by: a piece the engine lacks
    checks: list[CheckResult]
    #: where the localisation found the engine wrong ("the backward of `*` (MulBackward0)"),
    #: when `piece` is ""; both "": the checks only share their lead
    fault: str = ""

    @property
    def points(self) -> float:
        """The points that fixing it would unblock (at most: a check may fail for more)."""
        return total(r.max_score - r.score for r in self.checks)

    @property
    def lead(self) -> str:
        """What the first check says of it: for a fault, the finding and why (its first two
        lines, the example a student can work through by hand); else the message's `lead`."""
        message = self.checks[0].message.strip()
        return "\n".join(message.splitlines()[:2]) if self.fault else lead(message)

    def heading(self, first: bool = False) -> str:
        """"Implement `tensor()` first: 161 checks need it (188 points)"."""
        count = len(self.checks)
        then = " first" if first else ""
        if self.piece:
            checks = "1 check needs it" if count == 1 else f"{count} checks need it"
            return f"Implement `{self.piece}`{then}: {checks} ({points(self.points)} points)"
        if self.fault:
            return (f"Fix {self.fault}{then}: {count} checks point at it "
                    f"({points(self.points)} points)")
        return f"{count} checks fail the same way ({points(self.points)} points)"


def lead(message: str) -> str:
    """The start of a message that says what failed: its first line, and, while a line ends
    with a colon (it introduces what follows: a program, numbered steps), on to the next line
    that does not, so that a program found by random search is part of it."""
    lines = message.strip().splitlines()
    end = 0
    while end < len(lines) - 1 and (lines[end].endswith(":") or not lines[end].strip()
                                    or lines[end].startswith(" ")):
        end += 1
    return "\n".join(lines[:end + 1])


#: A name whose attribute is read, as in `v.grad`: leads that differ only in such names say one
#: thing of different variables (`v.grad` and `w.grad` giving a numpy array), one cause.
_OWNER = re.compile(r"\b[A-Za-z_]\w*(?=\.[A-Za-z_])")


def root_causes(report: GradeReport, show_hidden: bool = False) -> list[RootCause]:
    """The failed checks grouped by what blocks them, the most points first: by their
    `blocked_by`, else by the place of the engine their feedback found at fault, else by a lead
    that at least SHARED checks have, but for the names whose attributes it reads (`_OWNER`). Only checks whose details are shown take part, so that no
    hidden exercise is described by the group either; and only failed ones: a check gradcheck
    could not grade, or a broken exercise file, is nothing for the student to fix."""
    groups: dict[tuple[str, str], list[CheckResult]] = {}
    for r in failures(report):
        if r.status == "failed" and details_shown(r, show_hidden) and r.message.strip():
            key = (("piece", r.blocked_by) if r.blocked_by else
                   ("fault", r.detail["cause"]) if r.detail.get("cause") else
                   ("lead", _OWNER.sub("…", lead(r.message))))
            groups.setdefault(key, []).append(r)
    causes = [RootCause(what if kind == "piece" else "", checks,
                        what if kind == "fault" else "")
              for (kind, what), checks in groups.items()
              if kind == "piece" or len(checks) >= SHARED]
    return sorted(causes, key=lambda cause: (-cause.points, -len(cause.checks)))


def exercise_place(r: CheckResult) -> str:
    """Where a check is written: its exercise file, as short as can still be found, and line.
    A file of the bundled bank is named by its path in the bank (it lies inside the installed
    package), another by its path from the current folder when it lies under it."""
    if not r.file:
        return ""
    path = Path(r.file)
    for folder in (bank_dir(), Path.cwd()):
        if path.is_relative_to(folder):
            path = path.relative_to(folder)
            break
    return f"{path}:{r.line}" if r.line else str(path)


def reproduce_command(report: GradeReport) -> str:
    """The one-line command that grades the same submission at the same seed."""
    return printable(shlex.join(["gradcheck", "grade", report.submission, "--seed",
                                 str(report.seed)]), one_line=True)


def withheld_note(report: GradeReport, show_hidden: bool = False) -> str:
    """One sentence for the failed checks whose details are not shown, instead of a line each,
    and one for the course's files among them that could not be loaded (no fault of the
    submission's: its student should tell the instructor), or ''."""
    withheld = [r for r in failures(report) if not details_shown(r, show_hidden)]
    broken = sum(r.check == "load" for r in withheld)
    count = len(withheld) - broken
    said = [f"{count} failed {'check belongs' if count == 1 else 'checks belong'} to exercises "
            "whose details are not shown."] if count else []
    if broken:
        one = broken == 1
        said.append(f"{broken} exercise {'file' if one else 'files'} of the course could not be "
                    f"loaded, so {'it was' if one else 'they were'} not graded: this is not your "
                    "engine's fault; tell your instructor.")
    return " ".join(said)


def failures(report: GradeReport) -> list[CheckResult]:
    """The checks that failed or could not run, in the report's order."""
    return [r for r in report.results if r.status in ("failed", "error")]


def points(value: float) -> str:
    """A score as a person writes it: 4, 1.5, 0.33."""
    return f"{value:.2f}".rstrip("0").rstrip(".")
