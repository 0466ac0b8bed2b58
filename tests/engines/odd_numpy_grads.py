"""A 1-D `.grad`'s `tolist()` gives a numpy array, not a list: the protocol asks for a list of
floats, so the checks that read a vector's gradient lose, each saying what came back."""
import numpy as np
from odd import read_grad, reference

_engine = reference()


class _Grad:
    """A 1-D gradient whose tolist() forgot to convert."""

    def __init__(self, grad):
        self._grad = grad

    def tolist(self):
        return np.array(self._grad.tolist())


read_grad(_engine, lambda t, grad: _Grad(grad) if grad is not None and
          isinstance(grad.tolist(), list) else grad)
tensor, no_grad = _engine.tensor, _engine.no_grad
