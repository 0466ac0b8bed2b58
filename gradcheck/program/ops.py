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
    #: points where the derivative is a convention, not a limit (oracles may disagree there).
    kinks: tuple[float, ...] = ()
    doc: str = ""
    aliases: tuple[str, ...] = field(default=())


def _method(name: str) -> Callable[[Any], Any]:
    return lambda a: getattr(a, name)()


def _sigmoid(xp: Any, a: Any) -> Any:
    return 1.0 / (1.0 + xp.exp(-a))


def _relu(xp: Any, a: Any) -> Any:
    # `where`, not `maximum`: jax's maximum splits the slope 0.5/0.5 at 0, torch gives 0.
    return xp.where(a > 0, a, 0.0 * a)


_ANY = Interval()
_POSITIVE = Interval(0.05, 4.0)
_NONZERO = Interval(-3.0, 3.0, avoid=(0.0,))
_KINKED = Interval(-3.0, 3.0, avoid=(0.0,))

OPS: dict[str, Op] = {
    op.name: op
    for op in [
        Op("add", BINARY, 2, lambda a, b: a + b, lambda xp, a, b: a + b, "+", (_ANY, _ANY)),
        Op("sub", BINARY, 2, lambda a, b: a - b, lambda xp, a, b: a - b, "-", (_ANY, _ANY)),
        Op("mul", BINARY, 2, lambda a, b: a * b, lambda xp, a, b: a * b, "*", (_ANY, _ANY)),
        Op("div", BINARY, 2, lambda a, b: a / b, lambda xp, a, b: a / b, "/", (_ANY, _NONZERO)),
        Op("pow", BINARY, 2, lambda a, b: a**b, lambda xp, a, b: a**b, "**",
           (_POSITIVE, Interval(-2.0, 3.0))),
        Op("neg", UNARY, 1, lambda a: -a, lambda xp, a: -a, "-", (_ANY,)),
        Op("exp", FUNCTION, 1, _method("exp"), lambda xp, a: xp.exp(a), domains=(_ANY,)),
        Op("log", FUNCTION, 1, _method("log"), lambda xp, a: xp.log(a), domains=(_POSITIVE,)),
        Op("tanh", FUNCTION, 1, _method("tanh"), lambda xp, a: xp.tanh(a), domains=(_ANY,)),
        Op("sigmoid", FUNCTION, 1, _method("sigmoid"), _sigmoid, domains=(_ANY,)),
        Op("relu", FUNCTION, 1, _method("relu"), _relu, domains=(_KINKED,), kinks=(0.0,)),
        Op("sin", FUNCTION, 1, _method("sin"), lambda xp, a: xp.sin(a), domains=(_ANY,)),
        Op("cos", FUNCTION, 1, _method("cos"), lambda xp, a: xp.cos(a), domains=(_ANY,)),
        Op("sqrt", FUNCTION, 1, _method("sqrt"), lambda xp, a: xp.sqrt(a), domains=(_POSITIVE,)),
        Op("abs", FUNCTION, 1, _method("abs"), lambda xp, a: xp.abs(a), domains=(_KINKED,),
           kinks=(0.0,)),
        Op("sum", REDUCTION, 1, _method("sum"), lambda xp, a: xp.sum(a, axis=0), domains=(_ANY,)),
        Op("mean", REDUCTION, 1, _method("mean"), lambda xp, a: xp.mean(a, axis=0),
           domains=(_ANY,)),
        Op("select", SELECT, 1, lambda a, i: a[i], lambda xp, a, i: a[i], domains=(_ANY,)),
        # The same value with no history: nothing flows back through it. Its array form is the
        # value; each oracle stops the gradient its own way (finite differences hold it at the
        # unperturbed point, jax calls stop_gradient, torch detach).
        Op("detach", FUNCTION, 1, _method("detach"), lambda xp, a: a, domains=(_ANY,),
           doc="x.detach(): a constant with x's value"),
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


#: every name a failed use of the engine can blame (the worker reports one of these, no other)
PIECES = frozenset({*PROTOCOL, *(method_of(op, first) for op in OPS.values()
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
