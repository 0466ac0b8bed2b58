"""Feedback names the faulty operation: a catalogue of single-bug engines, graded for real.

Each engine is the reference engine with one mutation (tests/engines/mutant.py), run in the
sandboxed worker by the real grader against torch; the first line of the failing check's message
must name the operation the bug is in (torch's grad_fn name and the expression it came from).
"""

import json
import math
from pathlib import Path

import pytest

from gradcheck.bank import bundled
from gradcheck.bank.loader import load_bank, load_exercise
from gradcheck.bank.tolerances import Tolerance
from gradcheck.engine import handler, torch_engine
from gradcheck.grading import localise
from gradcheck.grading.chain_rule import walk
from gradcheck.grading.grader import Grader
from gradcheck.grading.results import CheckResult
from gradcheck.program.language import parse
from gradcheck.reports import details_shown
from gradcheck.reports.terminal import render_terminal

ENGINES = Path(__file__).parent / "engines"
TOLERANCE = Tolerance(atol=1e-12, rtol=1e-9)

# mutation, program, inputs, what the first line of the feedback must contain
CATALOGUE = [
    ("add", "y = x * w\nz = y + w * w", {"x": 1.5, "w": -0.5}, ["AddBackward0", "`y + w * w`"]),
    ("sub", "y = x.exp()\nz = y - x * x", {"x": 0.5}, ["SubBackward0", "`y - x * x`"]),
    ("rsub", "z = 2 - x.exp()", {"x": 0.5}, ["RsubBackward1", "`2 - x.exp()`"]),
    ("mul", "y = x * w\nz = y.tanh()", {"x": 0.7, "w": -1.2}, ["MulBackward0", "`x * w`"]),
    ("div", "y = x / w\nz = y.sin()", {"x": 0.7, "w": 1.3}, ["DivBackward0", "`x / w`"]),
    # torch computes 2 / x as x.reciprocal() * 2, so its grad_fn is MulBackward0
    ("reciprocal", "y = 2 / x\nz = y * y", {"x": 0.8}, ["MulBackward0", "`2 / x`"]),
    ("neg", "y = -x\nz = y.exp()", {"x": 0.3}, ["NegBackward0", "`-x`"]),
    ("pow", "y = x ** 3\nz = y + x", {"x": 0.8}, ["PowBackward0", "`x ** 3`"]),
    ("pow_tensor", "z = x ** w", {"x": 1.5, "w": 2.5}, ["PowBackward1", "`x ** w`"]),
    ("pow_base", "y = 2 ** x\nz = y * x", {"x": 0.4}, ["PowBackward2", "`2 ** x`"]),
    ("exp", "y = x.exp()\nz = 3 * y", {"x": 0.4}, ["ExpBackward0", "`x.exp()`"]),
    ("log", "y = x.log()\nz = 3 * y", {"x": 1.7}, ["LogBackward0", "`x.log()`"]),
    ("tanh", "y = x.tanh()\nz = 3 * y", {"x": 0.4}, ["TanhBackward0", "`x.tanh()`"]),
    ("sigmoid", "y = x.sigmoid()\nz = 3 * y", {"x": 0.3}, ["SigmoidBackward0", "`x.sigmoid()`"]),
    ("relu", "y = x.relu()\nz = 3 * y", {"x": 0.9}, ["ReluBackward0", "`x.relu()`"]),
    ("sin", "y = x.sin()\nz = 3 * y", {"x": 0.6}, ["SinBackward0", "`x.sin()`"]),
    ("cos", "y = x.cos()\nz = 3 * y", {"x": 0.6}, ["CosBackward0", "`x.cos()`"]),
    ("sqrt", "y = x.sqrt()\nz = 3 * y", {"x": 2.0}, ["SqrtBackward0", "`x.sqrt()`"]),
    ("abs", "y = x.abs()\nz = 3 * y", {"x": -1.5}, ["AbsBackward0", "`x.abs()`"]),
    ("sum", "s = v.sum()\nz = s * s", {"v": [0.5, 1.0, -2.0]}, ["SumBackward0", "`v.sum()`"]),
    ("mean", "m = (v * v).mean()\nz = m + 1", {"v": [0.5, 1.0, -2.0]},
     ["MeanBackward0", "`(v * v).mean()`"]),
    ("select", "z = v[1] * 3", {"v": [0.5, 1.0, -2.0]}, ["SelectBackward0", "`v[1]`"]),
    ("overwrite", "L = a * b + b ** 2", {"a": 2.0, "b": 4.0}, ["did not add up", "reach b"]),
    ("sigmoid_forward", "y = x.sigmoid()\nz = 3 * y", {"x": 0.3},
     ["the forward of `x.sigmoid()`", "SigmoidBackward0"]),
]


def exercise_file(folder: Path, program: str, inputs: dict) -> Path:
    lines = ["id: one-bug", "title: One bug", "topic: feedback", "points: 1", "inputs:"]
    lines += [f"  {name}: {{value: {value}}}" for name, value in inputs.items()]
    lines += ["program: |", *(f"  {line}" for line in program.splitlines())]
    lines += ["checks:", "  gradients:", "    oracles: [torch]"]
    path = folder / "one-bug.exercise.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def submission(folder: Path, *mutations: str) -> Path:
    """A submission file: the reference engine with `mutations` (see tests/engines/mutant.py)."""
    path = folder / f"engine_{'_'.join(mutations)}.py"
    path.write_text(f"import sys\nsys.path.append({str(ENGINES)!r})\nfrom mutant import load\n"
                    f"_engine = load(*{mutations!r})\n"
                    "tensor, no_grad = _engine.tensor, _engine.no_grad\n")
    return path

#: the cause (`CheckResult.detail["cause"]`) of a few mutations; the others' is "the backward of"
#: their operation, with its grad_fn name
CAUSES = {
    "mul": "the backward of `*` (MulBackward0)",
    # torch computes 2 / x as x.reciprocal() * 2: the same cause as a bug in `*`
    "reciprocal": "the backward of `*` (MulBackward0)",
    "rsub": "the backward of RsubBackward1",
    "pow_base": "the backward of `**` (PowBackward2)",
    "neg": "the backward of unary `-` (NegBackward0)",
    "exp": "the backward of `.exp()` (ExpBackward0)",
    "select": "the backward of indexing `[i]` (SelectBackward0)",
    "overwrite": "adding up (+=) the gradients of a value used more than once",
    "sigmoid_forward": "the forward of `.sigmoid()`",
}


def graded(folder: Path, engine: Path, program: str, inputs: dict) -> str:
    """The message of the gradients check, graded through the sandboxed worker."""
    return graded_check(folder, engine, program, inputs).message


def graded_check(folder: Path, engine: Path, program: str, inputs: dict) -> CheckResult:
    exercise = load_exercise(exercise_file(folder, program, inputs))
    with Grader(engine, seed=1) as grader:
        [result] = grader.grade_exercise(exercise)
    assert result.status == "failed", result.message
    return result


@pytest.mark.parametrize("mutation, program, inputs, named", CATALOGUE,
                         ids=[entry[0] for entry in CATALOGUE])
def test_the_first_line_names_the_faulty_operation(tmp_path, mutation, program, inputs, named):
    result = graded_check(tmp_path, submission(tmp_path, mutation), program, inputs)
    message = result.message
    first = message.splitlines()[0]
    for text in named:
        assert text in first, message
    # the plain comparison follows the finding
    assert "expected" in message.splitlines()[-1]
    # the cause a report groups checks by: the same words wherever the same bug is met
    cause = result.detail["cause"]
    if mutation in CAUSES:
        assert cause == CAUSES[mutation]
    else:
        assert cause.startswith("the backward of `") and cause.endswith(f"({named[0]})"), cause


def test_the_message_gives_the_slope_and_what_should_arrive(tmp_path):
    # z = 2y + 1 with y = x**2 at x = 3; MulBackward0 sends y its own value (9) instead of 2.
    message = graded(tmp_path, submission(tmp_path, "mul"), "y = x ** 2\nz = 2 * y + 1",
                     {"x": 3.0})
    first, second = message.splitlines()[:2]
    assert first == ("At x=3.0, the backward of `2 * y` (MulBackward0, line 2 of the program) "
                     "passed 9.0 to y; it should pass 2.0.")
    assert "the local slope of 2 * y with respect to y is 2.0" in second
    assert "y should receive 2.0 × 1.0 = 2.0" in second


def test_overwritten_gradients_name_what_was_kept(tmp_path):
    message = graded(tmp_path, submission(tmp_path, "overwrite"), "L = a * b + b ** 2",
                     {"a": 2.0, "b": 4.0})
    # dL/db = a + 2b = 10 by hand; the engine keeps only one of the two contributions.
    assert "should get their sum, 10.0" in message
    assert "(+=)" in message


def test_without_retain_grad_each_operation_runs_alone(tmp_path):
    message = graded(tmp_path, submission(tmp_path, "mul", "no_retain_grad"),
                     "y = x ** 2\nz = 2 * y + 1", {"x": 3.0})
    first = message.splitlines()[0]
    assert "the backward of `2 * y` (MulBackward0, line 2 of the program), run on its own" in first
    assert "retain_grad() does not work" in message


def test_without_retain_grad_a_combination_bug_is_named_as_such(tmp_path):
    message = graded(tmp_path, submission(tmp_path, "overwrite", "no_retain_grad"),
                     "L = a * b + b ** 2", {"a": 2.0, "b": 4.0})
    assert "how backward() combines them" in message.splitlines()[0]


def test_a_node_that_passes_on_its_gradient_too_early_is_named(tmp_path):
    # recursive_backward passes on a node's whole gradient so far each time some arrives: y,
    # used twice by z, is right, but x receives y's first share twice.
    message = graded(tmp_path, ENGINES / "recursive_backward.py", "y = x.exp()\nz = y * y",
                     {"x": 0.5})
    first = message.splitlines()[0]
    assert "the backward of `x.exp()` (ExpBackward0, line 1 of the program)" in first
    assert "before all of its gradient had arrived" in message


def test_a_correct_engine_gets_no_finding():
    program = parse("L = a * b + b ** 2", {"a": None, "b": None})
    point = {"a": 2.0, "b": 4.0}

    def ask(request):  # torch itself, in this process, through the same probe
        return handler.handle(torch_engine, request)

    assert localise.run(localise.locate(program, point, ["a", "b"], TOLERANCE), ask) is None


def test_operations_run_alone_on_torch_pass_what_torch_passes():
    # The request that runs operations alone, answered by torch through the probe, gives back
    # the walk's per-edge gradients: scalar slopes times the incoming gradient, and vector
    # backward(gradient=...) products alike.
    program = parse("y = v * x\nz = (y * y).mean() + v[1] + 2 / x", {"x": None, "v": 3})
    truth = walk(program, {"x": 2.0, "v": [1.0, -2.0, 3.0]}, ["x", "v"])
    nodes = [c for c in truth.backward_order() if truth.edges(c)]
    passed = localise.run(localise.passed_alone(truth, nodes),
                          lambda r: handler.handle(torch_engine, r))
    edges = [(c, e) for c in nodes for e in truth.edges(c)]
    assert len(passed) == len(edges) == 11
    for c, e in edges:
        assert passed[(c, e.slot)] == pytest.approx(e.passed, rel=1e-12, abs=1e-15)


def test_a_behaviour_check_names_the_step_and_the_statement(tmp_path):
    # As the course notes have it: a second backward pass adds to x.grad; this engine replaces it.
    path = tmp_path / "twice.exercise.yaml"
    path.write_text("id: twice\ntitle: Twice\ntopic: feedback\npoints: 1\n"
                    "inputs:\n  x: {value: 3.0}\n"
                    "program: |\n  y = x ** 2\n  z = 2 * y + 1\n"
                    "checks:\n  behaviour:\n    steps:\n"
                    "      - backward: {retain_graph: true}\n        expect: [grad.x]\n"
                    "      - backward: {}\n        expect: [grad.x]\n")
    with Grader(submission(tmp_path, "overwrite_grad"), seed=1) as grader:
        [result] = grader.grade_exercise(load_exercise(path))
        # loaded with its bank, the file is named by its path in the bank's folder
        [in_bank] = grader.grade_exercise(load_bank(tmp_path).exercises[0])
    assert result.status == "failed"
    first = result.message.splitlines()[0]
    assert first.startswith("step 2, `z.backward()` (twice.exercise.yaml:15): after it, x.grad ")
    assert in_bank.message.splitlines()[0] == first
    assert "torch gives" in first


def test_a_long_vector_is_abbreviated_in_every_line(tmp_path):
    wide = next(bundled.bank_dir().glob("*/wide-sum.exercise.yaml"))
    with Grader(submission(tmp_path, "sum"), seed=1) as grader:
        [result] = grader.grade_exercise(load_exercise(wide))
    assert result.status == "failed"
    assert "... (3000 values)" in result.message
    assert max(len(line) for line in result.message.splitlines()) < 400


def test_a_bank_graded_with_one_wrong_backward_names_it_once_at_the_top(tmp_path):
    # the reference engine with MulBackward0 wrong, on a bundled module: every gradients check
    # that meets it is one root cause, and none of them is listed again below
    bank = load_bank(bundled.bank_dir() / "02-backward")
    with Grader(submission(tmp_path, "mul"), seed=1) as grader:
        report = grader.grade_bank(bank)
    blamed = [r for r in report.results if r.detail.get("cause")]
    assert {r.detail["cause"] for r in blamed} == {"the backward of `*` (MulBackward0)"}
    blamed = [r for r in blamed if details_shown(r)]  # a hidden exercise's take no part
    assert len(blamed) >= 3
    text = render_terminal(report)
    heading = text.splitlines()[1]
    assert heading.startswith(f"  1. Fix the backward of `*` (MulBackward0) first: {len(blamed)} "
                              "checks point at it"), text
    assert not any(f"{r.name}:" in text for r in blamed)


@pytest.mark.parametrize("hidden_feedback", [False, True])
def test_feedback_no_report_shows_is_not_worked_out(tmp_path, hidden_feedback):
    # a student-facing grading withholds a hidden exercise's messages, so it does not ask the
    # engine for their feedback at all; the score is the same either way
    (tmp_path / "shown").mkdir()
    shown = load_exercise(exercise_file(tmp_path / "shown", "z = x * 3", {"x": 2.0}))
    path = exercise_file(tmp_path, "y = x * w\nz = y.tanh()", {"x": 0.7, "w": -1.2})
    path.write_text("visibility: hidden\n" + path.read_text())
    hidden = load_exercise(path)
    with Grader(submission(tmp_path, "mul"), seed=1, hidden_feedback=hidden_feedback) as grader:
        [in_shown] = grader.grade_exercise(shown)
        [in_hidden] = grader.grade_exercise(hidden)
    assert in_shown.status == in_hidden.status == "failed"
    assert in_shown.detail["cause"] == "the backward of `*` (MulBackward0)"
    assert ("cause" in in_hidden.detail) == hidden_feedback
    assert in_hidden.message.startswith("At x=0.7, w=-1.2, the backward of") == hidden_feedback
    assert "expected" in in_hidden.message and in_hidden.score == in_shown.score == 0.0


@pytest.mark.parametrize("feedback_later", [False, True])
def test_a_point_two_checks_fail_at_first_is_walked_once(feedback_later, monkeypatch):
    """op-mul's `gradients` and `answers` checks fail first at the same point with `__mul__`'s
    backward wrong: the engine traces it once, and both checks name the operation."""
    from gradcheck.engine.sandbox import Worker

    traced = []
    request = Worker.request

    def recorded(worker, sent, timeout, then=()):
        if sent.get("kind") == "trace":
            traced.append(json.dumps(sent["point"], sort_keys=True))
        return request(worker, sent, timeout, then)

    monkeypatch.setattr(Worker, "request", recorded)
    exercise = bundled.bank_dir() / "06-operations" / "op-mul.exercise.yaml"
    with Grader(ENGINES / "wrong_mul.py", seed=0, timeout=120) as grader:
        report = grader.grade_bank(load_bank(exercise), feedback_later=feedback_later)
        grader.give_feedback(report)
    failed = {r.check: r for r in report.results if r.status == "failed"}
    assert {"gradients", "answers"} <= set(failed)
    points = {check: json.dumps(failed[check].detail["point"], sort_keys=True)
              for check in ("gradients", "answers")}
    assert points["gradients"] == points["answers"]
    assert traced.count(points["gradients"]) == 1 and len(traced) == len(set(traced))
    for check in ("gradients", "answers"):
        assert "MulBackward0" in failed[check].detail["cause"]
        assert failed[check].message.startswith(failed["gradients"].message.split("\n")[0])


def test_a_trace_compared_as_one_array_finds_the_node_one_by_one_finds():
    """A deep chain's thousands of plain floats are compared as one array: the first node that
    differs is the one the rule for a single number gives (`same_numbers`), non-finite numbers
    and numbers at the edge of the tolerance included; anything else is compared one by one."""
    want = [1.0, -2.5, math.inf, math.nan, 0.0, 1e300, -math.inf, 3.0]
    edge = TOLERANCE.atol + TOLERANCE.rtol * 3.0
    cases = [
        list(want),  # nothing differs
        [1.0, -2.5, math.inf, math.nan, 0.0, 1e300, -math.inf, 3.0 + edge],  # at the edge: same
        [1.0, -2.5, math.inf, math.nan, 0.0, 1e300, -math.inf, 3.0 + 2 * edge],
        [1.0, -2.5, -math.inf, math.nan, 0.0, 1e300, -math.inf, 3.0],
        [1.0, -2.5, math.inf, 1.0, 0.0, 1e300, -math.inf, 3.0],
        [1.0, -2.5, math.inf, math.nan, math.nan, 1e300, -math.inf, 3.0],
        [1.0, None, math.inf, math.nan, 0.0, 1e300, -math.inf, 3.0],
        [1.0, -2.5, math.inf, math.nan, [0.0], 1e300, -math.inf, 3.0],
        [1.0, -2.5, math.inf, math.nan, 0, 1e300, -math.inf, 4],
    ]
    ids = list(range(10, 10 + len(want)))
    truth = dict(zip(ids, want))

    def first(got: list) -> int | None:
        found = {i: {"grad": g} for i, g in zip(ids, got)}
        return localise._first_wrong(ids, found, "grad", truth, TOLERANCE)

    for got in cases:
        one_by_one = next((i for i, g, e in zip(ids, got, want)
                           if not localise.same_numbers(g, e, TOLERANCE)), None)
        assert first(got) == one_by_one
    assert [first(got) for got in cases] == [None, None, 17, 12, 13, 14, 11, 14, 17]


def test_a_grad_step_reads_as_the_call_it_makes_with_several_outputs_and_their_seeds():
    from pydantic import ValidationError

    from gradcheck.bank.models import Step

    step = Step.model_validate({"grad": {"of": ["y", "s"], "grad_outputs": [[1.0, 0.5], 2.0],
                                         "wrt": ["x"], "names": ["g"], "retain_graph": True}})
    assert localise.step_code(step, "z") == (
        "g = grad((y, s), (x,), grad_outputs=(tensor([1.0, 0.5]), tensor(2.0)), "
        "retain_graph=True)")
    one = Step.model_validate({"grad": {"grad_outputs": [3.0], "wrt": ["x", "w"],
                                        "names": ["gx", "gw"]}})
    assert localise.step_code(one, "z") == "gx, gw = grad(z, (x, w), grad_outputs=tensor(3.0))"
    plain = Step.model_validate({"grad": {"wrt": ["x"], "names": ["g"]}})
    assert localise.step_code(plain, "z") == "g = grad(z, (x,))"
    with pytest.raises(ValidationError, match="one grad_outputs value per output of `of`: 2 "
                                              "outputs, 1 values"):
        Step.model_validate({"grad": {"of": ["y", "s"], "grad_outputs": [1.0], "wrt": ["x"],
                                      "names": ["g"]}})
