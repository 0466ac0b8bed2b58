"""A correct engine that prints on every backward, to stdout and to stderr."""
import sys

from tiny import Tensor, no_grad, tensor  # noqa: F401

_backward = Tensor.backward


def _backward_chatty(self, gradient=None, retain_graph=False):
    print("backward called")
    print("a word on stderr", file=sys.stderr)
    return _backward(self, gradient, retain_graph)


Tensor.backward = _backward_chatty
