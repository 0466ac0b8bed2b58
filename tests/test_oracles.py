"""The three oracles against each other, over every operation's domain, and their batching."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gradcheck.bank.domains import scalars, vectors
from gradcheck.bank.tolerances import Tolerances
from gradcheck.oracles import OracleResult, as_batch, compute, jax_grad, reached_inputs, registers
from gradcheck.program.language import engine_apply, evaluate, parse
from gradcheck.program.ops import BINARY, FUNCTION, OPS, REDUCTION, SELECT, UNARY, Interval

TOL = Tolerances()
MARGIN = 0.05  # keep sampled arguments this far from kinks, poles and domain edges
POINTS = 6  # one batch shape per operation, so jax compiles each program once


def _close(a: np.ndarray, b: np.ndarray, tol) -> bool:
    return bool(tol.agree(a, b).all())


def _program_for(op):
    """The smallest program that applies `op`, and a strategy for a batch of its points."""
    if op.kind == BINARY:
        source, inputs = f"z = a {op.symbol} b", {"a": None, "b": None}
        point = st.fixed_dictionaries({"a": scalars(op.domains[0], MARGIN),
                                       "b": scalars(op.domains[1], MARGIN)})
    elif op.kind == UNARY:
        source, inputs = "z = -a", {"a": None}
        point = st.fixed_dictionaries({"a": scalars(op.domains[0], MARGIN)})
    elif op.kind == FUNCTION:
        source, inputs = f"z = {op.name}(a)", {"a": None}
        point = st.fixed_dictionaries({"a": scalars(op.domains[0], MARGIN)})
    elif op.kind == REDUCTION:
        source, inputs = f"z = {op.name}(v)", {"v": 3}
        point = st.fixed_dictionaries({"v": vectors(op.domains[0], 3, MARGIN)})
    else:
        assert op.kind == SELECT
        source, inputs = "z = v[1]", {"v": 3}
        point = st.fixed_dictionaries({"v": vectors(op.domains[0], 3, MARGIN)})
    return parse(source, inputs), st.lists(point, min_size=POINTS, max_size=POINTS)


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_operation_has_the_same_derivative_by_each_oracle_over_its_domain(name):
    program, batches = _program_for(OPS[name])
    wanted = list(program.inputs)

    @settings(max_examples=15)
    @given(batches)
    def each_oracle_agrees(points):
        results = compute(program, points, wanted)
        fd, th, jx = results["fd"], results["torch"], results["jax"]
        assert _close(th.value, jx.value, TOL.analytic) and _close(fd.value, th.value,
                                                                   TOL.analytic)
        for input_name in wanted:
            assert _close(th.grads[input_name], jx.grads[input_name], TOL.analytic)
            assert _close(fd.grads[input_name], th.grads[input_name], TOL.fd)
            assert _close(fd.grads[input_name], jx.grads[input_name], TOL.fd)
            assert np.isfinite(fd.grads[input_name]).all()

    each_oracle_agrees()


def test_a_twenty_operation_composition_agrees_across_oracles():
    source = ("a = (x * y).tanh()\nc = exp(-x ** 2)\nd = a * c + y\ne = 1 + d ** 2\n"
              "f = sigmoid(log(e) - x)\ng = sin(f) * cos(y)\nz = g / sqrt(e) + (v * x).sum()")
    program = parse(source, {"x": None, "y": None, "v": 3})
    rng = np.random.default_rng(1)
    batch = {"x": rng.uniform(-2, 2, 50), "y": rng.uniform(-2, 2, 50),
             "v": rng.uniform(-2, 2, (50, 3))}
    results = compute(program, batch, ["x", "y", "v"])
    for name in ("x", "y", "v"):
        assert _close(results["torch"].grads[name], results["jax"].grads[name], TOL.analytic)
        assert _close(results["fd"].grads[name], results["torch"].grads[name], TOL.fd)


def test_batched_torch_gradients_equal_one_backward_per_point_on_torch_scalars():
    program = parse("a = v * x\nb = a.tanh().mean() + v[2] ** 2\nz = b * x.sigmoid()",
                    {"x": None, "v": 3})
    rng = np.random.default_rng(2)
    batch = {"x": rng.uniform(-2, 2, 7), "v": rng.uniform(-2, 2, (7, 3))}
    batched = compute(program, batch, ["x", "v"], ("torch",))["torch"]
    for i in range(7):
        x = torch.tensor(batch["x"][i], dtype=torch.float64, requires_grad=True)
        v = torch.tensor(batch["v"][i], dtype=torch.float64, requires_grad=True)
        out = evaluate(program, {"x": x, "v": v}, engine_apply)[program.output]
        out.backward()
        assert batched.value[i] == out.item()
        assert batched.grads["x"][i] == x.grad.item()
        assert batched.grads["v"][i].tolist() == v.grad.tolist()


def test_finite_differences_use_the_accurate_stencil_on_smooth_functions():
    program = parse("z = exp(x) * sin(3 * x) + x ** 3", {"x": None})
    batch = {"x": np.linspace(-3, 3, 41)}
    results = compute(program, batch, ["x"], ("fd", "torch"))
    fd, exact = results["fd"], results["torch"].grads["x"]
    error = np.abs(fd.grads["x"] - exact) / np.maximum(1, np.abs(exact))
    central_error = np.abs(fd.central["x"] - exact) / np.maximum(1, np.abs(exact))
    assert error.max() < 1e-9
    # the central difference alone is typically an order of magnitude or two worse
    assert np.median(central_error) > 10 * np.median(error)


def test_a_wide_stencil_across_a_kink_gives_way_to_the_central_difference():
    program = parse("z = relu(x) * 3", {"x": None})
    fd = compute(program, {"x": np.array([1e-4, -1e-4])}, ["x"], ("fd",))["fd"]
    assert np.allclose(fd.grads["x"], [3.0, 0.0], atol=1e-6)
    relu = next(i for i, node in enumerate(program.nodes) if node.op == "relu")
    assert fd.crossing["x"].tolist() == [relu, relu]  # the kink is still within reach


def test_a_stencil_across_a_kink_or_an_edge_names_that_node():
    program = parse("y = relu(x)\nz = log(u) + y", {"x": None, "u": None})
    fd = compute(program, [{"x": 0.0, "u": 1.0}, {"x": 1.0, "u": 1e-7}], ["x", "u"],
                 ("fd",))["fd"]
    relu, log = program.names["y"], program.nodes[program.output].args[0]
    assert program.nodes[log].op == "log"
    assert fd.crossing["x"].tolist() == [relu, -1]
    assert fd.crossing["u"].tolist() == [-1, log]


def test_non_finite_values_are_kept_as_such_by_every_oracle():
    program = parse("z = log(x) + sqrt(y)", {"x": None, "y": None})
    results = compute(program, [{"x": -1.0, "y": 1.0}, {"x": 1.0, "y": 0.0},
                                {"x": 0.0, "y": 1.0}], ["x", "y"])
    for name in ("fd", "torch", "jax"):
        r = results[name]
        assert np.isnan(r.value[0]) and r.value[2] == -np.inf
    for name in ("torch", "jax"):
        # the analytic derivative 1/x does not look at log's domain: -1 at x=-1
        assert results[name].grads["x"][0] == -1.0
        assert results[name].grads["y"][1] == np.inf
        assert results[name].grads["x"][2] == np.inf
    fd = results["fd"].grads
    assert np.isnan(fd["x"][0]) and not np.isfinite(fd["y"][1]) and not np.isfinite(fd["x"][2])


def test_an_input_the_output_ignores_gets_zero_gradients_and_is_not_reached():
    program = parse("z = x * 2", {"x": None, "y": None})
    results = compute(program, [{"x": 1.0, "y": 2.0}], ["x", "y"])
    assert reached_inputs(program) == {"x"}
    for r in results.values():
        assert r.grads["y"].tolist() == [0.0] and r.grads["x"].tolist() == [2.0]


def test_a_one_dimensional_output_has_values_per_element_and_gradients_of_its_sum():
    program = parse("z = v * x", {"x": None, "v": 2})
    results = compute(program, [{"x": 3.0, "v": [1.0, 2.0]}, {"x": -1.0, "v": [0.5, 4.0]}],
                      ["x", "v"])
    for r in results.values():
        assert r.value.tolist() == [[3.0, 6.0], [-0.5, -4.0]]
        assert np.allclose(r.grads["x"], [3.0, 4.5]) and np.allclose(r.grads["v"],
                                                                     [[3, 3], [-1, -1]])


def test_only_the_inputs_that_require_grad_are_differentiated():
    program = parse("z = x * y", {"x": None, "y": None})
    results = compute(program, [{"x": 2.0, "y": 5.0}], ["y"])
    for r in results.values():
        assert list(r.grads) == ["y"] and np.allclose(r.grads["y"], [2.0])


def _assert_same(found: OracleResult, expected: OracleResult) -> None:
    for a, b in [(found.value, expected.value),
                 *((found.grads[k], expected.grads[k]) for k in expected.grads)]:
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-300, equal_nan=True)
        assert np.array_equal(np.isinf(a) & (a > 0), np.isinf(b) & (b > 0))


INTERPRETED = [  # every kind of instruction and register the interpreter lowers
    ("z = a + b - a * b / b ** 2.5 + 2 - a", {"a": None, "b": None}),
    ("z = -(a.exp() + a.tanh() + a.sigmoid() + a.sin() + a.cos() + a.abs() + a.relu())",
     {"a": None, "b": None}),
    ("z = (v * a).log().sum() + v.sqrt().mean() + v[2] + a.sum() + b.mean()",
     {"a": None, "b": None, "v": 3}),
    ("z = v * a + b", {"a": None, "b": None, "v": 3}),  # a 1-D output, summed to differentiate
    ("z = (1.0 / (a * -0.0)).tanh() + a * 0.0", {"a": None}),  # 0.0 and -0.0 kept apart
]


@pytest.mark.parametrize("source, inputs", INTERPRETED)
def test_jax_interpreter_gives_what_jax_gives_tracing_the_program(source, inputs):
    program = parse(source, inputs)
    assert jax_grad._code(program) is not None
    rng = np.random.default_rng(7)
    n = 150  # three calls of the interpreter's LANES points
    batch = {name: rng.uniform(0.5, 2.0, (n,) if size is None else (n, size))
             for name, size in inputs.items()}
    for name in batch:  # kinks and edges: each convention must be jax's own
        batch[name][:3] = 0.0
    requires_grad = tuple(inputs)
    _assert_same(jax_grad.run_many([(program, batch, requires_grad)])[0],
                 jax_grad.run(program, batch, requires_grad))


def test_a_dead_instruction_leaves_no_nan_in_the_gradient():
    """As in a scalar engine, an element the output ignores adds nothing, not 0 * inf (which
    jax tracing the vector `log` gives: NaN for all of v)."""
    program = parse("w = v.log()\nz = w[0] + v[1]", {"v": 3})
    code = registers.lower(program)
    assert [registers.INSTRUCTIONS[op].name for op, _, _ in code.instructions] == ["log", "add"]
    [result] = jax_grad.run_many([(program, {"v": np.array([[1.0, 0.0, 0.0]])}, ("v",))])
    assert result.grads["v"].tolist() == [[1.0, 1.0, 0.0]]


def test_jax_compiles_a_program_once_and_its_interpreter_once_for_all_programs():
    source = "z = (x * y).sin()"
    program = parse(source, {"x": None, "y": None})
    batch = {"x": np.linspace(0, 1, 5), "y": np.linspace(1, 2, 5)}
    compute(program, batch, ["x", "y"], ("jax",))
    function = jax_grad.compiled(program, ("x", "y"))
    again = parse(source, {"x": None, "y": None})
    smaller = compute(again, {k: v[:3] for k, v in batch.items()}, ["x", "y"], ("jax",))["jax"]
    assert jax_grad.compiled(again, ("x", "y")) is function
    assert function._cache_size() == 1  # 5 and 3 points share one padded batch shape
    x, y = batch["x"][:3], batch["y"][:3]
    assert np.allclose(smaller.grads["x"], np.cos(x * y) * y)
    assert jax_grad.compiled(program, ("x",)) is not function

    # a bank's programs: one compiled interpreter for the short ones, a long one traced
    size = jax_grad.STEPS  # `size` products and `size - 1` sums: too long to interpret
    long = parse("z = (v * x).sum()", {"v": size, "x": None})
    wide = {"v": np.linspace(0, 1, 5 * size).reshape(5, size), "x": np.linspace(1, 2, 5)}
    assert jax_grad._code(program) is not None and jax_grad._code(long) is None
    short, product, summed = jax_grad.run_many([
        (program, batch, ("x", "y")), (parse("z = x * y", {"x": None, "y": None}), batch, ("x",)),
        (long, wide, ("v", "x"))])
    assert len(jax_grad._INTERPRETER) == 1
    assert np.allclose(short.grads["x"], np.cos(batch["x"] * batch["y"]) * batch["y"])
    assert np.allclose(product.grads["x"], batch["y"])
    assert np.allclose(summed.grads["x"], wide["v"].sum(axis=1))


def test_jax_run_many_gives_each_point_the_same_result_whatever_runs_beside_it():
    """What keeps an answer key equal to live grading to the bit: a result depends on the
    program and the point only, however the checks are grouped into calls."""
    cases = [("z = (x * y).sin() + x.relu()", {"x": None, "y": None}, ("x", "y")),
             ("z = (v * v).sum().tanh() + v[1].exp()", {"v": 3}, ("v",)),
             ("z = x ** 0.0 + c * x.abs()", {"x": None, "c": None}, ("x",)),
             ("z = (v * x).sin().sum()", {"v": jax_grad.STEPS, "x": None}, ("v", "x"))]
    rng = np.random.default_rng(3)
    jobs = []
    for source, inputs, requires_grad in cases:
        program = parse(source, inputs)
        n = int(rng.integers(2, 150))  # one to three calls of the interpreter
        batch = {name: rng.uniform(-2, 2, (n,) if size is None else (n, size))
                 for name, size in inputs.items()}
        batch[next(iter(inputs))][0] = 0.0  # a kink: each convention is jax's own here too
        jobs.append((program, batch, requires_grad))
    together = jax_grad.run_many(jobs)
    for (program, batch, requires_grad), merged in zip(jobs, together):
        alone = jax_grad.run_many([(program, batch, requires_grad)])[0]
        last = jax_grad.run_many([(program, {k: v[-1:] for k, v in batch.items()},
                                   requires_grad)])[0]
        assert list(merged.grads) == list(requires_grad)
        for found, expected, one in [(merged.value, alone.value, last.value),
                                     *((merged.grads[k], alone.grads[k], last.grads[k])
                                       for k in requires_grad)]:
            np.testing.assert_array_equal(found, expected)
            np.testing.assert_array_equal(found[-1:], one)
        _assert_same(merged, jax_grad.run(program, batch, requires_grad))


def test_as_batch_checks_every_point_against_the_inputs():
    program = parse("z = x * v.sum()", {"x": None, "v": 2})
    batch = as_batch(program, [{"x": 1, "v": [1, 2]}, {"x": 2.5, "v": [3, 4]}])
    assert batch["x"].dtype == np.float64 and batch["v"].shape == (2, 2)
    with pytest.raises(ValueError, match="point 1 has no value for v"):
        as_batch(program, [{"x": 1, "v": [1, 2]}, {"x": 2}])
    with pytest.raises(ValueError, match="'v' must be a list of 2 numbers"):
        as_batch(program, [{"x": 1, "v": [1, 2, 3]}])
    with pytest.raises(ValueError, match="'x' must be a number"):
        as_batch(program, [{"x": [1.0], "v": [1, 2]}])
    with pytest.raises(ValueError, match="'v' must be a list of 2 numbers at every point"):
        as_batch(program, [{"x": 1, "v": [1, 2]}, {"x": 2, "v": [1, 2, 3]}])  # ragged
    assert as_batch(program, [])["v"].shape == (0, 2)
    with pytest.raises(ValueError, match="pass a single point as a list"):
        as_batch(program, {"x": 1.0, "v": [1, 2]})


def test_unknown_oracles_and_requires_grad_names_are_refused():
    program = parse("z = x * 2", {"x": None})
    with pytest.raises(ValueError, match="unknown oracle 'tf'"):
        compute(program, [{"x": 1.0}], ["x"], ("tf",))
    with pytest.raises(ValueError, match="names q, which are not inputs"):
        compute(program, [{"x": 1.0}], ["q"])


def test_oracles_whose_library_cannot_be_imported_are_skipped_in_a_real_process():
    # A child process in which importing torch and jax fails, as on a machine without them.
    code = textwrap.dedent("""
        import json, sys
        sys.modules["torch"] = None
        sys.modules["jax"] = None
        from gradcheck.oracles import Skipped, compute
        from gradcheck.program.language import parse
        program = parse("z = x.exp()", {"x": None})
        results = compute(program, [{"x": 0.0}, {"x": 1.0}], ["x"])
        print(json.dumps({name: r.reason if isinstance(r, Skipped) else r.grads["x"].tolist()
                          for name, r in results.items()}))
    """)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, check=True)
    seen = json.loads(child.stdout)
    assert seen["torch"] == "skipped: torch is not installed"
    assert seen["jax"] == "skipped: jax is not installed"
    assert np.allclose(seen["fd"], [1.0, np.e], rtol=1e-9)
    assert isinstance(compute(parse("z = x", {"x": None}), [{"x": 1.0}], ["x"],
                              ("torch",))["torch"], OracleResult)  # here torch is installed


def test_sampling_domains_keep_their_margin_in_the_operation_table():
    # The table's domains leave room for the margin used above.
    for op in OPS.values():
        for domain in op.domains:
            assert isinstance(domain, Interval) and domain.high - domain.low > 4 * MARGIN
