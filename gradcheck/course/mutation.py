"""`gradcheck mutants`: how good is a bank? Grade buggy engines with it and see which bugs survive.

Every mutant of the catalogue (gradcheck/course/mutants.py) is written out as a submission (the reference
engine with one bug put in) and graded like a class's submission, by `gradcheck grade-batch`: each
in its own grader process and sandboxed worker, torch and jax run once for all of them through an
answer key. The unmutated reference engine is graded alongside as the control: an exercise kills a
mutant when the mutant fails one of its checks that the control passes. An exercise the control
fails (a broken file, a time limit too tight) kills nothing and is reported, as is a check
skipped for want of torch or jax.

The result is the kill matrix: for each mutant, the exercises that catch it; for each surviving
mutant, the kind of exercise that would. The command exits with status 1 when a mutant survives,
so an instructor's CI can require a bank that catches every bug of the catalogue.
"""

from __future__ import annotations

import argparse
import ast
import csv
import io
import os
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from gradcheck.bank.bundled import reference_path
from gradcheck.bank.course_file import BANK_HELP, CourseFileError, course_bank
from gradcheck.course import batch
from gradcheck.course.mutants import CATALOGUE, WHOLE, Edit, Mutant
from gradcheck.grading.grader import GraderError
from gradcheck.reports import atomic_write

#: The file name of the control, the reference engine without a bug, among the mutants.
CONTROL = "reference"
SURVIVED = 1
CANNOT_RUN = 2


class MutantError(Exception):
    """A mutant that cannot be made: its edit does not fit the reference engine's source."""


def mutate(source: str, mutant: Mutant) -> str:
    """The source of the reference engine with `mutant`'s edits made, and a header saying so."""
    for edit in mutant.edits:
        source = _apply(source, edit, mutant.name)
    header = f"# gradcheck mutant {mutant.name}: {mutant.bug}\n"
    try:
        compile(source, f"<mutant {mutant.name}>", "exec")
    except SyntaxError as error:
        problem = f"line {error.lineno}: {error.msg}"
        raise MutantError(f"mutant {mutant.name}: the edited engine is not valid Python "
                          f"({problem}); fix the edit's `new` text") from None
    return header + source


def _apply(source: str, edit: Edit, name: str) -> str:
    spans = _definitions(source).get(edit.where)
    if not spans:
        raise MutantError(f"mutant {name}: the reference engine has no definition "
                          f"{edit.where!r}; name a function, a class or Class.method")
    lines = source.splitlines(keepends=True)
    if edit.old == WHOLE:
        if len(spans) != 1:
            raise MutantError(f"mutant {name}: {edit.where!r} is defined {len(spans)} times; "
                              "replace a text inside it instead of the whole definition")
        first, last = spans[0]
        return "".join(lines[:first] + [edit.new] + lines[last:])
    counts = [("".join(lines[first:last]).count(edit.old), first, last) for first, last in spans]
    total = sum(count for count, _, _ in counts)
    if total != 1:
        where = "not found" if total == 0 else f"found {total} times"
        raise MutantError(f"mutant {name}: the text {edit.old!r} is {where} in {edit.where!r} "
                          "of the reference engine; the edit must name a text found exactly "
                          "once (was the engine changed?)")
    _, first, last = max(counts)
    body = "".join(lines[first:last]).replace(edit.old, edit.new)
    return "".join(lines[:first]) + body + "".join(lines[last:])


def _definitions(source: str) -> dict[str, list[tuple[int, int]]]:
    """Each function, class and method of `source` by qualified name -> its line spans, 0-based
    and end-exclusive, decorators included (a property's getter and setter share a name)."""
    spans: dict[str, list[tuple[int, int]]] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + node.name
                first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
                spans.setdefault(name, []).append((first, node.end_lineno or node.lineno))
                if isinstance(node, ast.ClassDef):
                    visit(node.body, name + ".")

    visit(ast.parse(source).body, "")
    return spans


def write_mutants(folder: Path, mutants: Sequence[Mutant]) -> None:
    """Write each mutant as `<name>.py` in `folder`, with the unmutated control beside them."""
    source = (reference_path() / "__init__.py").read_text()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{CONTROL}.py").write_text(source)
    for mutant in mutants:
        (folder / f"{mutant.name}.py").write_text(mutate(source, mutant))


# --- the kill matrix ----------------------------------------------------------------------------

@dataclass
class KillMatrix:
    """Which exercises kill which mutants, from the graded submissions' JUnit reports."""

    mutants: list[Mutant]
    exercises: list[str]
    killed: dict[str, list[str]] = field(default_factory=dict)  # mutant -> exercises, bank order
    #: exercises the control fails: their kills do not count.
    unsound: dict[str, str] = field(default_factory=dict)
    #: mutants (or the control) whose grading did not finish -> why.
    ungraded: dict[str, str] = field(default_factory=dict)
    #: killed mutant -> what its first killer told it: the feedback a student with the bug gets.
    evidence: dict[str, str] = field(default_factory=dict)
    #: the control's skipped checks ("exercise::check") -> why: no mutant can fail those either.
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def survivors(self) -> list[Mutant]:
        return [m for m in self.mutants
                if m.name not in self.ungraded and not self.killed.get(m.name)]

    @property
    def complete(self) -> bool:
        """Every mutant graded and killed, and the control graded."""
        return not self.survivors and not self.ungraded


def kill_matrix(mutants: Sequence[Mutant], graded: Path, rows: Sequence[batch.Row]) -> KillMatrix:
    """Read each submission's `junit.xml` under `graded` (as grade-batch wrote them)."""
    status = {row.submission.removesuffix(".py"): row for row in rows}
    control = _failures(graded / f"{CONTROL}.py" / "junit.xml")
    matrix = KillMatrix(list(mutants), [])
    if control is None:
        matrix.ungraded[CONTROL] = _why(status.get(CONTROL))
        return matrix
    matrix.exercises, matrix.unsound, matrix.skipped = control
    for mutant in mutants:
        result = _failures(graded / f"{mutant.name}.py" / "junit.xml")
        if result is None:
            matrix.ungraded[mutant.name] = _why(status.get(mutant.name))
            continue
        _, fails, _ = result
        killers = [e for e in matrix.exercises if e in fails and e not in matrix.unsound]
        matrix.killed[mutant.name] = killers
        if killers:
            matrix.evidence[mutant.name] = f"{killers[0]}::{fails[killers[0]]}"
    return matrix


def _failures(junit: Path) -> tuple[list[str], dict[str, str], dict[str, str]] | None:
    """The exercises of a JUnit report in order, the first failure message of each failing one,
    and each skipped check's message; None when there is no complete report (grading did not
    finish)."""
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return None
    exercises: list[str] = []
    failures: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for case in root.iter("testcase"):
        exercise, check = case.get("classname", ""), case.get("name", "")
        if exercise not in exercises:
            exercises.append(exercise)
        for outcome in case:
            message = outcome.get("message", "")
            if outcome.tag == "skipped":
                skipped[f"{exercise}::{check}"] = message
            elif outcome.tag in ("failure", "error") and exercise not in failures:
                failures[exercise] = f"{check}: {message}"
    return exercises, failures, skipped


def _why(row: batch.Row | None) -> str:
    if row is None:
        return "not graded"
    return f"{row.status}: {row.note}" if row.note else row.status


def render(matrix: KillMatrix, *, width: int = 100, verbose: bool = False) -> str:
    """The kill matrix for a terminal: each mutant and its killers, then what survived.

    `verbose` adds, under each killed mutant, the first message its first killer gave it.
    """
    out = io.StringIO()
    if CONTROL in matrix.ungraded:
        out.write(f"The unmutated reference engine could not be graded "
                  f"({matrix.ungraded[CONTROL]}): no mutant can be judged.\n")
        return out.getvalue()
    for exercise, why in matrix.unsound.items():
        problem = (f"{exercise} could not be loaded ({why.removeprefix('load: ')})"
                   if why.startswith("load: ") else
                   f"the unmutated reference engine fails {exercise} ({why})")
        out.write(f"warning: {problem}; it kills no mutant: run `gradcheck validate` on it\n")
    if matrix.skipped:
        first, why = next(iter(matrix.skipped.items()))
        count = len(matrix.skipped)
        checks = "1 check was" if count == 1 else f"{count} checks were"
        out.write(f"warning: {checks} skipped, for the unmutated engine too (first: {first}, "
                  f"{why}); no mutant can fail them: install torch and jax (pip install -c "
                  "constraints.txt 'gradcheck[all]') to grade them\n")
    name_width = max(len(m.name) for m in matrix.mutants)
    out.write(f"{'mutant':<{name_width}}  killed by\n")
    for mutant in matrix.mutants:
        if mutant.name in matrix.ungraded:
            line = f"NOT GRADED ({matrix.ungraded[mutant.name]})"
        else:
            killers = matrix.killed.get(mutant.name, [])
            line = _listing(killers, width - name_width - 2) if killers else "SURVIVED"
        out.write(f"{mutant.name:<{name_width}}  {line}\n")
        if verbose and mutant.name in matrix.evidence:
            out.write(f"{'':<{name_width}}    {matrix.evidence[mutant.name]}\n")
    idle = [e for e in matrix.exercises if e not in matrix.unsound
            and not any(e in killers for killers in matrix.killed.values())]
    if idle:
        kill = "kills" if len(idle) == 1 else "kill"
        out.write(f"\n{len(idle)} of {len(matrix.exercises)} exercises {kill} no mutant: "
                  f"{', '.join(idle)}\n")
    survivors = matrix.survivors
    graded = len(matrix.mutants) - len(matrix.ungraded)
    out.write(f"\n{graded - len(survivors)} of {len(matrix.mutants)} mutants killed")
    out.write(f", {len(survivors)} survived" if survivors else "")
    out.write(f", {len(matrix.ungraded)} not graded" if matrix.ungraded else "")
    out.write(".\n")
    for mutant in survivors:
        out.write(f"\nsurvived: {mutant.name}\n  the bug: {mutant.bug}\n"
                  f"  no exercise catches it; add {mutant.catch}.\n")
    return out.getvalue()


def _listing(killers: list[str], room: int) -> str:
    """`n: a, b, c, +k more`, fitted into `room` characters."""
    shown: list[str] = []
    for i, exercise in enumerate(killers):
        rest = len(killers) - i - 1
        text = f"{len(killers)}: " + ", ".join(shown + [exercise])
        if rest and len(text) + len(f", +{rest} more") > room or not rest and len(text) > room:
            break
        shown.append(exercise)
    rest = len(killers) - len(shown)
    return f"{len(killers)}: " + ", ".join(shown) + (f", +{rest} more" if rest else "")


def write_csv(matrix: KillMatrix, path: Path) -> None:
    """The whole matrix: one row per mutant, one column per exercise, 1 where it kills."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["mutant", "killed", *matrix.exercises])
    for mutant in matrix.mutants:
        killers = set(matrix.killed.get(mutant.name, ()))
        status = ("not graded" if mutant.name in matrix.ungraded
                  else "yes" if killers else "survived")
        writer.writerow([mutant.name, status, *(int(e in killers) for e in matrix.exercises)])
    atomic_write(path, buffer.getvalue())


# --- the command --------------------------------------------------------------------------------

def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """`gradcheck mutants`."""
    p = subparsers.add_parser(
        "mutants", help="grade buggy engines with the bank: which bugs does it catch?",
        description="Grade every mutant of the catalogue (the reference engine with one classic "
                    "bug put in) against the bank, and print which exercises kill which mutant. "
                    "Exit status 1 when a mutant survives (no exercise catches it), 2 when "
                    "grading cannot run.")
    p.add_argument("--exercises", metavar="DIR", type=Path, action="append", help=BANK_HELP)
    p.add_argument("-j", "--jobs", type=batch.job_count, default=len(os.sched_getaffinity(0)),
                   help="mutants graded at once (default: the number of CPUs)")
    p.add_argument("--only", metavar="MUTANT", action="append",
                   help="grade only this mutant (repeatable; see --list)")
    p.add_argument("--list", action="store_true", help="print the catalogue and exit")
    p.add_argument("--key", metavar="FILE", type=Path,
                   help="an answer key of the bank (default: one is built for the run)")
    p.add_argument("--seed", type=int, help="the seed of sampled points")
    p.add_argument("--out", metavar="DIR", type=Path,
                   help="keep the mutants' sources and results here (default: a temporary "
                        "folder, removed afterwards)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="under each killed mutant, the message its first killer gave it")
    p.add_argument("--matrix", metavar="FILE", type=Path,
                   help="write the whole kill matrix as CSV (one row per mutant)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Grade the mutants, print the kill matrix; 0 when every mutant is killed."""
    if args.list:
        for mutant in CATALOGUE:
            sys.stdout.write(f"{mutant.name}\n  {mutant.bug}\n")
        return 0
    try:
        mutants = _chosen(args.only)
        for path in args.exercises or []:
            if not path.exists():
                raise GraderError(f"--exercises {path}: no such file or folder")
        if args.key is not None and not args.key.is_file():
            raise GraderError(f"--key {args.key}: no such file")
        if args.out is not None:
            return _grade(mutants, args, args.out)
        with tempfile.TemporaryDirectory(prefix="gradcheck-mutants-") as folder:
            return _grade(mutants, args, Path(folder))
    except (CourseFileError, GraderError, MutantError) as error:
        print(f"gradcheck mutants: {error}", file=sys.stderr)
        return CANNOT_RUN


def _chosen(names: list[str] | None) -> list[Mutant]:
    if not names:
        return list(CATALOGUE)
    known = {mutant.name: mutant for mutant in CATALOGUE}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise GraderError(f"no mutant named {', '.join(unknown)}; `gradcheck mutants --list` "
                          "shows the catalogue")
    return [known[name] for name in dict.fromkeys(names)]


def _grade(mutants: list[Mutant], args: argparse.Namespace, folder: Path) -> int:
    sources, graded = folder / "mutants", folder / "graded"
    write_mutants(sources, mutants)
    exercises, course = course_bank(args.exercises)
    rows = batch.grade_batch(sources, graded, jobs=args.jobs, exercises=exercises, key=args.key,
                             seed=args.seed, timeout=None, memory_mb=None,
                             submission_timeout=batch.SUBMISSION_TIMEOUT, junit=True,
                             course=course)
    matrix = kill_matrix(mutants, graded, rows)
    sys.stdout.write(render(matrix, verbose=args.verbose))
    if args.matrix:
        write_csv(matrix, args.matrix)
    return 0 if matrix.complete else SURVIVED
