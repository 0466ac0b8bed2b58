"""Gradients stored in single precision: every operation's backward is exact, but `.grad` holds
the float32 nearest to it."""
from odd import float32, read_grad, reference

_engine = reference()


def _rounded(t, grad):
    if grad is None:
        return None
    values = grad.tolist()
    return _engine.tensor([float32(v) for v in values] if isinstance(values, list)
                          else float32(values))


read_grad(_engine, _rounded)
tensor, no_grad = _engine.tensor, _engine.no_grad
