"""torch's record of a graph or behaviour request and an engine's reply to it, compared: the first
difference, as a sentence for the student (the grader's graph and behaviour checks, and the
behaviour sessions of random programs)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from gradcheck.bank.models import Exercise, Step
from gradcheck.grading import compare, localise


def graph(torch: dict[str, Any], found: dict[str, Any], exercise: Exercise) -> str:
    """The first graph fact where the engine differs from torch, as a sentence, or ''."""
    if torch.get("error"):
        return ""  # validation reports a program torch cannot run; never the student's fault
    if found.get("error"):
        return _error_sentence("building the graph", found["error"])
    tolerance = exercise.tolerance.pair().analytic
    for name, facts in torch["nodes"].items():
        mine = found["nodes"].get(name, {})
        for field in ("grad_fn", "is_leaf", "requires_grad"):
            if mine.get(field) != facts[field]:
                return (f"{name}.{field} should be {facts[field]!r}, as in torch; your engine "
                        f"gives {mine.get(field)!r}")
        if not _close(mine.get("value"), facts["value"], tolerance):
            return f"the value of {name} should be {facts['value']!r}; found {mine.get('value')!r}"
    return ""


def behaviour(torch: dict[str, Any], found: dict[str, Any], steps: Sequence[Step], output: str,
              tolerance: compare.Tolerance, located: Callable[[int], str] = lambda number: ""
              ) -> str:
    """The first step where the engine departs from torch, as a sentence, or ''. `located(i)`
    says where step i is written (an exercise's file and line), or '' (a drawn session)."""
    if found.get("error"):
        return _error_sentence("running the program before the first step", found["error"])
    for number, (step, want, got) in enumerate(zip(steps, torch["steps"], found["steps"]),
                                               start=1):
        place = located(number - 1)
        where = (f"step {number}, `{localise.step_code(step, output)}`"
                 + (f" ({place})" if place else ""))
        if bool(want["error"]) != bool(got["error"]):
            if want["error"]:
                return (f"{where}: torch raises {want['error']['type']} "
                        f"({_first_line(want['error']['message'])}); your engine raised nothing")
            return f"{where}: torch raises nothing; " + _error_sentence("", got["error"])
        if want["error"] and want["error"]["type"] != got["error"]["type"]:
            return (f"{where}: torch raises {want['error']['type']}, your engine "
                    f"{got['error']['type']} ({_first_line(got['error']['message'])})")
        for item in step.expect:
            expected, seen = want["observed"].get(item), got["observed"].get(item)
            if not _close(seen, expected, tolerance):
                return (f"{where}: after it, {localise.observation_name(item)} is {seen!r} in "
                        f"your engine; torch gives {expected!r}")
    return ""


def _close(found: Any, expected: Any, tolerance: compare.Tolerance) -> bool:
    """Plain JSON values equal within `tolerance` (numbers), or exactly (anything else)."""
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


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _error_sentence(during: str, error: Mapping[str, Any]) -> str:
    where = f" while {during}" if during else ""
    return f"your engine raised {error['type']}{where}: {_first_line(error['message'])}"
