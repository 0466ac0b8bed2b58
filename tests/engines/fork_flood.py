"""backward() forks 100 processes that sleep; some leave the session with setsid()."""
import os
import time

from tiny import Tensor, no_grad, tensor  # noqa: F401

_backward = Tensor.backward


def _flood(self, gradient=None, retain_graph=False):
    for i in range(100):
        if os.fork() == 0:
            if i % 2:
                os.setsid()
            time.sleep(60)
            os._exit(0)
    return _backward(self, gradient, retain_graph)


Tensor.backward = _flood
