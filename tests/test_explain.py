"""`gradcheck explain` and the graph pictures, on the seed texts' worked examples.

The golden tables hold the seed texts' hand-derived walks: for z = 2x^2 + 1 at x = 3 the local
slopes 1, 2 and 6 multiply to x.grad = 12; for L = a*b + b^2 at a = 2, b = 4, dL/da = b = 4 and
dL/db = a + 2b = 2 + 8 = 10.
"""

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import gradcheck
from gradcheck import cli
from gradcheck.bank.bundled import bank_dir
from gradcheck.grading.chain_rule import walk
from gradcheck.program.language import parse
from gradcheck.reports import graph_picture
from gradcheck.reports.explain import slope_paths

ENGINES = Path(__file__).parent / "engines"

SEED_Z = """\
node           operation     value  local slope       gradient in  gradient out
z = 2 * y + 1  AddBackward0  19.0   d/d(2 * y) = 1.0  1.0          1.0 to `2 * y`
2 * y          MulBackward0  18.0   d/dy = 2.0        1.0          2.0 to y
y = x ** 2     PowBackward0  9.0    d/dx = 6.0        2.0          12.0 to x
x              input         3.0                      12.0         x.grad = 12.0

x.grad = 12.0 = 1.0 × 2.0 × 6.0 (along z -> `2 * y` -> y -> x)
"""

SEED_LOSS = """\
node                operation     value  local slope        gradient in       gradient out
L = a * b + b ** 2  AddBackward0  24.0   d/d(a * b) = 1.0   1.0               1.0 to `a * b`
                                         d/d(b ** 2) = 1.0                    1.0 to `b ** 2`
b ** 2              PowBackward0  16.0   d/db = 8.0         1.0               8.0 to b
a * b               MulBackward0  8.0    d/da = 4.0         1.0               4.0 to a
                                         d/db = 2.0                           2.0 to b
b                   input         4.0                       8.0 + 2.0 = 10.0  b.grad = 10.0
a                   input         2.0                       4.0               a.grad = 4.0

b.grad = 10.0 = 1.0 × 2.0 (along L -> `a * b` -> b)
    + 1.0 × 8.0 (along L -> `b ** 2` -> b)
a.grad = 4.0 = 1.0 × 4.0 (along L -> `a * b` -> a)
"""


@pytest.fixture
def seed_z(tmp_path: Path) -> Path:
    path = tmp_path / "seed-z.exercise.yaml"  # x's value is not 3: --at sets it
    path.write_text("id: seed-z\ntitle: z = 2x^2 + 1\ntopic: explain\npoints: 1\n"
                    "inputs:\n  x: {value: 1.0}\n"
                    "program: |\n  y = x ** 2\n  z = 2 * y + 1\n"
                    "checks:\n  gradients: {}\n")
    return path


@pytest.fixture
def seed_loss(tmp_path: Path) -> Path:
    path = tmp_path / "seed-loss.exercise.yaml"
    path.write_text("id: seed-loss\ntitle: L = a*b + b^2\ntopic: explain\npoints: 1\n"
                    "inputs:\n  a: {value: 2.0}\n  b: {value: 4.0}\n"
                    "program: |\n  L = a * b + b ** 2\n"
                    "checks:\n  gradients: {}\n")
    return path


def explain(capsys, *argv: str) -> tuple[int, str, str]:
    status = cli.main(["explain", *map(str, argv)])
    out, err = capsys.readouterr()
    return status, out, err


def table_and_products(out: str) -> str:
    return out[out.index("\nnode ") + 1:]


def test_the_walk_of_z_at_3_multiplies_slopes_1_2_6_into_12(capsys, seed_z):
    status, out, _ = explain(capsys, seed_z, "--at", "x=3")
    assert status == 0
    assert "At x=3.0, z = 19.0." in out
    assert table_and_products(out) == SEED_Z


def test_the_walk_of_the_loss_adds_two_paths_into_b(capsys, seed_loss):
    status, out, _ = explain(capsys, seed_loss)
    assert status == 0
    assert table_and_products(out) == SEED_LOSS


def test_an_exercise_of_the_bundled_bank_is_found_by_id(capsys):
    status, out, _ = explain(capsys, "chain-rule-z", "--at", "x=3")
    assert status == 0
    assert "x.grad = 12.0 = 1.0 × 2.0 × 6.0" in out


def test_a_point_outside_an_operations_domain_is_said_to_be_one(capsys):
    """At x = -1, log's value is nan: the walk is shown, and the line above it says why its
    numbers are nan and what point to give instead."""
    status, out, _ = explain(capsys, "op-log", "--at", "x=-1")
    assert status == 0
    assert ("At x=-1.0, y=2.0, z = nan. z is not finite here: an operation's argument lies "
            "outside its domain or on a pole, where there is no derivative to explain; give --at "
            "a point inside every operation's domain.") in out
    assert "not finite" not in explain(capsys, "op-log", "--at", "x=1")[1]


def test_the_sum_over_paths_of_slope_products_is_the_gradient():
    # The chain rule itself: every path from the output to an input contributes the product of
    # the local slopes along it, and torch's gradient is their sum.
    program = parse("y = x * w\nh = y.tanh() + y * x\nz = h * h - w.sigmoid()",
                    {"x": None, "w": None})
    truth = walk(program, {"x": 0.7, "w": -1.3}, ["x", "w"])
    for name in ("x", "w"):
        paths = slope_paths(truth, program.names[name], limit=100)
        assert len(paths) >= 4
        total = sum(math.prod(e.slope for _, e in path) for path in paths)
        assert total == pytest.approx(truth.grads[program.names[name]], rel=1e-12)


def test_a_submission_is_shown_beside_torch_and_its_bug_marked(capsys, seed_z, tmp_path):
    engine = tmp_path / "engine_mul.py"
    engine.write_text(f"import sys\nsys.path.append({str(ENGINES)!r})\nfrom mutant import load\n"
                      "_engine = load('mul')\ntensor, no_grad = _engine.tensor, _engine.no_grad\n")
    status, out, _ = explain(capsys, seed_z, "--at", "x=3", "--submission", engine)
    assert status == 1
    marked = [line for line in out.splitlines() if line.endswith("<- departs here")]
    assert len(marked) == 1 and marked[0].startswith("2 * y ")
    assert ("At x=3.0, the backward of `2 * y` (MulBackward0, line 2 of the program) passed "
            "9.0 to y; it should pass 2.0.") in out


def test_a_correct_submission_agrees_at_every_node(capsys, seed_loss):
    status, out, _ = explain(capsys, seed_loss, "--submission", "reference")
    assert status == 0
    assert "reference agrees with torch at every node." in out
    assert "<- departs here" not in out


def test_a_point_asked_for_where_the_oracles_disagree_names_the_oracle_that_does(capsys):
    """At x=0, y=0 jax's derivative of `x ** y` is nan, torch's and the finite differences'
    log 3: the note says that jax is the odd one, and that grade would not grade there (the
    point came from --at: no fault of the exercise, and no score)."""
    status, out, _ = explain(capsys, "op-pow-tensor", "--submission", "torch", "--at", "x=0",
                             "y=0")
    assert status == 0
    note = next(line for line in out.splitlines() if line.startswith("At x=0.0, y=0.0, the "))
    assert note.startswith("At x=0.0, y=0.0, the oracles disagree on every gradient, so grade "
                           "would grade none of them there: not graded: ")
    assert "jax gives no finite value here, next to the pole or domain edge of pow in " in note
    assert "stencil" not in note and "fault of the exercise" not in note and "scores" not in note


def test_bad_arguments_say_what_to_do(capsys, seed_z):
    status, _, err = explain(capsys, seed_z, "--at", "v=1")
    assert status == 2 and "NAME one of the inputs x" in err
    status, _, err = explain(capsys, "no-such-exercise")
    assert status == 2 and "no exercise 'no-such-exercise' in the bundled bank" in err
    status, _, err = explain(capsys, seed_z, "--graph", seed_z.with_suffix(".pdf"))
    assert status == 2 and "give a file ending in .svg, .png or .dot" in err


def test_an_svg_graph_is_valid_xml_with_every_node(capsys, seed_z, tmp_path):
    picture = tmp_path / "z.svg"
    status, _, _ = explain(capsys, seed_z, "--at", "x=3", "--graph", picture)
    assert status == 0
    root = ET.parse(picture).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = {t.text for t in root.iter("{http://www.w3.org/2000/svg}text")}
    assert {"z = 2 * y + 1", "MulBackward0", "y = x ** 2", "grad 12.0"} <= texts


def test_a_png_graph_marks_the_diverging_node(capsys, seed_z, tmp_path):
    engine = tmp_path / "engine_pow.py"
    engine.write_text(f"import sys\nsys.path.append({str(ENGINES)!r})\nfrom mutant import load\n"
                      "_engine = load('pow')\ntensor, no_grad = _engine.tensor, _engine.no_grad\n")
    picture, source = tmp_path / "z.png", tmp_path / "z.dot"
    explain(capsys, seed_z, "--at", "x=3", "--submission", engine, "--graph", picture)
    explain(capsys, seed_z, "--at", "x=3", "--submission", engine, "--graph", source)
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    marked = [line for line in source.read_text().splitlines() if "departs here" in line]
    assert len(marked) == 1 and "y = x ** 2" in marked[0] and "#c0392b" in marked[0]


def test_without_dot_a_dot_file_is_written_and_pictures_say_what_to_install(
        capsys, seed_z, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-programs-here"))
    source = tmp_path / "z.dot"
    status, _, _ = explain(capsys, seed_z, "--graph", source)
    assert status == 0
    assert source.read_text().startswith("digraph gradcheck {")
    status, _, err = explain(capsys, seed_z, "--graph", tmp_path / "z.svg")
    assert status == 2
    assert graph_picture.NO_DOT in err
    assert not (tmp_path / "z.svg").exists()


# --- explain reaches grade's verdict ------------------------------------------------------------

#: tests/engines/odd_*.py and a few bugs of gradcheck/course/mutants.py, each on exercises where
#: it shows: a chain-rule exercise with every first-order kind of check (gradients, sampled,
#: answers, graph, behaviour), a diamond (order bugs), a hessian and a random_programs check.
ODD_ENGINES = sorted(path.stem for path in ENGINES.glob("odd_*.py"))
MUTANTS = ["mul-own-operand", "grad-overwritten-between-paths", "retain-graph-ignored",
           "create-graph-ignored"]
AGREEMENT = ([(engine, exercise) for engine in ODD_ENGINES
              for exercise in ("chain-rule-z", "diamond-short-path-first")]
             + [(engine, "second-derivative-square")
                for engine in ("odd_set_order", "odd_float32_grads", "create-graph-ignored")]
             + [(engine, "mixed-arithmetic") for engine in ("odd_set_order", "mul-own-operand")]
             + [(mutant, "chain-rule-z") for mutant in MUTANTS])
SEED = 17
FILES = {"chain-rule-z": "chain-rule"}  # an exercise's file, where it is not named by its id


def printed_verdicts(out: str) -> dict[str, tuple[str, str]]:
    """explain's verdict section: check -> (status, message)."""
    section = out[out.index("\nThe verdict of `gradcheck grade "):].splitlines()[2:]
    verdicts: dict[str, tuple[str, list[str]]] = {}
    for line in section:
        if line.startswith("      "):
            verdicts[check][1].append(line[6:])
        elif line.startswith("  "):
            check, _, rest = line[2:].partition(": ")
            verdicts[check] = (rest.split(",")[0], [])
    return {check: (status, "\n".join(lines)) for check, (status, lines) in verdicts.items()}


@pytest.fixture(scope="module")
def engine_files(tmp_path_factory) -> dict[str, Path]:
    from gradcheck.course.mutants import CATALOGUE
    from gradcheck.course.mutation import write_mutants

    folder = tmp_path_factory.mktemp("mutants")
    write_mutants(folder, [m for m in CATALOGUE if m.name in MUTANTS])
    return {**{name: ENGINES / f"{name}.py" for name in ODD_ENGINES},
            **{name: folder / f"{name}.py" for name in MUTANTS}}


@pytest.mark.slow
@pytest.mark.parametrize("engine, exercise", AGREEMENT)
def test_explain_reaches_grades_verdict_on_every_check(capsys, engine_files, engine, exercise):
    path = next(bank_dir().glob(f"*/{FILES.get(exercise, exercise)}.exercise.yaml"))
    report = gradcheck.grade(engine_files[engine], [path], seed=SEED)
    status, out, _ = explain(capsys, path, "--submission", engine_files[engine],
                             "--seed", SEED)
    graded = {r.check: (r.status, r.message) for r in report.results}
    assert printed_verdicts(out) == graded
    assert status == (1 if any(s != "passed" for s, _ in graded.values()) else 0)
    if any("not deterministic" in message for _, message in graded.values()):
        # one run's values beside torch's would contradict what grade says
        assert "yours: value" not in out and "it is not deterministic" in out


def test_behaviour_steps_show_torch_beside_the_engine_and_mark_grades_step(capsys, engine_files):
    path = next(bank_dir().glob("*/two-passes-add-up.exercise.yaml"))
    status, out, _ = explain(capsys, path)  # torch alone: what each step leaves
    assert status == 0
    assert "2. y.backward(retain_graph=True)  x.grad = 12.0\n" in out
    assert "4. y.backward()                   raises RuntimeError: Trying to backward" in out
    status, out, _ = explain(capsys, path, "--submission", engine_files["retain-graph-ignored"],
                             "--seed", SEED)
    assert status == 1
    # its gradients are right: the walk agrees, and says that what fails is elsewhere
    assert "agrees with torch at every node. What fails is not in this walk: the behaviour " \
           "check, below.\n" in out
    marked = [line for line in out.splitlines() if line.endswith("<- departs here")]
    # the engine freed the graph that retain_graph=True keeps: its second pass raises
    assert len(marked) == 1 and marked[0].startswith("2. y.backward(retain_graph=True)  "
                                                     "x.grad = 12.0  ")
    assert "  raises RuntimeError: " in marked[0]
    assert printed_verdicts(out)["behaviour"][1].startswith(
        "step 2, `y.backward(retain_graph=True)` (")


def test_drawn_inputs_are_walked_where_grade_draws_them(capsys):
    # random-init-weights draws w from the grading seed: the walk and the behaviour steps are
    # at the same draw, the one grade uses at that seed
    status, out, _ = explain(capsys, "random-init-weights", "--seed", 3)
    assert status == 0
    walked = next(line for line in out.splitlines() if line.startswith("w  "))
    stepped = next(line for line in out.splitlines() if line.startswith("1. loss.backward()"))
    gradient = walked.split("w.grad = ")[1]
    assert stepped.endswith(f"w.grad = {gradient}")
    _, again, _ = explain(capsys, "random-init-weights", "--seed", 4)
    assert gradient not in again
