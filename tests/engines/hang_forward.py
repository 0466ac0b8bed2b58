"""exp() spins forever."""
from tiny import Tensor, no_grad, tensor  # noqa: F401


def _spin(self):
    while True:
        pass


Tensor.exp = _spin
