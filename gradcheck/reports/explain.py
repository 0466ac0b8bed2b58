"""`gradcheck explain`: an exercise's chain-rule walk, node by node, as course notes show it.

For `z = 2x^2 + 1` at x = 3, backward starts at z with gradient 1 and multiplies by each node's
local slope on the way back: 1 for `+ 1`, 2 for `2 *`, 6 for `x ** 2`, which leaves 12 in
x.grad. The table prints exactly that walk, computed by torch. With `--submission`, the same
program runs on the submission in the sandboxed worker, its values and gradients are printed next
to torch's, and the node where it departs is marked and explained. `--graph` draws the graph.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from gradcheck.bank.course_file import CourseFileError, bank_default, find_course
from gradcheck.bank.loader import load_bank, load_exercise
from gradcheck.bank.models import Exercise
from gradcheck.bank.problems import ExerciseError
from gradcheck.bank.tolerances import Tolerance
from gradcheck.engine.sandbox import Failure, Worker
from gradcheck.grading import localise
from gradcheck.grading.chain_rule import Walk, WalkError, number_text, trace_request, walk
from gradcheck.grading.grader import GraderError, resolve_submission
from gradcheck.reports import graph_picture

CANNOT_RUN = 2  # as `gradcheck grade`
DEPARTS = 1  # the submission departs from torch, or could not run
MAX_PATHS = 4  # products of slopes are spelled out for at most this many paths into a leaf
MAX_SPELLED = 40  # ... in graphs of at most this many nodes
_HEADERS = ("node", "operation", "value", "local slope", "gradient in", "gradient out")


class ExplainError(Exception):
    """The walk cannot be shown (an unknown exercise, a bad --at); the message says why."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `explain` on the `gradcheck` command's subparsers."""
    p = subparsers.add_parser(
        "explain", help="show an exercise's chain-rule walk, node by node",
        description="Print the backward walk of EXERCISE as torch does it: each node's value, "
                    "its local slope with respect to each operand, the gradient arriving at it "
                    "and the gradient it passes on. Exit status: 0, or "
                    f"{DEPARTS} when --submission departs from torch, or {CANNOT_RUN} when the "
                    "walk cannot be shown.")
    p.add_argument("exercise", metavar="EXERCISE",
                   help="an exercise file, or the id of an exercise of the bundled bank")
    p.add_argument("--submission", metavar="S",
                   help="also run a submission (a module file, a package folder, 'reference' or "
                        "'torch') in the sandboxed worker and mark where it departs")
    p.add_argument("--at", metavar="NAME=VALUE", nargs="+", action="extend", default=[],
                   help="input values instead of the exercise's (x=3, v=[1,2,3]); repeatable")
    p.add_argument("--graph", metavar="FILE", type=Path,
                   help="draw the graph to FILE (.svg, .png, or .dot which needs no graphviz)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the walk (and the submission's departure), draw the graph if asked."""
    try:
        exercise = find_exercise(args.exercise)
        point = parse_at(args.at, exercise)
        truth = walk(exercise.program, point, exercise.grad_names)
    except (ExplainError, WalkError) as error:
        print(f"gradcheck explain: {error}", file=sys.stderr)
        return CANNOT_RUN
    found, finding, status = None, None, 0
    out = [heading(exercise, truth)]
    if args.submission:
        try:
            path = resolve_submission(args.submission)
        except GraderError as error:
            print(f"gradcheck explain: {error}", file=sys.stderr)
            return CANNOT_RUN
        found, finding, note = _run_submission(path, exercise, point)
        if found is not None and not note and not finding and not _agrees(exercise, truth, found):
            note = (f"{args.submission} departs from torch here, but gradcheck could not tell "
                    "which operation is at fault.")
        status = DEPARTS if note or finding else 0
        out.append(table(truth, found, finding))
        out.append(note or (finding.message if finding else
                            f"{args.submission} agrees with torch at every node."))
    else:
        out.append(table(truth))
    out += slope_products(truth)
    print("\n\n".join(part for part in out if part))
    if args.graph:
        try:
            graph_picture.draw(truth, args.graph, found, finding)
        except graph_picture.DrawingError as error:
            print(f"gradcheck explain: {error}", file=sys.stderr)
            return CANNOT_RUN
        print(f"\nThe graph is in {args.graph}.")
    return status


# --- inputs -------------------------------------------------------------------------------------


def find_exercise(text: str) -> Exercise:
    """An exercise file, or by id an exercise of the course's bank (gradcheck.toml in this
    folder or above), else of the bundled bank."""
    path = Path(text)
    try:
        if path.is_file():
            return load_exercise(path)
    except ExerciseError as error:
        raise ExplainError(f"{path} is not a valid exercise:\n{error}") from None
    if path.suffix in (".yaml", ".yml") or "/" in text:
        raise ExplainError(f"no exercise file at {path}")
    try:
        course = find_course()
    except CourseFileError as error:
        raise ExplainError(str(error)) from None
    folder = bank_default(course)
    bank = load_bank(folder)
    by_id = {exercise.id: exercise for exercise in bank.exercises}
    if text not in by_id:
        where = f"the course's bank {folder}" if course else "the bundled bank"
        raise ExplainError(f"no exercise {text!r} in {where}; its exercises are "
                           f"{', '.join(sorted(by_id))}, or give an exercise file")
    return by_id[text]


def parse_at(items: Sequence[str], exercise: Exercise) -> dict[str, Any]:
    """The exercise's input values with `NAME=VALUE` items put in (`v=[1,2]` or `v=1,2`)."""
    point = dict(exercise.values)
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or name not in exercise.inputs:
            raise ExplainError(f"--at {item}: write NAME=VALUE with NAME one of the inputs "
                               f"{', '.join(exercise.inputs)}")
        size = exercise.sizes[name]
        try:
            value = json.loads(text if text.strip().startswith("[") or size is None
                               else f"[{text}]")
            value = float(value) if size is None else [float(v) for v in value]
        except (ValueError, TypeError):
            value = None
        if value is None or size is not None and len(value) != size:
            want = "a number" if size is None else f"{size} numbers, like [1, 2]"
            raise ExplainError(f"--at {item}: {name} needs {want}")
        point[name] = value
    return point


def _run_submission(path: Path, exercise: Exercise, point: Mapping[str, Any]
                    ) -> tuple[dict[int, Any] | None, localise.Finding | None, str]:
    """The submission's trace records by node id, where it departs, and what went wrong if it
    could not run."""
    with Worker(path) as worker:
        def ask(request: dict[str, Any]) -> Any:
            return worker.request(request, timeout=exercise.timeout)

        reply = ask(trace_request(exercise.program, point, exercise.grad_names))
        if isinstance(reply, Failure):
            return None, None, f"The submission could not run: {reply.message}"
        if not reply["nodes"]:
            error = reply["error"] or {}
            return None, None, (f"The submission raised {error.get('type')}: "
                                f"{error.get('message')}")
        found = {record["id"]: record for record in reply["nodes"]}
        finding = localise.locate(exercise.program, point, exercise.grad_names, ask,
                                  _tolerance(exercise))
    return found, finding, ""


def _agrees(exercise: Exercise, w: Walk, found: Mapping[int, Any]) -> bool:
    tolerance = _tolerance(exercise)
    return all(localise.same_numbers(found[i]["value"], w.values[i], tolerance)
               and localise.same_numbers(found[i]["grad"], w.grads[i], tolerance)
               for i in w.backward_order())


def _tolerance(exercise: Exercise) -> Tolerance:
    """The exercise's tolerance between analytic answers: torch's and the submission's."""
    return Tolerance(exercise.tolerance.analytic.atol, exercise.tolerance.analytic.rtol)


# --- the table ----------------------------------------------------------------------------------


def heading(exercise: Exercise, w: Walk) -> str:
    program = "\n".join(f"    {line}" for line in exercise.program.source.strip().splitlines())
    point = ", ".join(f"{name}={number_text(value)}" for name, value in w.point.items())
    output = w.program.output_name
    return (f"{exercise.id}: {exercise.title}\n{program}\n"
            f"At {point}, {output} = {number_text(w.values[w.output])}. backward() starts at "
            f"{output} with gradient 1.0; each node multiplies the gradient arriving at it by its "
            "local slope with respect to each operand and passes the product on.")


def table(w: Walk, found: Mapping[int, Any] | None = None,
          finding: localise.Finding | None = None) -> str:
    """One row per node backward reaches, output first; a continuation line per extra edge."""
    rows = table_rows(w, found, finding)
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                     for row in rows)


def table_rows(w: Walk, found: Mapping[int, Any] | None = None,
               finding: localise.Finding | None = None) -> list[list[str]]:
    """The walk's table as cells, headers first (for the text table and the HTML report)."""
    headers = list(_HEADERS) + (["yours: value", "yours: gradient", ""] if found else [])
    rows = [headers]
    for i in w.backward_order():
        node = w.node(i)
        edges = w.edges(i)
        twice = {a for a in node.args if node.args.count(a) > 1}
        slopes = [f"d/d{_operand(w, e.arg)}{(' (left)', ' (right)')[e.slot] * (e.arg in twice)}"
                  f" = {number_text(e.slope)}" for e in edges]
        passes = [f"{number_text(e.passed)} to {w.label(e.arg)}" for e in edges]
        if node.op == "input":
            passes = [f"{node.name}.grad = {number_text(w.grads[i])}"]
        row = [_node_text(w, i), w.grad_fn(i) or "input", number_text(w.values[i]),
               slopes[0] if slopes else "", _gradient_in(w, i), passes[0] if passes else ""]
        if found:
            mark = "<- departs here" if finding and finding.node == i else ""
            row += [localise.observed_text(found[i]["value"]),
                    localise.observed_text(found[i]["grad"]), mark]
        rows.append(row)
        for slope, passed in zip(slopes[1:], passes[1:]):
            rows.append(["", "", "", slope, "", passed] + [""] * (3 if found else 0))
    return rows


def slope_products(w: Walk) -> list[str]:
    """For each input: its gradient as the sum over paths of the products of local slopes."""
    if len(w.ids) > MAX_SPELLED:
        return []
    lines = []
    for i in w.backward_order():
        if w.node(i).op != "input":
            continue
        paths = slope_paths(w, i)
        if not paths or any(isinstance(e.slope, list) for path in paths for _, e in path):
            continue
        terms = [" × ".join(number_text(e.slope) for _, e in path)
                 + f" (along {' -> '.join([w.label(c) for c, _ in path] + [w.label(i)])})"
                 for path in paths]
        lines.append(f"{w.node(i).name}.grad = {number_text(w.grads[i])} = "
                     + "\n    + ".join(terms))
    return ["\n".join(lines)] if lines else []


def slope_paths(w: Walk, target: int, limit: int = MAX_PATHS) -> list[list[tuple[int, Any]]]:
    """Every path of edges from the output to `target`, or [] if there are more than `limit`."""
    count = {target: 1}
    for i in w.ids:
        if i > target:
            count[i] = min(limit + 1, sum(count.get(e.arg, 0) for e in w.edges(i)))
    if not 0 < count.get(w.output, 0) <= limit:
        return []
    paths = []

    def follow(i: int, trail: list[tuple[int, Any]]) -> None:
        if i == target:
            paths.append(trail)
            return
        for e in w.edges(i):
            if count.get(e.arg):
                follow(e.arg, trail + [(i, e)])

    follow(w.output, [])
    return paths


def _node_text(w: Walk, i: int) -> str:
    node = w.node(i)
    if node.op == "input":
        return node.name
    text = node.text if len(node.text) <= 40 else node.text[:37] + "..."
    return f"{node.name} = {text}" if node.name else text


def _operand(w: Walk, i: int) -> str:
    node = w.node(i)
    return node.name if node.name else f"({node.text})"


def _gradient_in(w: Walk, i: int) -> str:
    arriving = [e.passed for _, e in w.consumers(i)]
    total = number_text(w.grads[i])
    if 1 < len(arriving) <= MAX_PATHS and not any(isinstance(p, list) for p in arriving):
        return " + ".join(number_text(p) for p in arriving) + f" = {total}"
    return total

