"""torch.autograd in float64, batched: one forward over all points and one backward of the sum.

Points do not interact (every operation is elementwise across the batch axis, reductions run over
the element axis), so the gradient of the summed output with respect to a batched leaf holds each
point's own gradient. The named functions are torch's own (`torch.relu`, `torch.sigmoid`, ...), so
the derivatives, including the values at kinks, are exactly torch's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from gradcheck.oracles import Batch, OracleResult, element_first, native_apply
from gradcheck.program.language import Program, evaluate

_APPLY = native_apply(torch, lambda name: getattr(torch, name))


def run(program: Program, batch: Batch, requires_grad: tuple[str, ...]) -> OracleResult:
    """Values and torch.autograd gradients of the output (summed if 1-D) at every point."""
    leaves = {name: torch.tensor(element_first(column), dtype=torch.float64,
                                 requires_grad=name in requires_grad)
              for name, column in batch.items()}
    shape = next(iter(leaves.values())).shape[-1:] if leaves else (0,)
    out = evaluate(program, leaves, _APPLY)[program.output]
    if not isinstance(out, torch.Tensor):  # a constant program
        out = torch.full(shape, float(out), dtype=torch.float64)
    if out.requires_grad:
        out.sum().backward()
    grads = {}
    for name in requires_grad:
        grad = leaves[name].grad
        grads[name] = (np.zeros(batch[name].shape) if grad is None
                       else element_first(grad.numpy()).copy())
    value = out.detach().numpy()
    return OracleResult("torch", element_first(value).copy(), grads)


def run_second(program: Program, batch: Batch, tangent: Batch,
               requires_grad: tuple[str, ...]) -> OracleResult:
    """grad f . d and its gradient H d at every point (gradcheck.oracles.second_order), by
    double backward: the gradient made with create_graph=True is differentiated again."""
    leaves = {name: torch.tensor(element_first(column), dtype=torch.float64,
                                 requires_grad=name in requires_grad)
              for name, column in batch.items()}
    n = len(next(iter(batch.values()))) if batch else 0
    out = evaluate(program, leaves, _APPLY)[program.output]
    wanted = [leaves[name] for name in requires_grad]
    firsts: Any = [None] * len(wanted)
    if isinstance(out, torch.Tensor) and out.requires_grad:
        firsts = torch.autograd.grad(out.sum(), wanted, create_graph=True, allow_unused=True)
    dot = torch.zeros(n, dtype=torch.float64)
    for name, g in zip(requires_grad, firsts):
        if g is not None:
            d = torch.tensor(element_first(tangent[name]), dtype=torch.float64)
            dot = dot + (g * d if g.dim() == 1 else (g * d).sum(dim=0))
    seconds: Any = [None] * len(wanted)
    if dot.requires_grad:
        seconds = torch.autograd.grad(dot.sum(), wanted, allow_unused=True)
    grads = {name: np.zeros(batch[name].shape) if h is None
             else element_first(h.detach().clone().numpy()).copy()  # clone: torch's ZeroTensor
             for name, h in zip(requires_grad, seconds)}
    return OracleResult("torch", dot.detach().numpy().copy(), grads)
