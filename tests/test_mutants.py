"""`gradcheck mutants`: the catalogue of engine bugs, the kill matrix, and the bundled bank killing
every mutant."""

import csv
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from grading_samples import PRODUCT

from gradcheck.bank.bundled import bank_dir, reference_path
from gradcheck.course.mutants import CATALOGUE, WHOLE, Edit, Mutant
from gradcheck.course.mutation import MutantError, mutate
from gradcheck.program.ops import BINARY, OPS, REDUCTION, SELECT

SOURCE = (reference_path() / "__init__.py").read_text()


def _gradcheck(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gradcheck", *args], capture_output=True,
                          text=True, cwd=cwd)


def _reference_module():
    spec = importlib.util.spec_from_file_location("reference_under_test",
                                                  reference_path() / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the catalogue -------------------------------------------------------------------------------

def test_the_catalogue_has_at_least_25_distinct_bugs_each_said_in_a_sentence():
    names = [m.name for m in CATALOGUE]
    assert len(names) >= 25 and len(set(names)) == len(names)
    for mutant in CATALOGUE:
        assert mutant.name == mutant.name.lower() and " " not in mutant.name
        assert mutant.bug.endswith(".") and len(mutant.bug.split()) >= 5
        assert mutant.catch.startswith("an exercise")


@pytest.mark.parametrize("mutant", CATALOGUE, ids=lambda m: m.name)
def test_each_mutant_is_the_reference_engine_with_its_edits_and_nothing_else(mutant):
    mutated = mutate(SOURCE, mutant)
    header, _, body = mutated.partition("\n")
    assert header == f"# gradcheck mutant {mutant.name}: {mutant.bug}"
    assert body != SOURCE
    for edit in mutant.edits:
        assert edit.new in body
    compile(body, mutant.name, "exec")


@pytest.mark.parametrize("mutant, op, kink, elsewhere", [
    ("relu-kink-one", "relu", 0.0, (-0.5, -1e-9, 0.7)),
    ("abs-kink-one", "abs", 0.0, (-0.5, -1e-9, 0.7)),
    ("sqrt-kink-zero", "sqrt", 0.0, (1e-9, 0.7)),
])
def test_a_kinks_mutant_differs_from_torch_at_the_kink_alone(tmp_path, mutant, op, kink, elsewhere):
    """A mutant is the bug its sentence says: one slope at the kink, and torch's everywhere
    else (relu's once tested its output, never negative, and so was wrong for every x < 0)."""
    import torch
    (tmp_path / "mutated.py").write_text(mutate(SOURCE, next(m for m in CATALOGUE
                                                            if m.name == mutant)))
    spec = importlib.util.spec_from_file_location("mutated", tmp_path / "mutated.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def slope(make, at):
        x = make(at)
        getattr(x, op)().backward()
        return x.grad.tolist()

    def ours(value):
        return module.tensor(value, requires_grad=True)

    def torchs(value):
        return torch.tensor(value, dtype=torch.float64, requires_grad=True)

    for at in elsewhere:
        assert slope(ours, at) == slope(torchs, at), at
    assert slope(ours, kink) != slope(torchs, kink)


def test_every_operation_of_the_table_has_a_wrong_derivative_in_the_catalogue():
    """The operations come from gradcheck/ops.py, the grad_fn each makes from the reference
    engine itself: a new operation without a mutant fails here."""
    engine = _reference_module()
    x, v = engine.tensor(0.7, requires_grad=True), engine.tensor([0.3, 0.6], requires_grad=True)
    made = set()
    for op in OPS.values():
        if op.kind == BINARY:
            results = [op.engine(x, x), op.engine(x, 2.0), op.engine(2.0, x)]
        elif op.kind == REDUCTION:
            results = [op.engine(v)]
        elif op.kind == SELECT:
            results = [op.engine(v, 1)]
        else:
            results = [op.engine(x)]
        if op.name == "detach":  # makes no node: its bug is keeping the history
            assert all(r.grad_fn is None for r in results)
            assert any(m.name == "detach-keeps-history" for m in CATALOGUE)
            continue
        made |= {type(r.grad_fn).__name__ for r in results}
    edited = " ".join(f"{e.where} {e.old}" for m in CATALOGUE for e in m.edits)
    assert len(made) >= len(OPS) - 1
    assert [name for name in sorted(made) if name not in edited] == []


@pytest.mark.parametrize("edit, problem", [
    (Edit("MulBackward0.backward", "return g + g", "return g"), "is not found in"),
    (Edit("NoSuchFunction", "x", "y"), "has no definition 'NoSuchFunction'"),
    (Edit("Tensor.grad", "values", "vals"), "times in 'Tensor.grad' of the reference"),
    (Edit("Tensor.grad", WHOLE, "pass\n"), "is defined 2 times"),
    (Edit("ExpBackward0.backward", "g * node._value", "g * (node._value"), "not valid Python"),
])
def test_an_edit_that_does_not_fit_the_engine_is_refused_saying_which_and_why(edit, problem):
    with pytest.raises(MutantError) as caught:
        mutate(SOURCE, Mutant("my-bug", "A bug.", "an exercise", (edit,)))
    assert str(caught.value).startswith("mutant my-bug: ") and problem in str(caught.value)


# --- the command -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def whole_catalogue(tmp_path_factory):
    """The whole catalogue graded against the bundled bank, once for the module."""
    out = tmp_path_factory.mktemp("mutants")
    run = _gradcheck("mutants", "-j", "2", "--seed", "3", "--out", str(out / "run"),
                     "--matrix", str(out / "matrix.csv"))
    with open(out / "matrix.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return run, rows, out / "run"


@pytest.mark.slow
def test_the_bundled_bank_kills_every_mutant_of_the_catalogue(whole_catalogue):
    run, rows, folder = whole_catalogue
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{len(CATALOGUE)} of {len(CATALOGUE)} mutants killed." in run.stdout
    assert "SURVIVED" not in run.stdout and "warning" not in run.stdout
    assert [row["mutant"] for row in rows] == [m.name for m in CATALOGUE]
    for row in rows:
        assert row["killed"] == "yes"
        assert sum(int(row[e]) for e in row if e not in ("mutant", "killed")) >= 1
    with open(folder / "graded" / "gradebook.csv", newline="") as f:
        control = next(r for r in csv.DictReader(f) if r["submission"] == "reference.py")
    assert control["score"] == control["max"] and control["status"] == "graded"


@pytest.mark.slow
def test_each_exercise_written_for_a_bug_kills_its_mutant(whole_catalogue):
    """Hand-derived: these exercises exist to catch these bugs (see their hints)."""
    _, rows, _ = whole_catalogue
    by_name = {row["mutant"]: row for row in rows}
    for mutant, exercise in [("relu-kink-one", "relu-kink-torch"),
                             ("abs-kink-one", "abs-kink-torch"),
                             ("sqrt-kink-zero", "sqrt-at-zero-torch"),
                             ("pow-zero-exponent-nan", "pow-zero-exponent-torch"),
                             ("recursive-topological-sort", "deep-chain"),
                             ("no-topological-order", "diamond-short-path-first"),
                             ("grad-overwritten-between-backwards", "two-passes-add-up"),
                             ("graph-never-freed", "graph-is-freed"),
                             ("mean-forgets-1-over-n", "op-sum-mean"),
                             ("pow-graph-on-floats", "second-derivative-square"),
                             ("relu-graph-on-floats", "relu-abs-second"),
                             ("tanh-graph-half-detached", "tanh-sigmoid-second"),
                             ("sigmoid-graph-sign-error", "tanh-sigmoid-second"),
                             ("create-graph-ignored", "double-backward-accumulates"),
                             ("retain-graph-default-false", "retain-graph-default"),
                             ("grad-with-history-replaced", "double-backward-accumulates")]:
        assert by_name[mutant][exercise] == "1", (mutant, exercise)


@pytest.fixture
def small_bank(tmp_path):
    """Only op-add of the bundled bank."""
    bank = tmp_path / "bank"
    bank.mkdir()
    shutil.copy(bank_dir() / "06-operations" / "op-add.exercise.yaml", bank)
    return bank


@pytest.mark.slow
def test_a_mutant_no_exercise_catches_survives_with_a_suggestion_and_exit_status_1(small_bank):
    run = _gradcheck("mutants", "--exercises", str(small_bank), "--only",
                     "add-drops-second-operand", "--only", "relu-kink-one", "--verbose")
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    killed = lines.index(next(line for line in lines
                              if line.startswith("add-drops-second-operand ")))
    assert lines[killed].split()[1:] == ["1:", "op-add"]
    # --verbose: the feedback a student with this bug gets, naming the operation at fault
    assert lines[killed + 1].lstrip().startswith("op-add::")
    assert "(AddBackward0)" in lines[killed + 1]
    assert any(line.split() == ["relu-kink-one", "SURVIVED"] for line in lines)
    relu = next(m for m in CATALOGUE if m.name == "relu-kink-one")
    assert f"survived: relu-kink-one\n  the bug: {relu.bug}\n" in run.stdout
    assert f"no exercise catches it; add {relu.catch}." in run.stdout
    assert "1 of 2 mutants killed, 1 survived." in run.stdout


@pytest.mark.slow
def test_an_exercise_the_reference_fails_kills_nothing_and_a_broken_one_stops_nothing(
        small_bank):
    source = (small_bank / "op-add.exercise.yaml").read_text()
    # A time limit no engine can meet: the control fails it too.
    rushed = source.replace("id: op-add", "id: op-add-rushed\ntimeout: 0.000001")
    (small_bank / "op-add-rushed.exercise.yaml").write_text(rushed)
    (small_bank / "broken.exercise.yaml").write_text("id: broken\ntitle: [unclosed\n")
    run = _gradcheck("mutants", "--exercises", str(small_bank), "--only",
                     "add-drops-second-operand")
    assert run.returncode == 0, run.stdout + run.stderr
    # which of its checks runs out of time first depends on the machine's load
    assert "the unmutated reference engine fails op-add-rushed (" in run.stdout
    assert "warning: broken could not be loaded (" in run.stdout
    assert any(line.split() == ["add-drops-second-operand", "1:", "op-add"]
               for line in run.stdout.splitlines())


@pytest.mark.slow
def test_checks_skipped_for_want_of_torch_and_jax_are_named_as_catching_nothing(tmp_path):
    """Every process of the run (the key's builder, each grader) finds neither torch nor jax."""
    bank = tmp_path / "bank"
    bank.mkdir()
    (bank / "product.exercise.yaml").write_text(PRODUCT)  # gradients, and a graph (torch only)
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text('import sys\nsys.modules["torch"] = None\n'
                                           'sys.modules["jax"] = None\n')
    run = subprocess.run([sys.executable, "-m", "gradcheck", "mutants", "--exercises", str(bank),
                          "--only", "mul-own-operand"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(hide)})
    assert run.returncode == 0, run.stdout + run.stderr  # finite differences still catch it
    assert ("warning: 1 check was skipped, for the unmutated engine too (first: product::graph, "
            "skipped: torch is not installed); no mutant can fail them") in run.stdout
    assert "every submission is graded live" in run.stderr


def test_an_unknown_mutant_is_refused_and_the_catalogue_can_be_listed():
    run = _gradcheck("mutants", "--only", "no-such-bug")
    assert run.returncode == 2
    assert "no mutant named no-such-bug; `gradcheck mutants --list`" in run.stderr
    listed = _gradcheck("mutants", "--list")
    assert listed.returncode == 0
    assert listed.stdout.splitlines()[::2] == [m.name for m in CATALOGUE]
