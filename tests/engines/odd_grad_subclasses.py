"""`.grad` is the engine's tensor as a subclass of a Python type, as some engines make their
tensors: a 1-D one a `list` of its elements (each a 0-d tensor), a 0-d one a `float` of its
value; each keeps the tensor's attributes, `tolist()` and flags among them."""
from odd import read_grad, reference

_engine = reference()


class ListTensor(list):
    def __init__(self, tensor):
        with _engine.no_grad():
            super().__init__(tensor[i] for i in range(len(tensor.tolist())))
        self._tensor = tensor

    def __getattr__(self, name):
        return getattr(self._tensor, name)


class FloatTensor(float):
    def __new__(cls, tensor):
        made = super().__new__(cls, tensor.tolist())
        made._tensor = tensor
        return made

    def __getattr__(self, name):
        return getattr(self._tensor, name)


read_grad(_engine, lambda tensor, grad: grad if grad is None else
          ListTensor(grad) if isinstance(grad.tolist(), list) else FloatTensor(grad))
tensor, no_grad = _engine.tensor, _engine.no_grad
