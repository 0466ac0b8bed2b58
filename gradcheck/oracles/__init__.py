"""The three oracles: finite differences (numpy), torch.autograd and jax.grad.

Each oracle differentiates a parsed program over a whole batch of points in one pass, so the cost
of a check does not grow with Python work per point. torch and jax are optional: they are imported
on first use, once, and an oracle whose library is missing answers :class:`Skipped` instead of a
result, so that its checks are reported as skipped, never passed or failed.

A batch maps each input name to an array: shape `(n,)` for a scalar input, `(n, k)` for a 1-D input
of length `k`. Results use the same layout; a 1-D output gives values of shape `(n, k)`, and is
differentiated through its sum (what `backward(gradient=ones)` does).
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from gradcheck.program.language import Apply, Node, Program, array_apply
from gradcheck.program.ops import FUNCTION, Op

#: oracle name -> (module that implements it, library it needs)
ORACLES: dict[str, tuple[str, str]] = {
    "fd": ("gradcheck.oracles.finite_diff", "numpy"),
    "torch": ("gradcheck.oracles.autograd_torch", "torch"),
    "jax": ("gradcheck.oracles.jax_grad", "jax"),
}

Batch = dict[str, np.ndarray]
#: what an oracle's `run` takes: a program, a batch, the inputs to differentiate
Job = tuple[Program, Batch, tuple[str, ...]]


@dataclass(frozen=True)
class OracleResult:
    """An oracle's values and gradients at every point of a batch (float64)."""

    oracle: str
    value: np.ndarray  # (n,) or (n, k) for a 1-D output
    grads: dict[str, np.ndarray]  # input -> (n,) or (n, k); zeros where the output ignores it
    #: finite differences only: the plain central difference, to judge how well conditioned the
    #: chosen (more accurate) estimate is.
    central: dict[str, np.ndarray] | None = None
    #: finite differences only: id of a node whose kink, pole or domain edge lies within the
    #: stencils' reach (-1 where none), so that a disagreement there can be explained.
    crossing: dict[str, np.ndarray] | None = None
    #: finite differences only: how far that node's argument is from its kink, pole or edge at
    #: the point (inf where no node is crossed), so that of several the nearest is named
    distance: dict[str, np.ndarray] | None = None


@dataclass(frozen=True)
class Skipped:
    """An oracle that could not run, with the reason shown instead of a verdict."""

    reason: str

    def __str__(self) -> str:
        return self.reason


@dataclass(frozen=True)
class Unfit(Skipped):
    """An oracle that cannot answer for this program at all, wherever it runs (not for want of
    a library): an answer key stores it, so that a keyed grading meets it as a live one does."""


def as_batch(program: Program, points: Sequence[Mapping[str, Any]] | Mapping[str, Any]
             ) -> Batch:
    """Turn a list of points (name -> float or list of floats) into the batch form, checked.

    A mapping is taken to be a batch already and is only checked and converted to float64.
    """
    if isinstance(points, Mapping):
        raw = dict(points)
        n = len(next(iter(raw.values()))) if raw and np.ndim(next(iter(raw.values()))) else 0
        if any(np.ndim(v) == 0 for v in raw.values()):
            raise ValueError("a batch maps each input to an array with one value per point; "
                             "pass a single point as a list: [point]")
    else:
        n = len(points)
        for i, point in enumerate(points):
            missing = set(program.inputs) - set(point)
            if missing:
                raise ValueError(f"point {i} has no value for {', '.join(sorted(missing))}")
        raw = {name: [p[name] for p in points] for name in program.inputs}
    batch: Batch = {}
    for name, size in program.inputs.items():
        if name not in raw:
            raise ValueError(f"the points have no value for input {name!r}")
        shape = (n,) if size is None else (n, size)
        what = "a number" if size is None else f"a list of {size} numbers"
        try:
            column = np.asarray(raw[name], dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"input {name!r} must be {what} at every point") from None
        if n == 0:
            column = column.reshape(shape)
        if column.shape != shape:
            raise ValueError(f"input {name!r} must be {what} at every point; got values of "
                             f"shape {column.shape[1:] or 'scalar'}")
        batch[name] = column
    return batch


def batch_size(batch: Mapping[str, np.ndarray]) -> int:
    return len(next(iter(batch.values()))) if batch else 0


def element_first(column: np.ndarray) -> np.ndarray:
    """(n,) stays, (n, k) becomes (k, n): the layout of :func:`gradcheck.program.language.array_apply`."""
    return column.T if column.ndim == 2 else column


def reached_inputs(program: Program) -> frozenset[str]:
    """The inputs the output depends on through the program, along paths no detach cuts: torch
    leaves the others' .grad None."""
    seen = {program.output}
    for node_id in range(program.output, -1, -1):
        if node_id in seen and program.nodes[node_id].op != "detach":  # detach cuts the path
            seen.update(program.nodes[node_id].args)
    return frozenset(n.name for i, n in enumerate(program.nodes) if n.op == "input" and i in seen)


def native_apply(xp: Any, function: Callable[[str], Callable[[Any], Any]]) -> Apply:
    """Like `array_apply(xp)`, but each named function (exp, sigmoid, relu, ...) is the library's
    own, so its derivative is the library's, including its conventions at kinks."""
    arrays = array_apply(xp)

    def apply(op: Op, args: list[Any], node: Node) -> Any:
        if op.kind == FUNCTION:
            return function(op.name)(args[0])
        return arrays(op, args, node)

    return apply


def compute(program: Program, points: Mapping[str, Any] | Sequence[Mapping[str, Any]],
            requires_grad: Iterable[str],
            oracles: Sequence[str] = ("fd", "torch", "jax")) -> dict[str, OracleResult | Skipped]:
    """Values and gradients of `program` at every point, by each named oracle."""
    _, batch, wanted = job(program, points, requires_grad)
    results: dict[str, OracleResult | Skipped] = {}
    for name in oracles:
        oracle = backend(name)
        results[name] = oracle if isinstance(oracle, Skipped) else oracle.run(
            program, batch, wanted)
    return results


def job(program: Program, points: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        requires_grad: Iterable[str]) -> Job:
    """What `compute` gives each oracle's `run`, checked (`jax_grad.run_many` takes a list)."""
    return program, as_batch(program, points), _requires_grad(program, requires_grad)


def _requires_grad(program: Program, names: Iterable[str]) -> tuple[str, ...]:
    wanted = tuple(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in program.inputs]
    if unknown:
        raise ValueError(f"requires_grad names {', '.join(unknown)}, which are not inputs; the "
                         f"inputs are {', '.join(program.inputs)}")
    return wanted


@functools.cache
def backend(name: str) -> ModuleType | Skipped:
    """The module of oracle `name`, imported once, or why it cannot run."""
    if name not in ORACLES:
        raise ValueError(f"unknown oracle {name!r}; choose from {', '.join(ORACLES)}")
    module, library = ORACLES[name]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] == library:
            return Skipped(f"skipped: {library} is not installed")
        raise
    except OSError as exc:  # installed but broken, e.g. a shared library that will not load
        return Skipped(f"skipped: {library} could not be loaded ({exc})")
