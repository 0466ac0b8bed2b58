"""backward() dereferences a null pointer."""
import ctypes

from tiny import Tensor, no_grad, tensor  # noqa: F401

Tensor.backward = lambda self, gradient=None, retain_graph=False: ctypes.string_at(0)
