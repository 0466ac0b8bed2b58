"""A Markdown summary for a CI job page (GitHub's $GITHUB_STEP_SUMMARY): totals, a table of
exercises, and each failed check's message folded in a <details> block."""

from __future__ import annotations

import html
import os
import re

from gradcheck.grading.results import GradeReport
from gradcheck.reports import (
    atomic_write,
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

_MARKS = {"passed": "✅", "partial": "🟡", "skipped": "⚪", "failed": "❌"}


def render_markdown(report: GradeReport, *, show_hidden: bool = False, command: str = "") -> str:
    """The summary as Markdown (GitHub-flavoured: tables and HTML <details>): what blocks many
    checks first, then the exercises by module with each module's subtotal and the total, then
    each other failed check, then the command that reproduces the run."""
    exercises = by_exercise(report)
    failing = sum(e.status != "passed" for e in exercises)
    lines = [f"## gradcheck: {points(report.score)} / {points(report.max_score)} points", "",
             f"Submission `{_cell(report.submission)}` · seed {report.seed} · "
             f"{len(exercises)} exercise{'s' * (len(exercises) != 1)}, {failing} not fully "
             f"passed · "
             f"{shown_duration(report, show_hidden):.1f} s", ""]
    if report.import_error:
        lines += _fold("The submission could not be imported", report.import_error, open_=True)
    causes = root_causes(report, show_hidden)
    if causes:
        lines += ["### What to fix first", ""]
    for number, cause in enumerate(causes, start=1):
        heading = re.sub("`([^`]*)`", r"<code>\1</code>",
                         html.escape(cause.heading(first=number == 1)))
        lines += _fold(f"{number}. {heading}", f"{cause.lead}\n\nThe checks: "
                       + ", ".join(r.name for r in cause.checks))
    lines += ["| Module / exercise | Points | Status |", "|---|---:|---|"]
    for module in by_module(report):
        lines.append(f"| **{_cell(module.name)}** | "
                     f"**{points(module.score)} / {points(module.max_score)}** | |")
        lines += [f"| `{_cell(e.exercise_id)}` | {points(e.score)} / {points(e.max_score)} | "
                  f"{_MARKS[e.status]} {e.status} |" for e in module.exercises]
    lines.append(f"| **Total** | **{points(report.score)} / {points(report.max_score)}** | |")
    grouped = {id(r) for cause in causes for r in cause.checks}
    alone = [r for r in failures(report)
             if id(r) not in grouped and details_shown(r, show_hidden)]
    note = withheld_note(report, show_hidden)
    if alone or note:
        lines += ["", "### Failed checks", ""]
    for r in alone:
        place = exercise_place(r)
        lines += _fold(f"<code>{html.escape(r.name)}</code> {html.escape(r.title)}"
                       + (f" (<code>{html.escape(place)}</code>)" if place else ""),
                       shown_message(r, show_hidden))
    if note:
        lines += [note, ""]
    output = shown_output(report, show_hidden)
    if output:
        lines += _fold("What the submission printed", output)
    lines += ["", f"Reproduce: `{_cell(command or reproduce_command(report))}`"]
    return "\n".join(lines) + "\n"


def write_markdown(report: GradeReport, path: str | os.PathLike[str], *,
                   show_hidden: bool = False, command: str = "") -> None:
    """Write the summary atomically (append it to $GITHUB_STEP_SUMMARY yourself if wanted)."""
    atomic_write(path, render_markdown(report, show_hidden=show_hidden, command=command))


def _fold(summary: str, body: str, open_: bool = False) -> list[str]:
    """A <details> block whose body is shown verbatim, whatever backticks it contains, its
    control characters escaped (the file is read in terminals too)."""
    body = printable(body)
    longest = max((len(run) for run in re.findall("`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"<details{' open' if open_ else ''}><summary>{summary}</summary>", "",
            f"{fence}text", body.rstrip("\n"), fence, "", "</details>", ""]


def _cell(text: str) -> str:
    """Text that stays inside one table cell (or inline code span)."""
    return printable(text.replace("\n", " "), one_line=True).replace("|", "\\|").replace("`", "'")
