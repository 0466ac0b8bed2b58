"""torch and an engine side by side, as rows of text: a behaviour check's steps, a graph check's
nodes. The HTML page draws these rows as tables, `gradcheck explain` prints them as columns; both
read the records the grader compared (CheckResult.detail), so neither can show other numbers than
the verdict was made from."""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

from gradcheck.grading import localise
from gradcheck.grading.digits import value_text

#: the facts of a graph node that the graph check compares, in the order shown
GRAPH_FACTS = ("grad_fn", "is_leaf", "requires_grad", "value")


class Row(NamedTuple):
    """One step or node: what it is, what torch shows, what the engine shows ('' when there is
    no engine), and whether the two differ."""

    label: str
    torch: str
    engine: str
    differs: bool


def step_rows(codes: Sequence[str], torch: Mapping[str, Any],
              engine: Mapping[str, Any] | None = None) -> list[Row]:
    """Each behaviour step (`codes`: the step as engine code) as torch and the engine went
    through it: what each read after it, or what it raised; first, when the engine could not
    even run the program, what it raised there."""
    rows = []
    if engine is not None and engine.get("error"):
        rows.append(Row("the program, before the first step", "runs",
                        "raises " + raised_text(engine["error"]), True))
    theirs = list(engine.get("steps", [])) if engine is not None else []
    for number, (code, want) in enumerate(zip(codes, torch.get("steps", [])), start=1):
        mine = observed_text(want)
        got = observed_text(theirs[number - 1]) if number <= len(theirs) else ""
        rows.append(Row(f"{number}. {code}", mine, got, engine is not None and got != mine))
    return rows


def graph_rows(torch: Mapping[str, Any], engine: Mapping[str, Any]) -> list[Row]:
    """Each node the graph check names, with its facts in torch and in the engine."""
    if engine.get("error"):
        return [Row("building the graph", "runs", "raises " + raised_text(engine["error"]),
                    True)]
    rows = []
    for name, facts in torch.get("nodes", {}).items():
        mine, theirs = facts_text(facts), facts_text(engine.get("nodes", {}).get(name, {}))
        rows.append(Row(name, mine, theirs, mine != theirs))
    return rows


def observed_text(record: Mapping[str, Any]) -> str:
    """What a step read (`x.grad = 12.0; y.grad = 6.0`), `runs`, or what it raised."""
    if record.get("error"):
        return "raises " + raised_text(record["error"])
    shown = "; ".join(f"{localise.observation_name(item)} = {value_text(value)}"
                      for item, value in record.get("observed", {}).items())
    return shown or "runs"


def facts_text(node: Mapping[str, Any]) -> str:
    """A graph node's facts: `grad_fn = 'MulBackward0'; is_leaf = False; ...`."""
    return "; ".join(f"{field} = {value_text(node.get(field))}" for field in GRAPH_FACTS)


def raised_text(error: Mapping[str, Any]) -> str:
    """An error record as its type and the first line of its message."""
    message = str(error.get("message", "")).strip().splitlines()
    return f"{error.get('type', 'an error')}: {message[0] if message else ''}"
