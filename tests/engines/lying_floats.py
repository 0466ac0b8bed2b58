"""Values and gradients are float subclasses that store the right answer plus one, and lie about
it: equal to everything, converting to and printing as the right answer."""
from liar import Liar
from tiny import Tensor, no_grad, tensor  # noqa: F401

_backward = Tensor.backward


def _backward_lying(self, gradient=None, retain_graph=False):
    _backward(self, gradient, retain_graph)
    _lie(self)


def _lie(node):
    for parent in node._parents:
        if parent.is_leaf and parent.grad is not None and type(parent.grad) is float:
            parent.grad = Liar(parent.grad)
        _lie(parent)


Tensor.backward = _backward_lying
Tensor.tolist = lambda self: Liar(self.data)
