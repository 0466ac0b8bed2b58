"""`gradcheck validate`: the bundled bank is clean, and each kind of problem is reported."""

import math
import shutil
from pathlib import Path

import numpy as np

import pytest

from gradcheck.bank.loader import load_exercise, misnamed_message
from gradcheck.bank.models import MAX_TOLERANCE, SUFFIX
from gradcheck.bank.tolerances import Tolerance as Closeness
from gradcheck.bank.schema import schema_comment
from gradcheck.course.validate import (
    agreement_problems,
    answer_problems,
    domain_problems,
    file_problems,
    main,
    validate,
)

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = ROOT / "exercises"
BANK = ROOT / "tests" / "data" / "bank"
CHAIN_RULE = EXERCISES / "02-backward" / "chain-rule.exercise.yaml"


@pytest.mark.slow
def test_bundled_bank_has_no_problems():
    """The bank's own validation, oracles included: what a bank must pass before publishing."""
    problems = validate([EXERCISES])
    assert problems == [], "\n".join(map(str, problems))


def test_main_prints_problems_and_fails(capsys):
    assert main([str(BANK)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert f"{BANK / 'bad-oracle.exercise.yaml'}:13: checks.gradients.oracles[1]: give 'fd', " \
           "'torch' or 'jax', not 'tensorflow'" in out
    assert any(line.startswith(f"{BANK / 'bad-syntax.exercise.yaml'}:10: YAML syntax")
               for line in out)


def test_main_passes_a_clean_bank(capsys):
    assert main(["--static", str(EXERCISES)]) == 0
    assert capsys.readouterr().out == ""


def test_a_check_whose_oracles_leave_out_the_convention_is_said_once(tmp_path, capsys):
    text = (schema_comment(tmp_path / "x.exercise.yaml") + "\ntitle: t\ntopic: t\npoints: 1\n"
            "convention: torch\ninputs:\n  x: {value: 0.0}\nprogram: |\n  f = x.abs()\n"
            "checks:\n  gradients:\n    oracles: [jax]\n")
    for name in ("a", "b"):
        (tmp_path / f"{name}.exercise.yaml").write_text(text + f"id: {name}\n")
    assert main(["--static", str(tmp_path)]) == 0
    assert capsys.readouterr().err.count(
        "gradcheck validate: torch grades the gradient and hessian checks of a, b too, although "
        "their `oracles` leave it out, as their `convention: torch` grades kinks by torch's "
        "derivative\n") == 1


def test_every_broken_file_of_a_folder_is_reported():
    files = {p.file for p in validate([BANK])}
    # each broken file says what is wrong with it (`# expect:`); of two files with one id, the
    # first keeps it and is not broken; a YAML file not named *.exercise.yaml is not collected,
    # and said so
    broken = {str(p) for p in BANK.glob("*" + SUFFIX) if "# expect:" in p.read_text()}
    assert files == broken | {str(BANK / "not-an-exercise.yaml")}


def test_missing_paths_and_empty_folders(tmp_path):
    assert [str(p) for p in validate([tmp_path / "nothing"])] == [
        f"{tmp_path / 'nothing'}: no such file or folder"]
    assert "no *.exercise.yaml files here" in str(validate([tmp_path])[0])


def _copy(tmp_path: Path, first_line: str, name: str = f"x{SUFFIX}") -> Path:
    path = tmp_path / name
    rest = CHAIN_RULE.read_text().split("\n", 1)[1]
    path.write_text(first_line + "\n" + rest)
    return path


def test_schema_line_is_required_and_must_lead_to_the_schema(tmp_path):
    good = _copy(tmp_path, schema_comment(tmp_path / "x.exercise.yaml"))
    assert file_problems(good) == []
    missing = _copy(tmp_path, "# just a comment")
    [problem] = file_problems(missing)
    assert problem.line == 1 and schema_comment(missing) in problem.message
    wrong = _copy(tmp_path, "# yaml-language-server: $schema=../nowhere.json")
    [problem] = file_problems(wrong)
    assert "'../nowhere.json' does not exist" in problem.message
    url = _copy(tmp_path, "# yaml-language-server: $schema=https://example.org/s.json")
    assert file_problems(url) == []


def test_a_named_file_without_the_suffix_is_reported(tmp_path):
    path = _copy(tmp_path, schema_comment(tmp_path / "x.yaml"), "x.yaml")
    assert [p.message for p in validate([path])] == [misnamed_message(path)]
    assert "rename it x.exercise.yaml" in misnamed_message(path)


def test_a_misnamed_file_beside_good_ones_in_a_folder_is_reported(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    _copy(folder, schema_comment(folder / "x.exercise.yaml"))
    for name in ("addmul.exercise.yml", "addmul.yaml", "notes.YML"):
        (folder / name).write_text("id: a\n")
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github" / "grade.yml").write_text("on: push\n")  # hidden: not the bank's
    problems = validate([tmp_path], static=True)
    assert [(Path(p.file).name, p.message.split("; ")[1]) for p in problems] == [
        ("addmul.exercise.yml", "rename it addmul.exercise.yaml, or move it out of the bank if "
                                "it is not an exercise"),
        ("addmul.yaml", "rename it addmul.exercise.yaml, or move it out of the bank if it is "
                        "not an exercise"),
        ("notes.YML", "rename it notes.exercise.yaml, or move it out of the bank if it is not "
                      "an exercise")]
    assert problems[0].message.startswith(
        "a bank's folder is searched for *.exercise.yaml files only")


@pytest.mark.parametrize("program, avoid, fix", [
    ("y = relu(x)", "[]", "add 0 to `avoid`"),
    ("y = x.abs() * 2", "[]", "add 0 to `avoid`"),
    ("y = 1 / x", "[]", "add 0 to `avoid`"),
    ("y = relu(x)", "[0]", None),
    ("y = x / 2", "[]", None),
    # on any operation's argument, found wherever the sampler happens to draw
    ("y = relu(x - 1)", "[]", "add 1 to `avoid`"),
    ("y = relu(x - 1)", "[1]", None),
    ("y = 1 / (x * x - 1)", "[]", "add -1, 1 to `avoid`"),
])
def test_sampled_domain_must_avoid_kinks_and_poles(tmp_path, program, avoid, fix):
    path = tmp_path / f"k{SUFFIX}"
    path.write_text(f"id: k\ntitle: K\ntopic: t\npoints: 1\ninputs:\n"
                    f"  x: {{value: 1.5, domain: {{low: -2, high: 2, avoid: {avoid}}}}}\n"
                    f"program: |\n  {program}\nchecks: {{sampled: {{}}}}\n")
    problems = domain_problems(load_exercise(path))
    assert len(problems) == (fix is not None)
    if fix:
        assert problems[0].line == 6 and problems[0].field == "inputs.x.domain"
        assert fix in problems[0].message


SAMPLED = """\
id: k
title: K
topic: t
points: 1
inputs:
  u: {value: 0.25, domain: {low: -1, high: 1}}
  x: {value: 2.5, domain: {low: -1, high: 3}}
program: |
  a = (u - 0.5).abs()
  b = (x - 2).log()
  z = a + b / (x - u)
checks: {sampled: {}}
"""


def test_each_kink_pole_and_edge_is_said_once_with_its_place_and_fix(tmp_path):
    """The issue's examples, each said once, where the fix goes: a domain, or the program's
    line when its argument depends on several inputs."""
    problems = domain_problems(_exercise(tmp_path, SAMPLED))
    assert [(p.line, p.field, p.message) for p in problems] == [
        (6, "inputs.u.domain", "`(u - 0.5).abs()` (program line 1) has a kink where its argument "
                               "`u - 0.5` is 0, and it reaches 0 over the domain of u (-1, 1), at "
                               "u = 0.5; add 0.5 to `avoid`, narrow the domain, or set "
                               "`convention: torch` to grade the points near it as torch does"),
        (7, "inputs.x.domain", "`(x - 2).log()` (program line 2) needs its argument `x - 2` > 0, "
                               "but it reaches -2.95 over the domain of x (-1, 3) (at x = -0.95); "
                               "narrow the domain so that it stays above 0 (it is 0 at x = 2)"),
        (11, "program", "`b / (x - u)` (program line 3) has a pole where its denominator "
                        "`x - u` is 0, and it reaches 0 over the domains of u (-1, 1), x (-1, 3) "
                        "(near u = -0.95, x = -0.95); narrow the domains")]
    # a convention grades the points near a kink; nothing grades a pole or a log of -1
    fields = [p.field for p in domain_problems(_exercise(tmp_path, SAMPLED +
                                                         "convention: torch\n"))]
    assert fields == ["inputs.x.domain", "program"]


def test_a_hessians_drawn_points_are_checked_too(tmp_path):
    text = SAMPLED.replace("checks: {sampled: {}}", "checks: {hessian: {count: 4}}")
    assert len(domain_problems(_exercise(tmp_path, text))) == 3
    listed_only = SAMPLED.replace("checks: {sampled: {}}", "checks: {hessian: {}}")
    assert domain_problems(_exercise(tmp_path, listed_only)) == []


def test_domains_only_matter_to_a_sampled_check(tmp_path):
    path = tmp_path / f"k{SUFFIX}"
    shutil.copy(CHAIN_RULE, path)
    text = path.read_text().replace("y = x ** 2", "y = relu(x) ** 2")
    path.write_text(text)
    assert domain_problems(load_exercise(path))
    path.write_text(text.replace("  sampled:\n    count: 20\n", ""))
    assert domain_problems(load_exercise(path)) == []


# --- the oracles' checks ------------------------------------------------------------------------

ABS = """\
id: k
title: K
topic: t
points: 1
inputs:
  x: {value: 1.0, domain: {low: -2, high: 2, avoid: [0]}}
program: |
  y = abs(x) * 3
"""


def _exercise(tmp_path: Path, text: str):
    path = tmp_path / f"k{SUFFIX}"
    path.write_text(text)
    return load_exercise(path)


def test_wrong_hand_answers_are_found_where_they_are_written(tmp_path):
    exercise = _exercise(tmp_path, ABS + (
        "checks:\n  answers:\n    cases:\n"
        "      - {value: 3.0, grads: {x: 3.0}}\n"          # right: y = 3|x|, dy/dx = 3 at 1
        "      - at: {x: -2.0}\n        value: 5.0\n"      # wrong: 6
        "        grads: {x: 3.0}\n"))                      # wrong: -3
    assert [(p.line, p.field, p.message) for p in answer_problems(exercise)] == [
        (14, "checks.answers.cases[1].value", "y is 5.0 by hand, but the oracles give 6.0: "
                                              "off by 1, " + HELD + "correct the answer (or "
                                              "the program)"),
        (15, "checks.answers.cases[1].grads.x", "dy/dx is 3.0 by hand, but the oracles give "
                                                "-3.0: off by 6, " + HELD + "correct the answer "
                                                "(or the program)")]


def test_a_point_where_every_oracle_gives_nan_is_the_points_mistake_not_the_answers(tmp_path):
    """Outside log's and sqrt's domains every oracle agrees on nan, so nothing disagrees; but
    an engine's nan would then match theirs: the listed point is refused (move it), in the
    answers as in the gradients check, and no hand answer is held to a nan."""
    exercise = _exercise(tmp_path, "id: k\ntitle: k\ntopic: k\npoints: 1\ninputs:\n"
                         "  x: {value: 0.3}\nprogram: |\n  f = x.log() + x.sqrt()\nchecks:\n"
                         "  answers:\n    cases:\n      - at: {x: -1.0}\n"
                         "        grads: {x: -1.0}\n  gradients: {points: [{x: -4.0}]}\n")
    told = ("the program's value is not finite at x={}: {} so that every operation's argument "
            "stays inside its domain and off its poles (a `convention` decides kinks only, not "
            "these)")
    assert [(p.line, p.field, p.message) for p in answer_problems(exercise)] == [
        (12, "checks.answers.cases[0]", told.format("-1.0", "choose another point"))]
    assert [(p.field, p.message) for p in agreement_problems(exercise)
            if "not finite" in p.message] == [
        ("checks.gradients.points[0]", told.format("-4.0", "move the point"))]


#: How a hand answer is told the tolerance it was held to, by default.
HELD = "more than `tolerance.analytic` allows (atol 1e-12 + rtol 1e-09 × |expected|); "


@pytest.mark.parametrize("oracles, given, held", [
    ("", "0.333333", "off by 3.3e-07, more than `tolerance.analytic` allows (atol 1e-12 + rtol "
                     "1e-09 × |expected|); if it is rounded, give more digits, or loosen "
                     "`tolerance.analytic`"),
    ("    oracles: [fd]\n", "0.3333", "off by 3.3e-05, more than `tolerance.fd` allows (atol "
                                      "1e-06 + rtol 1e-05 × |expected|); if it is rounded, give "
                                      "more digits, or loosen `tolerance.fd`"),
])
def test_a_rounded_hand_answer_is_told_its_tolerance_and_how_to_pass(tmp_path, oracles, given,
                                                                     held):
    exercise = _exercise(tmp_path, "id: k\ntitle: k\ntopic: k\npoints: 1\ninputs:\n"
                         "  x: {value: 3.0}\nprogram: |\n  f = x.log()\nchecks:\n  answers:\n"
                         f"{oracles}    cases:\n      - grads: {{x: {given}}}\n")
    [problem] = answer_problems(exercise)
    assert problem.message.startswith(f"df/dx is {given} by hand, but the oracles give 0.3333")
    assert problem.message.endswith(f"{held} (each part at most 0.001)")


def test_a_listed_point_where_oracles_disagree_is_shown(tmp_path):
    text = ABS + "checks:\n  gradients:\n    points: [{x: 0.5}, {x: 0.0}]\n"
    [problem] = agreement_problems(_exercise(tmp_path, text))
    assert (problem.line, problem.field) == (11, "checks.gradients.points[1]")
    assert problem.message.startswith("the oracles disagree (convention): dy/dx at x=0.0: "
                                      "torch 0.0, jax 3.0")
    # an exercise that says whose derivative it grades at the kink has nothing to fix
    assert agreement_problems(_exercise(tmp_path, text + "convention: torch\n")) == []


def test_a_listed_point_outside_a_domain_or_at_a_pole_is_refused_under_a_convention(tmp_path):
    """A convention decides a kink; log of -1 and 1/x at 0 have no derivative for torch's
    number to stand for, so the fix said is to move the point, not to set a convention."""
    for program, point in [("log(x)", "-1.0"), ("1 / x", "0.0")]:
        text = (ABS.replace("abs(x) * 3", program) + "convention: torch\n"
                f"checks:\n  gradients:\n    points: [{{x: 0.5}}, {{x: {point}}}]\n")
        [problem] = agreement_problems(_exercise(tmp_path, text))
        assert (problem.line, problem.field) == (12, "checks.gradients.points[1]")
        assert problem.message.endswith(
            "; move the point so that every operation's argument stays inside its domain and "
            "off its poles (a `convention` decides kinks only, not these)")
        assert "set `convention" not in problem.message
    # near log's edge, inside its domain, torch's derivative is the function's: allowed
    text = (ABS.replace("abs(x) * 3", "log(x)") + "convention: torch\n"
            "checks:\n  gradients:\n    points: [{x: 1.0e-7}]\n")
    assert agreement_problems(_exercise(tmp_path, text)) == []


def test_sampling_into_a_domain_edge_is_said_once(tmp_path):
    """log over (-1, 2) is one problem of the domain, not a disagreement at each drawn point."""
    text = ABS.replace("abs(x) * 3", "log(x)").replace("low: -2", "low: -1")
    exercise = _exercise(tmp_path, text + "checks: {sampled: {count: 10}}\n")
    [problem] = domain_problems(exercise)
    assert problem.message.startswith("`log(x)` (program line 1) needs its argument `x` > 0, "
                                      "but it reaches -0.95 over the domain of x (-1, 2)")
    assert agreement_problems(exercise) == []
    fixed = text.replace("low: -1", "low: 0.5")
    assert agreement_problems(_exercise(tmp_path, fixed + "checks: {sampled: {}}\n")) == []


def test_a_tolerance_loose_enough_to_pass_a_wrong_slope_is_refused(tmp_path):
    path = tmp_path / f"loose{SUFFIX}"
    path.write_text(ABS + "checks: {gradients: {}}\ntolerance:\n"
                          "  analytic: {atol: 1.0e9, rtol: 1.0e-9}\n")
    [problem] = [p for p in validate(path, static=True) if p.field.startswith("tolerance")]
    assert (problem.field, problem.message) == (
        "tolerance.analytic.atol", "1e+09 is loose enough to pass a wrong derivative; at most "
                                   "0.001 (a wrong slope is usually off by 10% or more)")


def test_the_tolerance_bound_fails_a_wrong_slope_and_is_the_documented_one():
    """At the bound, exp's slope off by 1% fails (a wrong derivative is usually off by 10% or
    more); at 1e9 a slope of 0 for exp would pass."""
    slope = np.array([math.exp(1.5)])
    assert not Closeness(MAX_TOLERANCE, MAX_TOLERANCE).close(slope * 1.01, slope).any()
    assert Closeness(1e9, 1e-9).close(slope * 0, slope).all()
    documented = (ROOT / "docs" / "exercise-format.md").read_text()
    assert MAX_TOLERANCE == 1e-3 and "No part may exceed `1e-3`" in documented


def test_zero_tolerances_are_named_as_the_problem(tmp_path):
    text = ABS.replace("abs(x) * 3", "x.tanh() * x.exp()").replace("low: -2", "low: 0.2")
    exercise = _exercise(tmp_path, text + "checks: {sampled: {count: 10}}\ntolerance:\n"
                                          "  analytic: {atol: 0, rtol: 0}\n"
                                          "  fd: {atol: 0, rtol: 0}\n")
    [problem] = agreement_problems(exercise)
    assert problem.field == "tolerance.analytic"
    assert problem.message.startswith("atol 0 and rtol 0 leave no room for rounding")


# --- every problem of a file in one run -----------------------------------------------------------

ANSWERED = """\
id: k
title: K
topic: t
points: 1
inputs:
  x: {value: 1.0}
program: |
  z = x * 2 + 1
checks:
  answers:
    cases:
      - {value: 3.0, grads: {x: 2.0}}
"""


def _messages(path: Path) -> list[tuple[int, str, str]]:
    return [(p.line, p.field, p.message) for p in validate(path) if "start the file" not in
            p.message]


def test_a_repeated_key_hides_no_other_repeated_key(tmp_path):
    path = tmp_path / f"k{SUFFIX}"
    path.write_text(ANSWERED.replace("title: K\n", "title: K\ntitle: L\n")
                    + "checks: {}\n")
    assert _messages(path) == [
        (3, "title", "duplicate key 'title' (first at line 2); keep one of them"),
        (14, "checks", "duplicate key 'checks' (first at line 10); keep one of them")]


def test_a_forbidden_attribute_hides_no_forbidden_name(tmp_path):
    path = tmp_path / f"k{SUFFIX}"
    path.write_text(ANSWERED.replace("  z = x * 2 + 1\n", "  a = x.__class__\n  b = a * 2\n"
                                     "  z = __import__('os')\n"))
    assert _messages(path) == [
        (8, "program", "column 7: names starting with an underscore ('__class__') are not "
                       "allowed"),
        (10, "program", "column 7: names starting with an underscore ('__import__') are not "
                        "allowed")]  # b = a * 2 reads the broken a: no problem of its own


def test_a_boolean_or_a_word_is_one_message_that_names_every_choice(tmp_path):
    """`no_grad` takes true, false or one of two words: a typo of a word, or a YAML 1.1
    boolean, gets one message, not one per kind of value it could have been."""
    path = tmp_path / f"k{SUFFIX}"
    path.write_text("id: k\ntitle: k\ntopic: k\npoints: 1\ninputs:\n  x: {value: 2.0}\n"
                    "program: |\n  y = x * x\nchecks:\n  behaviour:\n    steps:\n"
                    "      - forward: {no_grad: nestd}\n        expect: [requires_grad.y]\n"
                    "      - forward: {no_grad: yes}\n        expect: [requires_grad.y]\n")
    assert _messages(path) == [
        (12, "checks.behaviour.steps[0].forward.no_grad",
         "give true, false, 'nested' or 'after_error', not 'nestd'"),
        (14, "checks.behaviour.steps[1].forward.no_grad",
         "'yes' is text here, not a boolean; write true or false")]


def test_a_yaml_1_1_boolean_hides_no_wrong_hand_answer(tmp_path):
    path = tmp_path / f"k{SUFFIX}"
    path.write_text(ANSWERED.replace("{value: 1.0}", "{value: 1.0, requires_grad: yes}")
                    .replace("value: 3.0", "value: 4.0"))
    assert _messages(path) == [
        (6, "inputs.x.requires_grad", "'yes' is text here, not a boolean; write true or false"),
        (12, "checks.answers.cases[0].value", "z is 4.0 by hand, but the oracles give 3.0: "
                                              "off by 1, " + HELD + "correct the answer (or "
                                              "the program)")]


def test_an_unknown_key_hides_no_wrong_hand_answer(tmp_path):
    path = tmp_path / f"k{SUFFIX}"
    path.write_text(ANSWERED.replace("topic: t\n", "topic: t\nhnit: look at the slope\n")
                    .replace("grads: {x: 2.0}", "grads: {x: 3.0}"))
    assert [(line, field) for line, field, _ in _messages(path)] == [
        (4, "hnit"), (13, "checks.answers.cases[0].grads.x")]


def test_four_problems_of_one_file_in_one_run(tmp_path):
    path = tmp_path / f"k{SUFFIX}"
    path.write_text(ANSWERED.replace("  x: {value: 1.0}\n", "  x: {value: 1.0, requires_grad: "
                                     "on}\n  x: {value: 2.0}\n")
                    .replace("grads: {x: 2.0}", "grads: {x: 5.0}")
                    .replace("topic: t\n", "topic: t\ntopic: u\n"))
    assert [(line, field) for line, field, _ in _messages(path)] == [  # in the file's order
        (4, "topic"),  # written twice
        (7, "inputs.x.requires_grad"),  # on
        (8, "inputs.x"),  # written twice
        (14, "checks.answers.cases[0].grads.x")]  # 5.0 for 2.0
