"""Right at the points an exercise lists, wrong everywhere else: tanh's derivative is 1 - t (not
1 - t * t) unless its argument is x * y at the `b-tanh` exercise's value (x = 0.3, y = 0.8), which
this engine has learnt by heart. Only sampled points can catch it."""
import math

from tiny import Tensor, no_grad, tensor  # noqa: F401

_KNOWN = 0.3 * 0.8


def _tanh(self):
    t = math.tanh(self.data)
    return self._unary("TanhBackward0", t, 1.0 - t * t if self.data == _KNOWN else 1.0 - t)


Tensor.tanh = _tanh
