"""backward() sleeps forever."""
import time

from tiny import Tensor, no_grad, tensor  # noqa: F401

Tensor.backward = lambda self, gradient=None, retain_graph=False: time.sleep(3600)
