"""jax.grad with x64: a program traced under `vmap`, or many run by a compiled interpreter.

`run` traces one program as `jit(vmap(value_and_grad))`, compiled once per program and batch
shape and cached: about 0.1 s, then well under a millisecond per batch. A bank checks dozens of
programs once each, so `run_many` runs every program of up to STEPS instructions
(gradcheck.oracles.registers) with one compiled function instead: `value_and_grad` of a
`lax.scan` over its instructions, each a `lax.switch` over jax's own functions (`jax.nn.relu`,
`jax.nn.sigmoid`, `jnp.abs`, ...), so the derivative and every convention at a kink are still
jax's. It compiles once per process (about 1 s) and takes a few milliseconds per 64 points.
Longer programs are traced, and compiled together as one module (XLA's compile costs about
45 ms per module however small). Under `vmap` each point is evaluated alone (scalars are 0-d,
1-D inputs have shape (k,)).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import jax

jax.config.update("jax_enable_x64", True)  # before any jax array exists

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from gradcheck.oracles import (  # noqa: E402
    Batch,
    Job,
    OracleResult,
    batch_size,
    element_first,
    native_apply,
    registers,
)
from gradcheck.program.language import Program, evaluate  # noqa: E402
from gradcheck.program.ops import FUNCTION, Op  # noqa: E402


def _named(name: str) -> Callable[[Any], Any]:
    """jax's own function of that name, so that its derivative (and convention at a kink) is."""
    if name == "detach":
        return jax.lax.stop_gradient
    return getattr(jnp, name, None) or getattr(jax.nn, name)


_APPLY = native_apply(jnp, _named)
_COMPILED: dict[tuple[Any, ...], Callable[..., Any]] = {}


def run(program: Program, batch: Batch, requires_grad: tuple[str, ...]) -> OracleResult:
    """Values and jax.grad gradients of the output (summed if 1-D) at every point, the program
    traced and compiled once (cached): the fastest way to check one program again and again."""
    return _result(batch, requires_grad,
                   compiled(program, requires_grad)(*_arguments(program, batch, requires_grad)))


# --- the compiled interpreter ---------------------------------------------------------------------

#: the interpreter's fixed shapes: instructions, registers, points per call
STEPS, REGISTERS, LANES = 256, 512, 64
_SCRATCH = REGISTERS - 1  # where the padding instructions write


def _branch(op: Op) -> Callable[[Any, Any], Any]:
    if op.kind == FUNCTION:
        function = _named(op.name)
        return lambda a, b: function(a)
    return (lambda a, b: op.array(jnp, a, b)) if op.arity == 2 else lambda a, b: op.array(jnp, a)


_BRANCHES = [_branch(op) for op in registers.INSTRUCTIONS]


def _interpreter(start: jax.Array, code: jax.Array, weights: jax.Array) -> Any:
    """The registers after running `code` on `start` (REGISTERS, LANES), and the gradient with
    respect to `start` of the weighted sum of the final registers (the output's sum)."""

    def final(start: jax.Array) -> Any:
        def step(values: jax.Array, instruction: jax.Array) -> tuple[jax.Array, None]:
            op, a, b, to = instruction[0], instruction[1], instruction[2], instruction[3]
            result = jax.lax.switch(op, _BRANCHES, values[a], values[b])
            return jax.lax.dynamic_update_index_in_dim(values, result, to, 0), None

        values, _ = jax.lax.scan(step, start, code)
        return jnp.sum(weights @ values), values

    (_, values), gradient = jax.value_and_grad(final, has_aux=True)(start)
    return values, gradient


_COMPILING = threading.Lock()
_INTERPRETER: list[Any] = []  # the compiled interpreter, once built


def warm_up() -> Any:
    """The compiled interpreter, compiled on first use (about 1 s; XLA mostly releases the GIL,
    so a grader starts this in the background before it needs jax)."""
    with _COMPILING:
        if not _INTERPRETER:
            shape = jax.ShapeDtypeStruct
            _INTERPRETER.append(jax.jit(_interpreter).lower(
                shape((REGISTERS, LANES), jnp.float64), shape((STEPS, 4), jnp.int32),
                shape((REGISTERS,), jnp.float64)).compile())
        return _INTERPRETER[0]


def _code(program: Program) -> registers.Code | None:
    """`program`'s register code, or None if it is too long for the interpreter."""
    key = _key(program, ())
    if key not in _CODES:
        code = registers.lower(program)
        _CODES[key] = code if len(code.instructions) <= STEPS and code.size <= _SCRATCH else None
    return _CODES[key]


_CODES: dict[tuple[Any, ...], registers.Code | None] = {}


def _interpret(program: Program, code: registers.Code, batch: Batch,
               requires_grad: tuple[str, ...]) -> OracleResult:
    """`run` by the compiled interpreter, LANES points at a time."""
    n = batch_size(batch)
    width = max(LANES, -(-n // LANES) * LANES)
    start = np.zeros((REGISTERS, width))
    for name, rows in code.inputs.items():
        start[rows] = element_first(_pad(batch[name], width))
    start[code.first - len(code.constants):code.first] = np.array(code.constants)[:, None]
    table = np.tile(np.array([registers.OPCODE["add"], 0, 0, _SCRATCH], np.int32), (STEPS, 1))
    table[:len(code.instructions), :3] = code.instructions
    table[:len(code.instructions), 3] = np.arange(code.first, code.size)
    weights = np.bincount(code.output, minlength=REGISTERS).astype(np.float64)
    interpreter = warm_up()
    parts = [interpreter(start[:, i:i + LANES], table, weights) for i in range(0, width, LANES)]
    values = np.concatenate([np.asarray(v) for v, _ in parts], axis=1)[:, :n]
    gradient = np.concatenate([np.asarray(g) for _, g in parts], axis=1)[:, :n]

    def column(rows: list[int], size: int | None, of: np.ndarray) -> np.ndarray:
        return of[rows[0]] if size is None else of[rows].T

    return OracleResult("jax", column(code.output, program.nodes[program.output].size, values),
                        {name: column(code.inputs[name], program.inputs[name], gradient)
                         for name in requires_grad})


def run_many(jobs: Sequence[Job]) -> list[OracleResult]:
    """`run` of each (program, batch, requires_grad), for many programs each checked once (a
    bank): by the compiled interpreter, which compiles once for them all; programs too long for
    it are traced and compiled together as one module, not cached. The jobs of one program (an
    exercise's checks) become one batch. Each point's result depends only on its program and
    its point, not on the other jobs."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for index, (program, _, requires_grad) in enumerate(jobs):
        groups.setdefault(_key(program, requires_grad), []).append(index)
    merged = []
    for indices in groups.values():
        program, _, requires_grad = jobs[indices[0]]
        merged.append((program, {name: np.concatenate([jobs[i][1][name] for i in indices])
                                 for name in program.inputs}, requires_grad))
    traced = [job for job in merged if _code(job[0]) is None]
    functions = [_build(program, requires_grad) for program, _, requires_grad in traced]
    together = jax.jit(lambda arguments: [f(*a) for f, a in zip(functions, arguments)])
    outputs = iter(together([_arguments(*job) for job in traced]) if traced else [])
    results: list[OracleResult] = [None] * len(jobs)  # type: ignore[list-item]
    for indices, job in zip(groups.values(), merged):
        code = _code(job[0])
        whole = (_interpret(job[0], code, *job[1:]) if code is not None
                 else _result(*job[1:], next(outputs)))
        start = 0
        for i in indices:
            part = slice(start, start + batch_size(jobs[i][1]))
            results[i] = OracleResult("jax", whole.value[part],
                                      {name: g[part] for name, g in whole.grads.items()})
            start = part.stop
    return results


def _arguments(program: Program, batch: Batch, requires_grad: tuple[str, ...]
               ) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """The differentiated inputs and the others, padded. jit compiles once per batch shape
    (0.1-1 s): pad to a power of two, at least 64, so that an exercise's checks (a few listed
    points, a few dozen sampled ones) share one compilation."""
    padded = {name: _pad(column, _bucket(batch_size(batch))) for name, column in batch.items()}
    others = tuple(name for name in program.inputs if name not in requires_grad)
    return tuple(padded[k] for k in requires_grad), tuple(padded[k] for k in others)


def _result(batch: Batch, requires_grad: tuple[str, ...], output: Any) -> OracleResult:
    n = batch_size(batch)
    value, grads = output
    return OracleResult("jax", np.asarray(value, dtype=np.float64)[:n],
                        {name: np.asarray(g, dtype=np.float64)[:n]
                         for name, g in zip(requires_grad, grads)})


def _bucket(n: int) -> int:
    return max(64, 1 << max(0, n - 1).bit_length())


def _pad(column: np.ndarray, size: int) -> np.ndarray:
    """`column` grown to `size` points with copies of its last point (ones if it has none)."""
    if len(column) == 0:
        return np.ones((size, *column.shape[1:]))
    return np.concatenate([column, np.repeat(column[-1:], size - len(column), axis=0)])


def compiled(program: Program, requires_grad: tuple[str, ...]) -> Callable[..., Any]:
    """`jit(vmap(value_and_grad(program)))`, built once per (program spec, requires_grad)."""
    key = _key(program, requires_grad)
    if key not in _COMPILED:
        _COMPILED[key] = jax.jit(_build(program, requires_grad))
    return _COMPILED[key]


def _key(program: Program, requires_grad: tuple[str, ...]) -> tuple[Any, ...]:
    return (program.source, tuple(program.inputs.items()), program.output_name, requires_grad)


def _build(program: Program, requires_grad: tuple[str, ...]) -> Callable[..., Any]:
    """`vmap(value_and_grad(program))`, not compiled yet."""
    others = tuple(name for name in program.inputs if name not in requires_grad)

    def at_point(differentiated: tuple[Any, ...], fixed: tuple[Any, ...]) -> Any:
        leaves = {**dict(zip(requires_grad, differentiated)), **dict(zip(others, fixed))}
        out = jnp.asarray(evaluate(program, leaves, _APPLY)[program.output], dtype=jnp.float64)
        return jnp.sum(out), out

    def value_and_grads(differentiated: tuple[Any, ...], fixed: tuple[Any, ...]) -> Any:
        (_, value), grads = jax.value_and_grad(at_point, has_aux=True)(differentiated, fixed)
        return value, grads

    return jax.vmap(value_and_grads)


# --- second order ---------------------------------------------------------------------------------

_SECOND: dict[tuple[Any, ...], Callable[..., Any]] = {}


def run_second(program: Program, batch: Batch, tangent: Batch,
               requires_grad: tuple[str, ...]) -> OracleResult:
    """grad f . d and its gradient H d at every point (gradcheck.oracles.second_order): `jvp` of
    `grad` (forward over reverse), traced under `vmap` and compiled once per program (cached)."""
    key = _key(program, requires_grad)
    if key not in _SECOND:
        _SECOND[key] = jax.jit(_build_second(program, requires_grad))
    differentiated, fixed = _arguments(program, batch, requires_grad)
    size = _bucket(batch_size(batch))
    directions = tuple(_pad(tangent[name], size) for name in requires_grad)
    return _result(batch, requires_grad, _SECOND[key](differentiated, fixed, directions))


def _build_second(program: Program, requires_grad: tuple[str, ...]) -> Callable[..., Any]:
    """`vmap` of (grad f . d, H d) at one point, not compiled yet."""
    others = tuple(name for name in program.inputs if name not in requires_grad)

    def total(differentiated: tuple[Any, ...], fixed: tuple[Any, ...]) -> Any:
        leaves = {**dict(zip(requires_grad, differentiated)), **dict(zip(others, fixed))}
        return jnp.sum(jnp.asarray(evaluate(program, leaves, _APPLY)[program.output],
                                   dtype=jnp.float64))

    def along(differentiated: tuple[Any, ...], fixed: tuple[Any, ...],
              direction: tuple[Any, ...]) -> Any:
        gradient, hv = jax.jvp(lambda d: jax.grad(total)(d, fixed), (differentiated,),
                               (direction,))
        dot = sum((jnp.sum(g * t) for g, t in zip(gradient, direction)), jnp.float64(0.0))
        return dot, hv

    return jax.vmap(along)
