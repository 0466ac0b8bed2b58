"""`gradcheck validate`: check an exercise bank before it is published.

What is checked here without running anything: every file loads (YAML, schema, program, names,
points), ids are unique, each file is named `*.exercise.yaml` and starts with the schema line that
editors use, and the sampled domains keep clear of the points where an operation applied to an
input has a kink or a pole. Each check of one exercise is a function in `EXERCISE_CHECKS`; checks
that need the oracles or the reference engine are added to that list the same way.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable, Iterable, Sequence

from gradcheck.exercise import (SCHEMA_COMMENT, SUFFIX, Exercise, Problem, exercise_files,
                                load_bank, schema_comment)
from gradcheck.ops import OPS

Check = Callable[[Exercise], list[Problem]]
Paths = Iterable[str | os.PathLike[str]]


def validate(paths: Paths) -> list[Problem]:
    """Every problem found in the exercises under `paths` (files or folders)."""
    paths = [Path(p) for p in paths]
    problems = [Problem(str(p), 0, "", "no such file or folder") for p in paths if not p.exists()]
    files = exercise_files([p for p in paths if p.exists()])
    if not files and not problems:
        problems.append(Problem(", ".join(map(str, paths)), 0, "",
                                f"no *{SUFFIX} files here; name exercise files *{SUFFIX}"))
    for file in files:
        problems += file_problems(file)
    bank = load_bank(files)
    for _, error in bank.broken:
        problems += error.problems
    for exercise in bank.exercises:
        for check in EXERCISE_CHECKS:
            problems += check(exercise)
    return problems


def file_problems(file: Path) -> list[Problem]:
    """The file's name and first line: what makes the bank collect it and editors check it."""
    problems = []
    if not file.name.endswith(SUFFIX):
        problems.append(Problem(str(file), 0, "", f"name the file *{SUFFIX}, or the bank will "
                                                  "not collect it"))
    try:
        with file.open(encoding="utf-8") as stream:
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
    """Sampled domains must avoid the kinks and poles of operations applied to an input.

    Points where an operation is not differentiable are those its argument's sampling interval
    avoids in the table of operations (0 for relu, abs and a denominator).
    """
    if exercise.checks.sampled is None:
        return []
    program, problems = exercise.program, []
    for node in program.nodes:
        if node.op not in OPS:
            continue
        for arg, interval in zip(node.args, OPS[node.op].domains):
            leaf = program.nodes[arg]
            domain = exercise.inputs[leaf.name].domain if leaf.op == "input" else None
            if domain is None:
                continue
            for point in interval.avoid:
                if domain.low < point < domain.high and point not in domain.avoid:
                    problems.append(exercise.problem(
                        ("inputs", leaf.name, "domain"),
                        f"`{node.text}` (program line {node.line}) has no derivative at "
                        f"{leaf.name} = {point:g}, inside this domain; add {point:g} to `avoid`"))
    return problems


#: Checks of one loaded exercise, in order.
EXERCISE_CHECKS: list[Check] = [domain_problems]


def main(argv: Sequence[str] | None = None) -> int:
    """`gradcheck validate [PATHS]`: print `file:line: field: message` per problem; 1 if any."""
    from gradcheck.bundled import bank_dir

    parser = argparse.ArgumentParser(prog="gradcheck validate",
                                     description="Check an exercise bank before publishing it.")
    parser.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                        help=f"*{SUFFIX} files or folders (default: the bundled bank)")
    args = parser.parse_args(argv)
    paths = args.paths or [bank_dir()]
    problems = validate(paths)
    for problem in problems:
        print(problem)
    count = len(exercise_files([p for p in paths if p.exists()]))
    print(f"{count} exercise file(s), {len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
