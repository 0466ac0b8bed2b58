"""`gradcheck fuzz`: search random programs for a difference between an engine and the oracles,
with no exercise at all, and show the smallest program that has one.

The submission runs in the same sandboxed worker as `gradcheck grade`, with the same limits and
requests; the search is :func:`gradcheck.grading.fuzzing.search`. The finding can be written as
JSON (`--report-json`) and as an exercise file (`--emit-exercise`) that passes `gradcheck
validate`, ready to be added to a bank.

Exit status: 0 when no difference was found, 1 when one was, 2 on a usage error or when the
engine cannot be loaded.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import shlex
import sys
from pathlib import Path
from typing import Any

from gradcheck.bank.models import SUFFIX, Exercise, dump_exercise
from gradcheck.bank.random_programs import operation_names
from gradcheck.bank.schema import schema_comment
from gradcheck.engine.sandbox import Failure, Worker
from gradcheck.grading import fuzzing
from gradcheck.grading.grader import DEFAULT_MEMORY_MB, GraderError, resolve_submission
from gradcheck.reports import atomic_write, printable

FOUND = 1
CANNOT_RUN = 2


#: the options that change which programs a search draws, and their defaults
DRAWN = {"examples": 500, "max_operations": 6, "max_steps": 4}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """`gradcheck fuzz`."""
    p = subparsers.add_parser(
        "fuzz", help="search random programs for a difference from torch, shrunk to the smallest",
        description="Run SUBMISSION (a module file, a package folder, 'reference' or 'torch') on "
                    "random programs drawn from every operation of the protocol, with behaviour "
                    "sessions, in the grader's sandboxed worker; compare with finite "
                    "differences, torch and jax (the reference engine where torch is not "
                    "installed) and report the first difference, shrunk to the smallest "
                    "program that still shows it. Exit 0: none found; 1: found; 2: usage "
                    "error or the engine cannot be loaded.")
    p.add_argument("submission", metavar="SUBMISSION")
    p.add_argument("--seed", type=int, help="the search's seed (default: a new one, printed)")
    p.add_argument("--examples", type=_count, default=DRAWN["examples"],
                   help="programs to try (default: %(default)s)")
    p.add_argument("--max-operations", type=_count, default=DRAWN["max_operations"],
                   help="operations per program at most, plus the sum that makes a 1-D "
                        "result the scalar output (default: %(default)s)")
    p.add_argument("--ops", type=_ops, metavar="add,mul,...",
                   help="draw only these operations (default: all of them)")
    p.add_argument("--max-steps", type=int, default=DRAWN["max_steps"], metavar="N",
                   help="behaviour steps per program at most; 0 compares gradients only "
                        "(default: %(default)s)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="seconds per request to the engine (default: %(default)s)")
    p.add_argument("--memory-mb", metavar="MB", type=int, default=DEFAULT_MEMORY_MB,
                   help="memory limit of the worker (default: %(default)s)")
    p.add_argument("--report-json", metavar="FILE", type=Path,
                   help="write the result as one JSON object here")
    p.add_argument("--emit-exercise", metavar="FILE", type=Path,
                   help=f"write the shrunk case as an exercise file here (*{SUFFIX})")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Search, print what was found, write the requested files."""
    try:
        path = resolve_submission(args.submission)
    except GraderError as error:
        return _cannot_run(str(error))
    if args.emit_exercise and not args.emit_exercise.name.endswith(SUFFIX):
        return _cannot_run(f"--emit-exercise {args.emit_exercise}: name the file *{SUFFIX}")
    at_seed = secrets.randbelow(2**32) if args.seed is None else args.seed
    with Worker(path, memory_mb=args.memory_mb) as worker:
        loaded = worker.request({"kind": "inspect"}, args.timeout)
        if isinstance(loaded, Failure) and loaded.kind == "import":
            return _cannot_run(f"{loaded.message}\n{loaded.detail}".rstrip())
        result = fuzzing.search(lambda request: worker.request(request, args.timeout),
                                at_seed=at_seed, examples=args.examples, ops=args.ops,
                                max_operations=args.max_operations, max_steps=args.max_steps,
                                oracles=fuzzing.available())
    alone = result.found is None or _alone(path, args, result)
    print(printable(summary(result, at_seed, rerun(args, at_seed), alone)))
    if args.report_json:
        atomic_write(args.report_json, json.dumps(report(result, alone), indent=2) + "\n")
    if args.emit_exercise and result.found:
        atomic_write(args.emit_exercise, exercise_text(result.found, args.emit_exercise, at_seed))
        print(f"wrote {args.emit_exercise}: check it with `gradcheck validate "
              f"{args.emit_exercise}`")
    return FOUND if result.found else 0


def _alone(path: Path, args: argparse.Namespace, result: fuzzing.Search) -> bool:
    """Whether the shrunk program differs in a worker of its own, where no program ran before
    it, as in the search's worker, where hundreds did."""
    assert result.found is not None
    with Worker(path, memory_mb=args.memory_mb) as fresh:
        return fuzzing.reproduces(lambda request: fresh.request(request, args.timeout),
                                  result.found, result.oracles)


def rerun(args: argparse.Namespace, at_seed: int) -> str:
    """The `gradcheck fuzz` command that draws the same programs: the seed, and each option
    that changes what is drawn where it is not the default."""
    words = ["gradcheck", "fuzz", args.submission, "--seed", str(at_seed)]
    for name, default in DRAWN.items():
        if getattr(args, name) != default:
            words += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    if args.ops:
        words += ["--ops", ",".join(args.ops)]
    return shlex.join(words)


def summary(result: fuzzing.Search, at_seed: int, command: str, alone: bool = True) -> str:
    """What a person reads: the finding, or that there was none; how the search went."""
    tried = (f"{result.examples} random program{'s' * (result.examples != 1)} in "
             f"{result.seconds:.1f} s, seed {at_seed}; compared with {result.oracle_text} "
             f"(behaviour with {fuzzing.ORACLE_LABELS[result.behaviour_oracle]})")
    lines = []
    if result.found:
        lines += [result.found.describe(), *([] if alone else ["", fuzzing.NOT_ALONE]), "",
                  f"gradcheck fuzz: found a {result.found.kind} difference after {tried}",
                  f"run again with: {command}"]
    else:
        lines.append(f"gradcheck fuzz: no difference found in {tried}")
    if result.stopped:
        lines.append(f"stopped early: {result.stopped}")
    return "\n".join(lines)


def report(result: fuzzing.Search, alone: bool = True) -> dict[str, Any]:
    """The `--report-json` object; `alone`: whether the shrunk program differs in a worker of
    its own too (`_alone`)."""
    found = result.found
    drawn = found.drawn if found else None
    return {
        "found": found is not None,
        "program": drawn.source if drawn else None,
        "inputs": dict(drawn.inputs) if drawn else None,
        "point": drawn.point if drawn else None,
        "operations": found.operations if found else None,
        "kind": found.kind if found else None,
        "message": found.describe() if found else None,
        "steps": list(found.session.steps) if found else None,
        "requires_grad": list(found.session.requires_grad) if found else None,
        "examples": result.examples,
        "seconds": round(result.seconds, 3),
        "oracles": list(result.oracles),
        "behaviour_oracle": result.behaviour_oracle,
        "alone": alone if found else None,
    }


def exercise_text(found: fuzzing.Finding, path: Path, at_seed: int) -> str:
    """The finding as an exercise file: a gradients check at the point, or the behaviour
    session; it loads, and passes `gradcheck validate`."""
    drawn = found.drawn
    stem = path.name.removesuffix(SUFFIX).lower()
    exercise_id = re.sub(r"[^a-z0-9-]+", "-", stem).strip("-") or f"fuzz-{at_seed}"
    if found.kind == "behaviour":
        checks: dict[str, Any] = {"behaviour": {"steps": list(found.session.steps)}}
    else:
        checks = {"gradients": {}}
    exercise = Exercise.model_validate({
        "id": exercise_id,
        "title": f"A random program where an engine differed ({found.kind})",
        "topic": "fuzz",
        "points": 1.0,
        "hint": "Run this program on your engine and on torch, and compare step by step.",
        "inputs": {name: {"value": value, "requires_grad": found.kind != "behaviour"
                          or name in found.session.requires_grad}
                   for name, value in drawn.point.items()},
        "program": drawn.source,  # lines, so written as the format asks: a `|` block
        "checks": checks,
    }, strict=False)
    return dump_exercise(exercise, schema_comment(path))


def _cannot_run(problem: str) -> int:
    print(f"gradcheck fuzz: {problem}", file=sys.stderr)
    return CANNOT_RUN


def _count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of at least 1")
    return value


def _ops(text: str) -> tuple[str, ...]:
    try:
        return operation_names([name.strip() for name in text.split(",") if name.strip()])
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
