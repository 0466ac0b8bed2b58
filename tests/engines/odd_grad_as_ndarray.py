"""`.grad` is a numpy array, not a tensor: its values read as torch's, but arithmetic with it is
numpy's, so a step that updates a weight with it (`w - w.grad * 0.1`) makes a numpy array, which
is not one of the engine's tensors."""
import numpy as np
from odd import read_grad, reference

_engine = reference()
read_grad(_engine, lambda t, grad: None if grad is None else np.array(grad.tolist()))
tensor, no_grad = _engine.tensor, _engine.no_grad
