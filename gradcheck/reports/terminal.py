"""The summary printed by `gradcheck grade`: a table of exercises, then what failed and why."""

from __future__ import annotations

import textwrap

from gradcheck.grading.results import GradeReport
from gradcheck.reports import (
    ExerciseSummary,
    by_exercise,
    by_module,
    details_shown,
    exercise_place,
    failures,
    points,
    printable,
    reproduce_command,
    root_causes,
    shown_duration,
    shown_message,
    shown_output,
    withheld_note,
)

# green, yellow, grey, red
_COLOURS = {"passed": "32", "partial": "33", "skipped": "90", "failed": "31"}


def render_terminal(report: GradeReport, *, colour: bool = False, show_hidden: bool = False,
                    command: str = "") -> str:
    """The whole summary; `colour` adds ANSI colours (only for a terminal); `command` is the
    line that reproduces the run (default: the submission at the report's seed).

    What blocks many checks comes first, once; then the points by module (a module whose
    exercises all passed, or all failed, is one line); then each other failed check."""
    def paint(text: str, status: str) -> str:
        return f"\033[{_COLOURS[status]}m{text}\033[0m" if colour else text

    lines = []
    if report.import_error:
        lines += ["The submission could not be imported:", _indent(report.import_error), ""]
    causes = root_causes(report, show_hidden)
    if causes:
        lines.append("What to fix first, by the points each fix would unblock:")
    for number, cause in enumerate(causes, start=1):
        lines += [f"{number:>3}. {cause.heading(first=number == 1)}.",
                  _indent(cause.lead, "       ")]
    if causes:
        lines.append("")

    modules = by_module(report)
    rows: list[tuple[str, str, str, str]] = []  # name, points, status word, status colour
    for module in modules:
        subtotal = f"{points(module.score)}/{points(module.max_score)}"
        count = len(module.exercises)
        if module.uniform == "passed":
            rows.append((module.name, subtotal, f"all {count} passed" if count != 1
                         else "1 exercise, passed", "passed"))
        elif module.uniform == "failed":
            rows.append((module.name, subtotal, f"{_count(count, 'exercise')}, none passed",
                         "failed"))
        else:
            rows.append((module.name, subtotal, "", "partial"))
            rows += [(f"  {e.exercise_id}", f"{points(e.score)}/{points(e.max_score)}",
                      e.status, e.status) for e in module.exercises]
    name_width = max([len("module / exercise")] + [len(row[0]) for row in rows])
    pts_width = max([len("points")] + [len(row[1]) for row in rows])
    lines.append(f"{'module / exercise':<{name_width}}  {'points':>{pts_width}}  status")
    for name, pts, word, status in rows:
        lines.append(f"{name:<{name_width}}  {pts:>{pts_width}}  {paint(word, status)}".rstrip())

    failed = failures(report)
    grouped = {id(r) for cause in causes for r in cause.checks}
    alone = [r for r in failed if details_shown(r, show_hidden) and id(r) not in grouped]
    if alone:
        lines += ["", "Failed checks:"]
    for r in alone:
        place = exercise_place(r)
        lines += [f"{r.name}: {r.title}" + (f" ({place})" if place else ""),
                  _indent(shown_message(r, show_hidden))]
        if show_hidden:
            lines += [_indent("author: " + note) for note in r.author_notes]
    output = shown_output(report, show_hidden)
    if output:
        lines += ["", "The submission printed:", _indent(output)]

    score, max_score = report.score, report.max_score
    status = ExerciseSummary("", "", score, max_score, report.results).status
    lines += ["", paint(f"total {points(score)}/{points(max_score)}", status)
              + f"  ({_count(len(by_exercise(report)), 'exercise')} in "
                f"{_count(len(modules), 'module')}, seed {report.seed}, "
                f"{shown_duration(report, show_hidden):.1f} s)"]
    note = withheld_note(report, show_hidden)
    if note:
        lines.append(note)
    lines.append(f"Reproduce: {command or reproduce_command(report)}")
    return "\n".join(lines) + "\n"


def total_line(report: GradeReport) -> str:
    """One line for --quiet: the score and the seed that reproduces it."""
    return f"{points(report.score)}/{points(report.max_score)} (seed {report.seed})\n"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' * (number != 1)}"


def _indent(text: str, prefix: str = "    ") -> str:
    """A block of text from the grader or the engine, indented, its control characters escaped."""
    shown = printable(text.rstrip("\n"))
    return textwrap.indent(shown or "(no message)", prefix)
