"""backward() ends the process with os._exit(3), the way a plain pytest grader is fooled."""
import os

from tiny import Tensor, no_grad, tensor  # noqa: F401

Tensor.backward = lambda self, gradient=None, retain_graph=False: os._exit(3)
