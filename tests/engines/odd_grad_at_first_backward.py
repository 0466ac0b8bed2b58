"""`.grad` is made by the first backward() that reaches a tensor: before that (and on a tensor
backward never reaches) reading it raises AttributeError, where torch gives None."""
from odd import read_grad, reference

_engine = reference()


def _made(t, grad):
    if grad is None:
        raise AttributeError("'Tensor' object has no attribute 'grad'")
    return grad


read_grad(_engine, _made)
tensor, no_grad = _engine.tensor, _engine.no_grad
