"""The reference engine: a scalar autograd engine that behaves like torch (float64) on the protocol.

Every graph node holds one float. A 0-d tensor *is* its node (class :class:`Scalar`); a 1-D tensor
(:class:`Vector`) is a thin sequence of element nodes. Each operation is a small class named after
torch's ``grad_fn`` (``MulBackward0`` ...) with its forward and its backward side by side. A node
keeps what the backward needs (its parents, its value, a constant operand), no closure, so a
dropped graph is freed by reference counting alone, and ``__slots__`` keep a node near 130 bytes.

``backward`` imitates torch's engine, because students are graded against torch's observable
behaviour: it runs the reachable operations once each, newest first (torch's execution order),
accumulates into a leaf only once every path into it is done, runs ``retain_grad`` hooks, and
marks the operations that saved values as freed unless ``retain_graph=True``. A later backward
that reaches a freed operation raises torch's error after doing the work torch does before it.
No recursion anywhere, so graphs of any depth work.

This file is loaded by path as a submission and shipped as ``gradcheck._reference``: it imports
nothing from gradcheck.
"""

from __future__ import annotations

import itertools
import math
import numbers
import warnings
from typing import Any, Iterable, Sequence

__all__ = ["Tensor", "Scalar", "Vector", "tensor", "no_grad", "grad"]

_INF = math.inf
_NAN = math.nan

#: creation stamps of operations: torch runs the newest ready operation first.
_stamps = itertools.count(1)
#: False inside ``no_grad()``.
_grad_enabled = True

_BACKWARD_TWICE = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you call "
    ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
    "graph a second time or if you need to access saved tensors after calling backward.")
_NON_LEAF_GRAD = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
    "attribute won't be populated during autograd.backward(). If you indeed want the .grad field "
    "to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor. If you "
    "access the non-leaf Tensor by mistake, make sure you access the leaf Tensor instead. See "
    "github.com/pytorch/pytorch/pull/30531 for more information.")
_NON_LEAF_FLAG = (
    "you can only change requires_grad flags of leaf variables. If you want to use a computed "
    "variable in a subgraph that doesn't require differentiation use var_no_grad = var.detach().")


# --- float arithmetic with IEEE results where Python raises --------------------------------------

def _div(a: float, b: float) -> float:
    try:
        return a / b
    except ZeroDivisionError:
        if a != a or a == 0.0:
            return _NAN
        return math.copysign(_INF, a) * math.copysign(1.0, b)


def _odd_integer(x: float) -> bool:
    return math.isfinite(x) and x % 2.0 == 1.0


def _pow(a: float, b: float) -> float:
    try:
        return math.pow(a, b)
    except ValueError:  # zero to a negative power, or a negative base to a fractional power
        if a == 0.0:
            return math.copysign(_INF, a) if _odd_integer(b) else _INF
        return _NAN
    except OverflowError:
        return -_INF if a < 0.0 and _odd_integer(b) else _INF


def _sqrt(a: float) -> float:
    return math.sqrt(a) if a >= 0.0 else _NAN  # sqrt(-0.0) is -0.0


def _pow_number(a: float, e: float) -> float:
    """``a ** e`` for a number e, with the shortcuts torch takes (they differ at -0.0 and inf)."""
    if e == 0.0:
        return 1.0
    if e == 1.0:
        return a
    if e == 2.0:
        return a * a
    if e == 3.0:
        return a * a * a
    if e == 0.5:
        return _sqrt(a)
    if e == -0.5:
        return _div(1.0, _sqrt(a))
    if e == -1.0:
        return _div(1.0, a)
    if e == -2.0:
        return _div(1.0, a * a)
    return _pow(a, e)


def _exp(a: float) -> float:
    try:
        return math.exp(a)
    except OverflowError:
        return _INF


def _log(a: float) -> float:
    if a > 0.0:
        return math.log(a)
    return -_INF if a == 0.0 else _NAN


def _sin(a: float) -> float:
    return math.sin(a) if math.isfinite(a) else _NAN


def _cos(a: float) -> float:
    return math.cos(a) if math.isfinite(a) else _NAN


def _sign(a: float) -> float:
    return 1.0 if a > 0.0 else -1.0 if a < 0.0 else 0.0  # torch: sgn(0) = sgn(nan) = 0


def _val(operand: Any) -> float:
    """The value of a node's second operand: a node, or a float constant."""
    return operand if type(operand) is float else operand._value


def _const(value: float) -> Scalar:
    """A 0-d tensor without history: a gradient that does not depend on anything."""
    return Scalar(value, None, None, None, None)


# --- operations: torch's grad_fn name, forward on floats, backward as local slopes ---------------


class Function:
    """A kind of operation. ``t.grad_fn`` is an instance; ``name()`` is torch's name for it.

    ``forward(a, b)`` computes the value from floats; ``backward(node, g)`` returns the gradient
    sent to the node's first and second operands, as floats. ``graph(node, g)`` is the same rule
    computed with tensor operations on the node, its operands and a gradient tensor ``g``, so that
    the gradient it returns has a history of its own (``create_graph=True``). ``saves`` says whether torch saves values for
    the backward (then a second backward without ``retain_graph`` raises); ``many`` marks the
    reductions, whose first operand is a tuple of nodes.
    """

    __slots__ = ()
    saves = True
    many = False
    leaf = False

    def name(self) -> str:
        return type(self).__name__


class AccumulateGrad(Function):
    """Marks a leaf that requires grad (torch's edge into ``.grad``); never a ``grad_fn``."""

    __slots__ = ()
    saves = False
    leaf = True


class CopyBackwards(Function):
    """The history of a 1-D ``.grad`` with history, whose elements each have their own."""

    __slots__ = ()
    saves = False


class NoGradView(Function):
    """Marks ``v[i]`` made under ``no_grad()`` from a ``v`` that requires grad.

    torch makes it a view that reports ``requires_grad=True`` and ``is_leaf=True`` but has no
    edge into the graph: operations on it are recorded, yet no gradient reaches it or ``v``, and
    its own ``backward()`` raises.
    """

    __slots__ = ()
    saves = False
    leaf = True


class AddBackward0(Function):
    __slots__ = ()
    saves = False

    @staticmethod
    def forward(a: float, b: float) -> float:
        return a + b

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        return g, g

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        return g, g


class SubBackward0(Function):
    __slots__ = ()
    saves = False

    @staticmethod
    def forward(a: float, b: float) -> float:
        return a - b

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        return g, -g

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        return g, -g


class RsubBackward1(Function):
    """``2 - x``: torch computes it as ``rsub(x, 2)``, so x is the first operand."""

    __slots__ = ()
    saves = False

    @staticmethod
    def forward(a: float, b: float) -> float:
        return b - a

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        return -g, None

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        return -g, None


class MulBackward0(Function):
    __slots__ = ()

    @staticmethod
    def forward(a: float, b: float) -> float:
        return a * b

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        return g * _val(node._b), g * node._a._value

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        b = node._b
        return g * b, None if type(b) is float else g * node._a


class DivBackward0(Function):
    __slots__ = ()

    @staticmethod
    def forward(a: float, b: float) -> float:
        return _div(a, b)

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        a, b = node._a._value, _val(node._b)
        return _div(g, b), -g * _div(_div(a, b), b)

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        a, b = node._a, node._b
        return g / b, None if type(b) is float else -g * (a / b) / b


class ReciprocalBackward0(Function):
    """Half of ``2 / x``, which torch computes as ``x.reciprocal() * 2``."""

    __slots__ = ()

    @staticmethod
    def forward(a: float) -> float:
        return _div(1.0, a)

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        r = node._value
        return -g * (r * r), None

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        return -g * (node * node), None


class NegBackward0(Function):
    __slots__ = ()
    saves = False

    @staticmethod
    def forward(a: float) -> float:
        return -a

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        return -g, None

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        return -g, None


class PowBackward0(Function):
    """``x ** c`` with a number c (kept as the second operand)."""

    __slots__ = ()
    forward = staticmethod(_pow_number)

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        e = node._b
        return (0.0 if e == 0.0 else g * (e * _pow_number(node._a._value, e - 1.0))), None

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        e = node._b
        return (_const(0.0) if e == 0.0 else g * (e * node._a ** (e - 1.0))), None


class PowBackward1(Function):
    """``x ** y`` with two tensors."""

    __slots__ = ()

    @staticmethod
    def forward(a: float, b: float) -> float:
        return _pow(a, b)

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        a, e = node._a._value, _val(node._b)
        ga = 0.0 if e == 0.0 else g * (e * _pow(a, e - 1.0))
        gb = g * (0.0 if a == 0.0 and e >= 0.0 else node._value * _log(a))
        return ga, gb

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        a, e = node._a, node._b
        ga = _const(0.0) if e._value == 0.0 else g * (e * a ** (e - 1.0))
        gb = _const(0.0) if a._value == 0.0 and e._value >= 0.0 else g * (node * a.log())
        return ga, gb


class PowBackward2(Function):
    """``c ** x`` with a number c: x is the first operand, c the second."""

    __slots__ = ()

    @staticmethod
    def forward(a: float, b: float) -> float:
        return _pow(b, a)

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        base = node._b
        slope = 0.0 if base == 0.0 and node._a._value >= 0.0 else node._value * _log(base)
        return g * slope, None

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        base = node._b
        if base == 0.0 and node._a._value >= 0.0:
            return _const(0.0), None
        return g * (node * _log(base)), None


class ExpBackward0(Function):
    __slots__ = ()
    forward = staticmethod(_exp)

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        return g * node._value, None

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        return g * node, None


class LogBackward0(Function):
    __slots__ = ()
    forward = staticmethod(_log)

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        return _div(g, node._a._value), None

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        return g / node._a, None


class TanhBackward0(Function):
    __slots__ = ()
    forward = staticmethod(math.tanh)

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        t = node._value
        return g * (1.0 - t * t), None

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        return g * (1.0 - node * node), None


class SigmoidBackward0(Function):
    __slots__ = ()

    @staticmethod
    def forward(a: float) -> float:
        return 1.0 / (1.0 + _exp(-a))

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        s = node._value
        return g * (1.0 - s) * s, None

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        return g * (1.0 - node) * node, None


class ReluBackward0(Function):
    __slots__ = ()

    @staticmethod
    def forward(a: float) -> float:
        return 0.0 if a < 0.0 else a  # keeps nan and -0.0, as torch does

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        return (0.0 if node._value <= 0.0 else g), None  # relu'(0) = 0

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        return g * _unary(StepBackward0, node), None  # relu'(0) = 0; its mask has slope 0


class SinBackward0(Function):
    __slots__ = ()
    forward = staticmethod(_sin)

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        return g * _cos(node._a._value), None

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        return g * node._a.cos(), None


class CosBackward0(Function):
    __slots__ = ()
    forward = staticmethod(_cos)

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        return g * -_sin(node._a._value), None

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        return g * -node._a.sin(), None


class SqrtBackward0(Function):
    __slots__ = ()

    forward = staticmethod(_sqrt)

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        return _div(g, 2.0 * node._value), None  # sqrt'(0) = inf

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        return g / (2.0 * node), None


class AbsBackward0(Function):
    __slots__ = ()
    forward = staticmethod(abs)

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        return g * _sign(node._a._value), None  # abs'(0) = 0

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        return g * _unary(SignBackward0, node._a), None  # abs'(0) = 0; sign has slope 0


class SumBackward0(Function):
    __slots__ = ()
    saves = False
    many = True

    @staticmethod
    def forward(values: Sequence[float]) -> float:
        return sum(values, 0.0)

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        return g, None

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        return g, None


class MeanBackward0(Function):
    __slots__ = ()
    saves = False
    many = True

    @staticmethod
    def forward(values: Sequence[float]) -> float:
        return _div(sum(values, 0.0), float(len(values)))

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        return _div(g, float(len(node._a))), None

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        return g / float(len(node._a)), None


class SelectBackward0(Function):
    __slots__ = ()
    saves = False

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        return g, None

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        return g, None


class StepBackward0(Function):
    """relu's slope as a tensor, 1 where relu's output is positive: constant, so its slope is 0."""

    __slots__ = ()
    saves = False

    @staticmethod
    def forward(a: float) -> float:
        return 1.0 if a > 0.0 else 0.0

    @staticmethod
    def backward(node: Scalar, g: float) -> tuple[float, float | None]:
        return 0.0, None

    @staticmethod
    def graph(node: Scalar, g: Scalar) -> tuple[Scalar, Scalar | None]:
        return _const(0.0), None


class SignBackward0(StepBackward0):
    """abs's slope as a tensor: the sign of its input (0 at 0), constant where defined."""

    __slots__ = ()
    forward = staticmethod(_sign)


# --- tensors -------------------------------------------------------------------------------------

#: a non-leaf's ``_grad`` when it retains its gradient but none has arrived yet.
_RETAIN = object()


def _visible(g: Any) -> float | None:
    """The gradient behind a node's ``_grad`` slot.

    A leaf holds None or a float, or a 0-d tensor after ``backward(create_graph=True)``. A
    non-leaf holds None (not retained), ``_RETAIN``, a float or a tensor (retained: backward adds
    to it), or a 1-tuple (assigned by the user, not retained: backward leaves it alone).
    """
    if g is None or g is _RETAIN:
        return None
    return g[0] if type(g) is tuple else g


class Tensor:
    """What the protocol asks of a tensor; :class:`Scalar` and :class:`Vector` fill it in."""

    __slots__ = ()

    # arithmetic: the tensor is always the first operand, a number the constant second one.
    def __add__(self, other: Any) -> Tensor:
        return _binary(AddBackward0, self, other)

    __radd__ = __add__

    def __sub__(self, other: Any) -> Tensor:
        return _binary(SubBackward0, self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return _binary(RsubBackward1, self, other)

    def __mul__(self, other: Any) -> Tensor:
        return _binary(MulBackward0, self, other)

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> Tensor:
        return _binary(DivBackward0, self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        if _number(other) is None:
            return NotImplemented
        return _binary(MulBackward0, _unary(ReciprocalBackward0, self), other)

    def __pow__(self, other: Any) -> Tensor:
        op = PowBackward1 if isinstance(other, Tensor) else PowBackward0
        return _binary(op, self, other)

    def __rpow__(self, other: Any) -> Tensor:
        return _binary(PowBackward2, self, other)

    def __neg__(self) -> Tensor:
        return _unary(NegBackward0, self)

    def exp(self) -> Tensor:
        return _unary(ExpBackward0, self)

    def log(self) -> Tensor:
        return _unary(LogBackward0, self)

    def tanh(self) -> Tensor:
        return _unary(TanhBackward0, self)

    def sigmoid(self) -> Tensor:
        return _unary(SigmoidBackward0, self)

    def relu(self) -> Tensor:
        return _unary(ReluBackward0, self)

    def sin(self) -> Tensor:
        return _unary(SinBackward0, self)

    def cos(self) -> Tensor:
        return _unary(CosBackward0, self)

    def sqrt(self) -> Tensor:
        return _unary(SqrtBackward0, self)

    def abs(self) -> Tensor:
        return _unary(AbsBackward0, self)

    def sum(self) -> Scalar:
        return _reduce(SumBackward0, self)

    def mean(self) -> Scalar:
        return _reduce(MeanBackward0, self)

    # autograd
    @property
    def requires_grad(self) -> bool:
        return self._op is not None

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        self.requires_grad_(flag)

    @property
    def is_leaf(self) -> bool:
        return self._op is None or self._op.leaf

    @property
    def grad_fn(self) -> Function | None:
        return None if self.is_leaf else self._op()

    @property
    def grad(self) -> Tensor | None:
        slots = [node._grad for node in self._nodes()]
        values = [_visible(g) for g in slots]
        if all(v is None for v in values):
            if not self.is_leaf and all(g is None for g in slots):
                warnings.warn(_NON_LEAF_GRAD, UserWarning, stacklevel=2)
            return None
        return _gradient(self, values)

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None and not isinstance(value, Tensor):
            raise TypeError("assigned grad expected to be a Tensor or None but got grad of type "
                            f"{type(value).__name__}")
        if value is not None and value._shape() != self._shape():
            raise RuntimeError(f"attempting to assign a gradient of size '{list(value._shape())}' "
                               f"to a tensor of size '{list(self._shape())}'. Please ensure that "
                               "the gradient and the tensor are the same size")
        values = [None] * len(self._nodes()) if value is None else _values(value)
        for node, v in zip(self._nodes(), values):
            node._set_grad(v)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if not self.is_leaf:
            if not requires_grad:
                raise RuntimeError(_NON_LEAF_FLAG)
            return self
        op = AccumulateGrad if requires_grad else None
        self._op = op
        for node in self._nodes():
            node._op = op
        return self

    def retain_grad(self) -> None:
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if not self.is_leaf:
            for node in self._nodes():
                g = node._grad
                node._grad = _RETAIN if g is None else g[0] if type(g) is tuple else g

    def detach(self) -> Tensor:
        return self._like(_values(self))

    def backward(self, gradient: Tensor | None = None, retain_graph: bool | None = None,
                 create_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf), or the product ``gradient`` x Jacobian, into leaves.

        With ``create_graph`` the gradients are computed with tensor operations, so they have a
        history and can be differentiated again; ``retain_graph`` then defaults to True.
        """
        seeds = _seeds(self, gradient, create_graph, 0)
        if retain_graph is None:
            retain_graph = create_graph
        _backward(self._nodes(), seeds, retain_graph, create_graph)

    def __repr__(self) -> str:
        data = self.tolist()
        if not self.is_leaf:
            return f"tensor({data}, grad_fn=<{self._op.__name__}>)"
        return f"tensor({data}, requires_grad=True)" if self.requires_grad else f"tensor({data})"


class Scalar(Tensor):
    """A 0-d tensor, which is also a graph node.

    ``_op`` is the operation that made it (a :class:`Function` subclass), ``AccumulateGrad`` for a
    leaf that requires grad, ``NoGradView`` for torch's odd select under ``no_grad``, or None for
    a constant. ``_a`` is the first operand (a node, or a tuple of nodes for a reduction), ``_b``
    the second (a node, a float constant, or None). ``_seq`` is the operation's creation stamp,
    negated once its saved values are freed. ``_grad`` is described at :func:`_visible`.
    """

    __slots__ = ("_value", "_grad", "_op", "_a", "_b", "_seq")

    def __init__(self, value: float, op: type[Function] | None, a: Any, b: Any,
                 seq: int | None) -> None:
        self._value = value
        self._grad = None
        self._op = op
        self._a = a
        self._b = b
        self._seq = seq

    def tolist(self) -> float:
        return self._value

    def __getitem__(self, index: Any) -> Tensor:
        raise IndexError("invalid index of a 0-dim tensor. Use `tensor.item()` in Python or "
                         "`tensor.item<T>()` in C++ to convert a 0-dim tensor to a number")

    def _nodes(self) -> tuple[Scalar, ...]:
        return (self,)

    def _shape(self) -> tuple[int, ...]:
        return ()

    @staticmethod
    def _like(values: list[float]) -> Scalar:
        return Scalar(values[0], None, None, None, None)

    def _set_grad(self, value: float | None) -> None:
        if self._op is None or self._op.leaf:
            self._grad = value
            return
        retained = self._grad is _RETAIN or type(self._grad) is float or isinstance(
            self._grad, Scalar)
        if value is None:
            self._grad = _RETAIN if retained else None
        else:
            self._grad = value if retained else (value,)

    def _freed(self) -> bool:
        return self._seq < 0

    def _free(self) -> None:
        self._seq = -abs(self._seq)

    def _record(self) -> object:
        """What torch sees as one tensor: this node."""
        return self


class _Group:
    """What the elements of one vector share: torch sees one tensor and one operation."""

    __slots__ = ("freed",)

    def __init__(self) -> None:
        self.freed = False


class _Element(Scalar):
    """An element of a :class:`Vector`; its ``_seq`` is the vector operation's stamp."""

    __slots__ = ("_group",)

    def __init__(self, value: float, op: type[Function] | None, a: Any, b: Any,
                 seq: int | None, group: _Group) -> None:
        Scalar.__init__(self, value, op, a, b, seq)
        self._group = group

    def _freed(self) -> bool:
        return self._group.freed

    def _free(self) -> None:
        self._group.freed = True

    def _record(self) -> object:
        return self._group


class Vector(Tensor):
    """A 1-D tensor: a tuple of element nodes made by one operation (``_op``)."""

    __slots__ = ("_items", "_op")

    def __init__(self, items: tuple[_Element, ...], op: type[Function] | None) -> None:
        self._items = items
        self._op = op

    def tolist(self) -> list[float]:
        return [e._value for e in self._items]

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index: Any) -> Scalar:
        i = _index(index)
        n = len(self._items)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of bounds for dimension 0 with size {n}")
        item = self._items[i]
        if self._op is None:
            return Scalar(item._value, None, None, None, None)
        if _grad_enabled:
            return Scalar(item._value, SelectBackward0, item, None, next(_stamps))
        return Scalar(item._value, NoGradView, None, None, None)

    def _nodes(self) -> tuple[_Element, ...]:
        return self._items

    def _shape(self) -> tuple[int, ...]:
        return (len(self._items),)

    @staticmethod
    def _like(values: list[float]) -> Vector:
        return _leaf_vector(values, None)


# --- building the graph --------------------------------------------------------------------------

def _number(x: Any) -> float | None:
    """A Python (or numpy) real number as a float; None for anything else."""
    if type(x) is float:
        return x
    if isinstance(x, numbers.Real) and not isinstance(x, Tensor):
        return float(x)
    return None


def _index(index: Any) -> int:
    if isinstance(index, numbers.Integral) and not isinstance(index, bool):
        return int(index)
    raise TypeError(f"index with a whole number, like v[0], not {type(index).__name__}")


def _values(t: Tensor) -> list[float]:
    return [node._value for node in t._nodes()]


def _leaf_vector(values: Iterable[float], op: type[Function] | None) -> Vector:
    group = _Group()
    return Vector(tuple(_Element(v, op, None, None, None, group) for v in values), op)


def _binary(op: type[Function], a: Tensor, b: Any) -> Tensor:
    """``a op b``; a is a tensor, b a tensor or a number (kept as a constant)."""
    kind = type(b)
    if kind is not float and kind is not Scalar and kind is not Vector:
        if kind is _Element:  # an element node, in a graph rule: a 0-d tensor
            kind = Scalar
        else:
            b = _number(b)
            if b is None:
                return NotImplemented
            kind = float
    if kind is Vector or type(a) is Vector:
        return _elementwise(op, a, b)
    if kind is float:
        value = op.forward(a._value, b)
        tracked = a._op is not None
    else:
        value = op.forward(a._value, b._value)
        tracked = a._op is not None or b._op is not None
    if tracked and _grad_enabled:
        return Scalar(value, op, a, b, next(_stamps))
    return Scalar(value, None, None, None, None)


def _unary(op: type[Function], a: Tensor) -> Tensor:
    if type(a) is not Vector:
        if a._op is not None and _grad_enabled:
            return Scalar(op.forward(a._value), op, a, None, next(_stamps))
        return Scalar(op.forward(a._value), None, None, None, None)
    return _elementwise(op, a, None)


def _elementwise(op: type[Function], a: Tensor, b: Any) -> Vector:
    """A vector operation: one element node per pair of operands, broadcasting length 1."""
    xs = a._nodes()
    ys = (b,) if type(b) is float or b is None else b._nodes()
    n = len(xs)
    if len(ys) != n and n != 1 and len(ys) != 1:
        raise RuntimeError(f"The size of tensor a ({n}) must match the size of tensor b "
                           f"({len(ys)}) at non-singleton dimension 0")
    if n == 1:
        xs = xs * len(ys)
    elif len(ys) == 1:
        ys = ys * n
    tracked = _grad_enabled and (a._op is not None or isinstance(b, Tensor) and b._op is not None)
    if b is None:
        values = [op.forward(x._value) for x in xs]
    else:
        values = [op.forward(x._value, _val(y)) for x, y in zip(xs, ys)]
    if not tracked:
        return _leaf_vector(values, None)
    seq, group = next(_stamps), _Group()
    return Vector(tuple(_Element(v, op, x, y, seq, group) for v, x, y in zip(values, xs, ys)), op)


def _reduce(op: type[Function], a: Tensor) -> Scalar:
    nodes = a._nodes()
    value = op.forward([node._value for node in nodes])
    if a._op is not None and _grad_enabled:
        return Scalar(value, op, nodes, None, next(_stamps))
    return Scalar(value, None, None, None, None)


# --- backward ------------------------------------------------------------------------------------

def _operands(node: Scalar) -> Sequence[Any]:
    return node._a if node._op.many else (node._a, node._b)


def _reachable(roots: Sequence[Scalar]) -> list[Scalar]:
    """The recorded operations reachable from ``roots``, without recursion.

    A node is a recorded operation exactly when it has operands (``_a`` is not None).
    """
    stack = [r for r in roots if r._a is not None]
    seen = set(stack)
    found = []
    push, mark, keep = stack.append, seen.add, found.append
    while stack:
        node = stack.pop()
        keep(node)
        a = node._a
        if node._op.many:
            for p in a:
                if p._a is not None and p not in seen:
                    mark(p)
                    push(p)
            continue
        if a._a is not None and a not in seen:
            mark(a)
            push(a)
        b = node._b
        if b is not None and type(b) is not float and b._a is not None and b not in seen:
            mark(b)
            push(b)
    return found


def _stamp(node: Scalar) -> int:
    return abs(node._seq)


def _accumulate(leaf: Scalar, g: float) -> None:
    leaf._grad = g if leaf._grad is None else leaf._grad + g


def _retain(node: Scalar, g: float) -> None:
    """torch's ``retain_grad`` hook: add ``g`` to a retained non-leaf gradient."""
    kept = node._grad
    if kept is _RETAIN:
        node._grad = g
    elif type(kept) is not tuple:  # a float, or a gradient tensor
        node._grad = kept + g


def _backward(roots: Sequence[Scalar], seeds: Sequence[Any], retain_graph: bool,
              graph: bool = False, wanted: set[Scalar] | None = None) -> dict[Scalar, Any]:
    """One backward pass from ``roots``, each with its seed gradient.

    The gradients are floats, or 0-d tensors built by the rules' ``graph`` (``graph=True``).
    Without ``wanted`` they accumulate into the leaves (``backward``); with it, the gradients
    arriving at the ``wanted`` nodes are returned and no leaf's ``.grad`` changes (``grad``).
    Either way a retained non-leaf the pass reaches gets its gradient, as torch's hook gives it.
    """
    grads: dict[Scalar, Any] = {}  # gradient arrived so far at each node, this pass
    for root, seed in zip(roots, seeds):
        if root._op is not None:
            grads[root] = seed
    order = _reachable(roots)
    order.sort(key=_stamp, reverse=True)  # newest first: torch's order
    if wanted is not None:
        order = _toward(order, wanted)
    get = grads.get
    found: dict[Scalar, Any] = {}
    for i, node in enumerate(order):
        g = grads.pop(node)
        op = node._op
        if wanted is not None and node in wanted:
            found[node] = g
        if node._grad is not None:
            _retain(node, g)
        if op.saves and node._freed():
            _fail(order, i, grads, retain_graph, wanted is None)
        ga, gb = op.graph(node, g) if graph else op.backward(node, g)
        a = node._a
        if op.many:
            for p in a:
                if p._op is not None:
                    s = get(p)
                    grads[p] = ga if s is None else s + ga
        else:
            if a._op is not None:
                s = get(a)
                grads[a] = ga if s is None else s + ga
            b = node._b
            if gb is not None and isinstance(b, Scalar) and b._op is not None:
                s = get(b)
                grads[b] = gb if s is None else s + gb
    for leaf, g in grads.items():  # leaves, and with wanted the nodes where grad() stopped
        if wanted is None:
            if leaf._op is AccumulateGrad:
                _accumulate(leaf, g)
        elif leaf in wanted:
            found[leaf] = g
            if leaf._op is not AccumulateGrad and leaf._grad is not None:
                _retain(leaf, g)
    if not retain_graph:
        for node in order:
            if node._op.saves:
                node._free()
    return found


def _toward(order: list[Scalar], wanted: set[Scalar]) -> list[Scalar]:
    """The operations of ``order`` (newest first) that lead to a ``wanted`` node: ``grad()``
    runs only those, as torch does, so the rest of the graph is neither run nor freed."""
    leads = set(wanted)
    kept = []
    for node in reversed(order):  # oldest first: every operand before the nodes that use it
        if any(isinstance(p, Scalar) and p in leads for p in _operands(node)):
            leads.add(node)
            kept.append(node)
    kept.reverse()
    return kept


def _fail(order: list[Scalar], i: int, grads: dict[Scalar, Any], retain_graph: bool,
          accumulate: bool) -> None:
    """Finish what torch finishes before a freed operation raises, then raise its error."""
    node = order[i]
    record = node._record()
    for other in order[i + 1:]:  # torch runs the whole tensor's retain_grad hook first
        if other._record() is not record:
            break
        if other._grad is not None:
            _retain(other, grads[other])
    waiting = {p._record() for n in order[i:] for p in _operands(n)
               if isinstance(p, Scalar) and p._op is AccumulateGrad}
    for leaf, g in grads.items():
        if accumulate and leaf._op is AccumulateGrad and leaf._record() not in waiting:
            _accumulate(leaf, g)
    if not retain_graph:
        for done in order[:i]:
            if done._op.saves:
                done._free()
    raise RuntimeError(_BACKWARD_TWICE)


def _seeds(t: Tensor, gradient: Tensor | None, graph: bool, number: int) -> list[Any]:
    """The gradient each of ``t``'s nodes starts with: 1, or the ``gradient`` argument's."""
    nodes = t._nodes()
    if gradient is None:
        if t.requires_grad and len(nodes) != 1:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        seeds = [_const(1.0) if graph else 1.0 for _ in nodes]
    else:
        if not isinstance(gradient, Tensor):
            raise TypeError("gradients can be either Tensors or None, but got "
                            f"{type(gradient).__name__}")
        if gradient._shape() != t._shape():
            raise RuntimeError(
                f"Mismatch in shape: grad_output[{number}] has a shape of "
                f"torch.Size({list(gradient._shape())}) and output[{number}] has a shape of "
                f"torch.Size({list(t._shape())}).")
        seeds = list(gradient._nodes()) if graph else _values(gradient)
    if not t.requires_grad or t._op is NoGradView:
        raise RuntimeError(f"element {number} of tensors does not require grad and does not "
                           "have a grad_fn")
    return seeds


def _gradient(t: Tensor, values: Sequence[Any]) -> Tensor:
    """A gradient shaped like ``t`` from one value per node: None (0), a float, or a 0-d tensor
    (a gradient with history, made with ``create_graph``)."""
    if not any(isinstance(v, Scalar) for v in values):
        return t._like([0.0 if v is None else v for v in values])
    if type(t) is not Vector:
        return values[0]
    items = tuple(v if isinstance(v, Scalar) else _const(0.0 if v is None else v)
                  for v in values)
    tracked = any(item._op is not None for item in items)
    return Vector(items, CopyBackwards if tracked else None)  # type: ignore[arg-type]


def _tensors(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


# --- the module's functions ----------------------------------------------------------------------

def tensor(data: Any, requires_grad: bool = False) -> Tensor:
    """A leaf tensor from a number (0-d) or a flat list of numbers (1-D), in float64."""
    op = AccumulateGrad if requires_grad else None
    value = _number(data)
    if value is not None:
        return Scalar(value, op, None, None, None)
    if isinstance(data, (list, tuple)):
        values = [_number(x) for x in data]
        if not values:
            raise ValueError("tensor([]) is empty: a 1-D tensor of the protocol has at least one "
                             "element")
        if all(v is not None for v in values):
            return _leaf_vector(values, op)
    raise TypeError("tensor() takes a number or a flat list of numbers, not "
                    f"{type(data).__name__} {data!r:.60}")


def grad(outputs: Any, inputs: Any, grad_outputs: Any = None, retain_graph: bool | None = None,
         create_graph: bool = False, allow_unused: bool = False) -> tuple[Tensor | None, ...]:
    """d(outputs)/d(inputs) as a tuple, like ``torch.autograd.grad``: no leaf's ``.grad``
    changes, but a retained non-leaf the pass goes through gets its gradient, as in torch.

    ``grad_outputs`` are the seeds of non-scalar outputs; with ``create_graph`` the results have
    a history (``retain_graph`` then defaults to True); an input the outputs do not depend on
    raises, or gives None with ``allow_unused``.
    """
    outputs, inputs = _tensors(outputs), _tensors(inputs)
    seeds_given = _tensors(grad_outputs) if grad_outputs is not None else (None,) * len(outputs)
    if len(seeds_given) != len(outputs):
        raise RuntimeError(f"grad requires one grad_output per output: got {len(seeds_given)} "
                           f"for {len(outputs)} outputs")
    for t in inputs:
        if not isinstance(t, Tensor) or not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    roots: list[Scalar] = []
    seeds: list[Any] = []
    for number, (out, gradient) in enumerate(zip(outputs, seeds_given)):
        seeds += _seeds(out, gradient, create_graph, number)
        roots += out._nodes()
    wanted = {node for t in inputs for node in t._nodes()}
    found = _backward(roots, seeds, create_graph if retain_graph is None else retain_graph,
                      create_graph, wanted)
    results: list[Tensor | None] = []
    for index, t in enumerate(inputs):
        values = [found.get(node) for node in t._nodes()]
        if all(v is None for v in values):
            if not allow_unused:
                raise RuntimeError(f"The differentiated Tensor at index {index} appears to not "
                                   "have been used in the graph. Set allow_unused=True if this "
                                   "is the desired behavior.")
            results.append(None)
        else:
            results.append(_gradient(t, values))
    return tuple(results)


class no_grad:
    """Inside ``with no_grad():`` operations are not recorded: results are constants."""

    def __enter__(self) -> None:
        global _grad_enabled
        self._previous = _grad_enabled
        _grad_enabled = False

    def __exit__(self, *exc: object) -> None:
        global _grad_enabled
        _grad_enabled = self._previous
