"""grad_fn names without torch's trailing 0 (`AddBackward`, `MulBackward`)."""
from odd import reference

_engine = reference()
_engine.Function.name = lambda self: type(self).__name__.rstrip("0123456789")
tensor, no_grad = _engine.tensor, _engine.no_grad
