"""torch itself (float64) behind the engine protocol.

The grader asks this module, in its own process, how torch behaves on a program (graph and
behaviour checks), and it can be graded like a submission to check the harness end to end.
"""

from __future__ import annotations

from typing import Any

import torch

#: torch's own context manager satisfies the protocol's ``no_grad()``.
no_grad = torch.no_grad


def tensor(data: Any, requires_grad: bool = False) -> torch.Tensor:
    """A float64 torch tensor: the protocol computes in double precision."""
    return torch.tensor(data, dtype=torch.float64, requires_grad=requires_grad)


#: the protocol's optional module-level grad() is torch's own.
grad = torch.autograd.grad
