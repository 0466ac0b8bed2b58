"""`requires_grad` and `is_leaf` are numpy bools, as in an engine that keeps its flags in numpy
arrays: each is the answer torch gives, so this engine loses nothing."""
import numpy as np
from odd import reference

_engine = reference()
for _name in ("requires_grad", "is_leaf"):
    _flag = getattr(_engine.Tensor, _name)
    setattr(_engine.Tensor, _name,
            property(lambda self, flag=_flag: np.bool_(flag.fget(self)), _flag.fset))
tensor, no_grad = _engine.tensor, _engine.no_grad
