"""exp() starts 300 threads that sleep."""
import threading
import time

from tiny import Tensor, no_grad, tensor  # noqa: F401

_exp = Tensor.exp


def _flood(self):
    for _ in range(300):
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    return _exp(self)


Tensor.exp = _flood
