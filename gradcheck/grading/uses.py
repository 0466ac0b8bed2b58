"""A failed use of the engine, in the student's words: what was done, which piece of the
protocol it needed, and what happened.

Nothing asks an engine in advance what it has. A piece of the protocol (`__rpow__`, `exp()`, 1-D
tensors, `.grad`) is missing only where a check's own use of it fails, and then it costs that
check only: `x ** 2` needs `__pow__` alone, since Python asks a number's `__rpow__` only for
`2 ** x`. The worker records with each error the piece it was using and the program's node it
was using it for (:meth:`gradcheck.engine.run.Run.using`); this module turns that record into
the first line of the check's message and into the name reports group by
(`CheckResult.blocked_by`). Every word of it comes from the grader's own program and the closed
list `ops.PIECES`; only the exception's type and message come from the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from gradcheck.grading.digits import GAVE_UNREADABLE, first_line, unreadable
from gradcheck.program.language import Program
from gradcheck.program.ops import CREATE_GRAPH, CREATE_GRAPH_CALL, OPS, PIECES, PROTOCOL

_ATTRIBUTES = {"grad", "requires_grad", "is_leaf", "grad_fn"}
_MESSAGE = 200  # characters of the engine's message quoted


@dataclass(frozen=True)
class Use:
    """One failed use: `piece` is what a report groups by (`__rpow__`, `tensor([...])`)."""

    piece: str
    form: str  # what was done, as code: "`2 ** x`"
    missing: bool  # the piece is absent or not written yet (NotImplementedError)
    sentence: str  # the message's first line


def describe(program: Program | None, error: Mapping[str, Any] | None) -> Use | None:
    """The use an error record names, or None when it names none (or names it wrongly)."""
    if not isinstance(error, Mapping) or error.get("piece") not in PIECES:
        return None
    name = error["piece"]
    node = None
    if program is not None and type(error.get("node")) is int:
        if not 0 <= error["node"] < len(program.nodes):
            return None
        node = program.nodes[error["node"]]
    happened = f"{error.get('type', 'Error')}: {_first_line(str(error.get('message', '')))}"
    stub = error.get("type") == "NotImplementedError"
    if (name == "tensor" and node is not None and node.op == "input" and node.size is not None
            and not stub and error.get("absent") is not True):  # tensor() works for a number
        return Use("tensor([...])", "`tensor([...])`", True,
                   "your engine is missing 1-D tensors: `tensor([...])`, a 1-D tensor, is not "
                   f"supported (making the input {node.name} raised {happened})")
    piece = _label(name)
    form = _form(name, piece, node)
    absent = error.get("absent") is True
    if unreadable(error):  # the engine raised nothing: it gave what is not data
        return Use(piece, form, False, f"your engine's {form} {GAVE_UNREADABLE}: "
                                       f"{_first_line(str(error.get('message', '')))}")
    if name == "grad" and error.get("phase") == "read":  # a .grad the engine never made
        return Use(piece, form, False,
                   f"your engine raised {happened.split(':')[0]} reading {form} after backward() "
                   f"({_first_line(str(error.get('message', '')))}); an input's .grad should be "
                   "None until a gradient reaches it, then the gradient")
    if absent:
        return Use(piece, form, True,
                   f"your engine is missing `{piece}`: {form} needs it ({happened})")
    if stub:
        return Use(piece, form, True, f"your engine is missing `{piece}`: {form} needs it, and "
                                      f"it raised {happened}")
    return Use(piece, form, False, f"your engine raised {happened.split(':')[0]} in {form} "
                                   f"(`{piece}`): {_first_line(str(error.get('message', '')))}")


def _label(name: str) -> str:
    """`__rpow__` stays; a method gets its parentheses (`exp()`), an attribute its dot, and
    create_graph the call that uses it."""
    if name == CREATE_GRAPH:
        return CREATE_GRAPH_CALL
    if name.startswith("__"):
        return name
    if name in _ATTRIBUTES:
        return f".{name}"
    return f"{name}()"


def _form(name: str, piece: str, node: Any) -> str:
    if node is None:
        return f"`{piece}`"
    if node.op in OPS and name not in (*PROTOCOL, CREATE_GRAPH):
        return f"`{node.text}`"
    if name == "tensor":
        return f"`tensor(...)` for the input {node.name}"
    var = node.name or f"({node.text})"
    return f"`{var}{piece}`" if piece.startswith(".") else f"`{var}.{piece}`"


def _first_line(text: str) -> str:
    line = first_line(text)
    return line if len(line) <= _MESSAGE else line[:_MESSAGE] + "..."
