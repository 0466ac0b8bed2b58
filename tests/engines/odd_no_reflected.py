"""No reflected operators: `x + 1` works, `1 + x` and `2 ** x` do not (Python raises TypeError)."""
from odd import reference

_engine = reference()
for _name in ("__radd__", "__rsub__", "__rmul__", "__rtruediv__", "__rpow__"):
    delattr(_engine.Tensor, _name)
tensor, no_grad = _engine.tensor, _engine.no_grad
