"""How a number reads in every message people see: at most ten significant digits.

Every student-facing message (the grader's, `gradcheck.check`'s, `explain`'s tables, the
reports' tables) prints numbers through `number_text`, so that 0.1 + 0.2 reads `0.3` and a
point drawn at 8.770195113480294e-247 reads `8.770195113e-247`. Two different numbers that
still print the same (they differ past the tenth digit) are told apart by `pair_text`, which
writes the found one as the expected one plus the difference, again in few digits.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

#: significant digits of a number in a message
SIGNIFICANT = 10
#: elements of a 1-D value shown before the rest is summed up as "... (N values)"
SHOWN_ELEMENTS = 6

Numbers = Any  # a float, a list of floats, or None


def number_text(x: Numbers) -> str:
    """A value for people: `2.0`, `0.3333333333`, `[1.0, 2.0]`, `None`, a long list by its
    first elements and its length: `[0.5, 1.0, ... (3000 values)]`."""
    if x is None:
        return "None"
    if isinstance(x, (list, tuple)) or getattr(x, "ndim", 0) == 1:
        values = list(x)
        shown = [number_text(v) for v in values[:SHOWN_ELEMENTS]]
        if len(values) > SHOWN_ELEMENTS:
            shown.append(f"... ({len(values)} values)")
        return "[" + ", ".join(shown) + "]"
    x = float(x)
    text = f"{x:.{SIGNIFICANT}g}"
    if math.isfinite(x) and not any(c in text for c in ".en"):
        text += ".0"  # a float reads as one: 3.0, not 3
    return text


def is_numeric(x: Any) -> bool:
    """A number or a list of numbers, as JSON carries them (a bool is neither)."""
    return type(x) in (int, float) or isinstance(x, list) and all(type(v) in (int, float)
                                                                  for v in x)


#: the type of the error the worker records when an engine hands back what the protocol does
#: not allow (a numpy array from tolist(), a flag that is not a bool): the engine raised nothing
UNREADABLE = "ProtocolError"
#: what the engine did, then: said in place of "raised ..."
GAVE_UNREADABLE = "gave what the protocol does not allow"


def unreadable(error: Any) -> bool:
    """Whether a worker's error record is its ProtocolError: a value the engine gave that the
    protocol does not allow, not an error it raised."""
    return isinstance(error, Mapping) and error.get("type") == UNREADABLE


def raised_text(kind: Any, message: Any) -> str:
    """What the engine did, to follow "your engine": raised `kind` with `message`'s first line,
    or, for the worker's own ProtocolError, gave something the protocol does not allow."""
    if kind == UNREADABLE:
        return f"{GAVE_UNREADABLE}: {first_line(str(message))}"
    return f"raised {kind or 'Error'}: {first_line(str(message))}"


def value_text(x: Any) -> str:
    """Anything read from an engine or torch: numbers by `number_text`, what reading raised
    (`{"error": record}`) as its type and the first line of its message, the rest by repr."""
    if is_numeric(x):
        return number_text(x)
    if isinstance(x, dict) and isinstance(x.get("error"), dict):
        error = x["error"]
        if unreadable(error):
            return f"not readable ({first_line(str(error.get('message', '')))})"
        return (f"an error (reading it raised {error.get('type', 'Error')}: "
                f"{first_line(str(error.get('message', '')))})")
    return repr(x)


def first_line(text: str) -> str:
    """The first line of a message that has any ('' for none): what a verdict quotes."""
    return text.strip().splitlines()[0] if text.strip() else ""


def pair_text(found: Numbers, expected: Numbers) -> tuple[str, str]:
    """A wrong value and the right one, as `number_text` writes them; when those read the same,
    the found one (or its first element that differs) as the right one plus the difference:
    `2.0 + 4.4e-16`."""
    a, b = number_text(found), number_text(expected)
    if a != b:
        return a, b
    if isinstance(found, (list, tuple)):
        for j, (f, e) in enumerate(zip(found, expected)):
            if f != e and number_text(f) == number_text(e) and _difference(f, e):
                return f"{a} (element {j} is {_difference(f, e)})", b
        return a, b
    return _difference(found, expected) or a, b


def _difference(found: float, expected: float) -> str:
    """`found` as `expected` plus or minus a difference, or '' when that cannot be said."""
    difference = float(found) - float(expected)
    if not math.isfinite(difference) or difference == 0:
        return ""  # -0.0 against 0.0 reads `-0.0` already; NaN and infinities as they are
    sign = "+" if difference > 0 else "-"
    return f"{number_text(expected)} {sign} {abs(difference):.3g}"
