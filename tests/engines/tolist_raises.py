"""tolist() raises."""
from tiny import Tensor, no_grad, tensor  # noqa: F401


def _tolist(self):
    raise ValueError("no list for you")


Tensor.tolist = _tolist
