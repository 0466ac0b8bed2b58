"""backward() prints 100 MB to stdout and to stderr."""
import os
import sys

from tiny import Tensor, no_grad, tensor  # noqa: F401

_backward = Tensor.backward
_CHUNK = "flood " * 170_000  # about 1 MB


def _flood(self, gradient=None, retain_graph=False):
    for _ in range(100):
        sys.stdout.write(_CHUNK)
        os.write(2, _CHUNK.encode())
    return _backward(self, gradient, retain_graph)


Tensor.backward = _flood
