"""Tolerances, oracle agreement and its classification, and what a wrong engine is told.

The expected values in these tests come from the live oracles; the engine's answers are the
oracles' own answers, changed where a test needs a mistake.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradcheck.bank.tolerances import Tolerance, Tolerances
from gradcheck.grading.compare import CONVENTION, EDGE, ILL, KINK, agree, grade
from gradcheck.oracles import compute
from gradcheck.program.language import parse

ANALYTIC = Tolerances().analytic


def _answers(results, requires_grad, oracle="torch"):
    """An engine that answers exactly what `oracle` says (plain JSON-like data)."""
    r = results[oracle]
    return [{"value": r.value[i].tolist(),
             "grads": {name: r.grads[name][i].tolist() for name in requires_grad},
             "error": None} for i in range(len(r.value))]


def _reasons(source, points, inputs=None):
    program = parse(source, inputs or {"x": None})
    wanted = list(program.inputs)
    results = compute(program, points, wanted)
    return [(d.point, d.label, d.reason) for d in agree(program, results, wanted,
                                                         points).disagreements()]


# --- tolerances ---------------------------------------------------------------------------------


def test_defaults_have_an_absolute_and_a_relative_part():
    assert Tolerances().analytic == Tolerance(atol=1e-12, rtol=1e-9)
    assert Tolerances().fd == Tolerance(atol=1e-6, rtol=1e-5)


def test_closeness_is_relative_to_the_expected_value_plus_an_absolute_floor():
    tol = Tolerance(atol=1e-6, rtol=1e-3)
    assert tol.close(np.array([1000.9, 1e-7]), np.array([1000.0, 0.0])).tolist() == [True, True]
    assert tol.close(np.array([1001.1, 2e-6]), np.array([1000.0, 0.0])).tolist() == [False,
                                                                                      False]


def test_non_finite_values_are_compared_as_such_before_any_relative_error():
    nan, inf = math.nan, math.inf
    found = np.array([nan, nan, 1.0, inf, inf, -inf, 1e308])
    expected = np.array([nan, 1.0, nan, inf, -inf, -inf, inf])
    assert ANALYTIC.close(found, expected).tolist() == [True, False, False, True, False, True,
                                                        False]
    assert ANALYTIC.agree(found, expected).tolist() == [True, False, False, True, False, True,
                                                        False]


@given(st.floats(), st.floats() | st.integers(-10**6, 10**6),
       st.floats(0, 1e-3), st.floats(0, 1e-3))
def test_two_numbers_are_close_exactly_when_their_arrays_are(found, expected, atol, rtol):
    """The localisation compares numbers one at a time (`Tolerance.close_number`): the same
    verdict as `close` on arrays, NaN and infinities included."""
    tol = Tolerance(atol=atol, rtol=rtol)
    assert tol.close_number(found, expected) == bool(tol.close(np.array(found),
                                                              np.array(expected, float)))


# --- classification of disagreements (live oracles) ---------------------------------------------


def test_relu_at_zero_is_a_kink():
    assert _reasons("z = relu(x)", [{"x": 0.0}, {"x": 1.0}]) == [(0, "dz/dx", KINK)]


def test_abs_at_zero_is_a_convention_of_torch_against_jax():
    program = parse("z = abs(x)", {"x": None})
    results = compute(program, [{"x": 0.0}], ["x"])
    (d,) = agree(program, results, ["x"], [{"x": 0.0}]).disagreements()
    assert d.reason == CONVENTION
    assert (d.oracles["torch"], d.oracles["jax"]) == (results["torch"].grads["x"][0],
                                                      results["jax"].grads["x"][0])
    assert d.oracles["torch"] != d.oracles["jax"]


def test_sqrt_at_zero_is_a_domain_edge():
    assert _reasons("z = sqrt(x)", [{"x": 0.0}]) == [(0, "dz/dx", EDGE)]


def test_log_near_zero_is_a_domain_edge_that_the_stencil_crosses():
    program = parse("y = x * 2\nz = log(y)", {"x": None})
    results = compute(program, [{"x": 1e-7}], ["x"])
    (d,) = agree(program, results, ["x"], [{"x": 1e-7}]).disagreements()
    assert d.reason == EDGE
    assert "log in `log(y)` (line 2, column 5)" in d.detail


def test_one_over_x_near_zero_is_a_pole_and_a_little_further_ill_conditioned():
    reasons = _reasons("z = 1 / x", [{"x": 1e-5}, {"x": 0.01}, {"x": 1.0}])
    assert reasons == [(0, "dz/dx", EDGE), (1, "dz/dx", ILL)]


def test_cancellation_in_the_stencil_is_ill_conditioning():
    reasons = _reasons("z = (x + 1e11) - 1e11", [{"x": 1.0}])
    assert (0, "dz/dx", ILL) in reasons


def test_values_where_the_oracles_agree_are_graded_and_others_are_not():
    program = parse("z = relu(x) + abs(y)", {"x": None, "y": None})
    points = [{"x": 0.0, "y": 1.0}, {"x": 1.0, "y": 0.0}, {"x": 1.0, "y": 1.0}]
    agreement = agree(program, compute(program, points, ["x", "y"]), ["x", "y"], points)
    graded = {q.name: q.graded[:, 0].tolist() for q in agreement.quantities}
    assert graded == {"value": [True] * 3, "x": [False, True, True], "y": [True, False, True]}


# --- grading ------------------------------------------------------------------------------------


def test_an_engine_that_answers_like_torch_passes_everywhere_graded():
    program = parse("a = v * x\nz = a.tanh().sum() + relu(x)", {"x": None, "v": 2})
    points = [{"x": 0.5, "v": [1.0, -2.0]}, {"x": 0.0, "v": [0.3, 0.1]}]
    results = compute(program, points, ["x", "v"])
    grading = grade(program, points, ["x", "v"], results, _answers(results, ["x", "v"]))
    assert grading.passed and [v.status for v in grading.verdicts] == ["passed", "passed"]
    assert grading.message.startswith("all 2 graded points match the oracles; not graded: 1 "
                                      "value at 1 point where the oracles disagree (kink)")
    note = " ".join(grading.author_notes)
    assert "kink" in note and "relu" in note  # dz/dx at x=0 was not graded


def test_a_mismatch_report_names_input_element_point_each_oracle_found_and_errors():
    program = parse("z = (v * x).sin().sum()", {"x": None, "v": 3})
    points = [{"x": 0.5, "v": [1.0, -2.0, 0.25]}]
    results = compute(program, points, ["x", "v"])
    answers = _answers(results, ["x", "v"])
    right = answers[0]["grads"]["v"][1]
    answers[0]["grads"]["v"][1] = right + 0.5
    grading = grade(program, points, ["x", "v"], results, answers)
    (m,) = grading.mismatches
    assert (m.label, m.point, m.found, m.expected) == ("dz/dv[1]", 0, right + 0.5, right)
    assert set(m.oracles) == {"torch", "jax", "fd"}
    assert m.abs_error == pytest.approx(0.5) and m.rel_error == pytest.approx(0.5 / abs(right))
    text = str(m)
    assert text.startswith("dz/dv[1] at x=0.5, v=[1.0, -2.0, 0.25]: expected ")
    for name, oracle in (("torch", "torch"), ("jax", "jax"), ("finite differences", "fd")):
        assert f"{name} {results[oracle].grads['v'][0, 1]:.10g}" in text
    assert f"found {right + 0.5:.10g}; abs error 0.5, rel error {0.5 / abs(right):.3g}" in text
    assert grading.message == text + "; 1 of 1 points failed"
    assert grading.verdicts[0].status == "failed" and grading.verdicts[0].message == text


def test_the_student_message_gives_the_first_mismatch_in_full_then_a_count():
    program = parse("z = x * y * v.sum()", {"x": None, "y": None, "v": 4})
    points = [{"x": float(i), "y": 2.0, "v": [1.0, 2.0, 3.0, 4.0]} for i in range(1, 21)]
    results = compute(program, points, ["x", "y", "v"])
    answers = _answers(results, ["x", "y", "v"])
    for a in answers:
        a["grads"]["v"] = [g * 2 for g in a["grads"]["v"]]
    grading = grade(program, points, ["x", "y", "v"], results, answers)
    assert len(grading.mismatches) == 80
    first = str(grading.mismatches[0])
    assert grading.message == f"{first}. 79 more wrong values; 20 of 20 points failed"
    assert grading.message.count("expected") == 1 and len(grading.message) < 400


def test_a_gradient_reported_as_none_is_one_mistake_and_said_so():
    program = parse("z = v.sum() * x", {"x": None, "v": 3})
    points = [{"x": 2.0, "v": [1.0, 2.0, 3.0]}]
    results = compute(program, points, ["x", "v"])
    answers = _answers(results, ["x", "v"])
    answers[0]["grads"]["v"] = None
    grading = grade(program, points, ["x", "v"], results, answers)
    (m,) = grading.mismatches
    assert m.label == "dz/dv[0]" and m.found is None and "found None" in str(m)


def test_an_input_the_output_ignores_must_have_grad_none_as_in_torch():
    program = parse("z = x * 3", {"x": None, "y": None})
    points = [{"x": 2.0, "y": 1.0}]
    results = compute(program, points, ["x", "y"])
    answers = _answers(results, ["x", "y"])
    answers[0]["grads"]["y"] = None
    assert grade(program, points, ["x", "y"], results, answers).passed
    answers[0]["grads"]["y"] = 0.0
    grading = grade(program, points, ["x", "y"], results, answers)
    (m,) = grading.mismatches
    assert m.expected is None and m.found == 0.0 and "torch leaves .grad None" in str(m)


def test_a_wrong_forward_value_is_reported_as_the_output():
    program = parse("z = x.exp()", {"x": None})
    points = [{"x": 1.0}]
    results = compute(program, points, ["x"])
    answers = _answers(results, ["x"])
    answers[0]["value"] = 2.0
    (m,) = grade(program, points, ["x"], results, answers).mismatches
    assert m.label == "z" and m.expected == results["torch"].value[0]
    assert "numpy" in str(m)  # finite differences' forward pass is plain numpy


def test_a_value_reported_as_none_is_wrong_not_left_ungraded():
    """An answer without its value is not graded on its gradients alone: its gradients right
    and its value missing fail the point, as a missing gradient does (the worker's replies
    cannot say so: `wire.check_reply` refuses a result with neither a value nor an error)."""
    program = parse("z = x.exp()", {"x": None})
    points = [{"x": 1.0}]
    results = compute(program, points, ["x"])
    answers = _answers(results, ["x"])
    answers[0]["value"] = None
    grading = grade(program, points, ["x"], results, answers)
    (m,) = grading.mismatches
    assert not grading.passed and m.label == "z" and m.found is None and "found None" in str(m)


def test_nan_passes_only_where_every_oracle_says_nan():
    program = parse("z = log(x)", {"x": None})
    points = [{"x": -1.0}, {"x": 2.0}]
    results = compute(program, points, ["x"])
    answers = _answers(results, ["x"])
    answers[0]["grads"]["x"] = 123.0  # not graded: torch and jax say -1, finite differences nan
    answers[1]["value"] = math.nan
    grading = grade(program, points, ["x"], results, answers)
    assert math.isnan(results["torch"].value[0])
    assert [v.status for v in grading.verdicts] == ["passed", "failed"]  # value nan is graded
    assert grading.mismatches[0].label == "z" and grading.mismatches[0].point == 1
    assert grading.verdicts[0].disagreements[0].reason == EDGE


def test_a_wrong_answer_where_the_oracles_disagree_is_never_blamed():
    program = parse("z = relu(x)", {"x": None})
    points = [{"x": 0.0}]
    results = compute(program, points, ["x"])
    answers = _answers(results, ["x"])
    answers[0]["grads"]["x"] = 7.0
    grading = grade(program, points, ["x"], results, answers)
    assert grading.passed and grading.verdicts[0].status == "passed"  # the value is graded
    assert grading.verdicts[0].disagreements[0].reason == KINK


def test_a_convention_whose_oracle_did_not_run_lets_no_other_oracle_grade():
    """abs'(0) is 0 by torch's convention and 1 by jax's: with jax alone nothing tells a kink
    from any other point, so nothing is graded rather than jax's answer."""
    program = parse("z = abs(x)", {"x": None})
    points = [{"x": 0.0}, {"x": 1.0}]
    results = compute(program, points, ["x"], ["jax"])
    grading = grade(program, points, ["x"], results, _answers(results, ["x"], "jax"),
                    convention="torch")
    assert [v.status for v in grading.verdicts] == ["skipped", "skipped"]
    assert grading.message == ("skipped: torch was not asked; the convention is torch's, so no "
                               "other oracle grades this check in its place")


def test_second_derivatives_by_finite_differences_alone_leave_a_kink_ungraded_as_first_order():
    """relu(x) * 2 + relu(-x) * 3 at 0: finite differences give the mean of the slopes 2 and
    -3, no one's convention. The first-order check leaves it out; so does the hessian check's
    first derivative, which finite differences alone estimate the same way."""
    from gradcheck.oracles import second_order

    program = parse("z = x.relu() * 2 + (-x).relu() * 3", {"x": None})
    points = [{"x": 0.0}, {"x": 1.0}]
    first = agree(program, compute(program, points, ["x"], ["fd"]), ["x"], points)
    rows, _, labels = second_order.expand(points, second_order.directions(program, ["x"]))
    second = agree(program, second_order.compute(program, points, ["x"], None, ["fd"]), ["x"],
                   rows, directions=labels)
    slope = next(q for q in first.quantities if q.name == "x")
    along = next(q for q in second.quantities if q.name == "value")
    assert slope.graded[:, 0].tolist() == along.graded[:, 0].tolist() == [False, True]
    assert [(d.point, d.label, d.reason) for d in second.disagreements()] == [
        (0, "dz/d(direction)", KINK), (0, "d2z/d(direction) dx", KINK)]
    assert along.tolerance == Tolerances().fd  # an estimate, as first order's gradients are
    assert along.expected[1, 0] == pytest.approx(2.0)


@pytest.mark.parametrize("convention, passes, fails", [("torch", 0.0, 1.0), ("jax", 1.0, 0.0)])
def test_a_convention_grades_disagreements_against_that_oracle_labelled(convention, passes,
                                                                        fails):
    program = parse("z = abs(x)", {"x": None})
    points = [{"x": 0.0}]
    results = compute(program, points, ["x"])
    answers = _answers(results, ["x"])
    answers[0]["grads"]["x"] = passes
    grading = grade(program, points, ["x"], results, answers, convention=convention)
    assert grading.passed
    assert any(note.startswith(f"graded against {convention}'s convention")
               for note in grading.author_notes)
    answers[0]["grads"]["x"] = fails
    grading = grade(program, points, ["x"], results, answers, convention=convention)
    (m,) = grading.mismatches
    assert m.convention == convention and f"({convention}'s convention; " in str(m)


def test_an_engine_error_fails_every_point_where_something_is_graded():
    program = parse("z = relu(x) * relu(x)", {"x": None})
    points = [{"x": 1.0}, {"x": 0.0}]
    results = compute(program, points, ["x"])
    error = {"type": "RuntimeError", "message": "boom", "phase": "backward"}
    answers = [{"value": None, "grads": {}, "error": error}] * 2
    grading = grade(program, points, ["x"], results, answers)
    # at x=0 the gradient is not graded (a kink) but the value is, so that point fails too
    assert [v.status for v in grading.verdicts] == ["failed", "failed"]
    assert grading.message.startswith("at x=1.0, the engine raised RuntimeError in backward: boom")
    assert "1 more point where the engine raised; 2 of 2 points failed" in grading.message


def test_a_value_the_protocol_does_not_allow_is_counted_apart_from_what_the_engine_raised():
    """A numpy array where a list of floats goes is a value the engine gave, not an error it
    raised; a check that fails only for such values is `unreadable` (no hint on the maths)."""
    program = parse("z = x * x", {"x": None})
    points = [{"x": 1.0}, {"x": 2.0}, {"x": 3.0}]
    results = compute(program, points, ["x"])
    gave = {"type": "ProtocolError", "phase": "backward",
            "message": "x.grad.tolist() is a numpy.ndarray, not a number or a list of numbers"}
    raised = {"type": "RuntimeError", "message": "boom", "phase": "backward"}

    def graded(*errors):
        return grade(program, points, ["x"], results,
                     [{"value": None, "grads": {}, "error": error} for error in errors])

    mixed = graded(gave, gave, raised)
    assert mixed.message.startswith("at x=1.0, the engine gave what the protocol does not allow")
    assert mixed.message.endswith(". 1 more point where the engine raised, 1 more point where it "
                                  "gave what the protocol does not allow; 3 of 3 points failed")
    assert not mixed.unreadable
    alone = graded(gave, gave, gave)
    assert alone.message.endswith(". 2 more points where it gave what the protocol does not "
                                  "allow; 3 of 3 points failed") and alone.unreadable
    assert not graded(raised, raised, raised).unreadable


def test_an_engine_error_where_nothing_is_graded_is_only_noted_for_the_author():
    # relu(log(0)): numpy's relu of -inf is nan, torch's and jax's are 0, so the value is not
    # graded, and no gradient is asked for.
    program = parse("z = relu(log(x))", {"x": None})
    points = [{"x": 0.0}]
    results = compute(program, points, [])
    error = {"type": "ValueError", "message": "math domain error", "phase": "forward"}
    grading = grade(program, points, [], results, [{"error": error}])
    assert grading.passed and grading.verdicts[0].status == "ungraded"
    assert ("the engine raised ValueError in forward: math domain error at x=0.0, which is not "
            "graded") in grading.author_notes
    assert grading.author_notes[-1].startswith("no point was graded")


def test_untrusted_replies_are_refused_unless_they_are_plain_numbers():
    class Liar(float):
        def __eq__(self, other):
            return True

        __hash__ = float.__hash__

    program = parse("z = x * 2", {"x": None})
    points = [{"x": 1.0}, {"x": 2.0}, {"x": 3.0}, {"x": 4.0}]
    results = compute(program, points, ["x"])
    answers = [{"value": 2.0, "grads": {"x": Liar(5.0)}},
               {"value": 4.0, "grads": {"x": True}},
               {"value": 6.0, "grads": {"x": "2"}},
               "not a mapping"]
    grading = grade(program, points, ["x"], results, answers)
    assert [v.status for v in grading.verdicts] == ["failed"] * 4
    assert all(v.error.startswith("ProtocolError") for v in grading.verdicts)
    spelled = grade(program, points[:1], ["x"], compute(program, points[:1], ["x"]),
                    [{"value": "inf", "grads": {"x": 2}}])  # JSON's spellings of non-finite
    assert spelled.mismatches[0].label == "z" and spelled.mismatches[0].found == math.inf


def test_with_finite_differences_alone_the_fd_tolerance_applies():
    program = parse("z = x.exp()", {"x": None})
    points = [{"x": 1.0}]
    results = compute(program, points, ["x"], ("fd",))
    near = [{"value": math.e, "grads": {"x": math.e * (1 + 5e-6)}}]
    far = [{"value": math.e, "grads": {"x": math.e * (1 + 5e-5)}}]
    assert grade(program, points, ["x"], results, near).passed
    assert not grade(program, points, ["x"], results, far).passed


def test_the_number_of_answers_must_match_the_points():
    program = parse("z = x * 2", {"x": None})
    results = compute(program, [{"x": 1.0}], ["x"], ("fd",))
    with pytest.raises(ValueError, match="2 answers for 1 points"):
        grade(program, [{"x": 1.0}], ["x"], results, [{}, {}])


# --- points left out ------------------------------------------------------------------------------


ABS = parse("z = x.abs() * y", {"x": None, "y": None})


def test_a_point_left_out_at_a_kink_is_said_even_when_the_rest_match():
    points = [{"x": 0.0, "y": 2.0}, {"x": 1.0, "y": 2.0}]
    results = compute(ABS, points, ["x", "y"], ["fd", "torch", "jax"])
    grading = grade(ABS, points, ["x", "y"], results, _answers(results, ["x", "y"]))
    assert grading.passed and not grading.nothing_graded
    assert grading.message.startswith(
        "all 2 graded points match the oracles; not graded: 1 value at 1 point where the "
        "oracles disagree (convention), first dz/dx at x=0.0, y=2.0: torch 0.0, jax 2.0, finite "
        "differences 0.0")


def test_counts_are_of_distinct_points_whose_gradients_are_graded():
    """Below log's domain every oracle agrees the value is nan, but no gradient is graded there:
    that point is not a graded one. A point listed twice (the inputs' value, listed again) is
    one point, and its ungraded value one value."""
    program = parse("z = (x - 2).log()", {"x": None})
    points = [{"x": 0.5}, {"x": 0.5}, {"x": 3.0}, {"x": 3.0}, {"x": 4.0}]
    results = compute(program, points, ["x"], ["fd", "torch", "jax"])
    answers = _answers(results, ["x"])
    grading = grade(program, points, ["x"], results, answers)
    assert grading.message.startswith("all 2 graded points match the oracles; not graded: 1 "
                                      "value at 1 point where the oracles disagree")
    answers[2]["grads"]["x"] = answers[3]["grads"]["x"] = 7.0
    grading = grade(program, points, ["x"], results, answers)
    assert grading.message.endswith("; 1 of 3 points failed") and "more wrong" not in (
        grading.message)
    only = grade(program, points[2:3], ["x"], compute(program, points[2:3], ["x"]),
                 _answers(compute(program, points[2:3], ["x"]), ["x"]))
    assert only.message == "the 1 graded point matches the oracles"


def test_a_hessian_check_counts_points_not_its_rows():
    from gradcheck.oracles import second_order

    program = parse("z = x ** 2 * y + y.exp() * x.sin()", {"x": None, "y": None})
    points = [{"x": 0.0, "y": 0.0}, {"x": 1.0, "y": 0.5}, {"x": 1.0, "y": 0.5}]
    rows, _, labels = second_order.expand(points, second_order.directions(program, ["x", "y"]))
    results = second_order.compute(program, points, ["x", "y"], None, ["torch", "jax"])
    grading = grade(program, rows, ["x", "y"], results, _answers(results, ["x", "y"]),
                    directions=labels)
    assert len(rows) == 6 and grading.message == "all 2 graded points match the oracles"


def test_a_check_with_no_graded_gradient_is_not_a_pass():
    points = [{"x": 0.0, "y": 2.0}]  # dz/dx is a convention there, and y is not differentiated
    results = compute(ABS, points, ["x"], ["fd", "torch", "jax"])
    grading = grade(ABS, points, ["x"], results, _answers(results, ["x"]))
    assert grading.nothing_graded
    assert grading.message.startswith("no gradient of this check could be graded, so it scores 0 "
                                      "(a fault of the exercise, not of the submission): not "
                                      "graded: 1 value at 1 point")


def test_oracles_that_read_the_same_and_still_disagree_say_how_far_apart():
    """A tolerance tighter than rounding (0) makes the oracles disagree by the last bit, which
    ten digits cannot show: the message says by how much, and what to do."""
    from gradcheck.grading.compare import Disagreement

    apart = Disagreement(0, "dz/dx", ILL, {"torch": 0.1 + 0.2, "jax": 0.3}, "", None)
    assert apart.describe("x=1.0") == (
        "dz/dx at x=1.0: torch 0.3, jax 0.3 (apart by 5.551115123e-17: the exercise's tolerance "
        "is tighter than rounding; `gradcheck validate` says which part)")
    plain = Disagreement(0, "dz/dx", ILL, {"torch": 0.3, "jax": 0.5}, "", None)
    assert plain.describe("x=1.0") == "dz/dx at x=1.0: torch 0.3, jax 0.5"


def test_a_wrong_value_shows_the_oracles_that_agreed_without_their_last_bits():
    """Oracles that agree within the tolerance and differ in the last bit are no news to a
    student whose value is wrong (a student read the note on tolerance there as the grader's
    fault)."""
    from gradcheck.grading.compare import Mismatch

    wrong = Mismatch(0, "x=1.0", "dz/dx", 0.3, 0.7, {"torch": 0.3, "fd": 0.1 + 0.2}, 0.4, 1.3)
    assert str(wrong) == ("dz/dx at x=1.0: expected 0.3 (torch 0.3, finite differences 0.3), "
                          "found 0.7; abs error 0.4, rel error 1.3")


# --- a convention under --oracles ----------------------------------------------------------------

MAX_TIE = """\
id: max-tie-abs
title: max(a, b) written with abs, at a tie (torch's convention)
topic: 06-operations
points: 2
convention: torch
inputs:
  a: {value: 1.0}
  b: {value: 1.0}
program: |
  m = (a + b + (a - b).abs()) / 2
  z = m * m
checks:
  gradients:
    points: [{a: 2.0, b: 1.0}]
"""

RELU_BOTH_SIDES = """\
id: relu-both-sides
title: relu(x) and relu(-x) meet at 0 (torch's convention)
topic: 06-operations
points: 2
convention: torch
inputs:
  x: {value: 0.0}
program: |
  z = x.relu() * 2 + (-x).relu() * 3
checks:
  gradients:
    points: [{x: 1.0}]
  hessian:
    points: [{x: 0.5}]
"""


@pytest.mark.parametrize("oracles", [["jax"], ["fd"]])
def test_a_torch_convention_is_graded_by_torch_whatever_oracles_are_asked(tmp_path, oracles):
    """`--oracles jax` or `--oracles fd` leave torch out, but an exercise with `convention:
    torch` is graded by torch at its kinks all the same, first and second order alike: the
    reference, which is torch, loses nothing, and an engine with jax's abs'(0) = 1 loses the
    tie, told torch's value."""
    from gradcheck.bank.bundled import reference_path
    from gradcheck.bank.loader import load_bank
    from gradcheck.course.mutants import CATALOGUE
    from gradcheck.course.mutation import mutate
    from gradcheck.grading.grader import Grader

    (tmp_path / "max-tie-abs.exercise.yaml").write_text(MAX_TIE)
    (tmp_path / "relu-both-sides.exercise.yaml").write_text(RELU_BOTH_SIDES)
    bank = load_bank(tmp_path)
    jax_abs = tmp_path / "jax_abs.py"
    jax_abs.write_text(mutate((reference_path() / "__init__.py").read_text(),
                              next(m for m in CATALOGUE if m.name == "abs-kink-one")))

    def graded(submission):
        with Grader(submission, seed=11, oracles=oracles) as grader:
            return {(r.exercise_id, r.check): r for r in grader.grade_bank(bank).results}

    reference = graded("reference")
    assert {key: r.status for key, r in reference.items()} == {
        ("max-tie-abs", "gradients"): "passed", ("relu-both-sides", "gradients"): "passed",
        ("relu-both-sides", "hessian"): "passed"}
    assert any(note.startswith("graded against torch's convention at 1 point")
               for note in reference[("max-tie-abs", "gradients")].author_notes)
    tie = graded(jax_abs)[("max-tie-abs", "gradients")]
    assert tie.status == "failed" and "it should pass 0.0" in tie.message


def test_grade_says_once_which_exercises_torch_grades_although_oracles_leave_it_out(
        tmp_path, capsys):
    from grading_samples import PRODUCT

    from gradcheck.cli import main

    (tmp_path / "max-tie-abs.exercise.yaml").write_text(MAX_TIE)
    (tmp_path / "relu-both-sides.exercise.yaml").write_text(RELU_BOTH_SIDES)
    (tmp_path / "product.exercise.yaml").write_text(PRODUCT)
    for oracles, said in (("fd", True), ("fd,torch", False)):
        assert main(["grade", "reference", "--exercises", str(tmp_path), "--seed", "1",
                     "--oracles", oracles]) == 0
        err = capsys.readouterr().err
        assert err.count("torch grades") == said
        assert said == (
            f"gradcheck grade: --oracles {oracles}: torch grades the gradient and hessian checks "
            "of max-tie-abs, relu-both-sides too, as their `convention: torch` grades kinks by "
            "torch's derivative\n" in err)


def test_grade_says_once_that_torch_grades_a_check_whose_oracles_leave_it_out(tmp_path, capsys):
    from gradcheck.cli import main

    (tmp_path / "max-tie-abs.exercise.yaml").write_text(
        MAX_TIE.replace("  gradients:\n", "  gradients:\n    oracles: [jax]\n"))
    assert main(["grade", "reference", "--exercises", str(tmp_path), "--seed", "1"]) == 0
    assert capsys.readouterr().err.count(
        "gradcheck grade: torch grades the gradient and hessian checks of max-tie-abs too, "
        "although their `oracles` leave it out, as their `convention: torch` grades kinks by "
        "torch's derivative\n") == 1
