"""The library API: gradcheck.check on programs and traced functions, engines, domains, reports;
and the hypothesis strategies it draws points with."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import gradcheck._reference as reference
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import gradcheck
from gradcheck.bank.domains import allowed, arguments, draw, points, scalars, vectors
from gradcheck.bank.tolerances import Tolerance, Tolerances
from gradcheck.check import trace
from gradcheck.engine import torch_engine
from gradcheck.grading.compare import KINK
from gradcheck.grading.digits import number_text, pair_text
from gradcheck.oracles import compute
from gradcheck.program.ops import OPS, Interval


def _scalar_engine(tanh_slope):
    """A minimal scalar engine for these tests; `tanh_slope(t)` is its local derivative of tanh
    (1 - t*t is right)."""

    class Value:
        def __init__(self, data, parents=(), slopes=(), requires_grad=False):
            self.data, self.parents, self.slopes = float(data), parents, slopes
            self.requires_grad, self.grad = requires_grad, None

        def _op(self, data, others, slopes):
            return Value(data, (self, *others), slopes)

        def __add__(self, o):
            o = o if isinstance(o, Value) else Value(o)
            return self._op(self.data + o.data, (o,), (1.0, 1.0))

        __radd__ = __add__

        def __mul__(self, o):
            o = o if isinstance(o, Value) else Value(o)
            return self._op(self.data * o.data, (o,), (o.data, self.data))

        __rmul__ = __mul__

        def tanh(self):
            t = math.tanh(self.data)
            return self._op(t, (), (tanh_slope(t),))

        def tolist(self):
            return self.data

        def backward(self):
            order, seen, stack = [], set(), [(self, False)]
            while stack:
                node, done = stack.pop()
                if done:
                    order.append(node)
                elif id(node) not in seen:
                    seen.add(id(node))
                    stack.append((node, True))
                    stack += [(p, False) for p in node.parents]
            slope = {id(self): 1.0}
            for node in reversed(order):
                g = slope.get(id(node), 0.0)
                if node.requires_grad:
                    node.grad = (node.grad or 0.0) + g
                for parent, local in zip(node.parents, node.slopes):
                    slope[id(parent)] = slope.get(id(parent), 0.0) + g * local

    module = types.ModuleType("scalar_engine")
    module.tensor = lambda data, requires_grad=False: Value(data, requires_grad=requires_grad)
    return module


# --- check on programs --------------------------------------------------------------------------


def test_a_program_checked_at_given_points_reports_agreement():
    report = gradcheck.check("y = x * w\nz = y.tanh() + w ** 2", inputs={"x": None, "w": None},
                             at=[{"x": 0.5, "w": -1.0}, {"x": 2.0, "w": 0.25}])
    assert report.ok and report.grading is None and report.agreement.n == 2
    assert set(report.results) == {"fd", "torch", "jax"}
    text = str(report)
    assert text.splitlines()[0] == "gradcheck: ok"
    assert "y = x * w; z = y.tanh() + w ** 2 -> z; inputs x, w" in text
    assert "the oracles agree at 2 of 2 points" in text


def test_inputs_are_inferred_from_the_points_with_lists_as_one_dimensional():
    report = gradcheck.check("z = (v * x).sum()", at={"x": 2.0, "v": [1.0, 2.0, 3.0]})
    assert dict(report.program.inputs) == {"x": None, "v": 3}
    assert report.results["torch"].grads["v"].tolist() == [[2.0, 2.0, 2.0]]


def test_a_disagreement_without_an_engine_is_not_ok_and_is_classified():
    report = gradcheck.check("z = relu(x)", at=[{"x": 0.0}, {"x": 1.0}])
    assert not report.ok
    assert "kink (not graded): dz/dx at x=0.0: torch 0.0, jax 0.0, finite differences 0.5" in str(
        report)
    settled = gradcheck.check("z = relu(x)", at=[{"x": 0.0}], convention="torch")
    assert settled.ok and "graded by torch's convention" in str(settled)


def test_a_subset_of_oracles_and_a_tolerance_can_be_chosen():
    loose = Tolerances(fd=Tolerance(atol=1e-3, rtol=1e-3))
    report = gradcheck.check("z = x.exp()", at={"x": 1.0}, oracles=("fd",), tolerance=loose)
    assert list(report.results) == ["fd"]
    assert report.agreement.quantities[1].tolerance == loose.fd


def test_no_points_and_unknown_inputs_are_refused_with_what_to_do():
    with pytest.raises(ValueError, match="give them with at="):
        gradcheck.check("z = x * 2", inputs={"x": None})
    with pytest.raises(ValueError, match="declare the program's inputs"):
        gradcheck.check("z = x * 2")
    with pytest.raises(ValueError, match="no domain for input y"):
        gradcheck.check("z = x * y", inputs={"x": None, "y": None}, domains={"x": (0, 1)})


# --- domains and hypothesis ---------------------------------------------------------------------


def test_points_drawn_from_domains_keep_the_margin_and_repeat_with_the_seed():
    domains = {"x": (-2.0, 2.0, [0.0]), "v": {"low": 0.0, "high": 1.0}}
    run = dict(inputs={"x": None, "v": 2}, domains=domains, samples=15, margin=0.1)
    report = gradcheck.check("z = abs(x) * v.sum()", **run, seed=3)
    x, v = report.points["x"], report.points["v"]
    assert len(x) == 15 and report.seed == 3
    assert (np.abs(x) > 0.1).all() and (np.abs(x) < 1.9).all()
    assert ((v > 0.1) & (v < 0.9)).all()
    assert report.ok  # no point near abs's kink
    again = gradcheck.check("z = abs(x) * v.sum()", **run, seed=3)
    other = gradcheck.check("z = abs(x) * v.sum()", **run, seed=4)
    assert np.array_equal(again.points["x"], x) and not np.array_equal(other.points["x"], x)
    assert "points: 15 (drawn with seed 3)" in str(report)


def test_listed_and_drawn_points_are_checked_together():
    report = gradcheck.check("z = x ** 3", at=[{"x": 0.5}], domains={"x": (1, 2)}, samples=4)
    assert report.points["x"][0] == 0.5 and len(report.points["x"]) == 5


@given(scalars(Interval(-1.0, 2.0, (0.0, 1.0, 5.0)), margin=0.1))
def test_scalars_keep_a_set_distance_from_edges_and_avoided_points(x):
    assert -0.9 < x < 1.9 and abs(x) > 0.1 and abs(x - 1.0) > 0.1


@given(vectors(Interval(0.0, 1.0), 4, margin=0.25))
def test_vectors_have_their_length_and_keep_the_margin(v):
    assert len(v) == 4 and all(0.25 < e < 0.75 for e in v)


@pytest.mark.parametrize("name", sorted(OPS))
def test_operation_arguments_come_from_the_operation_domains(name):
    op = OPS[name]
    for args in draw(arguments(op, margin=0.05), 20, 0):
        for a, domain in zip(args, op.domains):
            assert domain.low + 0.05 < a < domain.high - 0.05
            assert all(abs(a - k) > 0.05 for k in domain.avoid)


def test_a_domain_with_no_room_left_is_refused():
    assert allowed(Interval(0, 1, (0.5,)), 0.1) == [(0.1, 0.4), (0.6, 0.9)]
    with pytest.raises(ValueError, match="leaves no room"):
        allowed(Interval(0, 1), 0.5)
    with pytest.raises(ValueError, match="margin must be >= 0"):
        allowed(Interval(0, 1), -0.1)
    with pytest.raises(ValueError, match="no domains? for input"):
        points({"x": None, "y": 2}, {"x": Interval()})


def test_draw_is_reproducible_and_ignores_the_test_profile():
    strategy = points({"x": None, "v": 2}, {"x": Interval(), "v": Interval(0, 1)})
    assert draw(strategy, 10, 7) == draw(strategy, 10, 7) != draw(strategy, 10, 8)
    assert len(draw(st.integers(), 5, 0)) == 5


# --- tracing functions --------------------------------------------------------------------------


def _on_torch(function, point):
    """Run `function` itself on float64 torch tensors: value and gradients (the ground truth of
    what it computes)."""
    leaves = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in point.items()}
    out = function(**leaves)
    (out if out.dim() == 0 else out.sum()).backward()
    return out.detach().numpy(), {k: t.grad.numpy() for k, t in leaves.items()}


def test_a_traced_function_computes_what_the_function_computes():
    def f(x, v):
        total = 0
        for e in v:  # iteration, a Python loop, builtin sum and abs, reflected operators
            total = total + e * x
        return 2 - (total / 3).tanh() + abs(x) ** 2 * v[-1] + sum(v).exp() + 1 / v.mean()

    point = {"x": -0.7, "v": [0.3, -1.2, 2.0]}
    program = trace(f, {"x": None, "v": 3})
    assert program.output_name == "f"
    result = compute(program, [point], ["x", "v"], ("torch",))["torch"]
    value, grads = _on_torch(f, point)
    assert np.allclose(result.value, value, rtol=1e-14)
    assert np.allclose(result.grads["x"], grads["x"], rtol=1e-14)
    assert np.allclose(result.grads["v"], grads["v"], rtol=1e-14)


def test_check_traces_a_function_and_names_reports_after_it():
    def energy(x, y):
        return (x * y).sin() * -2.5 + y.exp()

    report = gradcheck.check(energy, at={"x": 0.3, "y": 1.1})
    assert report.ok and dict(report.program.inputs) == {"x": None, "y": None}
    assert report.agreement.quantities[1].label == "denergy/dx"


@pytest.mark.parametrize("function, words", [
    (lambda x: x if x > 0 else -x, "branches on a tensor's value"),
    (lambda x: x.exp() if x == 0 else x, "branches on a tensor's value"),
    (lambda x: math.exp(x), "converts a tensor to a number"),
    (lambda x: x * "a", "str values cannot be traced"),
    (lambda x: x * math.inf, "not a finite number"),
    (lambda x: x[0], "a scalar cannot be indexed"),
])
def test_what_cannot_be_traced_is_refused_with_the_reason(function, words):
    with pytest.raises(TypeError, match=words):
        trace(function, {"x": None})


def test_a_traced_shape_error_points_at_the_recorded_step():
    with pytest.raises(ValueError, match=r"lengths 2 and 3 do not match \(in the recorded step "
                                         r"`t0 = v \+ w`\)"):
        trace(lambda v, w: v + w, {"v": 2, "w": 3})


def test_tracing_avoids_names_of_inputs():
    program = trace(lambda t0, t1: t0 * t1 + 1, {"t0": None, "t1": None})
    assert "tt0 = t0 * t1" in program.source


# --- engines ------------------------------------------------------------------------------------


def test_torch_and_the_reference_engine_pass_in_process():
    source = "a = v * x\nz = a.tanh().sum() + (x * 3).exp() / v[0]"
    at = [{"x": 0.4, "v": [1.5, -0.5]}, {"x": -1.0, "v": [2.0, 0.25]}]
    for engine, name in ((torch_engine, "gradcheck.engine.torch_engine"),
                         (reference, "gradcheck._reference")):
        report = gradcheck.check(source, at=at, engine=engine)
        assert report.ok, str(report)
        assert report.engine == name and f"engine {name}: passed" in str(report)
        assert [v.status for v in report.grading.verdicts] == ["passed", "passed"]


def test_a_wrong_local_derivative_is_caught_and_reported_with_its_input():
    right = _scalar_engine(lambda t: 1 - t * t)
    wrong = _scalar_engine(lambda t: 1 - t)
    source = "y = x * w + 1\nz = y.tanh() * 2"
    at = [{"x": 0.5, "w": 2.0}, {"x": -0.1, "w": 0.3}]
    assert gradcheck.check(source, at=at, engine=right).ok
    report = gradcheck.check(source, at=at, engine=wrong)
    assert not report.ok and report.grading.count("failed") == 2
    text = str(report)
    assert "engine scalar_engine: FAILED at 2 of 2 points" in text
    assert "dz/dx at x=0.5, w=2.0: expected " in text and "abs error" in text


def test_an_engine_that_raises_is_reported_with_the_phase():
    broken = types.ModuleType("broken")

    def tensor(data, requires_grad=False):
        raise RuntimeError("no tensors today")

    broken.tensor = tensor
    report = gradcheck.check("z = x * 2", at={"x": 1.0}, engine=broken)
    assert not report.ok
    assert report.grading.verdicts[0].error == "RuntimeError in forward: no tensors today"


def test_a_missing_oracle_is_reported_as_skipped_in_a_real_process():
    code = textwrap.dedent("""
        import sys
        sys.modules["torch"] = None  # importing fails, as where they are not installed
        sys.modules["jax"] = None
        import gradcheck
        print(gradcheck.check("z = x.exp() * 2", at={"x": 0.5}))
    """)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, check=True)
    assert "  torch: skipped: torch is not installed" in child.stdout
    assert "  jax: skipped: jax is not installed" in child.stdout
    assert "oracles: finite differences\n" in child.stdout
    assert child.stdout.startswith("gradcheck: ok")


def test_a_kink_is_explained_by_its_operation_and_source_position():
    report = gradcheck.check("z = relu(x - 1)", at={"x": 1.0})
    (d,) = report.agreement.disagreements()
    assert d.reason == KINK and "relu in `relu(x - 1)` (line 1, column 5)" in d.detail


def test_of_two_kinked_operations_the_one_at_its_kink_is_named():
    # At x = 0 both stencils cross: abs's argument is 1e-7 from its kink, relu's is on it. The
    # first kinked operation of the program is not the one to blame.
    for source, point, named in (("a = (x - 1e-7).abs()\nb = x.relu()\nz = a + b", 0.0,
                                  "relu in `x.relu()` (line 2, column 5)"),
                                 ("a = x.relu()\nb = (x - 1e-7).abs()\nz = a + b", 1e-7,
                                  "abs in `(x - 1e-7).abs()` (line 2, column 5)")):
        (d,) = gradcheck.check(source, at={"x": point}).agreement.disagreements()
        assert d.detail.endswith(named)
    # second order: the rows of finite-difference gradients cross both kinks at x = 0
    report = gradcheck.check("a = x.abs()\nb = (x - 1e-7).relu()\nz = a + b", at={"x": 0.0},
                             order=2)
    assert [d.detail for d in report.agreement.disagreements() if d.detail] == [
        "the finite-difference stencil crosses the kink of abs in `x.abs()` (line 1, column 5)"]


def most_digits(text: str) -> int:
    """The most significant digits of any number written in `text`."""
    mantissas = re.findall(r"(?<![\w.])-?(\d+(?:\.\d+)?)(?:e[-+]?\d+)?(?![\w.])", text)
    return max(len(m.replace(".", "").lstrip("0").rstrip("0") or "0") for m in mantissas)


def test_every_number_of_a_report_has_at_most_10_significant_digits():
    report = gradcheck.check("z = x * y + x", at={"x": 0.1 + 0.2, "y": 8.770195113480294e-247},
                             engine=mutant("mul"))
    text = str(report)
    assert "At x=0.3, y=8.770195113e-247, the backward of `x * y`" in text
    assert most_digits(text) == 10 and "0.30000000000000004" not in text


def test_numbers_that_read_the_same_are_told_apart_by_their_difference():
    assert pair_text(0.1 + 0.2, 0.3) == ("0.3 + 5.55e-17", "0.3")
    assert pair_text([1.0, 0.3], [1.0, 0.1 + 0.2]) == (
        "[1.0, 0.3] (element 1 is 0.3 - 5.55e-17)", "[1.0, 0.3]")
    assert pair_text(-0.0, 0.0) == ("-0.0", "0.0")
    assert number_text(123456789012.0) == "1.23456789e+11" and number_text(3) == "3.0"
    assert number_text(list(range(8))) == "[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, ... (8 values)]"


def mutant(name: str) -> types.ModuleType:
    """The reference engine with one of tests/engines/mutant.py's bugs."""
    sys.path.insert(0, str(Path(__file__).parent / "engines"))
    try:
        from mutant import load
    finally:
        sys.path.pop(0)
    return load(name)


def test_a_failed_check_with_an_engine_names_the_faulty_operation():
    report = gradcheck.check("y = x * 3\nz = y.exp() + x", at={"x": 0.5}, engine=mutant("exp"))
    assert not report.ok
    assert report.diagnosis.splitlines()[0] == (
        "At x=0.5, the backward of `y.exp()` (ExpBackward0, line 2 of the program) passed 1.0 to "
        "y; it should pass 4.48168907.")
    assert report.diagnosis.splitlines()[0] in str(report)


def test_a_check_where_nothing_could_be_graded_is_not_ok():
    """At a kink that jax and finite differences see differently, no point can be graded: the
    engine is not said to pass a check of nothing."""
    import torch

    report = gradcheck.check("y = (a - b).abs()", at={"a": 1.0, "b": 1.0}, oracles=("jax", "fd"),
                             engine=torch)
    assert report.grading.nothing_graded and not report.ok
    assert str(report).splitlines()[0] == "gradcheck: NOTHING GRADED"
    assert "  engine torch: nothing graded" in str(report)
