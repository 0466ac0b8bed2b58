"""`gradcheck validate`: check an exercise bank before it is published.

Static checks, which run nothing: every file loads (YAML, schema, program, names, points), ids are
unique, each file is named `*.exercise.yaml` and starts with the schema line that editors use,
sampled domains keep every operation's argument clear of its kink, pole or domain edge
(gradcheck.bank.reach), and a hessian check has an oracle that can answer for its program
(`plan.oracle_problems`, which `key build` reports too). Then the
oracles: at the listed points and over each domain the three oracles agree (a disagreement is
classified and shown, unless the exercise grades it by a `convention`), and hand-derived answers
equal what they compute. Last, the reference engine is graded on every exercise and must pass
every check. Each check of one exercise is a function in `STATIC_CHECKS` or
`ORACLE_CHECKS`; checks of the reference engine join them the same way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from gradcheck import oracles
from gradcheck.bank import reach, selection
from gradcheck.bank.course_file import CourseFileError, bank_default, describe, find_course
from gradcheck.bank.loader import (exercise_files, load_bank, misnamed_files, misnamed_message,
                                   path_list)
from gradcheck.bank.models import MAX_TOLERANCE, SUFFIX, Exercise, PathArg, Point
from gradcheck.bank.problems import Problem
from gradcheck.bank.schema import SCHEMA_COMMENT, schema_comment
from gradcheck.bank.tolerances import Tolerance as Closeness
from gradcheck.grading import compare
from gradcheck.grading.plan import convention_note, oracle_problems, wanted_oracles
from gradcheck.oracles import second_order
from gradcheck.program.ops import EDGE, KINK

Check = Callable[[Exercise], list[Problem]]


def validate(paths: PathArg, static: bool = False, notes: list[str] | None = None
             ) -> list[Problem]:
    """Every problem found in the exercises under `paths` (files or folders); with `static`,
    only what can be found without the oracles. What is right but may surprise the author
    (torch grading a check whose `oracles` leave it out) is added to `notes`, if given."""
    paths = path_list(paths)
    problems = [Problem(str(p), 0, "", "no such file or folder") for p in paths if not p.exists()]
    files = exercise_files([p for p in paths if p.exists()])
    misnamed = misnamed_files(paths)
    if not files and not problems and not misnamed:
        problems.append(Problem(", ".join(map(str, paths)), 0, "",
                                f"no *{SUFFIX} files here; name exercise files *{SUFFIX}"))
    problems += [Problem(str(file), 0, "", misnamed_message(file)) for file in misnamed]
    for file in files:
        problems += file_problems(file)
    bank = load_bank(files)
    checks = STATIC_CHECKS if static else STATIC_CHECKS + ORACLE_CHECKS
    for _, error in bank.broken:
        problems += error.problems
        if error.exercise is not None:  # read past its problems: its other ones are found too
            for check in checks:
                problems += check(error.exercise)
    for exercise in bank.exercises:
        for check in checks:
            problems += check(exercise)
    note = convention_note(bank.exercises, None)
    if note and notes is not None:
        notes.append(note)
    if not static:
        found = {(problem.file, problem.field.split(".")[1]) for problem in problems
                 if problem.field.startswith("checks.")}
        problems += [problem for problem in reference_problems(bank.exercises)
                     if (problem.file, problem.field.split(".")[1]) not in found]
    # each file's problems in the order of its lines, as an author reads down the file
    order = {file: number for number, file in enumerate(dict.fromkeys(p.file for p in problems))}
    return sorted(problems, key=lambda problem: (order[problem.file], problem.line))


def reference_problems(exercises: Sequence[Exercise]) -> list[Problem]:
    """Every check of every exercise must pass on the reference engine: proof that the exercise
    is gradable, and that its behaviour steps run the same on torch and on the reference. (A
    check another stage of `validate` found wrong is not said again here.)"""
    from gradcheck.grading.grader import Grader

    problems = []
    with Grader("reference", seed=SEED) as grader:
        for exercise in exercises:
            for result in grader.grade_exercise(exercise):
                first = result.message.splitlines()[0] if result.message else ""
                if result.status == "skipped":  # the exercise's doing, whatever the engine
                    problems.append(exercise.problem(
                        ("checks", result.check), f"this check grades nothing (skipped): "
                                                  f"{first}; fix the exercise"))
                elif result.status != "passed":
                    problems.append(exercise.problem(
                        ("checks", result.check),
                        f"the reference engine does not pass this check ({result.status}): "
                        f"{first}; fix the exercise, or report a bug in the reference engine"))
    return problems


def file_problems(file: Path) -> list[Problem]:
    """The file's name and first line: what makes the bank collect it and editors check it."""
    problems = []
    if not file.name.endswith(SUFFIX):
        problems.append(Problem(str(file), 0, "", misnamed_message(file)))
    try:
        with file.open(encoding="utf-8-sig") as stream:
            first = stream.readline().strip()
    except (OSError, UnicodeDecodeError):
        return problems  # loading the file reports why it cannot be read
    wanted = schema_comment(file)
    if not first.startswith(SCHEMA_COMMENT):
        problems.append(Problem(str(file), 1, "", f"start the file with `{wanted}` so that "
                                                  "editors check and complete it"))
        return problems
    target = first[len(SCHEMA_COMMENT):].strip()
    if "://" not in target and not (file.parent / target).is_file():
        problems.append(Problem(str(file), 1, "", f"the schema {target!r} does not exist from "
                                                  f"here; write `{wanted}`"))
    return problems


def domain_problems(exercise: Exercise) -> list[Problem]:
    """Sampled points must keep clear of every kink, pole and domain edge, on any operation's
    argument (gradcheck.bank.reach: interval bounds over the program, each confirmed by a point
    of the domain). A kink is allowed under `convention: torch`, which grades the points near it
    as torch does; a pole or an edge never is."""
    margins = [check.margin for check in (exercise.checks.sampled, exercise.checks.hessian)
               if check is not None and check.count]
    domains = {name: spec.domain.interval() for name, spec in exercise.inputs.items()
               if spec.domain is not None}
    if not margins or not domains:
        return []
    found = reach.reached(exercise.program, exercise.values_at(SEED), domains, min(margins))
    return [_reached_problem(exercise, hit) for hit in found
            if not (hit.kind == KINK and exercise.convention)]


def _reached_problem(exercise: Exercise, hit: reach.Reached) -> Problem:
    """One problem per operation: what it needs, where its argument goes, and what to change."""
    node, argument = hit.node, hit.argument
    at = f"{hit.edge.at:g}"
    role = f"its {hit.edge.role} `{argument.text}`"
    one = hit.inputs[0] if len(hit.inputs) == 1 else None
    over = (f"the domain of {one} {_shown(exercise, one)}" if one else
            "the domains of " + ", ".join(f"{n} {_shown(exercise, n)}" for n in hit.inputs)
            if hit.inputs else "the inputs' values")
    where = f"`{node.text}` (program line {node.line})"
    roots = ", ".join(f"{r:g}" for r in hit.roots)
    if hit.kind == EDGE:
        fix = f"narrow the domain so that it stays above {at}" if hit.inputs else \
            "change the values"
        text = (f"{where} needs {role} > {at}, but it reaches {hit.lowest + 0.0:.4g} over "
                f"{over}{_point(hit.witness, ' (at {})')}; {fix}")
        text += f" (it is {at} at {one} = {roots})" if roots else ""
    else:
        what = "a kink" if hit.kind == KINK else "a pole"
        text = f"{where} has {what} where {role} is {at}, and it reaches {at} over {over}"
        text += f", at {one} = {roots}" if roots else _point(hit.witness, " (near {})")
        fixes = [f"add {roots} to `avoid`"] if roots else []
        fixes.append("narrow the domain" + ("s" * (one is None)))
        if hit.kind == KINK:
            fixes.append("set `convention: torch` to grade the points near it as torch does")
        text += "; " + (", ".join(fixes[:-1]) + ", or " if len(fixes) > 1 else "") + fixes[-1]
    if one is not None:
        return exercise.problem(("inputs", one, "domain"), text)
    line = exercise.line_of("program")
    if exercise._source is not None:
        line, _ = exercise._source.text_position(("program",), node.line, node.column)
    return Problem(exercise._file, line, "program", text)


def _shown(exercise: Exercise, name: str) -> str:
    domain = exercise.inputs[name].domain
    avoid = f" avoiding {', '.join(f'{a:g}' for a in domain.avoid)}" if domain.avoid else ""
    return f"({domain.low:g}, {domain.high:g}){avoid}"


def _point(point: dict[str, Any], form: str) -> str:
    """`point` in `form` (" (at {})"), or nothing for no point."""
    shown = ", ".join(f"{name} = {_number(v)}" for name, v in point.items())
    return form.format(shown) if shown else ""


def _number(value: Any) -> str:
    if isinstance(value, list):
        return f"[{', '.join(f'{v:.6g}' for v in value)}]"
    return f"{value:.6g}"


def agreement_problems(exercise: Exercise) -> list[Problem]:
    """Where the oracles disagree at the listed points and at points drawn from the domains
    (not at drawn points when a kink, pole or edge in the domains was already reported: it is
    what they would show, many times over)."""
    problems = []
    reached = bool(domain_problems(exercise))
    if exercise.checks.gradients:
        agreement = _agreement(exercise, "gradients", exercise.check_points("gradients"))
        problems += _disagreements(exercise, agreement, lambda i: (
            ("checks", "gradients", "points", i - 1) if i else ("inputs",)), "move the point")
    if exercise.checks.sampled and not reached:
        agreement = _agreement(exercise, "sampled", exercise.check_points("sampled", SEED))
        problems += _disagreements(exercise, agreement, lambda i: ("checks", "sampled"),
                                   "narrow the domains, `avoid` the point")
    if exercise.checks.hessian:
        check = exercise.checks.hessian
        points = exercise.check_points("hessian", SEED)
        if reached:  # the inputs' values and the listed points only
            points = points[:1 + len(check.points)]
        names = exercise.grad_names
        rows, _, labels = second_order.expand(points, second_order.directions(
            exercise.program, names, check.vector))
        results = second_order.compute(exercise.program, points, names, check.vector,
                                       wanted_oracles(exercise, "hessian", None))
        agreement = compare.agree(exercise.program, results, names, rows,
                                  exercise.tolerance.pair(), exercise.convention, labels)
        problems += _disagreements(exercise, agreement, lambda i: ("checks", "hessian"),
                                   "move the point, narrow the domains or `avoid` the point")
    return problems


def answer_problems(exercise: Exercise) -> list[Problem]:
    """Hand-derived answers must equal what the oracles compute at the same points."""
    answers = exercise.checks.answers
    if answers is None:
        return []
    agreement = _agreement(exercise, "answers", exercise.check_points("answers"))
    problems = _disagreements(exercise, agreement, lambda i: ("checks", "answers", "cases", i),
                              "choose another point")
    outside = _not_finite(agreement)  # told above: no hand answer is held to a nan
    for quantity in agreement.quantities:
        for i, case in enumerate(answers.cases):
            given = case.value if quantity.name == "value" else case.grads.get(quantity.name)
            if given is None or i in outside or not quantity.graded[i].all():
                continue
            expected = quantity.expected[i]
            if not quantity.tolerance.close(np.ravel(given), expected).all():
                field = ("value",) if quantity.name == "value" else ("grads", quantity.name)
                problems.append(exercise.problem(("checks", "answers", "cases", i, *field),
                                                 _answer_message(quantity, given, expected)))
    return problems


def _answer_message(quantity: compare.Quantity, given: float | list[float],
                    expected: np.ndarray) -> str:
    """What a hand answer outside the tolerance is told: the tolerance it was held to, and,
    when the loosest tolerance allowed would pass it (a rounded answer), how to let it pass."""
    tolerance = quantity.tolerance
    kind = "fd" if set(quantity.estimates) == {"fd"} else "analytic"
    computed = expected.tolist() if quantity.size else float(expected[0])
    off = float(np.max(np.abs(np.ravel(given) - expected)))
    held = (f"off by {off:.2g}, more than `tolerance.{kind}` allows (atol {tolerance.atol:g} + "
            f"rtol {tolerance.rtol:g} × |expected|)")
    loosest = Closeness(MAX_TOLERANCE, MAX_TOLERANCE)
    fix = (f"if it is rounded, give more digits, or loosen `tolerance.{kind}` (each part at "
           f"most {MAX_TOLERANCE:g})" if loosest.close(np.ravel(given), expected).all()
           else "correct the answer (or the program)")
    return f"{quantity.label} is {given} by hand, but the oracles give {computed}: {held}; {fix}"


#: Seed of the points drawn for the `sampled` check (grading draws with a seed of its own).
SEED = 0
#: How many disagreements of one check are shown.
SHOWN = 3


def _agreement(exercise: Exercise, check: str, points: list[Point]) -> compare.Agreement:
    """The oracles' agreement at `points`: those that grade `check`, as grading asks them."""
    results = oracles.compute(exercise.program, points, exercise.grad_names,
                              wanted_oracles(exercise, check, None))
    return compare.agree(exercise.program, results, exercise.grad_names, points,
                         exercise.tolerance.pair(), exercise.convention)


def _disagreements(exercise: Exercise, agreement: compare.Agreement,
                   where: Callable[[int], tuple[str | int, ...]], fix: str) -> list[Problem]:
    """One problem per value the oracles disagree on and no `convention` decides (a few shown).
    A convention decides a kink only: at a pole or outside an operation's domain (where the
    function's value is not finite) there is no derivative for torch's number to stand for, so
    such a point is refused under one too."""
    outside = _not_finite(agreement)
    found = [d for d in agreement.disagreements()
             if d.graded_by is None or (d.reason == compare.EDGE and d.point in outside)]
    zero = [name for name, pair in (("analytic", exercise.tolerance.analytic),
                                    ("fd", exercise.tolerance.fd))
            if pair.atol == 0 and pair.rtol == 0]
    if found and zero:  # the tolerance is the problem, not the points or a convention
        return [exercise.problem(("tolerance", zero[0]), "atol 0 and rtol 0 leave no room for "
                                 "rounding: the oracles' own last digits disagree "
                                 f"({len(found)} values here); give both parts a small positive "
                                 "value (the defaults are atol 1e-12, rtol 1e-9 for analytic, "
                                 "atol 1e-6, rtol 1e-5 for fd)")]
    problems = [exercise.problem(where(d.point), f"the oracles disagree ({d.reason}): "
                                 f"{d.describe(agreement.point_text(d.point))}; "
                                 f"{_fix(fix, d.point in outside)}")
                for d in found[:SHOWN]]
    if len(found) > SHOWN:
        problems.append(exercise.problem(where(found[SHOWN].point),
                                         f"... and {len(found) - SHOWN} more disagreements"))
    # where every oracle agrees the value is nan or infinite there is nothing to grade (an
    # engine's nan would match theirs): the point is the exercise's mistake, not a hand answer
    problems += [exercise.problem(where(i), f"the program's value is not finite at "
                                  f"{agreement.point_text(i)}: {_fix(fix, True)}")
                 for i in sorted(outside - {d.point for d in found})[:SHOWN]]
    return problems


def _not_finite(agreement: compare.Agreement) -> set[int]:
    """The points where the program's value is nan or infinite (by the oracles)."""
    return {int(i) for q in agreement.quantities if q.name == "value"
            for i in np.flatnonzero(~np.isfinite(q.expected).all(axis=1))}


def _fix(fix: str, outside: bool) -> str:
    if outside:
        return (f"{fix} so that every operation's argument stays inside its domain and off its "
                "poles (a `convention` decides kinks only, not these)")
    return f"{fix}, or set `convention: torch` to grade it as torch does"


#: Checks of one loaded exercise that run nothing, in order.
STATIC_CHECKS: list[Check] = [domain_problems, oracle_problems]
#: Checks that ask the oracles (they import torch and jax).
ORACLE_CHECKS: list[Check] = [agreement_problems, answer_problems]


def main(argv: Sequence[str] | None = None) -> int:
    """`gradcheck validate [PATHS]`: print `file:line: field: message` per problem; 1 if any."""
    parser = argparse.ArgumentParser(prog="gradcheck validate",
                                     description="Check an exercise bank before publishing it.")
    selection.add_arguments(parser, positional=True)
    parser.add_argument("--static", action="store_true",
                        help="only the checks that need no oracle (no torch or jax; fast)")
    args = parser.parse_args(argv)
    try:
        course = find_course()
        chosen = selection.from_arguments(args, lambda: bank_default(course), option="")
        paths = chosen.files() if chosen.narrowed else chosen.paths
    except (CourseFileError, selection.SelectionError) as error:
        print(f"gradcheck validate: {error}", file=sys.stderr)
        return 2
    notes: list[str] = []
    problems = validate(paths, static=args.static, notes=notes)
    for problem in problems:
        print(problem)
    for note in notes:
        print(f"gradcheck validate: {note}", file=sys.stderr)
    count = len(exercise_files([p for p in paths if p.exists()]))
    print(describe(chosen.paths, count, course), file=sys.stderr)
    print(f"{count} exercise file(s), {len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
