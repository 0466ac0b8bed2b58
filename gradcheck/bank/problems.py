"""A problem of an exercise file, located at a line and a field, and the error that lists them."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any, Iterable


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an exercise, where it is and what to do about it."""

    file: str
    line: int  # 1-based; 0 when unknown
    field: str  # a field path such as checks.behaviour.steps[2].backward, or ""
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return ": ".join(part for part in (where, self.field, self.message) if part)


class ExerciseError(ValueError):
    """An exercise that cannot be used, with every problem found in it. `exercise` is the
    exercise as read past its problems (a repeated key's first value, `yes` read as true, an
    unknown key left out), when that was possible: validate checks it further, so that one
    problem hides no other. `visibility`: what the file says of its own, when it could be read
    (`gradcheck.bank.loader`); None when that is not known, and its problems, which quote the
    file's program and hints, are then not for students. `topic`: its module, if it says one
    plainly, so that reports list it where it belongs. `id`: its id, if it says one plainly,
    so that selecting the exercise by id still selects it (and shows its problems)."""

    def __init__(self, problems: list[Problem], exercise: Any = None,
                 visibility: str | None = None, topic: str = "", id: str = "") -> None:
        super().__init__("\n".join(map(str, problems)))
        self.problems = problems
        self.exercise = exercise
        self.visibility = visibility
        self.topic = topic
        self.id = id


def listing(names: Iterable[str]) -> str:
    return ", ".join(sorted(names)) or "(none)"


def suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
