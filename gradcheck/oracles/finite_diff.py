"""Finite differences in float64 with numpy, for every point and every input element at once.

Each differentiated element gets two estimates from one evaluation of the program over a stacked
batch (one row per perturbed copy of every point):

- the central difference with step `eps**(1/3) * max(1, |x|)` (relative error about 1e-9);
- the 5-point stencil with its own optimal step `eps**(1/5) * max(1, |x|)` (about 1e-12).

The 5-point estimate is used unless its wider stencil crosses a kink, pole or domain edge that the
central one does not. Whether a stencil crosses one is read off the program's own intermediate
values: the argument of `relu`/`abs` changing sign around its kink, of `log`/`sqrt` around 0, of a
denominator around 0. The two estimates and those crossings are kept, so that a disagreement with
the analytic oracles can be classified rather than blamed on anyone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradcheck.oracles import Batch, OracleResult, batch_size, element_first
from gradcheck.program.language import Node, Program, array_apply, critical_argument, evaluate
from gradcheck.program.ops import Op

EPS = float(np.finfo(np.float64).eps)
CENTRAL_STEP = EPS ** (1 / 3)
FIVE_POINT_STEP = EPS ** (1 / 5)
#: perturbed rows per element: +hc, -hc, +h5, -h5, +2h5, -2h5
ROWS = 6
#: array elements kept per evaluation (all nodes together), about 80 MB of float64
BUDGET = 10_000_000


def run(program: Program, batch: Batch, requires_grad: tuple[str, ...]) -> OracleResult:
    """Finite-difference gradients of the output (summed if 1-D) at every point of `batch`."""
    n = batch_size(batch)
    base = {name: element_first(batch[name]) for name in program.inputs}
    elements = [(name, e) for name in requires_grad for e in range(program.inputs[name] or 1)]
    m = len(elements)
    central, accurate = np.zeros((m, n)), np.zeros((m, n))
    cross_central, cross_wide = np.full((m, n), -1), np.full((m, n), -1)
    # how far the crossed node's argument is from its kink or edge at the point itself: of
    # several crossed, the nearest is named (the one at its kink, not the first in the program)
    near_central, near_wide = np.full((m, n), np.inf), np.full((m, n), np.inf)
    width = max([node.size or 1 for node in program.nodes] + [1])
    chunk = max(1, BUDGET // max(1, ROWS * n * width * len(program.nodes)))
    value = None
    with np.errstate(all="ignore"):
        for start in range(0, max(m, 1), chunk):
            part = slice(start, min(start + chunk, m))
            rows = _Stencil(base, elements[part], n)
            out, critical = _evaluate(program, rows.leaves)
            if value is None:
                value = np.array(out[..., 0, :])
            total = out.sum(axis=0) if out.ndim == 3 else out
            central[part], accurate[part] = rows.estimates(total)
            for node_id, crit in critical:
                mark_central, mark_wide = rows.crossings(crit)
                _nearest(cross_central[part], near_central[part], mark_central, node_id)
                _nearest(cross_wide[part], near_wide[part], mark_wide, node_id)
    # The wide stencil is trusted unless it crosses something the central one does not. The
    # crossing kept is the central stencil's, else the wide one's: a singularity that close can
    # spoil the central estimate too, and explains a disagreement there.
    chosen = np.where((cross_wide >= 0) & (cross_central < 0), central, accurate)
    crossing = np.where(cross_central >= 0, cross_central, cross_wide)
    distance = np.where(cross_central >= 0, near_central, near_wide)
    assert value is not None
    return OracleResult(
        "fd", value.T if value.ndim == 2 else value,
        grads=_per_input(program, requires_grad, chosen, n),
        central=_per_input(program, requires_grad, central, n),
        crossing=_per_input(program, requires_grad, crossing, n),
        distance=_per_input(program, requires_grad, distance, n))


class _Stencil:
    """Leaves for one evaluation: row 0 is each point, then ROWS perturbed rows per element."""

    def __init__(self, base: dict[str, np.ndarray], elements: list[tuple[str, int]],
                 n: int) -> None:
        self.count, self.n = len(elements), n
        total = 1 + ROWS * self.count
        self.leaves = {name: np.repeat(x[..., None, :], total, axis=-2)
                       for name, x in base.items()}
        self.central = np.empty((self.count, n))
        self.wide = np.empty((self.count, n))
        for r, (name, e) in enumerate(elements):
            x = base[name][e] if base[name].ndim == 2 else base[name]
            scale = np.maximum(1.0, np.abs(x))
            hc = (x + CENTRAL_STEP * scale) - x  # steps exactly representable at x
            h5 = (x + FIVE_POINT_STEP * scale) - x
            self.central[r], self.wide[r] = hc, h5
            offsets = np.stack([hc, -hc, h5, -h5, 2 * h5, -2 * h5])
            leaf = self.leaves[name]
            target = leaf[e] if leaf.ndim == 3 else leaf
            target[1 + ROWS * r:1 + ROWS * (r + 1)] += offsets

    def estimates(self, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Central and 5-point derivatives from the output rows, shape (elements, n)."""
        f = out[1:].reshape(self.count, ROWS, self.n)
        central = (f[:, 0] - f[:, 1]) / (2 * self.central)
        wide = (8 * (f[:, 2] - f[:, 3]) - (f[:, 4] - f[:, 5])) / (12 * self.wide)
        return central, wide

    def crossings(self, crit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """How far from `crit`'s sign change the central and the wide stencil are, where they
        see it change sign or leave the numbers: |crit| at the point (the nearest crossing
        element's, for a 1-D node), and inf where they do not."""
        sign = np.where(np.isnan(crit), 2.0, np.sign(crit))
        at = sign[..., :1, :]
        rows = sign[..., 1:, :].reshape(sign.shape[:-2] + (self.count, ROWS, self.n))
        distance = np.abs(np.nan_to_num(crit[..., :1, :], nan=0.0))
        central = np.where(_varies(at, rows[..., 0:2, :]), distance, np.inf)
        wide = np.where(_varies(at, rows[..., 2:6, :]), distance, np.inf)
        if sign.ndim == 3:  # a 1-D node crosses if any of its elements does
            central, wide = central.min(axis=0), wide.min(axis=0)
        return central, wide


def _varies(at: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return (rows != at[..., None, :, :]).any(axis=-2)


def _nearest(marks: np.ndarray, nearest: np.ndarray, distance: np.ndarray,
             node_id: int | np.ndarray) -> None:
    """Mark `node_id` (one, or one per point) where its stencil crosses nearer its kink or edge
    than any node yet."""
    nearer = distance < nearest
    marks[nearer] = node_id if np.ndim(node_id) == 0 else node_id[nearer]
    nearest[nearer] = distance[nearer]


def _evaluate(program: Program, leaves: dict[str, np.ndarray]
              ) -> tuple[np.ndarray, list[tuple[int, np.ndarray]]]:
    """The output rows (broadcast to the leaves' shape) and each critical argument's rows."""
    arrays = array_apply(np)
    ids = {id(node): i for i, node in enumerate(program.nodes)}
    critical: list[tuple[int, np.ndarray]] = []

    def apply(op: Op, args: list[Any], node: Node) -> Any:
        if op.name == "detach":  # a constant: every perturbed row keeps the unperturbed value
            value = np.asarray(args[0])
            return np.broadcast_to(value[..., :1, :], value.shape)
        crit = critical_argument(program, op, args, node)
        if crit is not None and np.ndim(crit) >= 2:
            critical.append((ids[id(node)], np.asarray(crit)))
        return arrays(op, args, node)

    out = evaluate(program, leaves, apply)[program.output]
    rows = next(iter(leaves.values())).shape[-2:]
    size = program.nodes[program.output].size
    return np.broadcast_to(out, rows if size is None else (size, *rows)), critical


def _per_input(program: Program, requires_grad: tuple[str, ...], rows: np.ndarray,
               n: int) -> dict[str, np.ndarray]:
    """Split (elements, n) rows back into input -> (n,) or (n, k)."""
    out: dict[str, np.ndarray] = {}
    start = 0
    for name in requires_grad:
        size = program.inputs[name]
        out[name] = rows[start] if size is None else rows[start:start + size].T
        start += size or 1
    return out



# --- second order ---------------------------------------------------------------------------------

#: steps along a direction, relative to max(1, |x|): the gradients differenced are themselves
#: finite differences (relative error about 1e-13), so the steps are wider than first order's.
SECOND_CENTRAL_STEP = EPS ** (1 / 4)
SECOND_FIVE_POINT_STEP = EPS ** (1 / 6)
#: offsets along the direction, in steps: the point, then +-hc, +-h5, +-2 h5
_ALONG = ((0, 0.0), (1, 1.0), (1, -1.0), (2, 1.0), (2, -1.0), (2, 2.0), (2, -2.0))


def run_second(program: Program, batch: Batch, tangent: Batch,
               requires_grad: tuple[str, ...]) -> OracleResult:
    """grad f . d and its derivative along d, H d, at every point (gradcheck.oracles.second_order):
    this module's first-order gradients at points moved along d, differenced by the central and
    the 5-point stencil. A kink or pole within any of those gradients' stencils is marked as
    first order marks it, so that a disagreement there is explained, never graded."""
    n = batch_size(batch)
    moved = [name for name in requires_grad if name in tangent]
    scale = np.ones(n)
    for name in moved:
        scale = np.maximum(scale, np.abs(batch[name]).reshape(n, -1).max(axis=1))
    steps = {1: SECOND_CENTRAL_STEP * scale, 2: SECOND_FIVE_POINT_STEP * scale}
    rows = {}
    for name, column in batch.items():
        copies = []
        for kind, times in _ALONG:
            shift = 0.0 if kind == 0 or name not in moved else (
                times * steps[kind].reshape((n,) + (1,) * (column.ndim - 1)) * tangent[name])
            copies.append(column + shift)
        rows[name] = np.concatenate(copies)
    inner = run(program, rows, requires_grad)
    value = np.zeros(n)
    grads, central, crossing = {}, {}, {}
    marks, nearest = np.full(n, -1), np.full(n, np.inf)
    every = np.arange(n)
    for name in requires_grad:  # the kink or edge nearest any gradient's stencil
        ids = inner.crossing[name].reshape(len(_ALONG), n, -1).transpose(1, 0, 2).reshape(n, -1)
        far = inner.distance[name].reshape(len(_ALONG), n, -1).transpose(1, 0, 2).reshape(n, -1)
        k = np.where(ids >= 0, far, np.inf).argmin(axis=1)
        _nearest(marks, nearest, np.where(ids[every, k] >= 0, far[every, k], np.inf),
                 ids[every, k])
    for name in requires_grad:
        g = inner.grads[name].reshape((len(_ALONG), n) + batch[name].shape[1:])
        shape = (n,) + (1,) * (g.ndim - 2)
        hc, h5 = steps[1].reshape(shape), steps[2].reshape(shape)
        value += (g[0] * tangent[name]).reshape(n, -1).sum(axis=1)
        central[name] = (g[1] - g[2]) / (2 * hc)
        grads[name] = (8 * (g[3] - g[4]) - (g[5] - g[6])) / (12 * h5)
        crossing[name] = np.broadcast_to(marks.reshape(shape), g[0].shape).copy()
    return OracleResult("fd", value, grads, central=central, crossing=crossing)
