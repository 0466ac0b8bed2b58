"""The chain-rule walk, as torch does it: what each node holds and passes back along each edge.

`walk(program, point, requires_grad)` runs a program on torch (float64) in this process and
gives, for every node, its value, its gradient (d output / d node, `retain_grad` on everything)
and torch's `grad_fn` name, and for every edge from a node to one of its operands the local slope
(d node / d operand) and what backward passes along it (the node's gradient times that slope).
These are the right answers that `explain` prints and draws and that localisation compares a
submission with. Values and gradients come from the probe's `trace` request, the very code a
submission's trace comes from; the slopes come from torch.autograd on each operation alone, with
a fresh leaf per operand slot, so `x * x` has two edges into x, as in torch's own graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from gradcheck.engine import handler
from gradcheck.program.language import Program, engine_apply
from gradcheck.program.ops import OPS

Numbers = Any  # a float, a list of floats, or None


class WalkError(Exception):
    """torch cannot walk this program here (torch missing, a vector output, torch raising)."""


@dataclass(frozen=True)
class Edge:
    """One operand slot of an operation, seen from the backward pass."""

    slot: int  # 0 for the first operand, 1 for the second
    arg: int  # the operand's node id
    slope: Numbers  # d node / d operand: a number, or one per element (row, diagonal or column)
    passed: Numbers  # what backward sends to the operand along this edge


class Walk:
    """torch's forward values, gradients, grad_fn names and per-edge slopes of one program."""

    def __init__(self, program: Program, point: Mapping[str, Any], trace: Mapping[str, Any]
                 ) -> None:
        self.program = program
        self.point = dict(point)
        self.values: dict[int, Numbers] = {}
        self.grads: dict[int, Numbers] = {}
        for record in trace["nodes"]:
            self.values[record["id"]] = record["value"]
            grad = record["grad"]  # torch refuses retain_grad on what needs no grad: no gradient
            self.grads[record["id"]] = None if isinstance(grad, dict) else grad
        #: the non-constant nodes, in evaluation order.
        self.ids = [record["id"] for record in trace["nodes"]]
        self._edges: dict[int, tuple[Edge, ...]] = {}
        self._grad_fns: dict[int, str | None] = {}
        #: found once per walk, which an answer key keeps for every grading
        self._needed: tuple[int, ...] | None = None
        self._backward_order: tuple[int, ...] | None = None

    @property
    def output(self) -> int:
        return self.program.output

    def node(self, i: int) -> Any:
        return self.program.nodes[i]

    def backward_order(self) -> tuple[int, ...]:
        """The nodes backward reaches, output first (the reverse of evaluation order)."""
        if self._backward_order is None:
            self._backward_order = tuple(i for i in reversed(self.ids) if self.grads[i] is not None)
        return self._backward_order

    def needed(self) -> tuple[int, ...]:
        """The non-constant nodes the output depends on, in evaluation order."""
        if self._needed is None:
            keep = {self.output}
            for i in reversed(range(self.output + 1)):
                if i in keep:
                    keep.update(self.node(i).args)
            self._needed = tuple(i for i in self.ids if i in keep)
        return self._needed

    def label(self, i: int) -> str:
        """How feedback names a node: its variable, or its expression in backquotes."""
        node = self.node(i)
        return node.name or f"`{node.text}`"

    def grad_fn(self, i: int) -> str | None:
        """torch's grad_fn name for an operation node (None for inputs and untracked nodes)."""
        if i not in self._grad_fns:
            self._compute(i)
        return self._grad_fns[i]

    def edges(self, i: int) -> tuple[Edge, ...]:
        """The edges backward follows from node i to its operands (none for inputs, constants,
        operands that need no gradient, or a node backward does not reach)."""
        if i not in self._edges:
            self._compute(i)
        return self._edges[i]

    def record(self) -> list[list[Any]]:
        """Plain JSON data from which :meth:`stored` rebuilds this walk without torch: per node
        of the trace, [id, value, gradient, grad_fn, edges as [slot, arg, slope, passed]]."""
        return [[i, self.values[i], self.grads[i], self.grad_fn(i),
                 [[e.slot, e.arg, e.slope, e.passed] for e in self.edges(i)]] for i in self.ids]

    @classmethod
    def stored(cls, program: Program, point: Mapping[str, Any], record: Sequence[Sequence[Any]]
               ) -> Walk:
        """The walk that :meth:`record` wrote (an answer key holds them)."""
        walk = cls(program, point, {"nodes": [{"id": i, "value": value, "grad": grad}
                                              for i, value, grad, *_ in record]})
        for i, _, _, grad_fn, edges in record:
            walk._grad_fns[i] = grad_fn
            walk._edges[i] = tuple(Edge(*edge) for edge in edges)
        return walk

    def consumers(self, i: int) -> list[tuple[int, Edge]]:
        """(node, edge) for every edge into node i, in backward order."""
        return [(c, e) for c in self.backward_order() if i in self.node(c).args
                for e in self.edges(c) if e.arg == i]

    def _compute(self, i: int) -> None:
        node = self.node(i)
        self._edges[i], self._grad_fns[i] = (), None
        if node.op in ("input", "const"):
            return
        import torch

        def operands(expand: int | None = None, like: Any = None) -> tuple[list[Any], dict]:
            items, leaves = [], {}
            for slot, a in enumerate(node.args):
                arg = self.node(a)
                if arg.op == "const":
                    items.append(arg.value)
                    continue
                tracked = self.grads.get(a) is not None
                if slot == expand:
                    leaf = torch.full(like.shape, float(self.values[a]), dtype=torch.float64,
                                      requires_grad=True)
                else:
                    leaf = torch.tensor(self.values[a], dtype=torch.float64, requires_grad=tracked)
                items.append(leaf)
                if tracked:
                    leaves[slot] = leaf
            return items, leaves

        items, leaves = operands()
        out = engine_apply(OPS[node.op], items, node)
        self._grad_fns[i] = out.grad_fn.name() if out.grad_fn is not None else None
        grad = self.grads.get(i)
        if grad is None or not leaves:
            return
        incoming = torch.tensor(grad, dtype=torch.float64)
        edges = []
        for slot, leaf in leaves.items():
            passed = torch.autograd.grad(out, leaf, incoming, retain_graph=True)[0]
            if out.dim() == 0 or leaf.dim() == 1:  # a row (reductions, select) or a diagonal
                slope = torch.autograd.grad(out, leaf, torch.ones_like(out), retain_graph=True)[0]
            else:  # a scalar operand broadcast over a vector: the Jacobian's column
                wide_items, wide = operands(expand=slot, like=out)
                wide_out = engine_apply(OPS[node.op], wide_items, node)
                slope = torch.autograd.grad(wide_out, wide[slot], torch.ones_like(wide_out))[0]
            edges.append(Edge(slot, node.args[slot], slope.tolist(), passed.tolist()))
        self._edges[i] = tuple(edges)


def trace_request(program: Program, point: Mapping[str, Any], requires_grad: Sequence[str]
                  ) -> dict[str, Any]:
    """The probe's `trace` request: values and gradients of every node, retain_grad on all."""
    return {"kind": "trace", "program": program.spec(), "point": dict(point),
            "requires_grad": list(requires_grad)}


def walk(program: Program, point: Mapping[str, Any], requires_grad: Sequence[str]) -> Walk:
    """torch's chain-rule walk of `program` at `point`; raises WalkError if torch cannot."""
    if program.nodes[program.output].size is not None:
        raise WalkError(f"the output {program.output_name} is a vector; the walk starts from a "
                        "scalar output (backward() with no gradient)")
    try:
        from gradcheck.engine import torch_engine
    except ImportError:
        raise WalkError("torch is not installed (pip install -c constraints.txt torch)") from None
    trace = handler.handle(torch_engine, trace_request(program, point, requires_grad))
    if trace["error"]:
        error = trace["error"]
        raise WalkError(f"torch raised {error['type']} {handler.PHASES.get(error['phase'], '')}: "
                        f"{error['message']}")
    return Walk(program, point, trace)
