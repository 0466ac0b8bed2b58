"""backward() calls sys.exit(3)."""
import sys

from tiny import Tensor, no_grad, tensor  # noqa: F401

Tensor.backward = lambda self, gradient=None, retain_graph=False: sys.exit(3)
