"""The one table of operations.

Every operation of the engine protocol is listed here once. The same table drives the program
language (which names and operators a program may use), every backend that interprets a program
(engines through the protocol, numpy and jax through array functions), the oracles, and the
reference engine's differential tests.

Array convention: the element axis of a 1-D value comes first and any batch axes trail, so one
array function serves numpy over a whole batch of points and jax on a single point under `vmap`.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any, Callable

#: How an operation is written in a program.
BINARY = "binary"  # a infix operator: a + b
UNARY = "unary"  # prefix minus: -a
FUNCTION = "function"  # exp(a) or a.exp()
REDUCTION = "reduction"  # sum(a) or a.sum(); identity on a scalar
SELECT = "select"  # v[i]


@dataclass(frozen=True)
class Interval:
    """Where an argument may be sampled: open bounds, kept `margin` away from `avoid` points."""

    low: float = -3.0
    high: float = 3.0
    avoid: tuple[float, ...] = ()


#: Kinds of point where an operation has no derivative (see :class:`Edge`).
KINK, POLE, EDGE = "kink", "pole", "domain edge"


@dataclass(frozen=True)
class Edge:
    """A value of one argument where an operation has no derivative: a kink (a corner, as relu
    and abs have at 0), a pole (a denominator at 0) or a domain edge (the argument must stay
    above `at`, as log's and sqrt's must stay above 0)."""

    kind: str
    arg: int = 0
    at: float = 0.0
    #: what the argument is called in messages: "the denominator `x - 1`"
    role: str = "argument"
    #: the kind when the other argument is a constant c (None: no edge for that c)
    by_constant: Callable[[float], str | None] | None = None

    def kind_for(self, constant: float | None) -> str | None:
        """The kind of this edge when the operation's other argument is the number `constant`
        (None when it is not a constant): `x ** 2` has none, `x ** -1` a pole, `x ** 0.5` an
        edge."""
        if constant is None or self.by_constant is None:
            return self.kind
        return self.by_constant(constant)


@dataclass(frozen=True)
class Op:
    """One protocol operation: how to apply it to protocol tensors and to arrays."""

    name: str
    kind: str
    arity: int
    #: apply to protocol objects (engine tensors, Python numbers): `a + b`, `a.exp()`, `a[i]`.
    engine: Callable[..., Any]
    #: apply to arrays given an array namespace `xp` (numpy, jax.numpy or the torch shim).
    array: Callable[..., Any]
    symbol: str = ""
    #: sampling domain for each argument, used by tests and property checks.
    domains: tuple[Interval, ...] = ()
    #: where an argument loses the derivative (a kink, pole or domain edge; oracles may disagree
    #: there, finite differences cannot judge it)
    edges: tuple[Edge, ...] = ()
    #: bounds of the result from bounds of the arguments: `bound(xp, (lo, hi), ...)` gives
    #: (lo, hi), arrays of the namespace `xp` (interval arithmetic; conservative, never narrow)
    bound: Callable[..., tuple[Any, Any]] | None = None
    doc: str = ""
    aliases: tuple[str, ...] = field(default=())

    @property
    def kinks(self) -> tuple[float, ...]:
        """Points where the derivative is a convention, not a limit (torch and jax may differ)."""
        return tuple(edge.at for edge in self.edges if edge.kind == KINK)


def _method(name: str) -> Callable[[Any], Any]:
    return operator.methodcaller(name)


def _sigmoid(xp: Any, a: Any) -> Any:
    return 1.0 / (1.0 + xp.exp(-a))


def _relu(xp: Any, a: Any) -> Any:
    # `where`, not `maximum`: jax's maximum splits the slope 0.5/0.5 at 0, torch gives 0.
    return xp.where(a > 0, a, 0.0 * a)


# --- interval rules: bounds of a result from bounds (lo, hi) of the arguments ---------------------

Bounds = tuple[Any, Any]


def _rising(f: Callable[..., Any]) -> Callable[..., Bounds]:
    """The rule of an increasing function: the ends map to the ends."""
    return lambda xp, a: (f(xp, a[0]), f(xp, a[1]))


def _hull(xp: Any, *values: Any) -> Bounds:
    """The smallest and largest of `values`, a nan (0 * inf) left out."""
    lo = hi = values[0]
    for v in values[1:]:
        lo, hi = xp.fmin(lo, v), xp.fmax(hi, v)
    return lo, hi


def _mul_bound(xp: Any, a: Bounds, b: Bounds) -> Bounds:
    return _hull(xp, a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])


def _div_bound(xp: Any, a: Bounds, b: Bounds) -> Bounds:
    lo, hi = _mul_bound(xp, a, (1.0 / b[1], 1.0 / b[0]))
    spans_zero = (b[0] <= 0) & (b[1] >= 0)
    return xp.where(spans_zero, -math.inf, lo), xp.where(spans_zero, math.inf, hi)


def _pow_bound(xp: Any, a: Bounds, b: Bounds) -> Bounds:
    """A whole-number exponent c (a constant): the ends' powers, and 0 (or a pole) where the
    base spans 0. Any other: a positive base makes a ** b monotone in each argument, so the
    corners bound it; a base that reaches below 0 leaves it unbounded (and nan there)."""
    (alo, ahi), (blo, bhi) = a, b
    whole = (blo == bhi) & (xp.floor(blo) == blo)
    ends_lo, ends_hi = _hull(xp, alo ** blo, ahi ** blo)
    even = xp.fmod(blo, 2.0) == 0
    whole_lo = xp.where((alo < 0) & (ahi > 0) & even & (blo > 0), 0.0, ends_lo)
    pole = (alo <= 0) & (ahi >= 0) & (blo < 0)  # infinite on either side of 0
    whole_lo = xp.where(pole, -math.inf, whole_lo)
    whole_hi = xp.where(pole, math.inf, ends_hi)
    low = xp.maximum(alo, 0.0)
    any_lo, any_hi = _hull(xp, low ** blo, low ** bhi, ahi ** blo, ahi ** bhi)
    any_lo = xp.where(alo < 0, -math.inf, any_lo)
    any_hi = xp.where(alo < 0, math.inf, any_hi)
    return xp.where(whole, whole_lo, any_lo), xp.where(whole, whole_hi, any_hi)


def _sin_bound(xp: Any, a: Bounds, shift: float = 0.0) -> Bounds:
    """sin over [lo, hi]: the ends, or 1 (-1) where a crest (trough) lies between them."""
    lo, hi = a[0] + shift, a[1] + shift
    turn = 2 * math.pi
    finite = xp.isfinite(lo) & xp.isfinite(hi)
    safe_lo, safe_hi = xp.where(finite, lo, 0.0), xp.where(finite, hi, 0.0)
    crest = xp.floor((safe_hi - math.pi / 2) / turn) * turn + math.pi / 2 >= safe_lo
    trough = xp.floor((safe_hi + math.pi / 2) / turn) * turn - math.pi / 2 >= safe_lo
    ends_lo, ends_hi = _hull(xp, xp.sin(safe_lo), xp.sin(safe_hi))
    return (xp.where(trough | ~finite, -1.0, ends_lo), xp.where(crest | ~finite, 1.0, ends_hi))


def _abs_bound(xp: Any, a: Bounds) -> Bounds:
    spans_zero = (a[0] < 0) & (a[1] > 0)
    lo, hi = _hull(xp, xp.abs(a[0]), xp.abs(a[1]))
    return xp.where(spans_zero, 0.0, lo), hi


def _power_base(c: float) -> str | None:
    """The base's edge for a constant exponent c: none for a whole c >= 0 (a polynomial), a
    pole for a whole c < 0, else a domain edge (a real power needs a positive base)."""
    return (None if c >= 0 else POLE) if float(c).is_integer() else EDGE


_ANY = Interval()
_POSITIVE = Interval(0.05, 4.0)
_NONZERO = Interval(-3.0, 3.0, avoid=(0.0,))
_KINKED = Interval(-3.0, 3.0, avoid=(0.0,))
_KINK = (Edge(KINK),)
_ABOVE_ZERO = (Edge(EDGE),)
_SAME: Callable[..., Bounds] = lambda xp, a: a  # noqa: E731

OPS: dict[str, Op] = {
    op.name: op
    for op in [
        Op("add", BINARY, 2, operator.add, lambda xp, a, b: a + b, "+", (_ANY, _ANY),
           bound=lambda xp, a, b: (a[0] + b[0], a[1] + b[1])),
        Op("sub", BINARY, 2, operator.sub, lambda xp, a, b: a - b, "-", (_ANY, _ANY),
           bound=lambda xp, a, b: (a[0] - b[1], a[1] - b[0])),
        Op("mul", BINARY, 2, operator.mul, lambda xp, a, b: a * b, "*", (_ANY, _ANY),
           bound=_mul_bound),
        Op("div", BINARY, 2, operator.truediv, lambda xp, a, b: a / b, "/", (_ANY, _NONZERO),
           edges=(Edge(POLE, 1, role="denominator"),), bound=_div_bound),
        Op("pow", BINARY, 2, operator.pow, lambda xp, a, b: a**b, "**",
           (_POSITIVE, Interval(-2.0, 3.0)),
           edges=(Edge(EDGE, 0, role="base", by_constant=_power_base),),
           bound=_pow_bound),
        Op("neg", UNARY, 1, operator.neg, lambda xp, a: -a, "-", (_ANY,),
           bound=lambda xp, a: (-a[1], -a[0])),
        Op("exp", FUNCTION, 1, _method("exp"), lambda xp, a: xp.exp(a), domains=(_ANY,),
           bound=_rising(lambda xp, a: xp.exp(a))),
        Op("log", FUNCTION, 1, _method("log"), lambda xp, a: xp.log(a), domains=(_POSITIVE,),
           edges=_ABOVE_ZERO, bound=_rising(lambda xp, a: xp.log(xp.maximum(a, 0.0)))),
        Op("tanh", FUNCTION, 1, _method("tanh"), lambda xp, a: xp.tanh(a), domains=(_ANY,),
           bound=_rising(lambda xp, a: xp.tanh(a))),
        Op("sigmoid", FUNCTION, 1, _method("sigmoid"), _sigmoid, domains=(_ANY,),
           bound=_rising(_sigmoid)),
        Op("relu", FUNCTION, 1, _method("relu"), _relu, domains=(_KINKED,), edges=_KINK,
           bound=_rising(lambda xp, a: xp.maximum(a, 0.0))),
        Op("sin", FUNCTION, 1, _method("sin"), lambda xp, a: xp.sin(a), domains=(_ANY,),
           bound=_sin_bound),
        Op("cos", FUNCTION, 1, _method("cos"), lambda xp, a: xp.cos(a), domains=(_ANY,),
           bound=lambda xp, a: _sin_bound(xp, a, math.pi / 2)),
        Op("sqrt", FUNCTION, 1, _method("sqrt"), lambda xp, a: xp.sqrt(a), domains=(_POSITIVE,),
           edges=_ABOVE_ZERO, bound=_rising(lambda xp, a: xp.sqrt(xp.maximum(a, 0.0)))),
        Op("abs", FUNCTION, 1, _method("abs"), lambda xp, a: xp.abs(a), domains=(_KINKED,),
           edges=_KINK, bound=_abs_bound),
        Op("sum", REDUCTION, 1, _method("sum"), lambda xp, a: xp.sum(a, axis=0), domains=(_ANY,),
           bound=_rising(lambda xp, a: xp.sum(a, axis=0))),
        Op("mean", REDUCTION, 1, _method("mean"), lambda xp, a: xp.mean(a, axis=0),
           domains=(_ANY,), bound=_rising(lambda xp, a: xp.mean(a, axis=0))),
        Op("select", SELECT, 1, operator.getitem, lambda xp, a, i: a[i], domains=(_ANY,),
           bound=lambda xp, a, i: (a[0][i], a[1][i])),
        # The same value with no history: nothing flows back through it. Its array form is the
        # value; each oracle stops the gradient its own way (finite differences hold it at the
        # unperturbed point, jax calls stop_gradient, torch detach).
        Op("detach", FUNCTION, 1, _method("detach"), lambda xp, a: a, domains=(_ANY,),
           bound=_SAME, doc="x.detach(): a constant with x's value"),
    ]
}

BINARY_BY_SYMBOL: dict[str, Op] = {op.symbol: op for op in OPS.values() if op.kind == BINARY}
#: names a program may call as `f(x)` or `x.f()`.
CALLABLE: dict[str, Op] = {op.name: op for op in OPS.values() if op.kind in (FUNCTION, REDUCTION)}


#: the method of a tensor that each infix operator calls (`a / b` is `a.__truediv__(b)`)
DUNDER = {"+": "add", "-": "sub", "*": "mul", "/": "truediv", "**": "pow"}
#: what the protocol asks of an engine besides the operations' own methods: the module's
#: `tensor` and `no_grad`, and the methods and attributes of its tensors.
PROTOCOL = ("tensor", "no_grad", "tolist", "backward", "grad", "retain_grad", "detach",
            "requires_grad_", "requires_grad", "is_leaf", "grad_fn")


def method_of(op: Op, number_first: bool = False) -> str:
    """The method of the engine's tensor that applying `op` calls. Python's own fallbacks
    decide it: `x ** 2` calls `x.__pow__` only, while `2 ** x` (a number on the left) asks the
    tensor's reflected `__rpow__`; `-x` is `__neg__`, `v[1]` is `__getitem__`, `x.exp()` is
    `exp`."""
    if op.kind == BINARY:
        return f"__{'r' * number_first}{DUNDER[op.symbol]}__"
    if op.kind == UNARY:
        return "__neg__"
    if op.kind == SELECT:
        return "__getitem__"
    return op.name


#: backward's keyword for higher-order gradients, a piece of its own: an engine may have a
#: backward() and not this; and how a student writes its use
CREATE_GRAPH = "create_graph"
CREATE_GRAPH_CALL = "backward(create_graph=True)"

#: every name a failed use of the engine can blame (the worker reports one of these, no other)
PIECES = frozenset({*PROTOCOL, CREATE_GRAPH, *(method_of(op, first) for op in OPS.values()
                                               for first in (False, True))})


def allowed(interval: Interval, margin: float = 0.0) -> list[tuple[float, float]]:
    """The open pieces of `interval` left after removing `margin` around edges and avoid points."""
    if margin < 0:
        raise ValueError(f"margin must be >= 0, not {margin}")
    cuts = sorted(a for a in interval.avoid if interval.low < a < interval.high)
    edges = [interval.low, *cuts, interval.high]
    pieces = [(lo + margin, hi - margin) for lo, hi in zip(edges, edges[1:])]
    pieces = [(lo, hi) for lo, hi in pieces if lo < hi]
    if not pieces:
        raise ValueError(f"the domain ({interval.low}, {interval.high}) avoiding "
                         f"{list(interval.avoid)} with margin {margin} leaves no room to sample")
    return pieces


class _Scalars:
    """The array namespace of plain Python floats, with IEEE results where `math` raises (exp
    overflows to inf, log(0) is -inf, sqrt(-1) is nan), as numpy gives them: constants are folded
    in the worker too, which has the standard library only."""

    @staticmethod
    def exp(a: float) -> float:
        try:
            return math.exp(a)
        except OverflowError:
            return math.inf

    @staticmethod
    def log(a: float) -> float:
        return math.log(a) if a > 0 else -math.inf if a == 0 else math.nan

    @staticmethod
    def sqrt(a: float) -> float:
        return math.sqrt(a) if a >= 0 else math.nan

    @staticmethod
    def sin(a: float) -> float:
        return math.sin(a) if math.isfinite(a) else math.nan

    @staticmethod
    def cos(a: float) -> float:
        return math.cos(a) if math.isfinite(a) else math.nan

    tanh = staticmethod(math.tanh)
    abs = staticmethod(abs)

    @staticmethod
    def where(condition: bool, a: float, b: float) -> float:
        return a if condition else b

    @staticmethod
    def sum(a: float, axis: int = 0) -> float:  # a reduction of a scalar is the scalar
        return a

    mean = sum


def fold_constant(op: Op, *args: float) -> float:
    """Evaluate an operation on plain numbers at parse time (constants carry no history)."""
    try:
        value = op.array(_Scalars, *(float(a) for a in args))
    except ZeroDivisionError:
        value = math.nan if op.name == "div" and args[0] == 0 else math.inf  # 0/0, x/0, 0**-1
    except OverflowError:
        value = math.inf
    if not isinstance(value, float) or not math.isfinite(value):  # complex: (-8) ** (1/3)
        shown = value if isinstance(value, float) else "no real number"
        raise ValueError(f"{op.name} of constants gives {shown}")
    return value
