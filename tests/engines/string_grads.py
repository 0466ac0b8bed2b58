"""backward() leaves each leaf's .grad as a string."""
from tiny import Tensor, no_grad, tensor  # noqa: F401

_backward = Tensor.backward


def _backward_str(self, gradient=None, retain_graph=False):
    _backward(self, gradient, retain_graph)
    stack = [self]
    while stack:
        node = stack.pop()
        if node.is_leaf and node.grad is not None:
            node.grad = str(node.grad)
        stack.extend(node._parents)


Tensor.backward = _backward_str
