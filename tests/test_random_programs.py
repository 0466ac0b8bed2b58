"""Random programs: what hypothesis draws (gradcheck/bank/random_programs.py), the search that
shrinks a difference to the smallest program (gradcheck/grading/fuzzing.py), and the command
`gradcheck fuzz` (gradcheck/course/fuzz.py)."""

import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings

from gradcheck import oracles
from gradcheck.bank import domains
from gradcheck.bank.bundled import reference_path
from gradcheck.bank.random_programs import (
    Drawn,
    Session,
    makes_views,
    programs,
    sessions,
    smaller,
    smaller_sessions,
    unused_inputs,
)
from gradcheck.course.mutants import CATALOGUE
from gradcheck.course.mutation import mutate
from gradcheck.engine import handler
from gradcheck.grading import compare, fuzzing
from gradcheck.program.language import parse
from gradcheck.program.ops import BINARY, OPS

SOURCE = (reference_path() / "__init__.py").read_text()
MUTANTS = {m.name: m for m in CATALOGUE}
ENGINES = Path(__file__).parent / "engines"


def engine(tmp_path: Path, name: str):
    """The reference engine with mutant `name`'s bug (or none: "reference"), imported here."""
    path = tmp_path / f"{name}.py"
    path.write_text(SOURCE if name == "reference" else mutate(SOURCE, MUTANTS[name]))
    spec = importlib.util.spec_from_file_location(f"engine_{name.replace('-', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fuzz_in_process(module, **options):
    options = {"at_seed": 1, "examples": 300, "oracles": ("fd", "torch"), **options}
    return fuzzing.search(lambda request: handler.handle(module, request), **options)


# --- what is drawn -------------------------------------------------------------------------------


@settings(max_examples=60)
@given(programs(ops=["mul", "exp", "sum", "select"], max_operations=3))
def test_a_drawn_program_is_in_the_language_uses_only_the_asked_operations_and_fits(drawn):
    program = parse(drawn.source, drawn.inputs)
    assert program.ops_used() <= {"mul", "exp", "sum", "select"}
    # an operation on a 1-D result is followed by the sum that makes the output a scalar
    assert 1 <= drawn.operations <= 4
    assert program.nodes[program.output].size is None
    assert set(drawn.point) == set(drawn.inputs)


@settings(max_examples=40)
@given(programs(max_operations=4))
def test_at_a_drawn_point_torch_and_finite_differences_agree(drawn):
    """Safe by construction: every kink, pole and domain edge is far enough away that the oracles
    agree on the value and on every gradient, so nothing drawn goes ungraded."""
    names = list(drawn.inputs)
    results = oracles.compute(drawn.program, [drawn.point], names, ["fd", "torch"])
    agreement = compare.agree(drawn.program, results, names, [drawn.point])
    assert agreement.disagreements() == []


def test_the_draw_has_every_operation_numbers_on_both_sides_fan_out_and_vectors():
    drawn = domains.draw(programs(max_operations=6), 400, 0)
    used = set().union(*(d.program.ops_used() for d in drawn))
    assert used == set(OPS)
    lines = [line for d in drawn for line in d.source.splitlines()]
    binary = [OPS[n.op].symbol for d in drawn for n in d.program.nodes
              if n.op in OPS and OPS[n.op].kind == BINARY]
    assert binary
    assert any(line.split(" = ")[1][0].isdigit() for line in lines)  # a number on the left
    assert any(line[-1].isdigit() or line.endswith(")") and "(-" in line for line in lines)

    def uses(d: Drawn) -> list[int]:
        counts = [0] * len(d.program.nodes)
        for node in d.program.nodes:
            for arg in node.args:
                counts[arg] += 1
        return counts

    inputs_twice = [d for d in drawn if any(uses(d)[i] >= 2 for i, n in
                                            enumerate(d.program.nodes) if n.op == "input")]
    made_twice = [d for d in drawn if any(uses(d)[i] >= 2 for i, n in
                                          enumerate(d.program.nodes) if n.op in OPS)]
    assert inputs_twice and made_twice  # a leaf on several paths; fan-out of a computed value
    assert any(d.inputs.get("v") for d in drawn)
    assert max(d.operations for d in drawn) >= 5


def test_sessions_draw_the_behaviour_steps_of_the_issue():
    steps = [step for s in domains.draw(sessions(max_steps=4), 300, 0) for step in s.steps]
    assert any(s.get("backward") == {"retain_graph": True} for s in steps)
    assert any(s.get("backward") == {} for s in steps)
    assert any("zero_grad" in s for s in steps) and any("detach" in s for s in steps)
    assert any(s.get("forward") == {"no_grad": True} for s in steps)
    assert any("retain_grad" in s for s in steps)
    assert any("of" in (s.get("backward") or {}) for s in steps)  # a 1-D value's backward


def test_no_session_looks_at_a_torch_view_made_under_no_grad(tmp_path):
    """torch's `v[i]` under no_grad() is a view that says requires_grad=True; a scalar engine
    that follows the protocol's rule (False) is not charged for it, and neither is the
    reference engine, which copies part of torch's view."""
    drawn = domains.draw(sessions(ops=["select", "exp"], max_steps=4), 300, 0)
    viewing = [s for s in drawn if makes_views(s.drawn.program, s.requires_grad)]
    assert viewing and all(s.get("forward") != {"no_grad": True}
                           for session in viewing for s in session.steps)
    no_views = tmp_path / "no_views.py"
    view = "return Scalar(item._value, NoGradView, None, None, None)"
    assert view in SOURCE
    no_views.write_text(SOURCE.replace(view, "return Scalar(item._value, None, None, None, None)"))
    spec = importlib.util.spec_from_file_location("no_views", no_views)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for checked in (module, engine(tmp_path, "reference")):
        result = fuzz_in_process(checked, ops=["select"], examples=150)
        assert result.found is None, result.found.describe()


def test_an_input_no_operation_uses_must_keep_its_grad_none(monkeypatch):
    """Some programs have an input they do not use: torch leaves its .grad None after
    backward(). An engine whose .grad starts at 0 (micrograd's) is found on gradients alone,
    with one operation; the search could not find it before such inputs were drawn."""
    assert any(unused_inputs(d) for d in domains.draw(programs(), 100, 0))
    monkeypatch.syspath_prepend(str(ENGINES))
    spec = importlib.util.spec_from_file_location("odd_zero_grads",
                                                  ENGINES / "odd_grad_starts_at_zero.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = fuzz_in_process(module, max_steps=0, examples=200).found
    assert found is not None and found.kind == "gradient" and found.operations == 1
    unused = unused_inputs(found.drawn)
    assert unused and "expected None" in found.message
    assert f"{unused[0]}: an input no operation uses" in found.describe()


def test_smaller_programs_are_each_earlier_value_and_each_operation_alone():
    program = parse("a = x + 2\nb = -a\nc = b.tanh()\n", {"x": None})
    drawn = Drawn(program.source, {"x": None}, {"x": 0.5}, program)
    sources = {(d.source, json.dumps(d.point)) for d in smaller(drawn)}
    assert ("a = x + 2\n", '{"x": 0.5}') in sources  # a prefix, at the same point
    assert ("a = x.tanh()\n", '{"x": -2.0}') in sources  # tanh alone at b's value, rounded
    assert ("a = x.tanh()\n", '{"x": -2.5}') in sources  # and exactly
    program = parse("a = x * 4\nb = 3 ** a\n", {"x": None})
    drawn = Drawn(program.source, {"x": None}, {"x": 0.3}, program)
    sources = {(d.source, json.dumps(d.point)) for d in smaller(drawn)}
    assert ("a = x * (-1)\nb = 3 ** a\n", '{"x": 0.3}') in sources  # a simpler number
    assert ("a = x * 4\nb = 2 ** a\n", '{"x": 0.3}') in sources  # the simplest base
    assert ("a = x * 4\nb = 3 ** a\n", '{"x": 0.0}') in sources  # a rounder point
    assert not any(f"{base} ** a" in source for source, _ in sources
                   for base in (0.5, 1.5))  # never a number less simple (NUMBERS' order)


def test_smaller_programs_drop_an_unused_input_take_one_element_and_round_either_way():
    """Without hypothesis's shrinker these are the only ways to an input fewer, a scalar for a
    1-D value, and a whole number on the far side of a value's rounding."""
    program = parse("a = v.tanh()\nb = a.sum()\n", {"x": None, "v": 2})
    drawn = Drawn(program.source, {"x": None, "v": 2}, {"x": 1.0, "v": [0.25, 1.75]}, program)
    sources = {(d.source, json.dumps(d.point)) for d in smaller(drawn)}
    assert ("a = v.tanh()\nb = a.sum()\n", '{"v": [0.25, 1.75]}') in sources  # x is gone
    # tanh alone on each element of v, as a scalar (x kept, unused, under another name)
    assert ("a = x.tanh()\n", '{"x": 1.75, "y": 1.0}') in sources
    assert ("a = x.tanh()\n", '{"x": 0.25, "y": 1.0}') in sources
    program = parse("a = x.tanh()\n", {"x": None})
    drawn = Drawn(program.source, {"x": None}, {"x": 0.4}, program)
    points = {json.dumps(d.point) for d in smaller(drawn)}
    assert points == {'{"x": 0.0}', '{"x": 1.0}'}  # the nearer whole number, and the other


def test_a_session_shrinks_to_smaller_programs_with_its_steps_renamed():
    program = parse("a = x.sin()\nb = a + y\nc = b * b\n", {"x": None, "y": None})
    drawn = Drawn(program.source, {"x": None, "y": None}, {"x": 0.5, "y": 1.0}, program)
    steps = ({"retain_grad": ["a"]}, {"backward": {"retain_graph": True},
                                      "expect": ["grad.a", "grad.x", "grad.y"]},
             {"zero_grad": ["y"], "expect": ["grad.x", "grad.y"]})
    shrunk = {(s.drawn.source, json.dumps(s.steps), s.requires_grad)
              for s in smaller_sessions(Session(drawn, steps, ("x",)))}
    # the prefix `a = x.sin()`: y is gone, and so is the step on it
    assert ("a = x.sin()\n", json.dumps([
        {"retain_grad": ["a"]},
        {"backward": {"retain_graph": True}, "expect": ["grad.a", "grad.x"]}]), ("x",)) in shrunk
    # `b * b` alone: its operand b is now the input x, made with requires_grad
    assert ("a = x * x\n", json.dumps([
        {"backward": {"retain_graph": True}, "expect": ["grad.x"]}]), ("x",)) in shrunk
    # `a + y` alone: a is the input x (a made value: tracked), y is still y (frozen)
    assert ("a = x + y\n", json.dumps([
        {"retain_grad": ["x"]},
        {"backward": {"retain_graph": True}, "expect": ["grad.x", "grad.y"]},
        {"zero_grad": ["y"], "expect": ["grad.x", "grad.y"]}]), ("x",)) in shrunk


# --- the search ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mutant, program", [
    ("exp-uses-input", "a = x.exp()\n"),
    ("tanh-forgets-square", "a = x.tanh()\n"),
    ("sum-divides-by-n", "a = v.sum()\n"),
])
def test_a_wrong_derivative_shrinks_to_the_one_operation_at_a_whole_number(tmp_path, mutant,
                                                                            program):
    result = fuzz_in_process(engine(tmp_path, mutant), max_steps=0)
    found = result.found
    assert found is not None and found.kind == "gradient"
    assert found.drawn.source == program and found.operations == 1
    assert all(float(v).is_integer() for value in found.drawn.point.values()
               for v in (value if isinstance(value, list) else [value]))
    assert program.strip() in found.describe() and "expected" in found.describe()


@pytest.mark.parametrize("mutant, at_seed, steps, says", [
    ("graph-never-freed", 1, 2, "torch raises RuntimeError"),
    ("retain-graph-ignored", 0, 2, "torch raises nothing"),
    # found in a session, which shrinks to none: an input no operation uses shows it on its own
    ("grad-starts-at-zero", 0, 0, "torch leaves .grad None"),
    # only where nothing requires grad: the inputs a smaller program is given are tried frozen
    ("constants-recorded", 0, 1, "does not require grad"),
    ("backward-without-grad-allowed", 0, 1, "does not require grad"),
])
def test_a_behaviour_bug_shrinks_to_one_operation_and_the_fewest_steps(tmp_path, mutant,
                                                                        at_seed, steps, says):
    """The session's program shrinks too (hypothesis alone left these at 2 and 4 operations),
    to one operation at whole numbers, with only the steps the bug needs."""
    found = fuzz_in_process(engine(tmp_path, mutant), at_seed=at_seed).found
    assert found is not None and found.kind == ("behaviour" if steps else "gradient")
    assert found.operations == 1 and len(found.session.steps) == steps, found.describe()
    assert all(float(v).is_integer() for v in found.drawn.point.values())
    assert says in found.message


def test_a_session_does_not_compare_what_torch_ran_before_a_backward_raised(tmp_path):
    """torch runs part of the graph before a second backward raises (a retained gradient
    filled, a leaf added into): no engine is expected to match that part (docs/protocol.md),
    so a gradient it changed is not compared until a step sets it to None."""
    upfront = tmp_path / "upfront.py"  # raises before it runs any operation of the pass
    walk = "    get = grads.get\n    found: dict[Scalar, Any] = {}\n"
    assert walk in SOURCE
    upfront.write_text(SOURCE.replace(walk, "    if any(n._op.saves and n._freed() for n in "
                                            "order):\n        raise RuntimeError(_BACKWARD_TWICE)\n"
                                      + walk))
    spec = importlib.util.spec_from_file_location("upfront", upfront)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    judge = fuzzing._Judge(lambda request: handler.handle(module, request), ("fd", "torch"),
                           compare.Tolerances())
    again = {"backward": {"retain_graph": True}, "expect": ["grad.a", "grad.x", "grad.y"]}
    for source, steps in [
        ("a = x / 2\n", ({"backward": {}}, {"retain_grad": ["a"]}, again)),  # a.grad: torch 1
        ("a = x * 2.0\nb = a + y\n", ({"backward": {}, "expect": ["grad.y"]},  # y.grad: 2
                                         {"backward": {}, "expect": ["grad.x", "grad.y"]},
                                         {"zero_grad": ["x"], "expect": ["grad.y"]})),
    ]:
        inputs = {"x": None, "y": None}
        program = parse(source, inputs)
        case = Session(Drawn(source, inputs, {"x": 0.0, "y": 1.0}, program), steps, ("x", "y"))
        answered = judge.answered(case)
        assert any(step["error"] for step in answered.behaviour["steps"])
        assert judge.judge(answered) is None, source
    # an engine that does not raise at all still differs, at that step
    upfront.write_text(SOURCE.replace("if op.saves and node._freed():", "if False:"))
    spec.loader.exec_module(module)
    found = judge(case)
    assert found is not None and "step 2" in found.message and "torch raises" in found.message


@pytest.mark.slow
def test_the_reference_engine_shows_no_difference_from_torch_in_300_programs(tmp_path):
    result = fuzz_in_process(engine(tmp_path, "reference"), oracles=("fd", "torch", "jax"))
    assert result.found is None and result.examples == 300


def test_torch_itself_shows_no_difference_even_with_detach_in_programs():
    """A program whose output a detach cuts off from every input has nothing to differentiate:
    none is drawn (torch's backward() would refuse it, and every engine would "differ")."""
    from gradcheck.engine import torch_engine

    result = fuzz_in_process(torch_engine, examples=120, oracles=("fd", "torch", "jax"))
    assert result.found is None and result.examples == 120


def test_without_torch_the_reference_engine_stands_in(tmp_path):
    result = fuzz_in_process(engine(tmp_path, "mul-own-operand"), oracles=("fd", "reference"),
                             max_steps=0)
    assert result.oracles == ("fd", "reference") and result.behaviour_oracle == "reference"
    assert result.found is not None and "the reference engine" in result.found.message


# --- the command ---------------------------------------------------------------------------------


def gradcheck(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "gradcheck", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd)


@pytest.mark.slow
def test_fuzz_finds_shrinks_reports_and_emits_an_exercise_that_validates(tmp_path):
    submission = tmp_path / "engine.py"
    submission.write_text(mutate(SOURCE, MUTANTS["sigmoid-forgets-factor"]))
    assert gradcheck("init", tmp_path / "course", "--empty").returncode == 0
    report = tmp_path / "report.json"
    exercise = tmp_path / "course" / "exercises" / "found" / "found.exercise.yaml"
    run = gradcheck("fuzz", submission, "--seed", 1, "--examples", 200, "--report-json", report,
                    "--emit-exercise", exercise)
    assert run.returncode == 1, run.stderr
    data = json.loads(report.read_text())
    assert {"found", "program", "inputs", "point", "operations", "kind", "message", "examples",
            "seconds"} <= set(data)
    assert data["found"] is True and data["operations"] == 1 and data["kind"] == "gradient"
    assert data["program"] == "a = x.sigmoid()\n" and data["program"] in run.stdout.replace(
        "    ", "")
    assert "finite differences, torch, jax" in run.stdout
    # its schema line names the course's copy, so that it validates in any clone of the course
    # (one into this machine's gradcheck would not), and its program is a block, as the
    # format asks
    assert exercise.read_text().startswith(
        "# yaml-language-server: $schema=../../schema/exercise.schema.json\n")
    assert "program: |\n  a = x.sigmoid()\n" in exercise.read_text()
    moved = tmp_path / "clone" / "elsewhere" / "course"
    shutil.move(tmp_path / "course", moved)
    exercise = moved / "exercises" / "found" / "found.exercise.yaml"
    checked = gradcheck("validate", exercise)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    graded = gradcheck("grade", submission, "--exercises", exercise.parent, "--quiet")
    assert "0/1" in graded.stdout.replace(" ", "") or "0.0/1" in graded.stdout, graded.stdout


@pytest.mark.slow
def test_fuzz_says_a_command_that_draws_the_same_programs_options_and_all(tmp_path):
    """The line to run again kept the seed alone: with `--ops` left out it drew other programs
    and found nothing. It keeps every option that changes what is drawn, and finds the same."""
    submission = tmp_path / "engine.py"
    submission.write_text(mutate(SOURCE, MUTANTS["sigmoid-forgets-factor"]))
    first = gradcheck("fuzz", submission, "--seed", 4, "--examples", 40, "--ops", "sigmoid,add",
                      "--max-steps", 0, "--max-operations", 3)
    assert first.returncode == 1, first.stdout + first.stderr
    line = next(line for line in first.stdout.splitlines() if line.startswith("run again with"))
    command = shlex.split(line.removeprefix("run again with: "))
    assert command == ["gradcheck", "fuzz", str(submission), "--seed", "4", "--examples", "40",
                       "--max-operations", "3", "--max-steps", "0", "--ops", "add,sigmoid"]
    again = gradcheck(*command[1:])
    assert again.returncode == 1 and again.stdout == first.stdout.replace(
        first.stdout.split(" random programs in ")[1].split(" s,")[0],
        again.stdout.split(" random programs in ")[1].split(" s,")[0])


#: tiny, keeping state from one program to the next, as a global tape may: from its fifth
#: backward() in a process on, every backward raises
STATEFUL = """import sys
sys.path.append({engines!r})
from tiny import tensor, no_grad
_backward = type(tensor(1.0)).backward
_calls = [0]


def backward(self, *args, **kwargs):
    _calls[0] += 1
    if _calls[0] > 4:
        raise RuntimeError("the tape is full")
    return _backward(self, *args, **kwargs)


type(tensor(1.0)).backward = backward
"""


@pytest.mark.slow
def test_fuzz_says_when_the_smallest_program_passes_in_a_worker_of_its_own(tmp_path):
    """The shrunk program failed only because of the programs run before it in the same worker:
    the finding showed it as the bug. It is run again in a fresh worker, and the report says
    the engine keeps state from one program to the next; an engine wrong on the program alone
    is not told that."""
    engines = Path(__file__).parent / "engines"
    stateful = tmp_path / "stateful.py"
    stateful.write_text(STATEFUL.format(engines=str(engines)))
    report = tmp_path / "report.json"
    run = gradcheck("fuzz", stateful, "--seed", 1, "--examples", 40, "--max-steps", 0,
                    "--report-json", report)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "the tape is full" in run.stdout
    assert "In a worker of its own, where no program ran before it, this program passes" \
        in run.stdout
    assert json.loads(report.read_text())["alone"] is False
    wrong = tmp_path / "engine.py"
    wrong.write_text(mutate(SOURCE, MUTANTS["sigmoid-forgets-factor"]))
    run = gradcheck("fuzz", wrong, "--seed", 1, "--examples", 200, "--report-json", report)
    assert run.returncode == 1 and "In a worker of its own" not in run.stdout
    assert json.loads(report.read_text())["alone"] is True


@pytest.mark.slow
def test_fuzz_of_the_reference_engine_finds_nothing_and_exits_0(tmp_path):
    report = tmp_path / "report.json"
    run = gradcheck("fuzz", "reference", "--seed", 2, "--examples", 60, "--report-json", report)
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads(report.read_text())
    assert data["found"] is False and data["examples"] == 60 and data["program"] is None


def test_fuzz_exits_2_on_a_usage_error_or_an_engine_that_cannot_be_loaded(tmp_path):
    assert gradcheck("fuzz", tmp_path / "missing.py").returncode == 2
    assert gradcheck("fuzz", "reference", "--ops", "add,nope").returncode == 2
    broken = tmp_path / "broken.py"
    broken.write_text("raise ImportError('no engine here')\n")
    run = gradcheck("fuzz", broken, "--examples", 5)
    assert run.returncode == 2 and "no engine here" in run.stderr


# --- the check kind ------------------------------------------------------------------------------

EXERCISE = """\
id: mixed
title: Mixed
topic: t
points: 2
inputs:
  x: {value: 0.5}
program: |
  z = x * x + x.tanh()
checks:
  gradients: {}
  random_programs: {ops: [add, mul, exp, tanh], count: 20, max_operations: 3}
"""


@pytest.fixture
def mixed_bank(tmp_path):
    folder = tmp_path / "bank"
    folder.mkdir()
    (folder / "mixed.exercise.yaml").write_text(EXERCISE)
    return folder


def graded(submission, bank, **options):
    from gradcheck.bank.loader import load_bank
    from gradcheck.grading.grader import Grader

    with Grader(submission, **options) as grader:
        results = grader.grade_bank(load_bank([bank])).results
    return {result.check: result for result in results}


def mutant_file(tmp_path, name):
    path = tmp_path / f"{name}.py"
    path.write_text(mutate(SOURCE, MUTANTS[name]))
    return path


def test_programs_differ_with_the_seed_and_repeat_with_it():
    first, again, other = (domains.draw(programs(), 10, s) for s in (5, 5, 6))
    assert [d.source for d in first] == [d.source for d in again]
    assert [d.source for d in first] != [d.source for d in other]


@pytest.mark.slow
def test_the_check_passes_the_reference_and_shows_a_mutant_its_shrunk_program(tmp_path,
                                                                              mixed_bank):
    assert graded("reference", mixed_bank, seed=3)["random_programs"].status == "passed"
    result = graded(mutant_file(tmp_path, "tanh-forgets-square"), mixed_bank, seed=3)
    check = result["random_programs"]
    assert check.status == "failed" and result["gradients"].status == "failed"
    assert check.message.startswith("The smallest program found")
    assert "    a = x.tanh()\n" in check.message and "torch" in check.message


@pytest.mark.slow
def test_with_an_answer_key_the_check_uses_finite_differences_and_the_reference(tmp_path,
                                                                                 mixed_bank):
    from gradcheck.bank.loader import load_bank
    from gradcheck.grading import answer_key

    key = tmp_path / "key.json"
    answer_key.build(load_bank([mixed_bank]), 4, key)
    assert graded("reference", mixed_bank, key=key)["random_programs"].status == "passed"
    check = graded(mutant_file(tmp_path, "mul-own-operand"), mixed_bank,
                   key=key)["random_programs"]
    assert check.status == "failed" and "the reference engine" in check.message
    assert check.author_notes == ["compared with finite differences, the reference engine"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["live", "keyed", "keyed, feedback later"])
def test_a_grade_says_when_the_program_it_shows_passes_in_a_worker_of_its_own(tmp_path,
                                                                           mixed_bank, mode):
    """As `gradcheck fuzz` does, the check runs the program it shows again in a worker where
    nothing ran before: an engine that fails only once earlier programs have run (a tape that
    fills up) is told the program passes there; an engine wrong on the program alone is not.
    Also when the shrinking waits for the feedback (`grade_bank(feedback_later=True)`)."""
    from gradcheck.bank.loader import load_bank
    from gradcheck.grading import answer_key
    from gradcheck.grading.grader import Grader

    options = {"seed": 3}
    if mode != "live":
        options["key"] = tmp_path / "key.json"
        answer_key.build(load_bank([mixed_bank]), 3, options["key"])
    stateful = tmp_path / "stateful.py"
    stateful.write_text(STATEFUL.format(engines=str(ENGINES)))
    for engine, alone in ((stateful, True), (mutant_file(tmp_path, "tanh-forgets-square"), False)):
        with Grader(engine, **options) as grader:
            later = mode.endswith("later")
            report = grader.grade_bank(load_bank([mixed_bank]), feedback_later=later)
            if later:
                grader.give_feedback(report)
        check = next(r for r in report.results if r.check == "random_programs")
        assert check.status == "failed" and check.message.count("The smallest program") == 1
        assert (fuzzing.NOT_ALONE in check.message) is alone, check.message
        assert ("the tape is full" in check.message) is alone


def test_a_missing_piece_costs_the_check_that_draws_its_form_and_is_named_first(tmp_path):
    """Probing by use: without reflected operators, a check whose operations draw `2 + x`
    fails, its message starting with the form that needs the missing piece and its
    `blocked_by` naming the piece, as any other check's; one drawing only functions keeps its
    points, and so does the exercise's gradients check (`x * x + x.tanh()` needs none)."""
    folder = tmp_path / "bank"
    folder.mkdir()
    for name, ops in (("arithmetic", "[add, mul]"), ("functions", "[exp, tanh, sin]")):
        (folder / f"{name}.exercise.yaml").write_text(EXERCISE.replace("id: mixed", f"id: {name}")
                                                     .replace("[add, mul, exp, tanh]", ops))
    from gradcheck.bank.loader import load_bank
    from gradcheck.grading.grader import Grader

    with Grader(ENGINES / "odd_no_reflected.py", seed=3) as grader:
        results = {(r.exercise_id, r.check): r
                   for r in grader.grade_bank(load_bank([folder])).results}
    assert results["functions", "random_programs"].status == "passed"
    assert results["arithmetic", "gradients"].status == "passed"
    check = results["arithmetic", "random_programs"]
    assert check.status == "failed" and check.blocked_by in ("__radd__", "__rmul__")
    first, rest = check.message.split("\n", 1)
    assert re.fullmatch(rf"your engine is missing `{check.blocked_by}`: `[-.0-9()]+ [+*] x` "
                        r"needs it \(TypeError: unsupported operand .*\)", first), first
    assert rest.startswith("The smallest program found") and "(1 operation)" in rest
