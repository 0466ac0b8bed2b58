"""The exercise format: each kind of broken file says where and what, and the rest still load."""

import hashlib
import keyword
import re
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradcheck.bank.loader import exercise_files, from_data, load_bank, load_exercise
from gradcheck.bank.models import SUFFIX, dump_exercise
from gradcheck.bank.problems import ExerciseError
from gradcheck.bank.schema import schema_comment

ROOT = Path(__file__).resolve().parent.parent
BANK = ROOT / "tests" / "data" / "bank"
EXAMPLES = ROOT / "exercises"
EXPECT = re.compile(r"^# expect: (\d+): ([^:]*): (.*)$", re.M)


def _expectations(path: Path) -> list[tuple[int, str, str]]:
    """`# expect: LINE: FIELD: MESSAGE` comments written in a broken test file."""
    return [(int(line), field, message) for line, field, message
            in EXPECT.findall(path.read_text(encoding="utf-8"))]


BROKEN = sorted(p for p in BANK.glob("*" + SUFFIX) if _expectations(p))


@pytest.fixture(scope="module")
def bank():
    return load_bank(BANK)


@pytest.mark.parametrize("path", BROKEN, ids=lambda p: p.name)
def test_broken_file_reports_each_problem_with_line_and_field(bank, path):
    broken = dict(bank.broken)
    assert path in broken, f"{path.name} loaded although it is broken"
    problems = broken[path].problems
    expected = _expectations(path)
    assert len(problems) == len(expected), "\n".join(map(str, problems))
    for line, field, message in expected:
        assert any(p.line == line and p.field == field and message in p.message
                   and p.file == str(path) for p in problems), (
            f"no problem at line {line}, field {field!r} saying {message!r}; got:\n"
            + "\n".join(map(str, problems)))


def test_rendered_problem_is_file_line_field_message(bank):
    broken = dict(bank.broken)
    text = str(broken[BANK / "bad-oracle.exercise.yaml"])
    assert text == (f"{BANK / 'bad-oracle.exercise.yaml'}:13: checks.gradients.oracles[1]: "
                    "give 'fd', 'torch' or 'jax', not 'tensorflow'")


def test_good_files_load_beside_broken_ones(bank):
    # of two files with one id, the first keeps it: a repeated id breaks only the later file
    assert [e.id for e in bank.exercises] == ["same-id", "two-inputs"]
    assert bank.exercises[0].title == "Two files, one id (a)"
    assert {p for p, _ in bank.broken} == set(BROKEN)


def test_only_exercise_suffix_is_collected():
    files = exercise_files(BANK)
    assert BANK / "not-an-exercise.yaml" not in files
    assert all(f.name.endswith(SUFFIX) for f in files)
    assert load_bank(BANK).misnamed == [BANK / "not-an-exercise.yaml"]  # said, not skipped


def test_yaml_1_2_scalars_reach_the_model(bank):
    exercise = next(e for e in bank.exercises if e.id == "two-inputs")
    assert exercise.hint == "no"  # YAML 1.1 would have made this False
    assert exercise.tolerance.fd.atol == 1e-6 and exercise.tolerance.fd.rtol == 1e-5


def test_strict_stops_at_the_first_broken_file():
    with pytest.raises(ExerciseError) as info:
        load_bank(BANK, strict=True)
    assert info.value.problems[0].file == str(BROKEN[0])


def test_strict_also_stops_on_duplicate_ids(tmp_path):
    for name in ("dup-id-a", "dup-id-b"):
        shutil.copy(BANK / f"{name}{SUFFIX}", tmp_path)
    with pytest.raises(ExerciseError, match="already used by"):
        load_bank(tmp_path, strict=True)


def test_a_byte_order_mark_is_read_past_and_a_byte_not_utf8_is_placed(tmp_path):
    """Windows editors save UTF-8 with a byte-order mark, which YAML allows: the file loads and
    its schema line is seen. A file in Latin-1 is refused at the line of its first such byte."""
    good = (BANK / "good-two-inputs.exercise.yaml").read_bytes()
    marked = tmp_path / "marked.exercise.yaml"
    marked.write_bytes(b"\xef\xbb\xbf" + good.replace(b"\n", b"\r\n"))
    assert load_exercise(marked).id == load_exercise(BANK / "good-two-inputs.exercise.yaml").id
    from gradcheck.course.validate import file_problems
    assert not [p for p in file_problems(marked) if "start the file with" in p.message]
    latin = tmp_path / "latin.exercise.yaml"
    lines = good.splitlines(keepends=True)
    latin.write_bytes(b"".join(lines[:3]) + b"# caf\xe9\n" + b"".join(lines[3:]))
    with pytest.raises(ExerciseError) as info:
        load_exercise(latin)
    assert info.value.problems[0].line == 4
    assert "not UTF-8 text" in str(info.value) and "save the file as UTF-8" in str(info.value)


def test_the_schema_line_asked_for_names_the_courses_copy_of_the_schema(tmp_path):
    """In a course (its gradcheck.toml and schema/ folder above the file) the line asked for
    points at the course's copy, which moves with it; outside one, at this gradcheck's."""
    from gradcheck.bank.schema import SCHEMA_PATH
    from gradcheck.course.validate import file_problems

    body = (BANK / "good-two-inputs.exercise.yaml").read_text().partition("\n")[2]
    course = tmp_path / "course"
    (course / "schema").mkdir(parents=True)
    (course / "schema" / "exercise.schema.json").write_text(SCHEMA_PATH.read_text())
    (course / "gradcheck.toml").write_text('exercises = "exercises"\n')
    inside = course / "exercises" / "week1" / "a.exercise.yaml"
    outside = tmp_path / "loose" / "a.exercise.yaml"
    for file in (inside, outside):
        file.parent.mkdir(parents=True)
        file.write_text(body)
    [asked] = [p.message for p in file_problems(inside)]
    assert "`# yaml-language-server: $schema=../../schema/exercise.schema.json`" in asked
    [asked] = [p.message for p in file_problems(outside)]
    wanted = os.path.relpath(SCHEMA_PATH, outside.parent)
    assert f"`# yaml-language-server: $schema={wanted}`" in asked


def test_missing_path_is_a_broken_entry_not_a_crash(tmp_path):
    bank = load_bank([tmp_path / "nowhere.exercise.yaml", EXAMPLES])
    assert len(bank.broken) == 1 and "cannot read" in str(bank.broken[0][1])
    assert bank.exercises


def test_loaded_exercise_knows_its_file_lines_program_and_digest():
    path = EXAMPLES / "02-backward" / "chain-rule.exercise.yaml"
    exercise = load_exercise(path)
    lines = path.read_text().splitlines()
    assert exercise.path == path
    assert lines[exercise.line_of("program") - 1].startswith("program:")
    step = exercise.line_of("checks.behaviour.steps[1].backward.retain_graph")
    assert "retain_graph: true" in lines[step - 1]
    assert exercise.program.output_name == "z"
    assert [n.name for n in exercise.program.nodes if n.name] == ["x", "y", "z"]
    assert exercise.digest == hashlib.sha256(path.read_bytes()).hexdigest()


def test_digest_follows_the_bytes(tmp_path):
    path = tmp_path / f"a{SUFFIX}"
    original = (EXAMPLES / "02-backward" / "chain-rule.exercise.yaml").read_text()
    path.write_text(original)
    first = load_exercise(path).digest
    assert load_exercise(path).digest == first
    path.write_text(original.replace("points: 4", "points: 5"))
    assert load_exercise(path).digest != first


# --- cross-field checks, on small exercises written in the tests --------------------------------

BASE = """\
id: t
title: T
topic: t
points: 1
inputs:
  x: {value: 3.0, domain: {low: -2, high: 2}}
  v: {value: [1.0, 2.0], requires_grad: false}
program: |
  y = x * v
  s = y.sum()
"""


def _problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / f"t{SUFFIX}"
    path.write_text(text)
    with pytest.raises(ExerciseError) as info:
        load_exercise(path)
    return [str(p).split(":", 1)[1] for p in info.value.problems]  # without the file name


def _loads(tmp_path: Path, text: str):
    path = tmp_path / f"t{SUFFIX}"
    path.write_text(text)
    return load_exercise(path)


def test_one_line_program_error_points_at_its_column(tmp_path):
    text = BASE.replace("program: |\n  y = x * v\n  s = y.sum()\n", 'program: "y = x +"\n')
    problems = _problems(tmp_path, text + "checks: {graph: {names: [x]}}\n")
    assert problems == ["8: program: column 18: not valid syntax: invalid syntax"]


def test_a_folded_program_is_told_to_keep_its_lines(tmp_path):
    """`program: >` makes one line of the program, which then reads as bad syntax: the message
    says why, and what to write."""
    text = BASE.replace("program: |", "program: >")
    problems = _problems(tmp_path, text + "checks: {graph: {names: [x]}}\n")
    assert problems == ["8: program: column 10: not valid syntax: invalid syntax; YAML joined the "
                        "program's lines into one line: write `program: |` to keep each line"]


def test_a_number_where_text_goes_and_a_decimal_comma_say_what_to_write(tmp_path):
    text = BASE.replace("topic: t", "topic: 2").replace("{value: 3.0,", "{value: 3,5,")
    assert _problems(tmp_path, text + "checks: {graph: {names: [x]}}\n") == [
        "3: topic: 2 is read as a number here; put it in quotes to make it text",
        "6: inputs.x.5: unknown key '5'; the keys here are domain, requires_grad, value; a "
        "decimal comma? write numbers with a point"]


def test_a_misspelt_word_and_a_top_level_key_indented_say_what_was_meant(tmp_path):
    text = BASE.replace("topic: t\n", "topic: t\nvisibility: hiden\n")
    assert _problems(tmp_path, text + "checks:\n  tolerance: {rtol: 1.0e-6}\n"
                                      "  graph: {names: [x]}\n") == [
        "4: visibility: give 'visible', 'hidden', 'after_due_date' or 'after_published', not "
        "'hiden' (did you mean 'hidden'?)",
        "13: checks.tolerance: unknown key 'tolerance'; the keys here are answers, behaviour, "
        "gradients, graph, hessian, random_programs, sampled; 'tolerance' is a key of the "
        "exercise itself, at the top of the file"]


def test_output_must_be_a_variable(tmp_path):
    problems = _problems(tmp_path, BASE + "output: q\nchecks: {graph: {names: [x]}}\n")
    assert problems == ["11: output: 'q' is not a variable of the program; name one of s, v, "
                        "x, y"]


def test_output_may_be_an_earlier_variable(tmp_path):
    exercise = _loads(tmp_path, BASE + "output: y\nchecks: {graph: {names: [x]}}\n")
    assert exercise.program.output_name == "y"


def test_gradient_checks_need_a_scalar_output(tmp_path):
    problems = _problems(tmp_path, BASE + "output: y\nchecks:\n  sampled: {}\n")
    assert len(problems) == 1 and problems[0].startswith("13: checks.sampled: gradients are "
                                                         "taken of a scalar output, but 'y'")


def test_answers_only_for_inputs_that_require_grad(tmp_path):
    text = BASE + "checks:\n  answers:\n    cases:\n      - grads: {x: 3.0, v: [1.0, 1.0]}\n"
    assert _problems(tmp_path, text) == [
        "14: checks.answers.cases[0].grads.v: 'v' is not an input that requires grad; those "
        "are x"]


def test_a_value_of_the_wrong_size_says_how_many_were_given(tmp_path):
    text = BASE + "checks:\n  answers:\n    cases:\n      - grads: {x: [3.0, 1.0]}\n"
    assert _problems(tmp_path, text) == [
        "14: checks.answers.cases[0].grads.x: 'x' is a number (as its value under inputs), but "
        "a list of 2 numbers is given here; give a number"]


def test_bounds_and_lengths_say_what_to_give(tmp_path):
    text = (BASE.replace("points: 1", "points: 0").replace("title: T", "title: ''")
            + "checks:\n  sampled: {count: 0, weight: -1}\n  graph: {names: []}\n"
              "  random_programs: {ops: []}\n")
    assert _problems(tmp_path, text) == [
        "2: title: the text is empty; write it",
        "4: points: give a number above 0, not 0",
        "12: checks.sampled.weight: give a number above 0, not -1",
        "12: checks.sampled.count: give a number of at least 1, not 0",
        "13: checks.graph.names: the list is empty; give at least 1 item (Inputs and variables "
        "whose `grad_fn` name, `is_leaf` and `requires_grad` are compared)",
        "14: checks.random_programs.ops: the list is empty; give at least 1 of abs, add, cos, "
        "detach, div, exp, log, mean, mul, neg, pow, relu, select, sigmoid, sin, sqrt, sub, "
        "sum, tanh, or leave `ops` out for its default"]


def test_answer_needs_a_value_or_grads(tmp_path):
    text = BASE + "checks:\n  answers:\n    cases:\n      - at: {x: 1.0, v: [1.0, 1.0]}\n"
    assert _problems(tmp_path, text) == [
        "14: checks.answers.cases[0]: give the output's `value`, some `grads`, or both"]


def test_sampled_needs_a_domain_with_room_to_sample(tmp_path):
    no_domain = BASE.replace(", domain: {low: -2, high: 2}", "")
    assert _problems(tmp_path, no_domain + "checks: {sampled: {}}\n") == [
        "11: checks.sampled: no input has a domain to sample from; give at least one input a "
        "domain: {low: .., high: ..}"]
    squeezed = "6: inputs.x.domain: nothing is left to sample once a margin of {} is kept " \
               "from the ends and the avoided points; widen the domain or lower the margin"
    assert _problems(tmp_path, BASE + "checks: {sampled: {margin: 2.5}}\n") == [
        squeezed.format("2.5")]
    avoided = BASE.replace("high: 2}", "high: 2, avoid: [-1, 0, 1]}")
    assert _problems(tmp_path, avoided + "checks: {sampled: {margin: 0.5}}\n") == [
        squeezed.format("0.5")]
    _loads(tmp_path, avoided + "checks: {sampled: {margin: 0.4}}\n")


def test_domain_must_be_ordered(tmp_path):
    text = BASE.replace("low: -2, high: 2", "low: 2, high: -2")
    assert _problems(tmp_path, text + "checks: {sampled: {}}\n") == [
        "6: inputs.x.domain: low (2) must be below high (-2)"]


def test_step_needs_exactly_one_action(tmp_path):
    text = BASE + ("checks:\n  behaviour:\n    steps:\n      - expect: [grad.x]\n"
                   "      - {backward: {}, zero_grad: [x]}\n")
    assert _problems(tmp_path, text) == [
        "14: checks.behaviour.steps[0]: a step has exactly one action (forward, backward, "
        "zero_grad, retain_grad, detach, requires_grad, sgd, grad, compute); this one has none",
        "15: checks.behaviour.steps[1]: a step has exactly one action (forward, backward, "
        "zero_grad, retain_grad, detach, requires_grad, sgd, grad, compute); this one has "
        "backward and "
        "zero_grad"]


def test_bare_backward_step_means_no_arguments(tmp_path):
    exercise = _loads(tmp_path, BASE + "checks:\n  behaviour:\n    steps:\n      - backward:\n"
                                       "        expect: [grad.x]\n")
    step = exercise.checks.behaviour.steps[0]
    assert step.action == "backward" and step.backward.retain_graph is None  # torch's default
    assert step.backward.create_graph is False


def test_detached_name_exists_only_after_its_step(tmp_path):
    text = BASE + ("checks:\n  behaviour:\n    steps:\n      - forward: {}\n"
                   "        expect: [requires_grad.d]\n"
                   "      - detach: {name: d, of: y}\n        expect: [requires_grad.d]\n"
                   "      - backward: {of: d}\n")
    assert _problems(tmp_path, text) == [
        "15: checks.behaviour.steps[0].expect[0]: 'd' is not defined; use an input or a "
        "variable of the program: s, v, x, y"]
    _loads(tmp_path, text.replace("        expect: [requires_grad.d]\n", "", 1))


def test_sgd_updates_inputs_only(tmp_path):
    text = BASE + ("checks:\n  behaviour:\n    steps:\n      - sgd: {lr: 0.1, params: [y]}\n"
                   "        expect: [value.x]\n")
    assert _problems(tmp_path, text) == [
        "14: checks.behaviour.steps[0].sgd.params[0]: sgd updates inputs (leaves); 'y' is not "
        "one of v, x"]


def test_expect_and_names_have_a_form(tmp_path):
    text = BASE + ("checks:\n  graph: {names: [x, 2y, lambda]}\n  behaviour:\n    steps:\n"
                   "      - backward: {}\n        expect: [grad_x]\n")
    assert _problems(tmp_path, text) == [
        "12: checks.graph.names[1]: '2y' is not a usable name; use letters, digits and _, "
        "starting with a letter",
        "12: checks.graph.names[2]: 'lambda' is a Python keyword; choose another name",
        "16: checks.behaviour.steps[0].expect[0]: 'grad_x' is not something to compare; write "
        "KIND.NAME with KIND one of grad, value, requires_grad, is_leaf, grad_fn, has_grad_fn "
        "(for example grad.x), grad.NAME.FIELD with FIELD one of requires_grad, is_leaf, "
        "has_grad_fn, or warnings"]


def test_missing_keys_and_no_checks(tmp_path):
    text = BASE.replace("points: 1\n", "") + "checks: {}\n"
    assert _problems(tmp_path, text) == [
        "1: points: the key 'points' is required here; add it",
        "10: checks: add at least one check: gradients, sampled, answers, graph, behaviour, "
        "hessian, random_programs"]


def test_empty_and_non_mapping_files(tmp_path):
    assert _problems(tmp_path, "# nothing\n") == [
        "1: the file is empty; an exercise is a mapping of keys such as id, title, inputs, "
        "program"]
    assert _problems(tmp_path, "- 1\n")[0].startswith("1: the file is a list, not a mapping")


def test_from_data_checks_everything_without_lines():
    with pytest.raises(ExerciseError) as info:
        from_data({"id": "Bad Id"}, file="generated")
    first = info.value.problems[0]
    assert (first.file, first.line, first.field) == ("generated", 0, "id")
    assert str(first).startswith("generated: id: 'Bad Id' is not a usable id")


# --- round trip ---------------------------------------------------------------------------------

_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,4}", fullmatch=True).filter(
    lambda n: not keyword.iskeyword(n) and n not in ("s", "t", "d", "sum"))
_FLOATS = st.floats(-1e6, 1e6, allow_nan=False)
_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@st.composite
def _exercise_data(draw):
    """Valid exercise data: random names, sizes, values, texts and a program that uses them."""
    names = draw(st.lists(_NAMES, min_size=1, max_size=3, unique=True))
    sizes = {name: draw(st.none() | st.integers(1, 3)) for name in names}

    def value(size):
        return draw(_FLOATS if size is None else st.lists(_FLOATS, min_size=size, max_size=size))

    inputs = {}
    for i, name in enumerate(names):
        inputs[name] = {"value": value(sizes[name]), "requires_grad": i == 0 or draw(st.booleans())}
        if draw(st.booleans()):
            low = draw(st.floats(-100, 100))
            inputs[name]["domain"] = {"low": low, "high": low + draw(st.floats(1, 10)),
                                      "avoid": draw(st.lists(_FLOATS, max_size=2))}
    terms = [f"{n}.sum()" if sizes[n] else f"{n} * {n}" for n in names]
    grad_names = [n for n in names if inputs[n]["requires_grad"]]
    point = {n: value(sizes[n]) for n in names}
    return {
        "id": draw(st.from_regex(r"[a-z0-9][a-z0-9-]{0,10}", fullmatch=True)),
        "title": draw(_TEXT.filter(bool)), "topic": draw(_TEXT.filter(bool)),
        "points": draw(st.integers(2, 40)) / 4, "hint": draw(_TEXT),
        "visibility": draw(st.sampled_from(["visible", "hidden", "after_due_date"])),
        "inputs": inputs,
        "program": "s = " + " + ".join(terms) + "\n" + draw(st.sampled_from(["", "t = s * 2\n"])),
        "output": "s",
        "checks": {
            "gradients": {"points": [point], "oracles": draw(st.sampled_from([["fd"],
                                                                              ["torch", "jax"]]))},
            "answers": {"weight": draw(st.floats(0.1, 5)),
                        "cases": [{"at": point, "value": draw(_FLOATS),
                                   "grads": {n: value(sizes[n]) for n in grad_names}}]},
            "graph": {"names": names},
            "behaviour": {"steps": [
                {"backward": {"retain_graph": draw(st.booleans())}, "expect": [f"grad.{names[0]}"]},
                {"zero_grad": [names[0]]},
                {"detach": {"name": "d", "of": "s"}, "expect": ["requires_grad.d"]}]},
        },
        "tolerance": {"fd": {"atol": draw(st.floats(0, 1e-3)), "rtol": 1e-6}},
        "convention": draw(st.sampled_from([None, "torch"])),
        "timeout": draw(st.floats(1, 60)),
    }


@settings(max_examples=50)
@given(_exercise_data())
def test_generated_exercise_round_trips_through_yaml(tmp_path_factory, data):
    exercise = from_data(data)
    path = tmp_path_factory.mktemp("round") / f"generated{SUFFIX}"
    path.write_text(dump_exercise(exercise, schema_comment(path)), encoding="utf-8")
    loaded = load_exercise(path)
    assert loaded.model_dump() == exercise.model_dump()
    assert loaded.program.nodes == exercise.program.nodes


def test_a_check_s_own_hint_replaces_the_exercise_s(tmp_path):
    from gradcheck.grading.grader import Grader

    engines = Path(__file__).parent / "engines"
    path = tmp_path / "hinted.exercise.yaml"
    path.write_text("""\
id: hinted
title: Hints per check
topic: 01-test
points: 2
hint: the exercise's hint
inputs:
  x: {value: 2.0}
program: |
  z = x * 3
checks:
  answers:
    cases:
      - grads: {x: 3.0}
  behaviour:
    hint: what the behaviour check tests
    steps:
      - backward: {}
        expect: [grad.x]
""")
    wrong = tmp_path / "wrong.py"
    wrong.write_text(f"import sys\nsys.path.append({str(engines)!r})\nfrom mutant import load\n"
                     "_engine = load('mul')\ntensor, no_grad = _engine.tensor, _engine.no_grad\n")
    with Grader(wrong, seed=1, oracles=["torch"]) as grader:
        results = {r.check: r for r in grader.grade_exercise(load_exercise(path))}
    assert results["behaviour"].message.endswith("\nHint: what the behaviour check tests")
    assert results["answers"].message.endswith("\nHint: the exercise's hint")


def test_the_only_convention_is_torch_s(tmp_path):
    path = tmp_path / "kink.exercise.yaml"
    path.write_text("id: kink\ntitle: K\ntopic: t\npoints: 1\ninputs:\n  x: {value: 1.0}\n"
                    "program: |\n  y = x.abs()\nchecks: {gradients: {}}\nconvention: jax\n")
    with pytest.raises(ExerciseError, match="convention"):
        load_exercise(path)
    path.write_text(path.read_text().replace("convention: jax", "convention: torch"))
    assert load_exercise(path).convention == "torch"


def test_a_compute_expression_is_parsed_as_the_engine_parses_it(tmp_path):
    steps = ("checks:\n  behaviour:\n    steps:\n      - backward: {of: s, retain_graph: true}\n"
             "      - grad: {of: s, wrt: [x], names: [gx]}\n"
             '      - compute: {name: p, expr: "(x.grad * v).sum() + gx"}\n'
             "        expect: [value.p]\n")
    _loads(tmp_path, BASE + steps)  # a variable's gradient, and one a grad step bound
    text = BASE + steps + ('      - compute: {name: q, expr: "p * v.data"}\n'
                           '      - compute: {name: r, expr: "y.grad[2]"}\n'
                           '      - compute: {name: t, expr: "p + w.grad"}\n')
    assert _problems(tmp_path, text) == [
        "18: checks.behaviour.steps[3].compute.expr: column 39: attribute access is not allowed "
        "here; the one attribute an expression reads is a variable's gradient, `x.grad`",
        "19: checks.behaviour.steps[4].compute.expr: column 42: index 2 is out of range for "
        "length 2",
        "20: checks.behaviour.steps[5].compute.expr: column 39: 'w' is not defined; use an "
        "input or a variable of the program: gx, p, q, r, s, v, x, y"]


def test_an_unknown_name_in_an_expression_hides_no_other_problem_and_each_is_at_its_column(
        tmp_path):
    steps = ("checks:\n  behaviour:\n    steps:\n      - backward: {of: s}\n"
             '      - compute: {name: p, expr: "nope[0] + y.foo() + nope.grad"}\n'
             '      - compute: {name: q, expr: "(y + nope)[1] + x[0]"}\n'
             "        expect: [value.p]\n")
    assert _problems(tmp_path, BASE + steps) == [
        "15: checks.behaviour.steps[1].compute.expr: column 35: 'nope' is not defined; use an "
        "input or a variable of the program: s, v, x, y",
        "15: checks.behaviour.steps[1].compute.expr: column 47: unknown method 'foo'; the "
        "methods are abs, cos, detach, exp, log, mean, relu, sigmoid, sin, sqrt, sum, tanh",
        "16: checks.behaviour.steps[2].compute.expr: column 40: 'nope' is not defined; use an "
        "input or a variable of the program: p, s, v, x, y",
        "16: checks.behaviour.steps[2].compute.expr: column 51: only a 1-D value can be indexed; "
        "this one is a scalar"]
