"""No 1-D tensors: tensor() takes a number only, as a micrograd Value does."""
from odd import reference

_engine = reference()


def tensor(data, requires_grad=False):
    return _engine.tensor(float(data), requires_grad)


no_grad = _engine.no_grad
