"""backward() raises KeyboardInterrupt."""
from tiny import Tensor, no_grad, tensor  # noqa: F401


def _interrupt(self, gradient=None, retain_graph=False):
    raise KeyboardInterrupt


Tensor.backward = _interrupt
