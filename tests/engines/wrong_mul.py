"""A classic bug: x * y sends y the slope y instead of x."""
from tiny import Tensor, _wrap, no_grad, tensor  # noqa: F401


def _mul(self, other):
    other = _wrap(other)
    return self._result(self.data * other.data, "MulBackward0", (self, other),
                        (other.data, other.data))


Tensor.__mul__ = Tensor.__rmul__ = _mul
