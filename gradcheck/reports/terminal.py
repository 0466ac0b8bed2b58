"""The summary printed by `gradcheck grade`: a table of exercises, then what failed and why."""

from __future__ import annotations

import re
import textwrap

from gradcheck.grading.results import GradeReport
from gradcheck.reports import (
    by_exercise,
    details_shown,
    failures,
    points,
    shown_message,
    shown_output,
)

_COLOURS = {"passed": "32", "partial": "33", "failed": "31"}  # green, yellow, red
# Control characters other than newline and tab, which could drive the terminal (ANSI escapes).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def render_terminal(report: GradeReport, *, colour: bool = False,
                    show_hidden: bool = False) -> str:
    """The whole summary; `colour` adds ANSI colours (only for a terminal)."""
    def paint(text: str, status: str) -> str:
        return f"\033[{_COLOURS[status]}m{text}\033[0m" if colour else text

    lines = []
    if report.import_error:
        lines += ["The submission could not be imported:", _indent(report.import_error), ""]
    exercises = by_exercise(report)
    rows = [(e.exercise_id, f"{points(e.score)}/{points(e.max_score)}", e.status)
            for e in exercises]
    id_width = max([len("exercise")] + [len(row[0]) for row in rows])
    pts_width = max([len("points")] + [len(row[1]) for row in rows])
    lines.append(f"{'exercise':<{id_width}}  {'points':>{pts_width}}  status")
    for exercise_id, pts, status in rows:
        lines.append(f"{exercise_id:<{id_width}}  {pts:>{pts_width}}  {paint(status, status)}")

    failed = failures(report)
    if failed:
        lines += ["", "Failed checks:"]
    for r in failed:
        lines += [f"{r.name}: {r.title}", _indent(shown_message(r, show_hidden))]
        if show_hidden:
            lines += [_indent("author: " + note) for note in r.author_notes]
    output = shown_output(report, show_hidden)
    if output:
        lines += ["", "The submission printed:", _indent(output)]

    score, max_score = report.score, report.max_score
    status = "passed" if not failed else "partial" if score > 0 else "failed"
    lines += ["", paint(f"total {points(score)}/{points(max_score)}", status)
              + f"  ({len(exercises)} exercises, seed {report.seed}, {report.duration:.1f} s)"]
    hidden = sum(not details_shown(r, show_hidden) for r in failed)
    if hidden:
        checks = "check belongs" if hidden == 1 else "checks belong"
        lines.append(f"{hidden} failed {checks} to exercises whose details are not shown.")
    return "\n".join(lines) + "\n"


def total_line(report: GradeReport) -> str:
    """One line for --quiet: the score and the seed that reproduces it."""
    return f"{points(report.score)}/{points(report.max_score)} (seed {report.seed})\n"


def _indent(text: str) -> str:
    """A block of text from the grader or the engine, indented, its control characters escaped."""
    shown = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text.rstrip("\n"))
    return textwrap.indent(shown or "(no message)", "    ")
