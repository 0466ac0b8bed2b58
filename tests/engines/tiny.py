"""A tiny correct scalar engine (no 1-D tensors), the base of the misbehaving engines.

Small and fast to import, so that tests can start many workers. Each result keeps its parents and
the local slopes (d result / d parent); backward walks a topological order without recursion.
"""

import math


class _Fn:
    def __init__(self, name):
        self._name = name

    def name(self):
        return self._name


_grad_enabled = [True]


class no_grad:
    def __enter__(self):
        self._saved = _grad_enabled[0]
        _grad_enabled[0] = False

    def __exit__(self, *exc):
        _grad_enabled[0] = self._saved


class Tensor:
    def __init__(self, data, requires_grad=False):
        if isinstance(data, (list, tuple)):
            raise TypeError("tiny tensors are scalars")
        self.data = float(data)
        self.requires_grad = bool(requires_grad)
        self.grad = None
        self.grad_fn = None
        self._parents = ()
        self._slopes = ()
        self._retain = False

    @property
    def is_leaf(self):
        return self.grad_fn is None

    def _result(self, data, name, parents, slopes):
        out = Tensor(data)
        if _grad_enabled[0] and any(p.requires_grad for p in parents):
            out.requires_grad = True
            out.grad_fn = _Fn(name)
            out._parents, out._slopes = parents, slopes
        return out

    def __add__(self, other):
        other = _wrap(other)
        return self._result(self.data + other.data, "AddBackward0", (self, other), (1.0, 1.0))

    __radd__ = __add__

    def __sub__(self, other):
        other = _wrap(other)
        return self._result(self.data - other.data, "SubBackward0", (self, other), (1.0, -1.0))

    def __rsub__(self, other):
        return self._result(float(other) - self.data, "RsubBackward1", (self,), (-1.0,))

    def __mul__(self, other):
        other = _wrap(other)
        return self._result(self.data * other.data, "MulBackward0", (self, other),
                            (other.data, self.data))

    __rmul__ = __mul__

    def __truediv__(self, other):
        other = _wrap(other)
        return self._result(self.data / other.data, "DivBackward0", (self, other),
                            (1.0 / other.data, -self.data / other.data ** 2))

    def __rtruediv__(self, other):
        return self._result(float(other) / self.data, "MulBackward0", (self,),
                            (-float(other) / self.data ** 2,))

    def __pow__(self, other):
        if isinstance(other, Tensor):
            value = self.data ** other.data
            return self._result(value, "PowBackward1", (self, other),
                                (other.data * self.data ** (other.data - 1),
                                 value * math.log(self.data)))
        return self._result(self.data ** other, "PowBackward0", (self,),
                            (other * self.data ** (other - 1),))

    def __rpow__(self, other):
        value = float(other) ** self.data
        return self._result(value, "PowBackward2", (self,), (value * math.log(other),))

    def __neg__(self):
        return self._result(-self.data, "NegBackward0", (self,), (-1.0,))

    def _unary(self, name, value, slope):
        return self._result(value, name, (self,), (slope,))

    def exp(self):
        e = math.exp(self.data)
        return self._unary("ExpBackward0", e, e)

    def log(self):
        return self._unary("LogBackward0", math.log(self.data), 1.0 / self.data)

    def tanh(self):
        t = math.tanh(self.data)
        return self._unary("TanhBackward0", t, 1.0 - t * t)

    def sigmoid(self):
        s = 1.0 / (1.0 + math.exp(-self.data))
        return self._unary("SigmoidBackward0", s, s * (1.0 - s))

    def relu(self):
        return self._unary("ReluBackward0", max(self.data, 0.0), float(self.data > 0))

    def sin(self):
        return self._unary("SinBackward0", math.sin(self.data), math.cos(self.data))

    def cos(self):
        return self._unary("CosBackward0", math.cos(self.data), -math.sin(self.data))

    def sqrt(self):
        r = math.sqrt(self.data)
        return self._unary("SqrtBackward0", r, 0.5 / r if r else math.inf)

    def abs(self):
        return self._unary("AbsBackward0", abs(self.data), math.copysign(1.0, self.data)
                           if self.data else 0.0)

    def sum(self):
        return self._unary("SumBackward0", self.data, 1.0)

    def mean(self):
        return self._unary("MeanBackward0", self.data, 1.0)

    def tolist(self):
        return self.data

    def retain_grad(self):
        self._retain = True

    def detach(self):
        return Tensor(self.data)

    def requires_grad_(self, flag=True):
        if not self.is_leaf:
            raise RuntimeError("you can only change requires_grad flags of leaf variables.")
        self.requires_grad = flag
        return self

    def backward(self, gradient=None, retain_graph=False):
        if not self.requires_grad:
            raise RuntimeError("element 0 of tensors does not require grad and does not have a "
                               "grad_fn")
        order, seen, stack = [], set(), [(self, False)]
        while stack:
            node, done = stack.pop()
            if done:
                order.append(node)
            elif id(node) not in seen:
                seen.add(id(node))
                stack.append((node, True))
                stack.extend((p, False) for p in node._parents if p.requires_grad)
        grads = {id(self): 1.0 if gradient is None else _wrap(gradient).data}
        for node in reversed(order):
            g = grads.pop(id(node), 0.0)
            if node.is_leaf or node._retain:
                node.grad = g if node.grad is None else node.grad + g
            for parent, slope in zip(node._parents, node._slopes):
                if parent.requires_grad:
                    grads[id(parent)] = grads.get(id(parent), 0.0) + g * slope


def _wrap(x):
    return x if isinstance(x, Tensor) else Tensor(x)


def tensor(data, requires_grad=False):
    return Tensor(data, requires_grad)
