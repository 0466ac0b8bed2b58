"""A drawn program and a behaviour session on it, as plain data: what a random-program search
tries on an engine, and what an answer key stores of it. Apart from the strategies that draw
them (:mod:`gradcheck.bank.random_programs`), so that using a stored one needs no hypothesis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gradcheck.program.language import Program
from gradcheck.program.ops import OPS


@dataclass(frozen=True)
class Drawn:
    """A drawn program, its inputs (name -> None or a length), and a point to run it at."""

    source: str
    inputs: dict[str, int | None]
    point: dict[str, Any]
    program: Program = field(repr=False, compare=False)

    @property
    def operations(self) -> int:
        """How many operations the program has (constants and inputs are not operations)."""
        return sum(node.op in OPS for node in self.program.nodes)

    @property
    def output(self) -> str:
        return self.program.output_name


@dataclass(frozen=True)
class Session:
    """A drawn program and the behaviour steps run after its first forward pass."""

    drawn: Drawn
    steps: tuple[dict[str, Any], ...]
    #: the inputs made with requires_grad=True in the session (the gradients: every input)
    requires_grad: tuple[str, ...] = ()


def unused_inputs(drawn: Drawn) -> list[str]:
    """The inputs no operation of the program uses."""
    used = {arg for node in drawn.program.nodes for arg in node.args}
    return [node.name for i, node in enumerate(drawn.program.nodes)
            if node.op == "input" and i not in used]
