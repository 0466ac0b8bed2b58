"""The HTML report (`gradcheck grade --html report.html`): one page a student opens in a browser.

The page is one self-contained file: its style is inline, its pictures are inline SVG, and it
loads nothing (no script, no font, no image from anywhere), so it reads the same offline, as a
CI artefact, or attached to an e-mail. Per module and exercise it shows each failed check's
message; for a failed gradient check, torch's chain-rule walk at the first failing point as a
table beside the engine's values, and the graph drawn by graphviz with the node at fault
marked; for a failed behaviour check, each step as torch and the engine went through it, side
by side (a graph check: each node's facts). Details follow the rule of every student-facing
report (gradcheck.reports): a check whose exercise is not visible shows its points only.

The walk is torch's, computed again here from the exercise file and the point the check failed
at (CheckResult.detail); where torch or graphviz's `dot` is missing, the page says so instead.
"""

from __future__ import annotations

import html
import os
from typing import Any, Mapping, Sequence

from gradcheck.bank.loader import load_exercise
from gradcheck.bank.models import Exercise
from gradcheck.bank.problems import ExerciseError
from gradcheck.grading import localise
from gradcheck.grading.chain_rule import WalkError, walk
from gradcheck.grading.compare import point_text
from gradcheck.grading.results import CheckResult, GradeReport
from gradcheck.reports import (
    atomic_write,
    by_module,
    details_shown,
    exercise_place,
    explain,
    graph_picture,
    points,
    printable,
    reproduce_command,
    root_causes,
    shown_duration,
    shown_message,
    shown_output,
    beside,
)

_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; padding: 0 1em;
       color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.6em; }
h3.check { font-size: 1em; font-weight: normal; margin: .5em 0; }
.passed { color: #1e7b34; } .partial { color: #a86500; } .failed, .error { color: #b3261e; }
.skipped { color: #666; }
details.exercise { border: 1px solid #ddd; border-radius: 6px; margin: .4em 0; padding: .3em .8em; }
summary { cursor: pointer; } summary .points { float: right; }
pre { background: #f6f6f6; padding: .6em; overflow-x: auto; white-space: pre-wrap; }
table { border-collapse: collapse; margin: .6em 0; font-size: .92em; }
th, td { border: 1px solid #ccc; padding: .2em .5em; text-align: left; vertical-align: top; }
tr.departs td, td.differs { background: #fdecea; }
.picture { overflow-x: auto; } .picture svg { max-width: 100%; height: auto; }
.withheld, .note { color: #666; font-style: italic; }
.causes li { margin-bottom: .5em; }
.causes .lead { white-space: pre-wrap; }
"""


def render_html(report: GradeReport, *, show_hidden: bool = False, command: str = "",
                graded: Sequence[Exercise] = ()) -> str:
    """The whole page as text. `graded`: the exercises as the grading read them, which the
    walks are drawn from; any other is read again from its file, which a worker of the
    grader's own user could have rewritten meanwhile (or made a FIFO, to hang the report)."""
    # file -> its exercise, or why it cannot load
    exercises: dict[str, Exercise | str] = {str(e.path): e for e in graded if e.path}
    body = [f"<h1>gradcheck: {points(report.score)} / {points(report.max_score)} points</h1>",
            f"<p>Submission <code>{_e(printable(report.submission, one_line=True))}</code> · seed {report.seed} · "
            f"{shown_duration(report, show_hidden):.1f} s</p>"]
    if report.import_error:
        body += ["<h2>The submission could not be imported</h2>",
                 f"<pre>{_e(report.import_error)}</pre>"]
    causes = root_causes(report, show_hidden)
    if causes:
        body.append("<h2>What to fix first</h2><ol class=\"causes\">")
        body += [f"<li><strong>{_code(cause.heading(first=number == 1))}</strong>"
                 f"<div class=\"lead\">{_e(cause.lead)}</div></li>"
                 for number, cause in enumerate(causes, start=1)]
        body.append("</ol>")
    # a check blocked by a missing piece is only named; one whose cause is a wrong operation
    # keeps its walk and its graph, the pictures that show where the operation goes wrong
    grouped = {id(r) for cause in causes if cause.piece for r in cause.checks}
    for module in by_module(report):
        body.append(f"<h2>{_e(module.name)} <span class=\"points\">"
                    f"{points(module.score)} / {points(module.max_score)}</span></h2>")
        for exercise in module.exercises:
            # open where there is something to read: a failure not said at the top already,
            # whose details are shown
            opened = " open" if any(r.status in ("failed", "error") and id(r) not in grouped
                                    and details_shown(r, show_hidden)
                                    for r in exercise.checks) else ""
            body.append(f"<details class=\"exercise\" id=\"{_e(exercise.exercise_id)}\""
                        f"{opened}><summary><code>{_e(exercise.exercise_id)}</code> "
                        f"<span class=\"{exercise.status}\">{exercise.status}</span>"
                        f"<span class=\"points\">{points(exercise.score)} / "
                        f"{points(exercise.max_score)}</span></summary>")
            body += [_check(r, show_hidden, id(r) in grouped, exercises)
                     for r in exercise.checks]
            body.append("</details>")
    output = shown_output(report, show_hidden)
    if output:
        body += ["<h2>What the submission printed</h2>", f"<pre>{_e(output)}</pre>"]
    body.append(f"<p>Reproduce: <code>{_e(command or reproduce_command(report))}</code></p>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>gradcheck: {points(report.score)} / {points(report.max_score)}</title>"
            f"<style>{_STYLE}</style></head><body>\n" + "\n".join(body)
            + "\n</body></html>\n")


def write_html(report: GradeReport, path: str | os.PathLike[str], *, show_hidden: bool = False,
               command: str = "", graded: Sequence[Exercise] = ()) -> None:
    """Write the page atomically."""
    atomic_write(path, render_html(report, show_hidden=show_hidden, command=command,
                                   graded=graded))


def _check(r: CheckResult, show_hidden: bool, grouped: bool,
           exercises: dict[str, Exercise | str]) -> str:
    place = exercise_place(r) if details_shown(r, show_hidden) else ""
    head = (f"<h3 class=\"check\"><span class=\"{r.status}\">{r.status}</span> "
            f"<code>{_e(r.check)}</code> {_e(r.title)}"
            + (f" <small>({_e(place)})</small>" if place else "")
            + f" <span class=\"points\">{points(r.score)} / {points(r.max_score)}</span></h3>")
    if r.status not in ("failed", "error"):
        return f"<div class=\"check\">{head}</div>"
    if not details_shown(r, show_hidden):
        return (f"<div class=\"check\">{head}<p class=\"withheld\">"
                f"{_e(shown_message(r, show_hidden))}</p></div>")
    if grouped:  # said once, at the top
        return (f"<div class=\"check\">{head}<p class=\"note\">Blocked by what to fix first: "
                f"{_e(r.message.strip().splitlines()[0])}</p></div>")
    parts = [head, f"<pre class=\"message\">{_e(r.message)}</pre>"]
    exercise = _exercise(r, exercises)
    if isinstance(exercise, str):
        parts.append(f"<p class=\"note\">{_e(exercise)}</p>")
    elif "point" in r.detail:
        parts.append(_walk(exercise, r.detail))
    else:
        parts.append(side_by_side(r))
    return "<div class=\"check\">" + "\n".join(parts) + "</div>"


def side_by_side(r: CheckResult) -> str:
    """A failed behaviour check's steps, or a graph check's nodes, as torch and the engine went
    through them, as an HTML table; '' for any other check."""
    if "engine" not in r.detail:
        return ""
    if r.check == "behaviour":
        return _steps(r.detail.get("steps", []), r.detail["torch"], r.detail["engine"])
    return _graph_facts(r.detail["torch"], r.detail["engine"])


def _exercise(r: CheckResult, exercises: dict[str, Exercise | str]) -> Exercise | str:
    """The check's exercise, loaded again from its file (once per page), or why not."""
    if r.file not in exercises:
        try:
            exercises[r.file] = load_exercise(r.file)
        except ExerciseError as error:
            exercises[r.file] = f"The exercise file could not be read again: {error}"
    return exercises[r.file]


def _walk(exercise: Exercise, detail: Mapping[str, Any]) -> str:
    """torch's chain-rule walk at the failing point, the engine's values beside it, and the
    graph with the node at fault marked."""
    point = detail["point"]
    try:
        truth = walk(exercise.program, point, exercise.grad_names)
    except WalkError as error:
        return f"<p class=\"note\">torch's walk cannot be shown here: {_e(str(error))}</p>"
    found = {record["id"]: record for record in detail.get("found", [])} or None
    if found is not None and set(found) != set(truth.ids):
        found = None
    finding = (localise.Finding("", detail["node"], "", detail.get("arg"))
               if detail.get("node") is not None else None)
    at = _e(point_text(point))
    rows = explain.table_rows(truth, found, finding)
    table = ["<table class=\"walk\"><tr>" + "".join(f"<th>{_e(c)}</th>" for c in rows[0])
             + "</tr>"]
    for row in rows[1:]:
        marked = " class=\"departs\"" if found and row[-1] else ""
        table.append(f"<tr{marked}>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>")
    table.append("</table>")
    try:
        picture = f"<div class=\"picture\">{graph_picture.svg(truth, found, finding)}</div>"
    except graph_picture.DrawingError as error:
        picture = f"<p class=\"note\">No picture: {_e(str(error))}</p>"
    return (f"<p>The chain-rule walk at {at}, as torch does it"
            + (", and your engine's values" if found else "") + ":</p>"
            + "\n".join(table) + picture)


def _steps(codes: list[str], torch: Mapping[str, Any], engine: Mapping[str, Any]) -> str:
    """Each behaviour step as torch and the engine went through it, side by side."""
    return _table("steps", "step", beside.step_rows(codes, torch, engine))


def _graph_facts(torch: Mapping[str, Any], engine: Mapping[str, Any]) -> str:
    """Each graph node's facts in torch and in the engine, side by side."""
    return _table("graph", "node", beside.graph_rows(torch, engine))


def _table(kind: str, first: str, rows: list[beside.Row]) -> str:
    cells = [f"<table class=\"{kind}\"><tr><th>{first}</th><th>torch</th><th>your engine</th>"
             "</tr>"]
    for row in rows:
        differs = " class=\"differs\"" if row.differs else ""
        cells.append(f"<tr><td>{_label(row.label)}</td><td>{_e(row.torch)}</td>"
                     f"<td{differs}>{_e(row.engine)}</td></tr>")
    return "".join(cells) + "</table>"


def _label(label: str) -> str:
    """A step's number and code (`2. z.backward()`), or a node's name, as HTML."""
    number, dot, code = label.partition(". ")
    if dot and number.isdigit():
        return f"{number}. <code>{_e(code)}</code>"
    return f"<code>{_e(label)}</code>" if label.isidentifier() else _e(label)


def _e(text: str) -> str:
    """Text as HTML, its control characters escaped too (`printable`): harmless in a browser,
    not in a terminal that shows the file."""
    return html.escape(printable(text), quote=True)


def _code(text: str) -> str:
    """Escaped text with its `backticks` as <code>."""
    parts = _e(text).split("`")
    return "".join(f"<code>{part}</code>" if i % 2 else part for i, part in enumerate(parts))

