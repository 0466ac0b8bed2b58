"""The reference engine against live torch (float64): every operation, graph shape and rule.

Each check runs the same program or script on both engines and compares what it observes: values,
gradients, grad_fn names, leaf flags, and which steps raise (type and message). The operations
come from the one table, gradcheck.program.ops.OPS, and programs go through gradcheck.program.language, as the
grader's do. The engine is loaded by file path under an arbitrary name, as a submission is.
"""

from __future__ import annotations

import gc
import importlib.util
import math
import sys
import tracemalloc
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from gradcheck.engine import torch_engine  # noqa: E402
from gradcheck.bank.domains import scalars  # noqa: E402
from gradcheck.program.language import engine_apply, evaluate, parse  # noqa: E402
from gradcheck.program.ops import BINARY, FUNCTION, OPS, REDUCTION, SELECT, UNARY, Interval, Op  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _load_by_path(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "reference" / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REF = _load_by_path("some_students_engine")
TORCH = torch_engine
EXAMPLES = settings(max_examples=25)


# --- observing an engine -------------------------------------------------------------------------

def grad_of(t: Any) -> Any:
    g = t.grad
    return None if g is None else g.tolist()


def name_of(t: Any) -> str | None:
    return None if t.grad_fn is None else t.grad_fn.name()


class Log:
    """What a script saw on one engine, in order: (label, value or error) pairs."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, Any]] = []

    def see(self, label: str, value: Any) -> None:
        self.entries.append((label, value))

    def attempt(self, label: str, action: Callable[[], Any]) -> Any:
        """Run `action`; log None, or the exception's type and message, as a script's try would."""
        try:
            result = action()
        except TypeError:  # torch's TypeError texts are accidents of its internals
            self.see(label, ("raised", "TypeError"))
            return None
        except Exception as exc:  # noqa: BLE001 (the comparison is the point)
            self.see(label, ("raised", type(exc).__name__, str(exc)))
            return None
        self.see(label, "ok")
        return result

    def tensor(self, label: str, t: Any) -> None:
        """The facts the grader compares about one tensor."""
        self.see(f"value.{label}", t.tolist())
        self.see(f"grad_fn.{label}", name_of(t))
        self.see(f"is_leaf.{label}", t.is_leaf)
        self.see(f"requires_grad.{label}", t.requires_grad)


def close(a: Any, b: Any, rtol: float, atol: float) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y, rtol, atol) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        if math.isinf(a) or math.isinf(b):
            return a == b
        return abs(a - b) <= atol + rtol * abs(b)
    return type(a) is type(b) and a == b


def assert_same(script: Callable[[Any, Log], Any], rtol: float = 1e-11,
                atol: float = 1e-12) -> list[tuple[str, Any]]:
    """Run `script(engine, log)` on the reference engine and on torch; the logs must agree."""
    logs = []
    for engine in (REF, TORCH):
        log = Log()
        script(engine, log)
        logs.append(log.entries)
    ours, theirs = logs
    assert [label for label, _ in ours] == [label for label, _ in theirs]
    for (label, mine), (_, torchs) in zip(ours, theirs):
        assert close(mine, torchs, rtol, atol), (
            f"{label}: reference {mine!r}, torch {torchs!r}\nreference log: {ours}\n"
            f"torch log: {theirs}")
    return ours


def run_program(source: str, point: dict[str, Any], requires_grad: set[str] | None = None,
                gradient: list[float] | None = None, names: list[str] = ()) -> Callable:
    """A script: the program on fresh leaves, backward twice (no retain_graph), all observed."""
    sizes = {n: len(v) if isinstance(v, list) else None for n, v in point.items()}
    program = parse(source, sizes)
    wanted = set(point) if requires_grad is None else requires_grad

    def script(engine: Any, log: Log) -> None:
        leaves = {n: engine.tensor(v, requires_grad=n in wanted) for n, v in point.items()}
        values = evaluate(program, leaves, engine_apply)
        out = values[program.output]
        log.tensor("out", out)
        for name in names:
            log.tensor(name, values[program.names[name]])
        seed = None if gradient is None else engine.tensor(gradient)
        for attempt in ("first", "second"):
            log.attempt(f"{attempt} backward", lambda: out.backward(seed))
            for name, leaf in leaves.items():
                log.see(f"{attempt} grad.{name}", grad_of(leaf))

    return script


# --- every operation, in every operand form ------------------------------------------------------

def _const(x: float) -> str:
    return f"({x!r})"


def forms(op: Op, data: st.DataObject) -> list[tuple[str, dict[str, Any], set[str] | None]]:
    """(program, point, inputs that require grad) for each way the operation can be written."""
    draw = data.draw
    one = [draw(scalars(d)) for d in op.domains]
    three = [[draw(scalars(d)) for _ in range(3)] for d in op.domains]
    if op.kind == BINARY:
        s = op.symbol
        (a, b), (va, vb) = one, three
        return [
            (f"z = a {s} b", {"a": a, "b": b}, None),                  # tensor-tensor
            (f"z = a {s} b", {"a": a, "b": b}, {"a"}),                 # b needs no grad
            (f"z = a {s} b", {"a": a, "b": b}, {"b"}),                 # a needs no grad
            (f"z = {_const(a)} {s} b", {"b": b}, None),                # const-tensor
            (f"z = a {s} {_const(b)}", {"a": a}, None),                # tensor-const
            (f"z = v {s} w", {"v": va, "w": vb}, None),                # vectors
            (f"z = v {s} b", {"v": va, "b": b}, None),                 # vector-scalar
            (f"z = a {s} w", {"a": a, "w": vb}, None),                 # scalar-vector
            (f"z = {_const(a)} {s} w", {"w": vb}, None),
            (f"z = v {s} {_const(b)}", {"v": va}, None),
        ]
    if op.kind == UNARY:
        return [("z = -a", {"a": one[0]}, None), ("z = -v", {"v": three[0]}, None)]
    if op.kind == FUNCTION:
        return [(f"z = {op.name}(a)", {"a": one[0]}, None),
                (f"z = v.{op.name}()", {"v": three[0]}, None)]
    if op.kind == REDUCTION:
        return [(f"z = {op.name}(v)", {"v": three[0]}, None),
                (f"z = a.{op.name}()", {"a": one[0]}, None)]
    assert op.kind == SELECT
    return [("z = v[1]", {"v": three[0]}, None), ("z = v[-1]", {"v": three[0]}, None)]


def _seed_for(source: str, point: dict[str, Any]) -> list[float] | None:
    """A vector output is backpropagated with `gradient=` (a vector-Jacobian product)."""
    vector = any(isinstance(v, list) for v in point.values()) and "sum" not in source \
        and "mean" not in source and "[" not in source
    return [1.0, -0.5, 2.0] if vector else None


@pytest.mark.parametrize("op", OPS.values(), ids=list(OPS))
@EXAMPLES
@given(data=st.data())
def test_every_op_in_every_form_matches_torch_values_grads_names_and_second_backward(op, data):
    for source, point, requires_grad in forms(op, data):
        assert_same(run_program(source, point, requires_grad, _seed_for(source, point)))


SAVES_VALUES = ["a * b", "2 * a", "a / b", "a / 2", "2 / a", "a ** 2", "a ** b", "2 ** a",
                "exp(a)", "log(a)", "tanh(a)", "sigmoid(a)", "relu(a)", "sin(a)", "cos(a)",
                "sqrt(a)", "abs(a)"]
SAVES_NOTHING = ["a + b", "a + 1", "1 + a", "a - b", "a - 2", "2 - a", "-a", "a.sum()",
                 "a.mean()", "v[0]", "v.sum()", "v.mean()"]


@pytest.mark.parametrize("expr", SAVES_VALUES + SAVES_NOTHING)
def test_second_backward_raises_exactly_when_torch_saved_values(expr):
    point = {"a": 1.5, "b": 0.75, "v": [0.5, 2.0]}
    point = {n: v for n, v in point.items() if n in expr}
    log = assert_same(run_program(f"z = {expr}", point))
    second = dict(log)["second backward"]
    assert (second != "ok") == (expr in SAVES_VALUES)


# --- values at kinks and domain edges ------------------------------------------------------------

def test_kink_conventions_are_torchs_relu_abs_at_zero_and_sqrt_at_zero():
    log = dict(assert_same(run_program("y = relu(a) + abs(b) + sqrt(c)",
                                       {"a": 0.0, "b": 0.0, "c": 0.0})))
    # hand-derived torch conventions: relu'(0) = 0, abs'(0) = 0, sqrt'(0) = inf
    assert log["first grad.a"] == 0.0 and log["first grad.b"] == 0.0
    assert log["first grad.c"] == math.inf


EDGES = [0.0, -0.0, 1.0, -1.0, -2.5, 1e-300, 800.0, -800.0, 1e308, math.inf, -math.inf, math.nan]


@pytest.mark.parametrize("op", [op for op in OPS.values() if op.kind in (FUNCTION, UNARY)],
                         ids=lambda op: op.name)
def test_edge_points_give_torchs_inf_and_nan_not_python_exceptions(op):
    call = "-a" if op.kind == UNARY else f"{op.name}(a)"
    for x in EDGES:
        assert_same(run_program(f"z = {call}", {"a": x}))


BINARY_EDGES = {"a / b": "ab", "a ** b": "ab", "a * b": "ab", "(2.0) / b": "b",
                "(0.0) ** b": "b", "(2.0) ** b": "b", "a ** 0": "a", "a ** (-1)": "a",
                "a ** 0.5": "a", "a ** 3": "a"}


@pytest.mark.parametrize("expr", BINARY_EDGES)
def test_binary_edge_points_match_torch(expr):
    for x in EDGES:
        for y in [0.0, -1.0, 2.0, 0.5, -3.0, math.inf]:
            point = {"a": x, "b": y if "a" in BINARY_EDGES[expr] else x}
            assert_same(run_program(f"z = {expr}", {n: point[n] for n in BINARY_EDGES[expr]}))


# --- compositions and graph shapes ---------------------------------------------------------------

SAFE = Interval(-2.0, 2.0)
COMPOSITIONS = {
    "neuron": ("y = tanh(w0 * x0 + w1 * x1 + b)", ["w0", "w1", "x0", "x1", "b"]),
    "softplus": ("y = log(1 + exp(x))", ["x"]),
    "logistic loss": ("p = sigmoid(w * x + b)\ny = -(t * log(p) + (1 - t) * log(1 - p))",
                      ["w", "x", "b", "t"]),
    "chain rule z": ("y = x ** 2\nz = 2 * y + 1", ["x"]),
    "quotient": ("y = (sin(x) + 2) / (cos(w) + 3) - x / (w * w + 1)", ["x", "w"]),
    "powers": ("y = (x * x + 1) ** w + 2 ** (x * w) + (w * w + 0.5) ** 0.5", ["x", "w"]),
    "vector mse": ("e = p - t\ny = (e * e).mean()", []),
    "vector softmax-ish": ("e = exp(v)\ny = log(e.sum()) - v[0] + v.mean() * relu(v[1])", []),
}


@pytest.mark.parametrize("name", COMPOSITIONS)
@EXAMPLES
@given(data=st.data())
def test_compositions_match_torch_at_sampled_points(name, data):
    source, scalars_in = COMPOSITIONS[name]
    point: dict[str, Any] = {n: data.draw(scalars(SAFE)) for n in scalars_in}
    if name == "logistic loss":
        point["t"] = data.draw(scalars(Interval(0.0, 1.0)))
    if "vector" in name:
        names = ["p", "t"] if "mse" in name else ["v"]
        point.update({n: [data.draw(scalars(SAFE)) for _ in range(4)] for n in names})
    program = parse(source, {n: len(v) if isinstance(v, list) else None for n, v in point.items()})
    assert_same(run_program(source, point, names=[n for n in program.names if n not in point]),
                rtol=1e-10)


@st.composite
def expressions(draw: Any, depth: int = 3) -> str:
    """A random expression over x and y from smooth, everywhere-defined operations."""
    if depth == 0 or draw(st.booleans()) and depth < 3:
        return draw(st.sampled_from(["x", "y", "(0.5)", "(-1.25)", "(2.0)"]))
    kind = draw(st.sampled_from(["+", "-", "*", "tanh", "sigmoid", "sin", "cos", "neg"]))
    left = draw(expressions(depth - 1))
    if kind in ("+", "-", "*"):
        return f"({left} {kind} {draw(expressions(depth - 1))})"
    return f"(-{left})" if kind == "neg" else f"{kind}({left})"


@EXAMPLES
@given(expr=expressions(), x=scalars(SAFE), y=scalars(SAFE))
def test_random_compositions_of_smooth_ops_match_torch(expr, x, y):
    source = f"z = {expr} + x * y"  # the output always depends on both inputs
    assert_same(run_program(source, {"x": x, "y": y}), rtol=1e-10)


def _traced(source: str, point: dict[str, Any]) -> Callable:
    """retain_grad() on every intermediate (the grader's trace), then backward."""
    program = parse(source, {n: None for n in point})

    def script(engine: Any, log: Log) -> None:
        leaves = {n: engine.tensor(v, requires_grad=True) for n, v in point.items()}
        values = evaluate(program, leaves, engine_apply)
        named = {n: values[i] for n, i in program.names.items()}
        for t in named.values():
            if not t.is_leaf:
                t.retain_grad()
        values[program.output].backward()
        for n, t in named.items():
            log.tensor(n, t)
            log.see(f"grad.{n}", grad_of(t))

    return script


def test_diamond_whose_short_path_comes_first_waits_for_every_path():
    source = "y = x * x\nl1 = exp(y)\nl2 = sin(l1)\nl3 = tanh(l2)\nz = y + l3"
    log = dict(assert_same(_traced(source, {"x": 0.7})))
    y = 0.49  # hand-derived: dz/dy = 1 + tanh'(sin(e^y)) cos(e^y) e^y, dz/dx = 2x dz/dy
    dzdy = 1 + (1 - math.tanh(math.sin(math.exp(y))) ** 2) * math.cos(math.exp(y)) * math.exp(y)
    assert log["grad.y"] == pytest.approx(dzdy) and log["grad.x"] == pytest.approx(1.4 * dzdy)


def test_fan_out_of_one_leaf_into_many_ops():
    assert_same(_traced("a = exp(x)\nb = sin(x)\nc = x * 3\nd = x ** 2\ne = tanh(x)\n"
                        "z = a + b + c + d + e", {"x": 0.3}))


def test_x_times_x_counts_both_operands():
    log = dict(assert_same(run_program("z = x * x + x", {"x": 3.0})))
    assert log["first grad.x"] == 7.0  # hand-derived: 2x + 1 at 3


def test_a_leaf_used_on_many_paths():
    source = "y = x\nfor _ in range(60):\n    y = y * 0.5 + sin(x) * w\nz = y"
    assert_same(run_program(source, {"x": 0.4, "w": -1.3}))


def _chain(engine: Any, depth: int) -> tuple[Any, Any]:
    x = engine.tensor(0.5, requires_grad=True)
    y = x
    for i in range(depth):
        y = y * 1.00001 if i % 2 else y + 0.001
    return x, y


def test_a_100000_deep_chain_backpropagates_without_recursion():
    def script(engine: Any, log: Log) -> None:
        x, y = _chain(engine, 100_000)
        log.see("value", y.tolist())
        log.attempt("backward", y.backward)
        log.see("grad", grad_of(x))

    log = dict(assert_same(script, rtol=1e-9))
    assert log["grad"] == pytest.approx(1.00001 ** 50_000)  # hand-derived: product of slopes


def test_a_10000_wide_sum_of_vector_and_of_scalars():
    values = [math.sin(i) for i in range(10_000)]

    def script(engine: Any, log: Log) -> None:
        v = engine.tensor(values, requires_grad=True)
        w = engine.tensor(values[::-1], requires_grad=True)
        s = (v * w).sum()
        s.backward()
        log.see("vector sum", s.tolist())
        log.see("grad.v", grad_of(v))
        xs = [engine.tensor(x, requires_grad=True) for x in values]
        total = sum(x * x for x in xs)
        total.backward()
        log.see("python sum", total.tolist())
        log.see("grads", [grad_of(x) for x in xs])
        log.see("grad_fn", name_of(total))

    assert_same(script, rtol=1e-9)


# --- the semantic rules, step by step ------------------------------------------------------------

def test_retain_graph_lets_a_second_backward_accumulate_and_the_third_raises():
    def script(E: Any, log: Log) -> None:
        x = E.tensor(3.0, requires_grad=True)
        y = x ** 2
        for i, kwargs in enumerate([{"retain_graph": True}, {}, {}]):
            log.attempt(f"backward {i}", lambda: y.backward(**kwargs))
            log.see(f"grad {i}", grad_of(x))

    log = dict(assert_same(script))
    assert [log[f"grad {i}"] for i in range(3)] == [6.0, 12.0, 12.0]


def test_grad_is_none_before_backward_and_for_unused_leaves_and_resets_to_none():
    def script(E: Any, log: Log) -> None:
        x = E.tensor(3.0, requires_grad=True)
        unused = E.tensor([1.0, 2.0], requires_grad=True)
        plain = E.tensor(5.0)
        log.see("before", grad_of(x))
        (x * plain).backward()
        log.see("after", grad_of(x))
        log.see("unused", grad_of(unused))
        log.see("plain", grad_of(plain))
        x.grad = None
        log.see("reset", grad_of(x))
        (x * plain).backward()
        log.see("again", grad_of(x))
        g = x.grad
        log.see("grad is a constant", (g.requires_grad, g.is_leaf, g.grad_fn is None))

    assert_same(script)


def test_non_leaf_grad_is_none_with_a_warning_unless_retained():
    def script(E: Any, log: Log) -> None:
        x = E.tensor([1.0, 2.0], requires_grad=True)
        h = x * 2
        k = x * 3
        h.retain_grad()
        (h * k).sum().backward()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            log.see("h (retained)", grad_of(h))
            log.see("k (not)", grad_of(k))
        log.see("warnings", [(w.category.__name__, str(w.message).split(". ")[0])
                             for w in caught])

    log = dict(assert_same(script))
    assert log["warnings"] == [("UserWarning", "The .grad attribute of a Tensor that is not a "
                                               "leaf Tensor is being accessed")]


def test_retained_grads_accumulate_and_reset_like_torch():
    def script(E: Any, log: Log) -> None:
        x = E.tensor(3.0, requires_grad=True)
        h = x * 2
        h.retain_grad()
        z = h * h
        z.backward(retain_graph=True)
        log.see("once", grad_of(h))
        z.backward(retain_graph=True)
        log.see("twice", grad_of(h))
        h.grad = None
        log.see("reset", grad_of(h))
        z.backward(retain_graph=True)
        log.see("after reset", grad_of(h))
        log.attempt("retain on a leaf", x.retain_grad)
        log.attempt("retain on a constant", E.tensor(1.0).retain_grad)
        h2 = x * 5
        h2.grad = E.tensor(4.0)   # assigned, not retained: backward leaves it alone
        out = h2 * 1
        out.backward(retain_graph=True)
        log.see("assigned", grad_of(h2))
        h2.retain_grad()
        out.backward()
        log.see("assigned then retained", grad_of(h2))

    assert_same(script)


def test_grad_fills_a_retained_non_leaf_it_passes_through_like_torch():
    """grad() changes no leaf's .grad, but torch's retain_grad hook runs in it as in backward():
    a retained non-leaf the pass reaches (on the way to an input, or an input itself) gets its
    gradient, added to what it had; one off the way, or below an input, does not."""
    def script(E: Any, log: Log) -> None:
        x, a = E.tensor(3.0, requires_grad=True), E.tensor(2.0, requires_grad=True)
        y = x * x
        y.retain_grad()
        z = y * 2
        log.see("result", E.grad(z, x, retain_graph=True)[0].tolist())
        log.see("on the way", grad_of(y))
        E.grad(z, x, retain_graph=True)
        log.see("added", grad_of(y))
        log.see("leaf", grad_of(x))
        log.see("input", E.grad(z, y, retain_graph=True)[0].tolist())
        log.see("input retained", grad_of(y))
        z.backward()
        log.see("then backward", grad_of(y))
        off = a * a
        off.retain_grad()
        E.grad(off * 2 + x * 3, x)
        log.see("off the way", grad_of(off))
        below = x * 4
        below.retain_grad()
        above = below * 2
        E.grad(above * 3, above)
        log.see("below an input", grad_of(below))
        v = E.tensor([1.0, 2.0], requires_grad=True)
        w = v * v
        w.retain_grad()
        E.grad(w[0] * 3, v)
        log.see("vector, one element", grad_of(w))
        q = x * a
        q.retain_grad()
        (g,) = E.grad(q * q, x, create_graph=True)
        for label, t in (("create_graph result", g), ("create_graph retained", q.grad)):
            # the operations inside a gradient's history are torch's internals: not compared
            log.see(label, (t.tolist(), t.requires_grad, t.is_leaf))

    assert_same(script)


def test_grad_assignment_accepts_tensors_and_refuses_wrong_types_and_sizes():
    def script(E: Any, log: Log) -> None:
        x = E.tensor(3.0, requires_grad=True)
        v = E.tensor([1.0, 2.0], requires_grad=True)
        log.attempt("set tensor", lambda: setattr(x, "grad", E.tensor(5.0)))
        log.see("x", grad_of(x))
        log.attempt("set float", lambda: setattr(x, "grad", 5.0))
        log.attempt("set wrong size", lambda: setattr(x, "grad", E.tensor([1.0, 2.0])))
        log.attempt("set vector", lambda: setattr(v, "grad", E.tensor([3.0, 4.0])))
        (v * v).sum().backward()
        log.see("v", grad_of(v))

    assert_same(script)


def test_accumulation_across_backward_passes_and_paths():
    def script(E: Any, log: Log) -> None:
        x = E.tensor(3.0, requires_grad=True)
        for i in range(3):
            (x * x + x).backward()
            log.see(f"pass {i}", grad_of(x))
        v = E.tensor([1.0, -2.0, 0.5], requires_grad=True)
        (v * v + v.exp() + v[1] * 4).sum().backward()
        log.see("vector", grad_of(v))

    log = dict(assert_same(script))
    assert [log[f"pass {i}"] for i in range(3)] == [7.0, 14.0, 21.0]


def test_no_grad_records_nothing_and_restores_the_mode():
    def script(E: Any, log: Log) -> None:
        x = E.tensor(3.0, requires_grad=True)
        v = E.tensor([1.0, 2.0], requires_grad=True)
        with E.no_grad():
            y = x * 2 + x.exp()
            w = v * x
            s = v[0]
            with E.no_grad():
                inner = x * 3
            after_inner = x * 4
        log.tensor("y", y)
        log.tensor("w", w)
        log.tensor("s", s)
        log.tensor("inner", inner)
        log.tensor("after_inner", after_inner)
        log.attempt("backward of y", y.backward)
        t = s * 2  # torch: s is a view that claims requires_grad, yet nothing flows through it
        log.tensor("op on the view", t)
        log.attempt("backward through the view", t.backward)
        log.see("grads", [grad_of(v), grad_of(s)])
        log.attempt("backward of the view", s.backward)
        try:
            with E.no_grad():
                raise KeyError("inside")
        except KeyError:
            pass
        log.tensor("after an exception", x * 2)
        z = x * 2
        with E.no_grad():
            log.attempt("backward inside no_grad", z.backward)
        log.see("grad", grad_of(x))

    assert_same(script)


def test_detach_gives_a_constant_leaf_cut_from_the_graph():
    def script(E: Any, log: Log) -> None:
        x = E.tensor(3.0, requires_grad=True)
        v = E.tensor([1.0, 2.0], requires_grad=True)
        y = x * x
        d = y.detach()
        dv = (v * 2).detach()
        log.tensor("d", d)
        log.tensor("dv", dv)
        log.attempt("backward of detached", d.backward)
        (d * x + dv.sum() * x).backward()
        log.see("x", grad_of(x))
        log.see("v", grad_of(v))

    assert_same(script)


def test_requires_grad_flags_on_leaves_and_non_leaves():
    def script(E: Any, log: Log) -> None:
        x = E.tensor(3.0, requires_grad=True)
        y = x * 2
        log.attempt("non-leaf to False", lambda: y.requires_grad_(False))
        log.attempt("non-leaf to True", lambda: y.requires_grad_(True))
        log.see("returns self", y.requires_grad_() is y)
        c = E.tensor([1.0, 2.0])
        log.see("leaf returns self", c.requires_grad_() is c)
        log.tensor("c", c)
        (c * c).sum().backward()
        log.see("c", grad_of(c))
        c.requires_grad_(False)
        log.tensor("c off", c)
        z = x * 4
        x.requires_grad_(False)  # turned off after the graph was built: no accumulation
        z.backward()
        log.see("x", grad_of(x))
        log.attempt("setter on non-leaf", lambda: setattr(y, "requires_grad", False))
        x.requires_grad = True
        log.tensor("x on", x)

    assert_same(script)


def test_backward_of_a_tensor_that_needs_no_grad_raises():
    def script(E: Any, log: Log) -> None:
        x = E.tensor(3.0, requires_grad=True)
        log.attempt("plain", E.tensor(2.0).backward)
        log.attempt("plain vector", E.tensor([2.0, 1.0]).backward)
        with E.no_grad():
            y = x * 2
        log.attempt("made under no_grad", y.backward)
        log.attempt("detached", (x * 2).detach().backward)
        log.attempt("leaf itself", x.backward)
        log.see("leaf grad", grad_of(x))

    assert_same(script)


def test_only_a_one_element_output_backpropagates_without_gradient():
    def script(E: Any, log: Log) -> None:
        v = E.tensor([1.0, 2.0, 3.0], requires_grad=True)
        one = E.tensor([2.0], requires_grad=True)
        log.attempt("vector", (v * v).backward)
        log.attempt("one element", (one * one).backward)
        log.see("one", grad_of(one))
        log.attempt("vector leaf", v.backward)

    assert_same(script)


def test_gradient_argument_is_a_vector_jacobian_product_with_torchs_shape_error():
    def script(E: Any, log: Log) -> None:
        x = E.tensor([1.0, 2.0, 3.0], requires_grad=True)
        s = E.tensor(3.0, requires_grad=True)
        (x ** 2).backward(E.tensor([1.0, 0.1, 0.01]))
        log.see("vjp", grad_of(x))
        log.attempt("too short", lambda: (x * 2).backward(E.tensor([1.0, 2.0])))
        log.attempt("0-d for a vector", lambda: (x * 2).backward(E.tensor(1.0)))
        log.attempt("vector for a 0-d", lambda: (s * 2).backward(E.tensor([1.0])))
        log.attempt("0-d for a 0-d", lambda: (s * 2).backward(E.tensor(0.5)))
        log.see("s", grad_of(s))
        log.attempt("not a tensor", lambda: (s * 2).backward(2.0))
        log.attempt("wrong shape on a constant",
                    lambda: E.tensor([1.0, 2.0]).backward(E.tensor([1.0, 2.0, 3.0])))

    log = dict(assert_same(script))
    assert log["vjp"] == pytest.approx([2.0, 0.4, 0.06])
    assert log["too short"][2] == ("Mismatch in shape: grad_output[0] has a shape of "
                                   "torch.Size([2]) and output[0] has a shape of "
                                   "torch.Size([3]).")


def test_work_done_before_a_freed_operation_raises_matches_torch():
    def script(E: Any, log: Log) -> None:
        def twice(label: str, z: Any, *leaves: Any) -> None:
            z.backward()
            log.attempt(f"{label}: second", z.backward)
            log.see(f"{label}: grads", [grad_of(t) for t in leaves])

        x, y = E.tensor(3.0, requires_grad=True), E.tensor(2.0, requires_grad=True)
        twice("leaf beside a freed product", x + y * y, x, y)
        x, y = E.tensor(3.0, requires_grad=True), E.tensor(2.0, requires_grad=True)
        twice("leaf on both paths", x + x * y, x, y)
        x, y = E.tensor(1.0, requires_grad=True), E.tensor(1.0, requires_grad=True)
        b = y.exp()
        twice("newest operation first", (x + 1) + b, x, y)
        x, y = E.tensor(1.0, requires_grad=True), E.tensor(1.0, requires_grad=True)
        a = x + 1
        twice("older saving operation", a + y.exp(), x, y)
        v = E.tensor([1.0, 2.0, 3.0], requires_grad=True)
        a = v[1]
        b = a * a
        twice("vector leaf waits for all its elements", b + v[0], v)
        x = E.tensor(1.0, requires_grad=True)
        h = x.exp()
        h.retain_grad()
        twice("retain hook runs before the error", h + 1, x, h)
        v = E.tensor([1.0, 2.0, 3.0], requires_grad=True)
        w = v * 2
        w.retain_grad()
        w[0].backward()
        log.attempt("a vector operation is freed as a whole", w[1].backward)
        log.see("grads", [grad_of(v), grad_of(w)])
        for keep in (False, True):  # what ran before the error is freed unless retain_graph
            x, y = E.tensor(2.0, requires_grad=True), E.tensor(0.5, requires_grad=True)
            e = y.exp()
            m = x * y
            e.backward()
            log.attempt(f"retain_graph={keep}: failing pass",
                        lambda: (m + e).backward(retain_graph=keep))
            log.attempt(f"retain_graph={keep}: the product again", m.backward)
            log.see(f"retain_graph={keep}: grads", [grad_of(x), grad_of(y)])

    assert_same(script)


def test_sgd_steps_under_no_grad_make_new_leaves():
    def script(E: Any, log: Log) -> None:
        w = E.tensor([0.5, -1.0], requires_grad=True)
        b = E.tensor(0.1, requires_grad=True)
        x = E.tensor([1.0, 2.0])
        for step in range(4):
            loss = ((w * x).sum() + b - 1.0) ** 2
            loss.backward()
            log.see(f"loss {step}", loss.tolist())
            with E.no_grad():
                w = w - 0.1 * w.grad
                b = b - 0.1 * b.grad
            w.requires_grad_()
            b.requires_grad_()
            log.tensor(f"w {step}", w)

    assert_same(script)


def test_indexing_and_length_errors_match_torch():
    def script(E: Any, log: Log) -> None:
        v = E.tensor([1.0, 2.0, 3.0], requires_grad=True)
        s = E.tensor(1.0, requires_grad=True)
        log.attempt("past the end", lambda: v[3])
        log.attempt("before the start", lambda: v[-4])
        log.attempt("a 0-d tensor", lambda: s[0])
        log.attempt("sizes differ", lambda: v + E.tensor([1.0, 2.0]))
        log.tensor("length 1 broadcasts", v * E.tensor([2.0], requires_grad=True))
        log.tensor("0-d broadcasts", s * v)
        log.see("len", len(v))
        log.tensor("select of a constant", E.tensor([1.0, 2.0])[0])

    assert_same(script)


def test_grad_fn_names_of_a_composed_graph_node_by_node():
    source = ("a = 2 * x ** 2 + 1\nb = 2 - x\nc = 2 / x\nd = x ** y\ne = 2 ** x\nf = -y\n"
              "g = (x - y) / y\nh = v[0] + v.sum() + v.mean()")
    assert_same(run_program(source, {"x": 1.5, "y": 0.5, "v": [1.0, 2.0]},
                            names=list("abcdefgh")))


# --- the engine as a submission ------------------------------------------------------------------

def test_the_engine_loads_by_path_under_any_name_and_as_the_installed_package():
    again = _load_by_path("another_name")
    x = again.tensor(3.0, requires_grad=True)
    z = 2 * x ** 2 + 1
    z.backward()
    assert z.tolist() == 19.0 and x.grad.tolist() == 12.0  # the protocol's worked example
    installed = importlib.util.find_spec("gradcheck._reference")
    if installed is not None:
        assert Path(installed.origin).resolve() == (ROOT / "reference" / "__init__.py").resolve()


def test_the_engine_refuses_empty_and_nested_data_with_a_clear_error():
    with pytest.raises(ValueError, match="at least one element"):
        REF.tensor([])
    with pytest.raises(TypeError, match="flat list of numbers"):
        REF.tensor([[1.0, 2.0]])


def test_a_dropped_graph_is_freed_by_reference_counting_alone():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        x, y = _chain(REF, 20_000)
        y.backward()
        built = tracemalloc.get_traced_memory()[0]
        del x, y
        freed = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    finally:
        if was_enabled:
            gc.enable()
    assert built - base > 20_000 * 50  # the graph was really there
    assert freed - base < (built - base) / 100  # and went without the cyclic collector


def test_no_recursion_limit_applies_to_deep_graphs():
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        x, y = _chain(REF, 5_000)
        y = y.tanh().sum()
        y.backward()
    finally:
        sys.setrecursionlimit(limit)
    assert x.grad is not None
