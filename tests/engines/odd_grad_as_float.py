"""`.grad` is a plain float (a list of floats for a 1-D tensor), not a tensor: the protocol
allows it, so this engine loses nothing."""
from odd import read_grad, reference

_engine = reference()
read_grad(_engine, lambda t, grad: None if grad is None else grad.tolist())
tensor, no_grad = _engine.tensor, _engine.no_grad
