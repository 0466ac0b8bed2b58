"""torch's record of a graph or behaviour request and an engine's reply to it, compared: the first
difference, as a sentence for the student (the grader's graph and behaviour checks, and the
behaviour sessions of random programs)."""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np

from gradcheck.bank.models import Exercise, Step
from gradcheck.grading import compare, localise, uses
from gradcheck.grading.digits import (
    first_line,
    is_numeric,
    pair_text,
    raised_text,
    unreadable,
    value_text,
)
from gradcheck.program.language import Program
from gradcheck.program.session import parse_expect


class Verdict(NamedTuple):
    """The first difference as a sentence ('' when there is none), the protocol piece whose
    failed use it is, when the engine lacks that piece (`CheckResult.blocked_by`), and, in a
    behaviour check, the number of the step where it is (from 1; 0 before the first step)."""

    message: str
    blocked_by: str = ""
    step: int = 0
    #: the difference is a value the protocol does not allow, not a wrong one (no hint on the
    #: maths speaks to it)
    unreadable: bool = False


def graph(torch: dict[str, Any], found: dict[str, Any], exercise: Exercise) -> Verdict:
    """The first graph fact where the engine differs from torch."""
    if torch.get("error"):
        return Verdict("")  # validation reports a program torch cannot run; never the student's
    program = exercise.program
    if found.get("error"):
        return _error_sentence(program, "building the graph", found["error"])
    tolerance = exercise.tolerance.pair().analytic
    for name, facts in torch["nodes"].items():
        mine = found["nodes"].get(name, {})
        for field in ("grad_fn", "is_leaf", "requires_grad"):
            if isinstance(mine.get(field), dict):
                return _error_sentence(program, f"reading {name}.{field}",
                                       mine[field].get("error") or {})
            if mine.get(field) != facts[field]:
                return Verdict(f"{name}.{field} should be {facts[field]!r}, as in torch; your "
                               f"engine gives {mine.get(field)!r}")
        if isinstance(mine.get("value"), dict):
            return _error_sentence(program, f"reading the value of {name}",
                                   mine["value"].get("error") or {})
        if not _close(mine.get("value"), facts["value"], tolerance):
            found_text, expected_text = _shown(mine.get("value"), facts["value"])
            return Verdict(f"the value of {name} should be {expected_text}; found {found_text}")
    return Verdict("")


def behaviour(torch: dict[str, Any], found: dict[str, Any], steps: Sequence[Step],
              program: Program, tolerance: compare.Tolerance,
              located: Callable[[int], str] = lambda number: "") -> Verdict:
    """The first step where the engine departs from torch. `located(i)` says where step i is
    written (an exercise's file and line), or '' (a drawn session). A gradient that torch
    changed in a backward that then raised (the record's `touched`) is not compared until a
    step sets it to None or runs the program again, and a step that uses it ends the
    comparison: no engine is expected to match the part of the graph torch ran first
    (docs/protocol.md)."""
    if found.get("error"):
        return _error_sentence(program, "running the program before the first step",
                               found["error"])
    unsettled: set[str] = set()  # gradients that carry what torch ran before a raise
    made = set(program.names) - set(program.inputs)
    for number, (step, want, got) in enumerate(zip(steps, torch["steps"], found["steps"]),
                                               start=1):
        unsettled -= set(step.zero_grad or ()) | (made if step.forward is not None else set())
        if _uses_gradient(step, unsettled):
            break  # what follows is built on torch's part: nothing more to compare
        unsettled |= set(want.get("touched", ()))
        place = located(number - 1)
        where = (f"step {number}, `{localise.step_code(step, program.output_name)}`"
                 + (f" ({place})" if place else ""))
        if bool(want["error"]) != bool(got["error"]):
            if want["error"]:
                return Verdict(f"{where}: torch raises {want['error']['type']} "
                               f"({first_line(want['error']['message'])}); your engine raised "
                               "nothing", step=number)
            said = _error_sentence(program, "", got["error"])
            return Verdict(f"{where}: torch raises nothing; {said.message}", said.blocked_by,
                           number, said.unreadable)
        if want["error"] and not _raises_as(got["error"], want["error"]["type"]):
            return Verdict(f"{where}: torch raises {want['error']['type']}, your engine "
                           f"{got['error']['type']} ({first_line(got['error']['message'])})",
                           step=number)
        for item in step.expect:
            kind, name, _ = parse_expect(item)
            if kind == "grad" and name in unsettled:
                continue
            expected, seen = want["observed"].get(item), got["observed"].get(item)
            if not _close(seen, expected, tolerance):
                seen_text, expected_text = _shown(seen, expected)
                single = (f"; {compare.FLOAT32}" if is_numeric(seen) and is_numeric(expected)
                          and all(compare.single_precision(f, e) for f, e in
                                  zip(np.ravel(seen).tolist(), np.ravel(expected).tolist())
                                  if f != e) else "")
                return Verdict(f"{where}: after it, {localise.observation_name(item)} is "
                               f"{seen_text} in your engine; torch gives {expected_text}{single}",
                               step=number,
                               unreadable=isinstance(seen, dict) and unreadable(seen.get("error")))
    return Verdict("")


def _raises_as(error: dict[str, Any], torch_type: str) -> bool:
    """Whether the engine's error is of torch's class, or of one derived from it: an `except`
    of torch's class catches either (a builtin one is told by the classes the error is)."""
    return error["type"] == torch_type or torch_type in error.get("kinds", ())


def _uses_gradient(step: Step, names: set[str]) -> bool:
    """Whether the step's action reads the `.grad` of one of `names` (an SGD step, or a
    `NAME.grad` it differentiates or computes with)."""
    if not names:
        return False
    if step.sgd is not None and names & set(step.sgd.params):
        return True
    action = json.dumps(step.model_dump(exclude={"expect"}, exclude_none=True))
    return any(re.search(rf"(?<![\w.]){re.escape(name)}\.grad\b", action) for name in names)


def _shown(found: Any, expected: Any) -> tuple[str, str]:
    """A value read from an engine and torch's, for a message: numbers with as few digits as
    tell them apart, a long list shortened, an error as what reading it raised."""
    if (is_numeric(found) and is_numeric(expected) and isinstance(found, list) == isinstance(
            expected, list) and (not isinstance(found, list) or len(found) == len(expected))):
        return pair_text(found, expected)
    return value_text(found), value_text(expected)


def _close(found: Any, expected: Any, tolerance: compare.Tolerance) -> bool:
    """Plain JSON values equal within `tolerance` (numbers), or exactly (anything else). What
    reading raised in torch (`{"error": record}`: a variable a failed step never made, a field
    of a None) is matched by the same error, its type and message: torch cannot read it either."""
    if isinstance(expected, dict):
        return isinstance(found, dict) and _raised(found) == _raised(expected)
    if isinstance(expected, bool) or expected is None or isinstance(expected, str):
        return type(found) is type(expected) and found == expected
    if isinstance(expected, (int, float)):
        if isinstance(found, bool) or not isinstance(found, (int, float)):
            return False
        return bool(tolerance.close([float(found)], [float(expected)])[0])
    if isinstance(expected, list):
        return (isinstance(found, list) and len(found) == len(expected)
                and all(_close(f, e, tolerance) for f, e in zip(found, expected)))
    return False


def _raised(observed: Mapping[str, Any]) -> tuple[Any, Any]:
    """The type and message of what reading a field raised (its phase and the use of the engine
    it names are not what the two sides must share)."""
    error = observed.get("error") or {}
    return error.get("type"), error.get("message")


def _error_sentence(program: Program, during: str, error: Mapping[str, Any]) -> Verdict:
    """What the engine raised, naming the use that failed when the record names one; blocked
    by that piece when the engine lacks it."""
    use = uses.describe(program, error)
    gave = unreadable(error)
    if use is not None:
        return Verdict(use.sentence, use.piece if use.missing else "", unreadable=gave)
    verb, _, said = raised_text(error.get("type"), error.get("message", "")).partition(": ")
    where = f" while {during}" if during else ""
    return Verdict(f"your engine {verb}{where}: {said}", unreadable=gave)
