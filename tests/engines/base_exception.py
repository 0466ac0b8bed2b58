"""Multiplication raises a BaseException that is not an Exception."""
from tiny import Tensor, no_grad, tensor  # noqa: F401


class Escape(BaseException):
    pass


def _mul(self, other):
    raise Escape("out of here")


Tensor.__mul__ = Tensor.__rmul__ = _mul
