"""Second derivatives by every oracle: rows of the Hessian, or a Hessian-vector product.

A direction `d` is a unit vector (one element of one input that requires grad: one row of the
Hessian) or a check's vector. At a point x and a direction d, each oracle gives the first
derivative along d, grad f(x) . d, as the result's `value`, and its gradient, H d, as the
result's `grads`: the layout of a first-order result with one row per (point, direction),
points first. Agreement and grading are then the first-order ones (gradcheck.grading.compare).

- torch: double backward, `torch.autograd.grad` with `create_graph=True`, then the gradient of
  grad f . d, over the whole batch at once;
- jax: forward over reverse, `jax.jvp` of `jax.grad`, under `vmap`;
- fd: differences along d of finite differences' own first-order gradients (the 5-point
  estimates of :mod:`gradcheck.oracles.finite_diff`), by a central and a 5-point stencil.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from gradcheck.oracles import OracleResult, Skipped, Unfit, as_batch, backend
from gradcheck.program.language import Program

Direction = dict[str, Any]  # input name -> a number, or a list for a 1-D input


def directions(program: Program, requires_grad: Sequence[str],
               vector: Mapping[str, Any] | None = None) -> list[tuple[str, Direction]]:
    """(label, direction) pairs: the check's vector, or one unit vector per element of every
    input that requires grad, in input order (the rows of the Hessian)."""
    if vector is not None:
        return [("vector", {name: vector[name] for name in requires_grad})]
    found = []
    for name in requires_grad:
        size = program.inputs[name]
        for e in range(size or 1):
            unit = {other: 0.0 if program.inputs[other] is None else
                    [0.0] * program.inputs[other] for other in requires_grad}
            if size is None:
                unit[name] = 1.0
            else:
                unit[name][e] = 1.0
            found.append((f"e({name})" if size is None else f"e({name}[{e}])", unit))
    return found


def expand(points: Sequence[Mapping[str, Any]], pairs: Sequence[tuple[str, Direction]]
           ) -> tuple[list[Mapping[str, Any]], list[Direction], list[str]]:
    """Each point repeated once per direction (points first), with the directions and labels."""
    rows = [point for point in points for _ in pairs]
    return rows, [d for _ in points for _, d in pairs], [label for _ in points for label, _ in pairs]


def compute(program: Program, points: Sequence[Mapping[str, Any]], requires_grad: Sequence[str],
            vector: Mapping[str, Any] | None = None,
            oracles: Sequence[str] = ("fd", "torch", "jax")
            ) -> dict[str, OracleResult | Skipped]:
    """Every oracle's first derivative along each direction, and its gradient (H d), at every
    point: one row per (point, direction), as :func:`expand` orders them."""
    wanted = tuple(dict.fromkeys(requires_grad))
    rows, tangents, _ = expand(points, directions(program, wanted, vector))
    batch = as_batch(program, rows)
    tangent = {name: np.asarray([t[name] for t in tangents], np.float64).reshape(
        batch[name].shape) for name in wanted}
    results: dict[str, OracleResult | Skipped] = {}
    for name in oracles:
        oracle = unfit(program, name) or backend(name)
        results[name] = oracle if isinstance(oracle, Skipped) else oracle.run_second(
            program, batch, tangent, wanted)
    return results


def unfit(program: Program, oracle: str) -> Unfit | None:
    """Why `oracle` cannot give `program`'s second derivatives at all, or None."""
    if oracle == "fd" and "detach" in program.ops_used():
        return Unfit("skipped: finite differences along a direction move a detached value with "
                     "the point, so they cannot give its second derivatives")
    return None
