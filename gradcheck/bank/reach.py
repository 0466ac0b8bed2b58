"""Which kinks, poles and domain edges a program's operations reach over the inputs' domains.

Interval arithmetic over the program (each operation's `bound` rule in the table of operations)
bounds every argument over each connected piece of the sampled region: the domains less their
`avoid` points, a margin kept from every cut, the other inputs at their values. An argument whose
bounds hold the point where its operation loses the derivative is a candidate. Interval
arithmetic is conservative (`x * x` over [-1, 1] is bounded by [-1, 1], as if the two x could
differ), so a candidate is reported only with a witness from a search of points in the same
piece: a point where a domain edge's argument is at or past the edge, a point where a pole's
argument is exactly at it, or two points where a kink's or a pole's argument lies on either side
(the piece is connected and the argument continuous, so it reaches the point between them).
What the search cannot confirm is left to the oracles' agreement at sampled points.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from gradcheck.program.language import Node, Program, array_apply, constant_operand, evaluate
from gradcheck.program.ops import EDGE, OPS, POLE, Edge, Interval, Op, allowed

#: Points searched in each piece of the sampled region.
SEARCH = 256
#: Pieces of the sampled region looked at (one piece per input's piece, in every combination).
MAX_PIECES = 64
#: Values (scalar inputs and elements of 1-D ones) up to which every corner of a piece is searched.
CORNERS = 6
#: Where a crossing is bracketed along one input before it is narrowed down by bisection.
ALONG = 2049


@dataclass(frozen=True)
class Reached:
    """An operation whose argument reaches its kink, pole or domain edge in the sampled region."""

    node: Node  # the operation
    argument: Node  # the argument the edge is on
    edge: Edge
    kind: str  # KINK, POLE or EDGE (a power's kind depends on its exponent)
    inputs: tuple[str, ...]  # the sampled inputs the argument depends on
    lowest: float  # the lowest value of the argument found (what a domain edge is reached by)
    witness: dict[str, Any]  # the values of `inputs` where the argument is at or nearest it
    roots: tuple[float, ...]  # for one scalar input: its values where the argument is at it


def reached(program: Program, values: Mapping[str, Any], domains: Mapping[str, Interval],
            margin: float) -> list[Reached]:
    """Every operation (once per place in the source) whose argument reaches its kink, pole or
    domain edge, over `domains` (input -> interval) with `margin` kept from every cut; inputs
    without a domain keep their `values`."""
    sampled = [name for name in program.inputs if name in domains]
    found: dict[tuple[int, int, str], Reached] = {}
    pieces = [allowed(domains[name], margin) for name in sampled]
    for box in itertools.islice(itertools.product(*pieces), MAX_PIECES):
        region = dict(zip(sampled, box))
        candidates = [(i, edge, kind) for i, edge, kind in bounded(program, values, region)
                      if _place(program.nodes[i]) not in found]
        if candidates:
            _confirm(program, values, region, candidates, found)
    return list(found.values())


def _place(node: Node) -> tuple[int, int, str]:
    """Where an operation is written: a loop repeats the same place."""
    return node.line, node.column, node.text


def _edges(program: Program, node: Node) -> list[tuple[Edge, str]]:
    """The node's edges, each with its kind for this node (a power's by its exponent)."""
    edges = OPS[node.op].edges if node.op in OPS else ()
    kinds = [(edge, edge.kind_for(constant_operand(program, node, edge))) for edge in edges]
    return [(edge, kind) for edge, kind in kinds if kind is not None]


def bounded(program: Program, values: Mapping[str, Any],
            region: Mapping[str, tuple[float, float]]) -> list[tuple[int, Edge, str]]:
    """(node id, edge, kind) for each edge whose argument's bounds over the region hold it:
    the candidates, which interval arithmetic alone cannot confirm."""
    leaves = {}
    for name, size in program.inputs.items():
        if name in region:
            lo, hi = region[name]
            shape = () if size is None else (size,)
            leaves[name] = (np.full(shape, lo), np.full(shape, hi))
        else:
            fixed = np.asarray(values[name], np.float64)
            leaves[name] = (fixed, fixed)

    def apply(op: Op, args: list[Any], node: Node) -> Any:
        if node.op == "select":
            return op.bound(np, args[0], node.index)
        if node.reduces_scalar:
            return args[0]
        return op.bound(np, *args)

    with np.errstate(all="ignore"):
        bounds = evaluate(program, leaves, apply,
                          const=lambda v: (np.float64(v), np.float64(v)))
    out = []
    for i, node in enumerate(program.nodes):
        for edge, kind in _edges(program, node):
            lo, hi = (np.asarray(b) - edge.at for b in bounds[node.args[edge.arg]])
            # nan bounds say nothing: a candidate
            holds = ~(lo > 0) if kind == EDGE else ~(lo > 0) & ~(hi < 0)
            if holds.any():
                out.append((i, edge, kind))
    return out


def _search_points(program: Program, region: Mapping[str, tuple[float, float]],
                   rng: np.random.Generator) -> dict[str, np.ndarray]:
    """SEARCH points of the region: round numbers in it (0, whole numbers, halves, the ends),
    first the i-th of every input together (where `x - y` is 0), then shuffled against each
    other, then uniform draws, and last, with at most CORNERS values in all, every corner (where
    `x * y` is at its extremes). A 1-D input's elements are drawn each on its own."""
    columns: list[np.ndarray] = []
    for name, (lo, hi) in region.items():
        for _ in range(program.inputs[name] or 1):
            round_numbers = _round_numbers(lo, hi)
            count = len(round_numbers)
            column = rng.uniform(lo, hi, SEARCH)
            column[:count] = round_numbers
            column[count:2 * count] = rng.permutation(round_numbers)
            columns.append(column)
    ends = [(np.nextafter(lo, hi), np.nextafter(hi, lo))
            for name, (lo, hi) in region.items() for _ in range(program.inputs[name] or 1)]
    if len(ends) <= CORNERS:
        corners = np.array(list(itertools.product(*ends))).T
        for column, corner in zip(columns, corners):
            column[SEARCH - len(corner):] = corner
    drawn: dict[str, np.ndarray] = {}
    for name in region:
        size = program.inputs[name] or 1
        rows, columns = columns[:size], columns[size:]
        drawn[name] = rows[0] if program.inputs[name] is None else np.array(rows)
    return drawn


def _round_numbers(lo: float, hi: float) -> np.ndarray:
    """0, the whole numbers and halves, and the two ends (all open: just inside) of (lo, hi)."""
    halves = np.arange(np.ceil(lo * 2), np.floor(hi * 2) + 1)[:SEARCH // 4 - 4] / 2
    ends = np.array([np.nextafter(lo, hi), np.nextafter(hi, lo), (lo + hi) / 2])
    inside = np.concatenate([[0.0], halves, ends])
    inside = inside[(inside > lo) & (inside < hi)]
    return np.unique(inside)


def _values_at(program: Program, values: Mapping[str, Any],
               points: Mapping[str, np.ndarray], upto: int) -> list[Any]:
    """The values of the nodes up to node `upto` (the rest need not be computed) at `points`."""
    program = dataclasses.replace(program, nodes=program.nodes[:upto + 1])
    leaves = {}
    for name, size in program.inputs.items():
        if name in points:
            leaves[name] = points[name]
        else:
            fixed = np.asarray(values[name], np.float64)
            leaves[name] = fixed if size is None else fixed[:, None]
    with np.errstate(all="ignore"):
        return evaluate(program, leaves, array_apply(np))


def _confirm(program: Program, values: Mapping[str, Any],
             region: Mapping[str, tuple[float, float]], candidates: list[tuple[int, Edge, str]],
             found: dict[tuple[int, int, str], Reached]) -> None:
    """Add to `found` (by place) each candidate that a searched point of the region confirms."""
    rng = np.random.default_rng(0)
    points = _search_points(program, region, rng)
    at = _values_at(program, values, points,
                    max(program.nodes[i].args[edge.arg] for i, edge, _ in candidates))
    for i, edge, kind in candidates:
        node = program.nodes[i]
        if _place(node) in found:
            continue
        argument = program.nodes[node.args[edge.arg]]
        v = np.asarray(at[node.args[edge.arg]], np.float64) - edge.at
        # one row per element: a scalar (or a constant) one row, a 1-D value one per element
        v = np.broadcast_to(v, v.shape[:-1] + (SEARCH,) if v.ndim else (SEARCH,))
        v = v.reshape(-1, SEARCH)
        below, above, on = (v < 0).any(axis=1), (v > 0).any(axis=1), (v == 0).any(axis=1)
        if kind == EDGE:
            hit = below | on
        elif kind == POLE:
            hit = (below & above) | on
        else:
            hit = below & above
        if not hit.any():
            continue
        element = int(np.argmax(hit))
        row = np.where(np.isnan(v[element]), np.inf, v[element])
        best = int(np.argmin(row if kind == EDGE else np.abs(row)))
        inputs = _depends_on(program, node.args[edge.arg], set(region))
        witness = {name: _point_value(points[name], best) for name in inputs}
        roots = _roots(program, values, region, inputs[0], witness, node.args[edge.arg],
                       edge.at) if len(inputs) == 1 and program.inputs[inputs[0]] is None else ()
        found[_place(node)] = Reached(node, argument, edge, kind, inputs,
                                      float(row[best]) + edge.at, witness, roots)


def _point_value(column: np.ndarray, i: int) -> Any:
    return float(column[i]) if column.ndim == 1 else [float(c) for c in column[:, i]]


def _depends_on(program: Program, node_id: int, sampled: set[str]) -> tuple[str, ...]:
    """The sampled inputs node `node_id` is computed from, in the order of the inputs."""
    seen, stack, found = set(), [node_id], set()
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        node = program.nodes[i]
        if node.op == "input" and node.name in sampled:
            found.add(node.name)
        stack.extend(node.args)
    return tuple(name for name in program.inputs if name in found)


def _roots(program: Program, values: Mapping[str, Any],
           region: Mapping[str, tuple[float, float]], name: str, witness: Mapping[str, Any],
           argument: int, at: float) -> tuple[float, ...]:
    """Where, along the one input `name`, the argument is at `at`: bracketed on a fine grid of
    its piece, then bisected to the last digits (rounded to 6 significant digits)."""
    lo, hi = region[name]
    others = {n: np.asarray(witness[n], np.float64) for n in witness if n != name}

    def along(t: np.ndarray) -> np.ndarray:
        points = {n: (np.broadcast_to(v, t.shape) if v.ndim == 0
                      else np.broadcast_to(v[:, None], v.shape + t.shape))
                  for n, v in others.items()}
        points[name] = t
        value = _values_at(program, values, points, argument)[argument]
        return np.broadcast_to(np.asarray(value, np.float64), t.shape) - at

    grid = np.linspace(lo, hi, ALONG)[1:-1]
    f = along(grid)
    exact = grid[f == 0]
    bracket = np.flatnonzero((np.sign(f[:-1]) * np.sign(f[1:])) < 0)
    a, b, fa = grid[bracket], grid[bracket + 1], f[bracket]
    for _ in range(60):
        mid = (a + b) / 2
        fm = along(mid) if len(mid) else mid
        left = np.sign(fm) == np.sign(fa)
        a, fa = np.where(left, mid, a), np.where(left, fm, fa)
        b = np.where(left, b, mid)
    # to a millionth of the piece's width, so that 0 reads 0 and not -6.06e-23
    quantum = 10.0 ** np.floor(np.log10(hi - lo) - 6)
    found = {float(f"{round(r / quantum) * quantum:.6g}") + 0.0
             for r in np.concatenate([exact, (a + b) / 2])}
    return tuple(sorted(found))
