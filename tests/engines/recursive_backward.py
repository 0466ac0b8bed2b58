"""A classic mistake: backward recurses into the parents each time a gradient arrives, and passes
on the node's whole gradient so far rather than what just arrived (so a node used twice sends its
first share twice)."""
from tiny import Tensor, no_grad, tensor  # noqa: F401


def _push(node, g):
    node._so_far = getattr(node, "_so_far", 0.0) + g
    if node.is_leaf or node._retain:
        node.grad = node._so_far
    for parent, slope in zip(node._parents, node._slopes):
        if parent.requires_grad:
            _push(parent, node._so_far * slope)


def _backward(self, gradient=None, retain_graph=False):
    _push(self, 1.0 if gradient is None else float(getattr(gradient, "data", gradient)))


Tensor.backward = _backward
