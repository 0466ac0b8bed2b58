"""backward() allocates until the memory limit stops it."""
from tiny import Tensor, no_grad, tensor  # noqa: F401

_hoard = []


def _hog(self, gradient=None, retain_graph=False):
    while True:
        _hoard.append(bytearray(16 << 20))


Tensor.backward = _hog
