"""Second order: the reference engine's create_graph and grad() against live torch, and the
worker's Hessian requests on both.

Every operation of the table is differentiated twice by both engines through the same request
the grader sends (`hessian`), at points inside its domain, and the rows must agree; the rules of
torch's double backward (accumulation into a .grad with history, retain_graph's default, grad()
and allow_unused) are compared step by step.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from gradcheck.bank.bundled import reference_path  # noqa: E402
from gradcheck.engine import handler, torch_engine  # noqa: E402
from gradcheck.engine.worker import load_submission  # noqa: E402
from gradcheck.program.language import parse  # noqa: E402
from gradcheck.program.ops import BINARY, FUNCTION, OPS, REDUCTION, SELECT, UNARY  # noqa: E402

REF = load_submission(reference_path())  # as the worker loads a submission


def _inside(op: Any, k: int) -> float:
    """A value inside the op's k-th domain, clear of its kinks and edges."""
    interval = op.domains[min(k, len(op.domains) - 1)]
    return interval.low + 0.37 * (interval.high - interval.low) + 0.011 * k


def forms(op: Any) -> list[tuple[str, dict[str, Any]]]:
    """Programs with a scalar output that use `op` on tensors, with a point inside its domain;
    each multiplies by another input so that mixed partials appear too."""
    a, b = _inside(op, 0), _inside(op, 1)
    if op.kind == BINARY:
        s = op.symbol
        return [(f"z = (a {s} b) * c", {"a": a, "b": b, "c": 1.3}),
                (f"z = (a {s} 1.5) * a", {"a": a}) if s != "**" else
                (f"z = a {s} 2.5", {"a": a}),
                (f"z = (1.5 {s} a) * a", {"a": b if s == "/" else a}),
                (f"z = (v {s} w).sum()", {"v": [a, a + 0.2], "w": [b, b + 0.1]})]
    if op.kind == UNARY:
        return [("z = (-a) * a", {"a": a})]
    if op.name == "detach":  # only the other factor's history is differentiated
        return [("z = detach(a * c) * a * c", {"a": a, "c": 0.8}),
                ("z = (v.detach() * v * v).sum()", {"v": [a, a + 0.25]})]
    if op.kind == FUNCTION:
        return [(f"z = {op.name}(a) * {op.name}(a * c)", {"a": a, "c": 0.8}),
                (f"z = (v.{op.name}() * v).sum()", {"v": [a, a + 0.25]})]
    if op.kind == REDUCTION:
        return [(f"z = {op.name}(v * v) * {op.name}(v)", {"v": [a, a + 0.5, a - 0.3]})]
    assert op.kind == SELECT
    return [("z = v[1] * v[0] * v[-1]", {"v": [a, a + 0.5, a - 0.3]})]


def hessian(engine: Any, source: str, point: dict[str, Any], vector: Any = None) -> Any:
    program = parse(source, {n: len(v) if isinstance(v, list) else None
                             for n, v in point.items()})
    request = {"kind": "hessian", "program": program.spec(), "points": [point],
               "requires_grad": list(point), "vector": vector}
    return handler.handle(engine, request)["results"]


def assert_rows_agree(mine: list[dict], torchs: list[dict]) -> None:
    assert len(mine) == len(torchs)
    for got, want in zip(mine, torchs):
        assert got["error"] is None and want["error"] is None, (got, want)
        assert got["value"] == pytest.approx(want["value"], rel=1e-12, abs=1e-12)
        for name, g in want["grads"].items():
            assert got["grads"][name] == pytest.approx(g, rel=1e-11, abs=1e-12), name


@pytest.mark.parametrize("op", OPS.values(), ids=list(OPS))
def test_every_op_differentiated_twice_matches_torch(op):
    for source, point in forms(op):
        assert_rows_agree(hessian(REF, source, point), hessian(torch_engine, source, point))


def test_hessian_and_hessian_vector_product_of_the_issues_example():
    rows = hessian(REF, "L = a * b + b ** 2", {"a": 2.0, "b": 4.0})
    assert [(r["value"], r["grads"]) for r in rows] == [(4.0, {"a": 0.0, "b": 1.0}),
                                                          (10.0, {"a": 1.0, "b": 2.0})]
    (hv,) = hessian(REF, "L = a * b + b ** 2", {"a": 2.0, "b": 4.0}, {"a": 1.0, "b": -1.0})
    assert hv == {"value": -6.0, "grads": {"a": -1.0, "b": -1.0}, "error": None}


@pytest.mark.parametrize("source", ["z = relu(x) * relu(x)", "z = abs(x) * x", "z = relu(x)"])
@pytest.mark.parametrize("x", [0.0, -1.5, 2.0])
def test_kinks_second_derivative_as_torch(source, x):
    assert_rows_agree(hessian(REF, source, {"x": x}), hessian(torch_engine, source, {"x": x}))


def _script(engine: Any) -> list[Any]:
    """torch's double-backward rules, observed: values and flags after each step."""
    seen: list[Any] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = engine.tensor(3.0, requires_grad=True)
        z = 2 * x ** 2 + 1
        z.backward(create_graph=True)
        seen += [x.grad.tolist(), x.grad.requires_grad, x.grad.is_leaf, x.grad.grad_fn is None]
        x.grad.backward()
        seen += [x.grad.tolist(), x.grad.requires_grad]
        z.backward()  # retain_graph defaulted to True
        seen.append(x.grad.tolist())
        y = engine.tensor(3.0, requires_grad=True)
        (2 * y + 1).backward(create_graph=True)
        seen += [y.grad.tolist(), y.grad.requires_grad, y.grad.is_leaf]
        a = engine.tensor(2.0, requires_grad=True)
        b = engine.tensor(4.0, requires_grad=True)
        loss = a * b + b ** 2
        ga, gb = engine.grad(loss, (a, b), create_graph=True)
        seen += [ga.tolist(), gb.tolist(), ga.requires_grad, a.grad is None]
        unused = engine.grad(ga, (a, b), allow_unused=True, retain_graph=True)
        seen.append([None if g is None else g.tolist() for g in unused])
        seen.append([g.tolist() for g in engine.grad(gb, (a, b), retain_graph=True)])
        try:
            engine.grad(ga, (a, b))
        except RuntimeError as exc:
            seen.append(str(exc).split(".")[0])
        v = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
        (g,) = engine.grad((v * v * v).sum(), v, create_graph=True)
        seen += [g.tolist(), g.requires_grad]
        seen.append(engine.grad((g * engine.tensor([1.0, 0.0, 1.0])).sum(), v)[0].tolist())
        w = engine.tensor(1.0, requires_grad=True)
        out = w.exp() * 2
        out.backward(create_graph=True)
        try:
            out.backward(retain_graph=False)
            out.backward()
        except RuntimeError as exc:
            seen.append(str(exc).split(".")[0])
    return seen


def test_double_backward_rules_match_torch():
    assert _script(REF) == _script(torch_engine)


def test_a_deep_chain_differentiates_twice_without_recursion():
    x = REF.tensor(0.5, requires_grad=True)
    y = x
    for _ in range(20_000):
        y = (y * 0.9999).sin() + 0.0001
    (g,) = REF.grad(y, x, create_graph=True)
    (h,) = REF.grad(g, x)
    assert math.isfinite(g.tolist()) and math.isfinite(h.tolist())


# --- the oracles, the hessian check and the behaviour words, graded --------------------------------

from gradcheck.bank.loader import load_exercise  # noqa: E402
from gradcheck.bank.bundled import bank_dir  # noqa: E402
from gradcheck.course.mutants import CATALOGUE  # noqa: E402
from gradcheck.course.mutation import mutate  # noqa: E402
from gradcheck.grading import compare  # noqa: E402
from gradcheck.grading.grader import Grader  # noqa: E402
from gradcheck.grading.plan import torch_request  # noqa: E402
from gradcheck.oracles import second_order  # noqa: E402

HIGHER = bank_dir() / "08-higher-order"


def test_three_oracles_agree_on_second_derivatives_and_leave_a_kink_ungraded():
    program = parse("z = (w * w * w).sum() * tanh(x) + relu(x) * x", {"w": 2, "x": None})
    points = [{"w": [1.0, -0.5], "x": 0.7}, {"w": [0.3, 2.0], "x": 0.0}]
    results = second_order.compute(program, points, ["w", "x"])
    rows, _, labels = second_order.expand(points, second_order.directions(
        program, ["w", "x"], None))
    agreement = compare.agree(program, results, ["w", "x"], rows, directions=labels)
    x_row = labels.index("e(x)")
    graded = {q.name: q.graded for q in agreement.quantities}
    assert graded["x"][x_row].all() and graded["w"][:3].all()  # the first point: all agree
    kink = len(labels) // len(points) + x_row  # d/dx of relu(x) * x at the second point, x = 0:
    # finite differences cannot tell
    assert not graded["x"][kink].all()
    assert any(d.reason == compare.KINK for d in agreement.disagreements())
    assert results["torch"].grads["x"][x_row] == pytest.approx(results["jax"].grads["x"][x_row])


def _grade(engine: Any, exercise_file: Any) -> dict[str, Any]:
    with Grader(engine, seed=5) as grader:
        return {r.check: r for r in grader.grade_exercise(load_exercise(exercise_file))}


def _mutant_file(tmp_path: Any, name: str) -> Any:
    mutant = next(m for m in CATALOGUE if m.name == name)
    path = tmp_path / f"{name}.py"
    path.write_text(mutate((reference_path() / "__init__.py").read_text(), mutant))
    return path



def test_the_hessian_check_passes_the_reference_and_fails_a_wrong_second_derivative(tmp_path):
    exercise = HIGHER / "tanh-sigmoid-second.exercise.yaml"
    assert _grade("reference", exercise)["hessian"].status == "passed"
    wrong = _grade(_mutant_file(tmp_path, "tanh-graph-half-detached"), exercise)["hessian"]
    assert wrong.status == "failed" and wrong.score == 0
    assert "d2z/d(direction) dx" in wrong.message and "direction e(x)" in wrong.message
    assert "(direction e(x) is the row of input x: dz/d(direction) is then dz/dx" in (
        wrong.message)


def test_a_hessian_vector_products_legend_names_the_exercises_own_input(tmp_path):
    """A Hessian-vector product's failure is read in the exercise's input (w), not in an x and
    a y it does not have."""
    exercise = HIGHER / "hessian-vector-product.exercise.yaml"
    wrong = _grade(_mutant_file(tmp_path, "mul-own-operand"), exercise)["hessian"]
    assert wrong.status == "failed", wrong.message
    assert ("(direction vector is the check's vector v: df/d(direction) is the gradient dotted "
            "with v, and d2f/d(direction) dw is the derivative of that product with respect to "
            "w") in wrong.message
    assert "input x" not in wrong.message


def test_an_engine_without_create_graph_loses_only_the_checks_that_need_it(tmp_path):
    """Its backward() takes no create_graph: the Hessian check, which calls backward with it,
    is lost; a behaviour check whose steps call grad(..., create_graph=True) alone is not."""
    exercise = tmp_path / "mixed.exercise.yaml"
    exercise.write_text("id: mixed\ntitle: t\ntopic: t\npoints: 3\ninputs:\n  x: {value: 0.5}\n"
                        "program: |\n  z = x * x * x\nchecks:\n  gradients: {}\n"
                        "  hessian: {}\n  behaviour:\n    steps:\n"
                        "      - grad: {wrt: [x], names: [g], create_graph: true}\n"
                        "        expect: [value.g, requires_grad.g]\n"
                        "      - grad: {of: g, wrt: [x], names: [h]}\n"
                        "        expect: [value.h]\n")
    plain = tmp_path / "plain.py"  # the reference's backward without create_graph
    plain.write_text((reference_path() / "__init__.py").read_text().replace(
        "retain_graph: bool | None = None,\n                 create_graph: bool = False)",
        "retain_graph: bool | None = None)").replace(
        "        seeds = _seeds(self, gradient, create_graph, 0)",
        "        create_graph = False\n        seeds = _seeds(self, gradient, create_graph, 0)"))
    results = _grade(plain, exercise)
    assert results["gradients"].status == results["behaviour"].status == "passed"
    assert results["hessian"].status == "failed"
    assert "missing create_graph, which this check uses" in results["hessian"].message


def test_a_backward_that_raises_only_with_create_graph_is_told_that_piece_not_backward(tmp_path):
    """Its backward() works, and raises NotImplementedError when create_graph is asked: the
    Hessian check and a step calling backward(create_graph=True) name that call, not backward(),
    which earns every first-order point."""
    stub = tmp_path / "stub.py"
    stub.write_text((reference_path() / "__init__.py").read_text().replace(
        "        seeds = _seeds(self, gradient, create_graph, 0)",
        "        if create_graph:\n            raise NotImplementedError('not yet')\n"
        "        seeds = _seeds(self, gradient, create_graph, 0)"))
    hessian = _grade(stub, HIGHER / "tanh-sigmoid-second.exercise.yaml")["hessian"]
    steps = _grade(stub, HIGHER / "double-backward-accumulates.exercise.yaml")["behaviour"]
    for result in (hessian, steps):
        assert result.status == "failed" and result.blocked_by == "backward(create_graph=True)"
        assert ("your engine is missing `backward(create_graph=True)`: "
                "`z.backward(create_graph=True)` needs it, and it raised NotImplementedError: "
                "not yet") in result.message


def test_warnings_are_compared_with_torchs(tmp_path):
    exercise = bank_dir() / "02-backward" / "nonleaf-grad-warns.exercise.yaml"
    assert _grade("reference", exercise)["behaviour"].status == "passed"
    silent = tmp_path / "silent.py"
    silent.write_text((reference_path() / "__init__.py").read_text().replace(
        "warnings.warn(_NON_LEAF_GRAD, UserWarning, stacklevel=2)", "pass"))
    result = _grade(silent, exercise)["behaviour"]
    assert result.status == "failed"
    assert "the warnings it issued (their categories) is [] in your engine; torch gives " \
           "['UserWarning']" in result.message


def test_grad_steps_bind_gradients_and_compute_steps_run_on_the_engine():
    program = parse("f = exp(x) - 2 * x", {"x": None})
    steps = [{"grad": {"wrt": ["x"], "names": ["g"], "create_graph": True},
              "expect": ["value.g", "requires_grad.g", "has_grad_fn.g"]},
             {"grad": {"of": "g", "wrt": ["x"], "names": ["h"]}, "expect": ["value.h"]},
             {"compute": {"name": "x1", "expr": "x - g / h"}, "expect": ["value.x1"]}]
    request = {"kind": "behaviour", "program": program.spec(), "point": {"x": 1.5},
               "requires_grad": ["x"], "steps": steps}
    mine, torchs = handler.handle(REF, request), handler.handle(torch_engine, request)
    assert mine == torchs
    e = math.exp(1.5)
    assert torchs["steps"][0]["observed"] == {"value.g": pytest.approx(e - 2),
                                              "requires_grad.g": True, "has_grad_fn.g": True}
    assert torchs["steps"][2]["observed"]["value.x1"] == pytest.approx(1.5 - (e - 2) / e)


PENALTY = """\
id: penalty
title: t
topic: t
points: 3
inputs:
  w: {value: [1.0, -2.0, 0.5]}
program: |
  y = w * w * w
checks:
  behaviour:
    steps:
      - backward: {gradient: [1.0, 0.5, 2.0], create_graph: true}
        expect: [grad.w, grad.w.requires_grad]
      - compute: {name: p, expr: "(w.grad * w.grad).sum()"}
        expect: [value.p, requires_grad.p]
      - backward: {of: p}
        expect: [grad.w]
      - zero_grad: [w]
      - compute: {name: q, expr: "w.grad.sum()"}
        expect: [value.q]
"""


def test_a_compute_step_reads_a_variables_gradient_as_torch_does(tmp_path):
    exercise = tmp_path / "penalty.exercise.yaml"
    exercise.write_text(PENALTY)
    request = torch_request(load_exercise(exercise), "behaviour")
    mine, torchs = handler.handle(REF, request), handler.handle(torch_engine, request)
    assert mine == torchs
    # w.grad = 3 w**2 g; p = sum(w.grad**2); p.backward() adds 2 w.grad * 6 w g into w.grad
    assert [step["observed"] for step in torchs["steps"][:3]] == [
        {"grad.w": [3.0, 6.0, 1.5], "grad.w.requires_grad": True},
        {"value.p": 47.25, "requires_grad.p": True}, {"grad.w": [39.0, -66.0, 19.5]}]
    assert torchs["steps"][4]["error"]["type"] == "TypeError"
    assert torchs["steps"][4]["error"]["message"] == "w.grad is None, not a tensor"
    for engine in ("torch", "reference"):
        result = _grade(engine, exercise)["behaviour"]
        assert result.status == "passed", result.message


UNREADABLE = """\
id: unreadable
title: t
topic: t
points: 2
inputs:
  x: {value: 1.5}
  w: {value: 2.0, requires_grad: false}
  u: {value: 0.5}
program: |
  z = x * w
checks:
  behaviour:
    steps:
      # w does not require grad: grad() raises and never binds gw
      - grad: {wrt: [w], names: [gw], retain_graph: true}
        expect: [value.gw, requires_grad.gw, is_leaf.gw, has_grad_fn.gw, grad.gw]
      # z does not use u: gu is None, which has no requires_grad
      - grad: {wrt: [x, u], names: [gx, gu], allow_unused: true, retain_graph: true}
        expect: [value.gx, requires_grad.gu]
      - backward: {}
        expect: [grad.x, grad.w]
"""


def test_what_torch_cannot_read_after_a_step_is_matched_by_the_same_error(tmp_path):
    exercise = tmp_path / "unreadable.exercise.yaml"
    exercise.write_text(UNREADABLE)
    for engine in ("torch", "reference"):
        result = _grade(engine, exercise)["behaviour"]
        assert result.status == "passed", result.message
    floats = tmp_path / "floats.py"  # the reference, with 0.0 where torch gives None
    floats.write_text((reference_path() / "__init__.py").read_text().replace(
        "            results.append(None)", "            results.append(0.0)"))
    result = _grade(floats, exercise)["behaviour"]
    assert result.status == "failed"
    assert ("after it, gu.requires_grad is an error (reading it raised AttributeError: 'float' "
            "object has no attribute 'requires_grad') in your engine; torch gives an error "
            "(reading it raised AttributeError: 'NoneType' object has no attribute "
            "'requires_grad')") in result.message


def test_check_order_2_checks_second_derivatives_and_an_engine(tmp_path):
    import gradcheck

    report = gradcheck.check("L = a * b + b ** 2", at={"a": 2.0, "b": 4.0}, order=2,
                             engine=REF)
    assert report.ok and report.grading is not None and report.grading.passed
    assert {k: r.grads["b"].tolist() for k, r in report.results.items()} == {
        "fd": pytest.approx([1.0, 2.0]), "torch": [1.0, 2.0], "jax": [1.0, 2.0]}
    hv = gradcheck.check(lambda w: (w * w * w).sum(), at={"w": [1.0, 2.0]}, order=2,
                         vector={"w": [1.0, -1.0]})
    assert hv.ok and hv.results["torch"].grads["w"].tolist() == [[6.0, -12.0]]
    wrong = gradcheck.check("z = tanh(x)", at={"x": 0.7}, order=2, engine=load_submission(
        _mutant_file(tmp_path, "tanh-graph-half-detached")))
    assert not wrong.ok and "d2z/d(direction) dx at x=0.7" in wrong.grading.message
    with pytest.raises(ValueError, match="order is 1"):
        gradcheck.check("z = x", at={"x": 1.0}, order=3)


def test_a_drawn_value_follows_the_grading_seed_and_answers_need_fixed_inputs(tmp_path):
    from gradcheck.bank.problems import ExerciseError
    from gradcheck.grading.plan import sample_seed

    exercise = load_exercise(bank_dir() / "05-training" / "random-init-weights.exercise.yaml")
    one, two = (exercise.values_at(sample_seed(s, exercise.id)) for s in (1, 2))
    assert one == exercise.values_at(sample_seed(1, exercise.id)) and one["w"] != two["w"]
    assert len(one["w"]) == 3 and one["x"] == [1.0, -2.0, 0.5]
    seed = sample_seed(1, exercise.id)
    assert exercise.check_points("gradients", seed) == [one]
    assert torch_request(exercise, "behaviour", seed)["point"] == one
    bad = tmp_path / "bad.exercise.yaml"
    bad.write_text("id: bad\ntitle: t\ntopic: t\npoints: 1\ninputs:\n"
                   "  w: {value: {normal: [0, -1]}}\n  u: {value: {uniform: [0, 1]}}\n"
                   "program: |\n  z = w * u\nchecks:\n  answers:\n    cases:\n"
                   "      - {value: 1.0}\n")
    with pytest.raises(ExerciseError) as caught:
        load_exercise(bad)
    assert "the standard deviation (-1) must be positive" in str(caught.value)
    bad.write_text(bad.read_text().replace("[0, -1]", "[0, 1]"))
    with pytest.raises(ExerciseError) as caught:
        load_exercise(bad)
    assert ("a hand-derived answer needs fixed inputs, but u, w are drawn at random; give "
            "them in `at`") in str(caught.value)


@pytest.mark.slow
def test_live_grading_leaves_second_order_jax_to_the_helper_process():
    import subprocess
    import sys

    script = ("import sys\nfrom gradcheck.grading.grader import grade\n"
              f"r = grade('reference', {str(HIGHER)!r}, seed=3)\n"
              "print(r.score, r.max_score, 'jax' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    score, max_score, imported = done.stdout.split()
    assert score == max_score and imported == "False", done.stdout + done.stderr


def test_validate_reports_a_hessian_point_where_the_oracles_cannot_agree(tmp_path):
    from gradcheck.course.validate import validate

    path = tmp_path / "kink.exercise.yaml"
    path.write_text("id: kink\ntitle: t\ntopic: t\npoints: 1\ninputs:\n  x: {value: 0.0}\n"
                    "program: |\n  z = relu(x) * 3\nchecks:\n  hessian: {}\n")
    problems = [p for p in validate([path]) if p.field]  # not the schema line's
    assert [p.field for p in problems] == ["checks.hessian"]
    assert "the oracles disagree (kink)" in problems[0].message
    path.write_text(path.read_text().replace("value: 0.0", "value: 0.5"))
    assert [p for p in validate([path]) if p.field] == []
