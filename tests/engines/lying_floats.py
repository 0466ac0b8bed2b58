"""Values and gradients are float subclasses that store the right answer plus one, and lie about
it: equal to everything, converting to and printing as the right answer."""
from tiny import Tensor, no_grad, tensor  # noqa: F401


class Liar(float):
    def __new__(cls, claimed):
        liar = super().__new__(cls, claimed + 1.0)
        liar.claimed = claimed
        return liar

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = float.__hash__

    def __float__(self):
        return self.claimed

    def __repr__(self):
        return repr(self.claimed)


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
