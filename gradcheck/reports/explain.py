"""`gradcheck explain`: an exercise's chain-rule walk, node by node, as course notes show it.

For `z = 2x^2 + 1` at x = 3, backward starts at z with gradient 1 and multiplies by each node's
local slope on the way back: 1 for `+ 1`, 2 for `2 *`, 6 for `x ** 2`, which leaves 12 in
x.grad. The table prints exactly that walk, computed by torch, and then the exercise's behaviour
check step by step, as torch goes through it.

With `--submission`, the submission is graded on the exercise by grade's own Grader at the seed
given (or a new one, printed), so that explain's verdict on each check is grade's, message and
all. The walk is then at the first point where a gradient check fails (or at `--at`, graded
there as a gradients check is), with the engine's values beside torch's as the diagnosis read
them and the node it blames marked; the behaviour steps show the engine's column beside
torch's, the step grade's verdict names marked. `--graph` draws the graph.
"""

from __future__ import annotations

import argparse
import json
import math
import secrets
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from gradcheck.bank.course_file import CourseFileError, bank_default, find_course
from gradcheck.bank.loader import load_bank, load_exercise
from gradcheck.bank.models import Exercise
from gradcheck.bank.problems import ExerciseError
from gradcheck.grading import localise
from gradcheck.grading.chain_rule import Walk, WalkError, walk
from gradcheck.grading.compare import NOTHING_GRADED, point_text
from gradcheck.grading.digits import number_text
from gradcheck.grading.grader import (
    Grader,
    GraderError,
    Outcome,
    resolve_submission,
    torch_answer,
)
from gradcheck.grading.plan import GRADIENT_CHECKS, oracle_list, sample_seed, torch_request
from gradcheck.grading.results import CheckResult
from gradcheck.reports import beside, graph_picture, points, printable

CANNOT_RUN = 2  # as `gradcheck grade`
DEPARTS = 1  # the submission departs from torch, or could not run
MAX_PATHS = 4  # products of slopes are spelled out for at most this many paths into a leaf
MAX_SPELLED = 40  # ... in graphs of at most this many nodes
MAX_CELL = 60  # characters of what torch or the engine shows after a step (an error message)
_HEADERS = ("node", "operation", "value", "local slope", "gradient in", "gradient out")


class ExplainError(Exception):
    """The walk cannot be shown (an unknown exercise, a bad --at); the message says why."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `explain` on the `gradcheck` command's subparsers."""
    p = subparsers.add_parser(
        "explain", help="show an exercise's chain-rule walk, node by node",
        description="Print the backward walk of EXERCISE as torch does it: each node's value, "
                    "its local slope with respect to each operand, the gradient arriving at it "
                    "and the gradient it passes on; then its behaviour check step by step. With "
                    "--submission, the submission is graded on EXERCISE as `gradcheck grade` "
                    "grades it at the same seed, and its values are shown beside torch's. Exit "
                    f"status: 0, or {DEPARTS} when --submission fails a check or departs from "
                    f"torch, or {CANNOT_RUN} when the walk cannot be shown.")
    p.add_argument("exercise", metavar="EXERCISE",
                   help="an exercise file, or the id of an exercise of the course's bank "
                        "(gradcheck.toml here or above), else of the bundled bank")
    p.add_argument("--submission", metavar="S",
                   help="also grade a submission (a module file, a package folder, 'reference' "
                        "or 'torch') in the sandboxed worker and mark where it departs")
    p.add_argument("--at", metavar="NAME=VALUE", nargs="+", action="extend", default=[],
                   help="walk at these input values instead of the exercise's, or the first "
                        "point where a gradient check fails (x=3, v=[1,2,3]); repeatable")
    p.add_argument("--seed", type=int,
                   help="the seed of the grading, as `gradcheck grade --seed` (default: a new "
                        "one, printed)")
    p.add_argument("--oracles", type=oracle_list, metavar="fd,torch,jax",
                   help="restrict the oracles used, as `gradcheck grade --oracles`")
    p.add_argument("--graph", metavar="FILE", type=Path,
                   help="draw the graph to FILE (.svg, .png, or .dot which needs no graphviz)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the walk, the behaviour steps and, with a submission, grade's verdict on each
    check; draw the graph if asked."""
    try:
        exercise = find_exercise(args.exercise)
        seed = args.seed if args.seed is not None else secrets.randbelow(2**32)
        # the inputs' values as grade draws them at this seed (for inputs given as a
        # distribution), with --at's put in
        point = parse_at(args.at, exercise, exercise.values_at(sample_seed(seed, exercise.id)))
        path = resolve_submission(args.submission) if args.submission else None
    except (ExplainError, GraderError) as error:
        print(f"gradcheck explain: {error}", file=sys.stderr)
        return CANNOT_RUN
    graded = (_grade(path, exercise, seed, args.oracles, point, bool(args.at))
              if path is not None else None)
    if graded is not None:
        point = graded.point
    try:
        truth = walk(exercise.program, point, exercise.grad_names)
    except WalkError as error:
        if graded is None and exercise.checks.behaviour is None:
            print(f"gradcheck explain: {error}", file=sys.stderr)
            return CANNOT_RUN
        truth, out = None, [f"{exercise.id}: {exercise.title}\ntorch's walk cannot be shown: "
                            f"{error}"]
    found, finding = None, None
    if truth is not None:
        out = [heading(exercise, truth)]
        if graded is not None:
            found, finding = graded.found(truth), graded.finding()
        out.append(table(truth, found, finding))
        if graded is not None:
            out.append(graded.walk_note(args.submission))
        out += slope_products(truth)
    out += behaviour_steps(exercise, seed, graded)
    if graded is not None:
        out += graph_nodes(graded.results)
        out.append(verdicts(graded.results, exercise, seed, args))
    print(printable("\n\n".join(part for part in out if part)))  # the engine's words, escaped
    if args.graph and truth is not None:
        try:
            graph_picture.draw(truth, args.graph, found, finding)
        except graph_picture.DrawingError as error:
            print(f"gradcheck explain: {error}", file=sys.stderr)
            return CANNOT_RUN
        print(f"\nThe graph is in {args.graph}.")
    return DEPARTS if graded is not None and graded.departs else 0


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


def parse_at(items: Sequence[str], exercise: Exercise, values: Mapping[str, Any]
             ) -> dict[str, Any]:
    """The exercise's input `values` with `NAME=VALUE` items put in (`v=[1,2]` or `v=1,2`)."""
    point = dict(values)
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


@dataclass
class Graded:
    """A submission graded on one exercise as `gradcheck grade` grades it, and the point the
    walk is shown at, with what grade's diagnosis read there."""

    results: list[CheckResult]
    point: dict[str, Any]
    #: the detail of the gradients graded at `point` (Grader.grade_point, or the failed check's)
    detail: dict[str, Any]
    #: the check whose first failing point `point` is, or '' (an --at point, or none failed)
    check: str
    #: the verdict at `point` when it was graded for the walk (not one of the checks)
    outcome: Outcome | None

    @property
    def departs(self) -> bool:
        return (any(r.status in ("failed", "error") for r in self.results)
                or self.outcome is not None and self.outcome.status == "failed")

    def found(self, truth: Walk) -> dict[int, Any] | None:
        """The engine's trace records by node id, as the diagnosis read them, or None (the
        engine is not deterministic, or its trace does not fit the walk)."""
        found = {record["id"]: record for record in self.detail.get("found", [])}
        return found if found and set(found) == set(truth.ids) else None

    def finding(self) -> localise.Finding | None:
        """The node (and operand) the diagnosis blames, for the mark in the table."""
        node = self.detail.get("node")
        return (localise.Finding("", node, "", self.detail.get("arg"))
                if node is not None else None)

    def walk_note(self, label: str) -> str:
        """What the walk's point is, and what grade says there."""
        at = point_text(self.point)
        if self.detail.get("nondeterministic"):
            said = (f"(the {self.check} check, below)" if self.check
                    else f"at {at}:\n{self.outcome.message if self.outcome else ''}")
            return ("Your engine's values are not shown beside torch's: it is not "
                    f"deterministic, so no one run of it is the run graded {said}")
        if self.check:
            return (f"The walk is at {at}, the first point where the {self.check} check "
                    "fails; its verdict is below.")
        if self.outcome is None or self.outcome.status == "passed":
            failing = list(dict.fromkeys(r.check for r in self.results
                                         if r.status in ("failed", "error")))
            return f"At {at}, {label} agrees with torch at every node." + (
                f" What fails is not in this walk: the {' and '.join(failing)} check"
                f"{'s' * (len(failing) > 1)}, below." if failing else "")
        if self.outcome.message.startswith(NOTHING_GRADED):  # the point asked for (--at)
            return (f"At {at}, the oracles disagree on every gradient, so grade would grade "
                    f"none of them there: {self.outcome.message.removeprefix(NOTHING_GRADED)}")
        return f"At {at}, graded as a gradients check:\n{self.outcome.message}"


def _grade(path: Path, exercise: Exercise, seed: int, oracles: Sequence[str] | None,
           point: dict[str, Any], asked: bool) -> Graded:
    """Every check of `exercise` graded by grade's own Grader at `seed` (the same requests in
    the same order, so that even an engine whose answers change from run to run meets them as
    in `gradcheck grade`), then the walk's point: the first point where a gradient check
    fails, unless the point was `asked` for (--at); else `point`, graded there as a gradients
    check is."""
    with Grader(path, seed=seed, oracles=oracles, records=True) as grader:
        results = grader.grade_exercise(exercise)
        failed = next((r for r in results if r.check in GRADIENT_CHECKS
                       and r.status == "failed" and "point" in r.detail), None)
        if not asked and failed is not None:
            return Graded(results, dict(failed.detail["point"]), failed.detail, failed.check,
                          None)
        outcome, detail = grader.grade_point(exercise, point)
    return Graded(results, point, detail, "", outcome)


# --- behaviour, graph and verdicts --------------------------------------------------------------


def behaviour_steps(exercise: Exercise, seed: int, graded: Graded | None) -> list[str]:
    """The behaviour check, step by step: what torch reads after each step and, with a
    submission, what the engine does, the step where grade's verdict says it departs marked."""
    if exercise.checks.behaviour is None:
        return []
    result = next((r for r in graded.results if r.check == "behaviour"), None) if graded else None
    detail = result.detail if result is not None else {}
    codes = [localise.step_code(step, exercise.program.output_name)
             for step in exercise.checks.behaviour.steps]
    torch = detail.get("torch") or torch_answer(
        torch_request(exercise, "behaviour", sample_seed(seed, exercise.id)))
    engine = detail.get("engine")
    rows = beside.step_rows(codes, torch, engine)
    head = "The behaviour check, step by step, as torch goes through it"
    if graded is None:
        return [f"{head}:\n" + _columns([["step", "torch"]]
                                         + [[row.label, _cut(row.torch)] for row in rows])]
    if engine is None:
        why = result.message.splitlines()[0] if result is not None else ""
        return [f"{head} (your engine's steps cannot be shown: {why}):\n"
                + _columns([["step", "torch"]] + [[row.label, _cut(row.torch)] for row in rows])]
    marked = detail.get("step", 0) - (0 if engine.get("error") else 1)
    failed = result.status == "failed"
    return [f"{head} and as your engine does:\n" + _columns(
        [["step", "torch", "your engine", ""]]
        + [[row.label, _cut(row.torch), _cut(row.engine),
            "<- departs here" if failed and k == marked else ""] for k, row in enumerate(rows)])]


def graph_nodes(results: Sequence[CheckResult]) -> list[str]:
    """A failed graph check's nodes, torch's facts beside the engine's."""
    result = next((r for r in results if r.check == "graph"), None)
    if result is None or result.status != "failed" or "engine" not in result.detail:
        return []
    rows = beside.graph_rows(result.detail["torch"], result.detail["engine"])
    return ["The graph check's nodes, in torch and in your engine:\n" + _columns(
        [["node", "torch", "your engine", ""]]
        + [[row.label, _cut(row.torch), _cut(row.engine), "<- differs" if row.differs else ""]
           for row in rows])]


def verdicts(results: Sequence[CheckResult], exercise: Exercise, seed: int,
             args: argparse.Namespace) -> str:
    """grade's verdict on each check, with its message, and the command that gives it."""
    command = ["gradcheck", "grade", str(args.submission), "--exercises", str(args.exercise),
               "--seed", str(seed)] + (["--oracles", ",".join(args.oracles)] if args.oracles
                                       else [])
    lines = [f"The verdict of `{shlex.join(command)}`:"]
    for r in results:
        lines.append(f"  {r.check}: {r.status}, {points(r.score)} of {points(r.max_score)} "
                     "points")
        lines += [f"      {line}" for line in r.message.splitlines()]
    unexplained = [name for name in ("hessian", "random_programs")
                   if getattr(exercise.checks, name) is not None]
    if unexplained:
        lines.append(f"(The walk above is of first derivatives, at one point; the "
                     f"{' and '.join(unexplained)} check{'s' * (len(unexplained) > 1)} "
                     f"{'are' if len(unexplained) > 1 else 'is'} explained by "
                     f"{'their' if len(unexplained) > 1 else 'its'} message alone.)")
    return "\n".join(lines)


# --- the table ----------------------------------------------------------------------------------


def heading(exercise: Exercise, w: Walk) -> str:
    program = "\n".join(f"    {line}" for line in exercise.program.source.strip().splitlines())
    point = ", ".join(f"{name}={number_text(value)}" for name, value in w.point.items())
    output = w.program.output_name
    value = w.values[w.output]
    outside = ("" if value is None or all(math.isfinite(v) for v in (
        value if isinstance(value, list) else [value])) else
               f" {output} is not finite here: an operation's argument lies outside its domain "
               "or on a pole, where there is no derivative to explain; give --at a point inside "
               "every operation's domain.")
    return (f"{exercise.id}: {exercise.title}\n{program}\n"
            f"At {point}, {output} = {number_text(value)}.{outside} backward() starts at "
            f"{output} with gradient 1.0; each node multiplies the gradient arriving at it by its "
            "local slope with respect to each operand and passes the product on.")


def table(w: Walk, found: Mapping[int, Any] | None = None,
          finding: localise.Finding | None = None) -> str:
    """One row per node backward reaches, output first; a continuation line per extra edge."""
    return _columns(table_rows(w, found, finding))


def _cut(text: str) -> str:
    """A cell of the steps' and nodes' tables, at most MAX_CELL characters."""
    return text if len(text) <= MAX_CELL else text[:MAX_CELL - 3] + "..."


def _columns(rows: list[list[str]]) -> str:
    """Rows of cells as aligned columns, the first row the headers."""
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

