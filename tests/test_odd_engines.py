"""The corpus of partial and odd engines (tests/engines/odd_*.py), each the reference engine with
one trait that real engines have, graded on a chosen part of the bundled bank.

`EXPECTED` is the table a reviewer reads: for each engine, every exercise where it loses points,
its score there, and the first line of each failed check's message (an exercise not listed
scores full marks). Every lost point must be a real difference from torch, and every message
must name it (docs/grading.md, "Fairness"). In a `sampled` check the numbers outside code are
masked as `…`: they depend on the points hypothesis draws.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import gradcheck
from gradcheck.bank.bundled import bank_dir

ENGINES = Path(__file__).parent / "engines"
SEED = 17
#: the part of the bundled bank the corpus is graded on: each exercise shows some trait
EXERCISES = ["op-pow-tensor", "op-pow-number", "op-sub", "grad-fn-with-numbers",
             "select-elements", "grad-starts-none", "unused-input", "diamond-short-path-first",
             "no-grad-restores", "two-passes-add-up", "op-exp", "sgd-one-weight",
             "grad-fn-binary"]

_TENSOR_1D = ("your engine is missing 1-D tensors: `tensor([...])`, a 1-D tensor, is not "
              "supported (making the input v raised TypeError: float() argument must be a "
              "string or a real number, not 'list')")
_NO_GRAD_YET = ("'Tensor' object has no attribute 'grad'")
_FLOAT32 = ("your engine seems to compute in float32: every wrong value is within single "
            "precision's rounding of torch's; the protocol asks for float64 (Python floats)")
_UNSTEADY = ("your engine is not deterministic: the same backward gave {} and {} for {}; visit "
             "the nodes in an order that does not change from run to run (not the order of a "
             "set)")

#: engine -> {exercise id: (score, {check: first line of its message})}
EXPECTED: dict[str, dict[str, tuple[float, dict[str, str]]]] = {
    # Python asks a number's reflected method only when the number is on the left: `x ** 2`
    # needs `__pow__` alone, and every exercise without such a form keeps its points.
    "odd_no_reflected": {
        "op-pow-tensor": (0.0, {
            "gradients": "your engine is missing `__rpow__`: `2 ** y` needs it (TypeError: "
                         "unsupported operand type(s) for ** or pow(): 'float' and 'Scalar')",
            "sampled": "your engine is missing `__rpow__`: `2 ** y` needs it (TypeError: "
                       "unsupported operand type(s) for ** or pow(): 'float' and 'Scalar')",
        }),
        "op-sub": (0.0, {
            check: "your engine is missing `__rsub__`: `2 - y` needs it (TypeError: unsupported "
                   "operand type(s) for -: 'float' and 'Scalar')"
            for check in ("gradients", "sampled", "answers")
        }),
        "grad-fn-with-numbers": (0.0, {
            check: "your engine is missing `__radd__`: `2 + x` needs it (TypeError: unsupported "
                   "operand type(s) for +: 'float' and 'Scalar')"
            for check in ("gradients", "graph")
        }),
    },
    # Reading .grad raises where torch gives None: only the checks that read such a .grad lose.
    "odd_grad_at_first_backward": {
        "grad-starts-none": (0.0, {
            "behaviour": "step 1, `the program again` (grad-starts-none.exercise.yaml:19): "
                         "after it, x.grad is an error"
                         f" (reading it raised AttributeError: {_NO_GRAD_YET}) in your "
                         "engine; torch gives None",
        }),
        "unused-input-grad-none": (0.0, {
            **{check: "your engine raised AttributeError reading `b.grad` after backward() "
                      f"({_NO_GRAD_YET}); an input's .grad should be None until a gradient "
                      "reaches it, then the gradient" for check in ("gradients", "sampled")},
            "behaviour": "step 1, `y.backward()` (unused-input.exercise.yaml:21): after it, "
                         "b.grad is an error "
                         f"(reading it raised AttributeError: {_NO_GRAD_YET}) in your engine; "
                         "torch gives None",
        }),
        "sgd-one-weight": (2.0, {
            "behaviour": "step 2, `w = w - w.grad * 0.1 (no_grad)` "
                         "(sgd-one-weight.exercise.yaml:44): after it, "
                         f"w.grad is an error (reading it raised AttributeError: {_NO_GRAD_YET}) "
                         "in your engine; torch gives None",
        }),
    },
    # Only the exercises with a 1-D input lose, and each says why.
    "odd_no_vectors": {
        "select-elements": (0.0, {check: _TENSOR_1D
                                  for check in ("gradients", "sampled", "answers")}),
        "grad-starts-none": (0.0, {"behaviour": _TENSOR_1D}),
    },
    # micrograd's .grad = 0: wrong exactly where torch leaves .grad None.
    "odd_grad_starts_at_zero": {
        "grad-starts-none": (0.0, {
            "behaviour": "step 1, `the program again` (grad-starts-none.exercise.yaml:19): "
                         "after it, x.grad is 0.0 "
                         "in your engine; torch gives None",
        }),
        "unused-input-grad-none": (0.0, {
            "gradients": "dy/db at a=1.5, b=-0.5: expected None (the output does not depend on "
                         "it, so torch leaves .grad None), found -0.0; 1 of 1 points failed",
            "sampled": "dy/db at a=…, b=…: expected None (the output does not depend on it, so "
                       "torch leaves .grad None), found …. … more wrong values; … of … points "
                       "failed",
            "behaviour": "step 1, `y.backward()` (unused-input.exercise.yaml:21): after it, "
                         "b.grad is -0.0 in "
                         "your engine; torch gives None",
        }),
        "sgd-one-weight": (2.0, {
            "behaviour": "step 2, `w = w - w.grad * 0.1 (no_grad)` "
                         "(sgd-one-weight.exercise.yaml:44): after it, "
                         "w.grad is 0.0 in your engine; torch gives None",
        }),
    },
    # The protocol lets .grad be a number or a list of numbers: nothing is lost.
    "odd_grad_as_float": {},
    # Flags kept as numpy bools are torch's answers all the same: nothing is lost.
    "odd_numpy_flags": {},
    # A vector gradient whose tolist() gives a numpy array is not a list of floats: the checks
    # that read it lose, and the message says what came back (the engine raised nothing).
    "odd_numpy_grads": {
        "grad-starts-none": (0.0, {
            "behaviour": "step 2, `z.backward()` (grad-starts-none.exercise.yaml:21): after it, "
                         "v.grad is not readable (v.grad.tolist() is a numpy.ndarray, not a "
                         "number or a list of numbers) in your engine; torch gives [1.0, 1.0]",
        }),
        "select-elements": (0.0, {
            check: "your engine's `v.grad` gave what the protocol does not allow: "
                   "v.grad.tolist() is a numpy.ndarray, not a number or a list of numbers"
            for check in ("gradients", "sampled", "answers")
        }),
    },
    # float32 gradients are a real difference (the protocol asks for float64), but no operation
    # is blamed: each message says it is the precision.
    "odd_float32_grads": {
        "op-pow-tensor": (0.0, {"gradients": _FLOAT32, "sampled": _FLOAT32}),
        "op-pow-number": (2.0, {"sampled": _FLOAT32}),
        "op-sub": (1.25, {"sampled": _FLOAT32}),
        "grad-fn-with-numbers": (1.5, {"gradients": _FLOAT32}),
        "select-elements": (2.0, {"sampled": _FLOAT32}),
        "diamond-short-path-first": (1.25, {"gradients": _FLOAT32, "sampled": _FLOAT32}),
        "op-exp": (0.5, {"gradients": _FLOAT32, "sampled": _FLOAT32}),
        "sgd-one-weight": (0.0, {
            "sampled": _FLOAT32, "answers": _FLOAT32,
            "behaviour": "step 4, `loss.backward()` (sgd-one-weight.exercise.yaml:48): after it, "
                         f"w.grad is -0.8000000119 in your engine; torch gives -0.8; {_FLOAT32}",
        }),
        "grad-fn-binary": (1.0, {"gradients": _FLOAT32}),
    },
    # Names are charged by the graph checks only: the behaviour checks about tracking compare
    # whether a grad_fn is there.
    "odd_short_names": {
        **{exercise: (points, {"graph": "a.grad_fn should be 'AddBackward0', as in torch; your "
                                        "engine gives 'AddBackward'"})
           for exercise, points in (("grad-fn-with-numbers", 1.5), ("grad-fn-binary", 1.0))},
    },
    # Breadth-first adds up (+=) right, and is told its order is at fault, not `=`.
    "odd_breadth_first": {
        "diamond-short-path-first": (0.0, {
            "gradients": "At x=0.5, backward() used the gradient of a before all of it had "
                         "arrived: a should get the sum of what its 2 consumers pass, "
                         "-1.96997749, but got 1.0.",
            "sampled": "At x=…, backward() used the gradient of a before all of it had arrived: "
                       "a should get the sum of what its … consumers pass, …, but got ….",
            "answers": "At x=0.0, backward() used the gradient of a before all of it had "
                       "arrived: a should get the sum of what its 2 consumers pass, 4.0, but got "
                       "1.0.",
        }),
    },
}

_NUMBER = re.compile(r"(?<![\w.])-?\d+(\.\d+)?(e[-+]?\d+)?(?![\w-]|\.\d)")


def masked(line: str) -> str:
    """`line` with every number outside `code` replaced by `…`."""
    parts = line.split("`")
    return "`".join(_NUMBER.sub("…", part) if i % 2 == 0 else part
                    for i, part in enumerate(parts))


def graded(engine: str, exercises: list[str] = EXERCISES
           ) -> dict[str, tuple[float, dict[str, str]]]:
    """What the engine loses, in the shape of `EXPECTED`."""
    paths = [path for name in exercises for path in bank_dir().glob(f"*/{name}*.exercise.yaml")]
    report = gradcheck.grade(ENGINES / f"{engine}.py", paths, seed=SEED)
    lost: dict[str, tuple[float, dict[str, str]]] = {}
    for exercise in dict.fromkeys(r.exercise_id for r in report.results):
        results = [r for r in report.results if r.exercise_id == exercise]
        score = round(sum(r.score for r in results), 2)
        if score != round(sum(r.max_score for r in results), 2):
            lost[exercise] = (score, {
                r.check: masked(r.message.splitlines()[0]) if r.check == "sampled"
                else r.message.splitlines()[0] for r in results if r.status != "passed"})
    return lost


def test_the_masking_keeps_code_and_words():
    assert masked("At x=0.25, `2 ** y` passed 1e-05 to y; 1-D; 3 of 20 points") == \
        "At x=…, `2 ** y` passed … to y; 1-D; … of … points"


@pytest.mark.slow
@pytest.mark.parametrize("engine", sorted(EXPECTED))
def test_each_odd_engine_loses_only_what_differs_from_torch(engine):
    expected = {exercise: (score, {check: masked(line) if check == "sampled" else line
                                   for check, line in lines.items()})
                for exercise, (score, lines) in EXPECTED[engine].items()}
    assert graded(engine) == expected


@pytest.mark.slow
def test_an_error_or_warning_of_a_class_derived_from_torchs_is_torchs():
    """An `except RuntimeError` catches an engine's AutogradError(RuntimeError) as it catches
    torch's error, and a warnings filter of UserWarning takes a subclass of it: neither costs a
    point. An error of a class of its own that is no RuntimeError does."""
    exercises = ["scalar-only", "backward-needs-grad", "nonleaf-grad-warns"]
    assert graded("odd_own_error_classes", exercises) == {}
    lost = graded("odd_unrelated_error_class", exercises)
    assert sorted(lost) == ["backward-needs-grad", "scalar-only-rule"]
    assert all("torch raises RuntimeError, your engine AutogradError (" in line
               for _, lines in lost.values() for line in lines.values()), lost


@pytest.mark.slow
@pytest.mark.parametrize("engine, step", [
    ("odd_no_grad_exit_on", "step 4, `the program again under no_grad(), after a nested "
     "no_grad() exited` (no-grad-restores.exercise.yaml:26): after it, y.requires_grad is True "
     "in your engine; torch gives False"),
    ("odd_no_grad_exit_unguarded", "step 5, `the program again, after a no_grad() block was left "
     "by an exception` (no-grad-restores.exercise.yaml:29): after it, y.requires_grad is False "
     "in your engine; torch gives True"),
])
def test_a_no_grad_that_does_not_restore_the_mode_it_found_loses_its_step(engine, step):
    """`no_grad()` must give back, on exit, the mode it found, whichever way its block ends:
    turning recording on ends a nested block's outer one too soon, and an exit that restores
    nothing after an error leaves recording off for good."""
    assert graded(engine, ["no-grad-restores"]) == {
        "no-grad-restores-tracking": (0.0, {"behaviour": step})}


@pytest.mark.slow
def test_a_grad_that_subclasses_list_or_float_is_read_as_the_tensor_it_is():
    """An engine's 1-D tensor may be a `list` of its elements (0-d tensors, not numbers), and
    its 0-d one a `float`: read as plain Python values, the first failed as "not a number" and
    the second lost its history (`grad.x.requires_grad` False). Through `tolist()` and its own
    flags, as any tensor, each is torch's answer."""
    assert graded("odd_grad_subclasses", [
        "op-sum-mean", "select-elements", "accumulate-vector", "double-backward-accumulates",
        "relu-abs-second", "grad-starts-none"]) == {}


@pytest.mark.slow
def test_an_engine_that_walks_in_a_sets_order_is_told_it_is_not_deterministic():
    """The determinism probe, carried by an exercise's first gradient check: the same backward
    asked again gives another answer, and the gradients and sampled checks say so (`sampled`,
    whose breadth-first calls are wrong, fails with what the probe found, not a diagnosis of
    yet another run). Whether a later check's single backward meets torch's order follows the
    set's order, that is where the interpreter put the nodes, so it is not asserted: any check
    that fails says the same. Where the two orders differ only in the last bits of a sum
    (op-sub), the answers are the same within the check's tolerance, and nothing is lost."""
    lost = graded("odd_set_order")
    assert list(lost) == ["diamond-short-path-first"]
    score, lines = lost["diamond-short-path-first"]
    assert {"gradients", "sampled"} <= set(lines) and score <= 1.25
    assert all(re.fullmatch(_UNSTEADY.format(".+", ".+", ".+").replace("(", r"\(")
                            .replace(")", r"\)"), line) for line in lines.values()), lines


@pytest.mark.slow
def test_what_an_operation_gave_from_elsewhere_is_never_a_piece_the_engine_lacks():
    """With `.grad` a numpy array, `w - w.grad * 0.05` gives a numpy array, and the step's
    `w.requires_grad_()` fails on it: a real difference from torch, said as what was raised on
    what. The engine has `requires_grad_()`, so it is not said to be missing, and no "fix
    first" asks for it."""
    step = ("step 2, `w = w - w.grad * 0.05 (no_grad)` ({}.exercise.yaml:{}): torch raises "
            "nothing; your engine raised AttributeError in `w.requires_grad_()` "
            "(`requires_grad_()`): 'numpy.ndarray' object has no attribute 'requires_grad_'")
    assert graded("odd_grad_as_ndarray", ["random-init-weights", "sgd-vector-weights"]) == {
        "random-init-weights": (1.0, {"behaviour": step.format("random-init-weights", 24)}),
        "sgd-vector-weights": (1.5, {"behaviour": step.format("sgd-vector-weights", 38)}),
    }


@pytest.mark.slow
def test_a_value_the_protocol_does_not_allow_gets_no_hint_on_the_maths():
    """`.grad` a numpy array is a matter of types: the exercise's hint (how the gradient of a
    sum reaches each weight) would send the student to the maths; a wrong gradient keeps it."""
    paths = [next(bank_dir().glob("*/dot-product.exercise.yaml"))]
    for engine, hinted in (("odd_numpy_grads", False), ("wrong_mul", True)):
        report = gradcheck.grade(ENGINES / f"{engine}.py", paths, seed=SEED)
        failed = [r.message for r in report.results if r.status == "failed"]
        assert failed and all(("\nHint: " in message) == hinted for message in failed), engine


def test_the_probe_runs_once_a_program_with_the_first_gradient_check(monkeypatch):
    """The probe, the same backward twice more at one point, goes with the exercise's first
    gradient check only: `gradients` where there is one, else `sampled`."""
    from gradcheck.bank.bundled import reference_path
    from gradcheck.engine import sandbox

    asked: list[dict] = []
    real = sandbox.Worker.request
    monkeypatch.setattr(sandbox.Worker, "request",
                        lambda worker, request, *args, **kwargs:
                        asked.append(request) or real(worker, request, *args, **kwargs))
    paths = [next(bank_dir().glob(f"*/{name}.exercise.yaml"))
             for name in ("diamond-short-path-first", "sgd-one-weight")]
    report = gradcheck.grade(reference_path(), paths, seed=SEED)
    assert report.score == report.max_score
    gradients = [r for r in asked if r["kind"] == "gradients"]
    probes = [r for r in gradients if len(r["points"]) == 2 and r["points"][0] == r["points"][1]]
    # diamond: gradients, its probe, sampled, answers; sgd-one-weight: sampled, its probe, answers
    assert len(gradients) == 7 and probes == [gradients[1], gradients[5]]
    assert probes[0]["points"][0] == gradients[0]["points"][0]
    assert probes[1]["points"][0] == gradients[4]["points"][0]


def test_the_probe_tells_a_difference_only_beyond_the_checks_tolerance():
    from gradcheck.bank.tolerances import Tolerance, Tolerances
    from gradcheck.grading.grader import _unsteady

    tol = Tolerances().analytic
    sums = (0.1 + 0.2) + 0.3, 0.1 + (0.2 + 0.3)
    assert sums[0] != sums[1] and _unsteady(*sums, tol) is None
    nan, inf = float("nan"), float("inf")
    for same in (None, 2.0, nan, -inf, [1.0, nan], [sums[0], 2.0]):
        assert _unsteady(same, [sums[1], 2.0] if same == [sums[0], 2.0] else same, tol) is None
    assert _unsteady(2.0, -3.93995498, tol) == ("2.0", "-3.93995498", "")
    assert _unsteady(1.0, 1.0 + 3e-9, tol) == ("1.0", "1.000000003", "")
    assert _unsteady(2.0, None, tol) == ("2.0", "None", "")
    assert _unsteady(inf, -inf, tol) == ("inf", "-inf", "")
    long_vector = [0.5] * 12
    assert _unsteady(long_vector, long_vector[:9] + [0.25] + long_vector[10:], tol) == \
        ("0.5", "0.25", "element 9 of ")
    assert _unsteady([1.0, 2.0], [1.0], tol) == ("[1.0, 2.0]", "[1.0]", "")
    assert _unsteady(1.0, 1.0 + 2e-12, Tolerance(atol=0.0, rtol=1e-13)) == \
        ("1.0", "1.0 (a difference of 1.999955757e-12)", "")


def _helper_imports_the_engine_by_name(folder: Path, package: bool) -> Path:
    """The reference engine whose `exp` a helper module puts back on its Tensor, importing the
    engine by its own name: `import engine` beside a file, `from mypkg import core` inside a
    package whose own modules import each other relatively."""
    source = (Path(gradcheck.__file__).parents[1] / "reference" / "__init__.py").read_text()
    source += "\n_exp = Tensor.exp\ndel Tensor.exp\n"
    if not package:
        folder.mkdir()
        (folder / "engine.py").write_text(source + "import helper  # noqa: E402\n")
        (folder / "helper.py").write_text("import engine\nengine.Tensor.exp = engine._exp\n")
        return folder / "engine.py"
    root = folder / "mypkg"
    root.mkdir(parents=True)
    (root / "core.py").write_text(source)
    (root / "helper.py").write_text("from mypkg import core\ncore.Tensor.exp = core._exp\n")
    (root / "__init__.py").write_text("from .core import *  # noqa: F403\nfrom . import helper\n")
    return root


@pytest.mark.parametrize("package", [False, True], ids=["file and helper", "package"])
def test_a_helper_that_imports_the_engine_by_its_own_name_gets_the_engine_graded(tmp_path,
                                                                              package):
    """A submission is imported under its own name: a helper's `import engine` is given the
    module graded, not a second copy whose Tensor the grader's tensors are not of (which lost
    every exercise of the functions the helper adds)."""
    submission = _helper_imports_the_engine_by_name(tmp_path / "sub", package)
    paths = list(bank_dir().glob("*/op-exp.exercise.yaml"))
    report = gradcheck.grade(submission, paths, seed=SEED)
    assert [r.status for r in report.results] == ["passed"] * len(report.results)
    assert report.score == report.max_score > 0
