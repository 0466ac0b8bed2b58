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
    failures,
    points,
    shown_message,
    shown_output,
)

_MARKS = {"passed": "✅", "partial": "🟡", "failed": "❌"}


def render_markdown(report: GradeReport, *, show_hidden: bool = False) -> str:
    """The summary as Markdown (GitHub-flavoured: tables and HTML <details>)."""
    exercises = by_exercise(report)
    failing = sum(e.status != "passed" for e in exercises)
    lines = [f"## gradcheck: {points(report.score)} / {points(report.max_score)} points", "",
             f"Submission `{_cell(report.submission)}` · seed {report.seed} · "
             f"{len(exercises)} exercises, {failing} not fully passed · "
             f"{report.duration:.1f} s", ""]
    if report.import_error:
        lines += _fold("The submission could not be imported", report.import_error, open_=True)
    lines += ["| Exercise | Topic | Points | Status |", "|---|---|---:|---|"]
    lines += [f"| `{_cell(e.exercise_id)}` | {_cell(e.topic)} | "
              f"{points(e.score)} / {points(e.max_score)} | {_MARKS[e.status]} {e.status} |"
              for e in exercises]
    failed = failures(report)
    if failed:
        lines += ["", "### Failed checks", ""]
    for r in failed:
        lines += _fold(f"<code>{html.escape(r.name)}</code> {html.escape(r.title)}",
                       shown_message(r, show_hidden))
    output = shown_output(report, show_hidden)
    if output:
        lines += _fold("What the submission printed", output)
    return "\n".join(lines) + "\n"


def write_markdown(report: GradeReport, path: str | os.PathLike[str], *,
                   show_hidden: bool = False) -> None:
    """Write the summary atomically (append it to $GITHUB_STEP_SUMMARY yourself if wanted)."""
    atomic_write(path, render_markdown(report, show_hidden=show_hidden))


def _fold(summary: str, body: str, open_: bool = False) -> list[str]:
    """A <details> block whose body is shown verbatim, whatever backticks it contains."""
    longest = max((len(run) for run in re.findall("`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"<details{' open' if open_ else ''}><summary>{summary}</summary>", "",
            f"{fence}text", body.rstrip("\n"), fence, "", "</details>", ""]


def _cell(text: str) -> str:
    """Text that stays inside one table cell (or inline code span)."""
    return text.replace("|", "\\|").replace("\n", " ").replace("`", "'")
