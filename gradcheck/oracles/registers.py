"""A program lowered to straight-line register code, for jax's compiled interpreter.

Tracing and compiling every program for jax costs about 0.1 s each; interpreting this code with
one compiled loop costs one compile for the whole bank. Each register holds one scalar per point
of a batch: a 1-D value takes one register per element, `sum` and `mean` become additions in
order, `v[i]` and a scalar's `sum` name an existing register. Every instruction applies one
operation of :mod:`gradcheck.program.ops` (a binary, unary or named function) to one or two registers and
writes the next register, so the code is a flat table of small integers.

Only the instructions the output depends on are kept. As in a scalar engine, an element of a 1-D
value that the output ignores then adds nothing to a gradient, where jax tracing the whole vector
multiplies its zero cotangent by the element's slope (NaN where the slope is infinite, as `log`'s
at 0, outside every sampled domain).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradcheck.program.language import Program
from gradcheck.program.ops import BINARY, FUNCTION, OPS, UNARY, Op

#: the operations an instruction may apply, in opcode order
INSTRUCTIONS: tuple[Op, ...] = tuple(op for op in OPS.values()
                                     if op.kind in (BINARY, UNARY, FUNCTION))
OPCODE = {op.name: code for code, op in enumerate(INSTRUCTIONS)}


@dataclass(frozen=True)
class Code:
    """`program` as register code. Registers: the inputs' elements in `program.inputs` order,
    then the constants, then one per instruction."""

    inputs: dict[str, list[int]]  # input name -> its registers, one per element
    constants: list[float]  # the values of the registers after the inputs'
    instructions: np.ndarray  # (n, 3) int32: opcode, first operand, second operand
    output: list[int]  # the output's registers (one for a scalar output)

    @property
    def first(self) -> int:
        """The register the first instruction writes."""
        return sum(map(len, self.inputs.values())) + len(self.constants)

    @property
    def size(self) -> int:
        return self.first + len(self.instructions)


def lower(program: Program) -> Code:
    """The register code of `program` (its values and their derivatives are unchanged)."""
    inputs: dict[str, list[int]] = {}
    placed: list[list[int]] = []  # node id -> its registers
    constants: dict[str, tuple[float, int]] = {}  # float.hex keeps 0.0 and -0.0 apart
    for node in program.nodes:  # the inputs and constants come first, in node order
        if node.op == "input":
            start = sum(map(len, inputs.values()))
            inputs[node.name] = list(range(start, start + (node.size or 1)))
    base = sum(map(len, inputs.values()))

    def constant(value: float) -> int:
        return constants.setdefault(value.hex(), (value, base + len(constants)))[1]

    for node in program.nodes:  # every constant is placed before the first instruction
        if node.op == "const":
            constant(node.value)
        elif node.op == "mean" and not node.reduces_scalar:
            constant(float(program.nodes[node.args[0]].size or 1))
    first = base + len(constants)
    code: list[tuple[int, int, int]] = []

    def emit(name: str, a: int, b: int = 0) -> int:
        code.append((OPCODE[name], a, b))
        return first + len(code) - 1

    for node in program.nodes:
        args = [placed[a] for a in node.args]
        if node.op == "input":
            registers = inputs[node.name]
        elif node.op == "const":
            registers = [constant(node.value)]
        elif node.op == "select":
            registers = [args[0][node.index]]
        elif node.reduces_scalar:
            registers = args[0]
        elif node.op in ("sum", "mean"):
            total = args[0][0]
            for element in args[0][1:]:
                total = emit("add", total, element)
            if node.op == "mean":
                total = emit("div", total, constant(float(len(args[0]))))
            registers = [total]
        else:
            width = max(map(len, args))
            registers = [emit(node.op, *(arg[j if len(arg) > 1 else 0] for arg in args))
                         for j in range(width)]
        placed.append(registers)
    code, output = _live(code, first, placed[program.output])
    return Code(inputs, [value for value, _ in constants.values()],
                np.array(code, dtype=np.int32).reshape(-1, 3), output)


def _live(code: list[tuple[int, int, int]], first: int, output: list[int]
          ) -> tuple[list[tuple[int, int, int]], list[int]]:
    """Only the instructions the output depends on, renumbered: a dead instruction's slope
    times its zero cotangent would be NaN where the slope is infinite (log at 0)."""
    needed = set(output)
    for index in range(len(code) - 1, -1, -1):
        if first + index in needed:
            op, a, b = code[index]
            needed.update((a, b) if INSTRUCTIONS[op].arity == 2 else (a,))
    kept = [index for index in range(len(code)) if first + index in needed]
    moved = {first + index: first + new for new, index in enumerate(kept)}
    return ([(code[i][0], moved.get(code[i][1], code[i][1]), moved.get(code[i][2], code[i][2]))
             for i in kept], [moved.get(r, r) for r in output])
