"""The bundled bank and reference engine are found in a checkout and in an installed wheel."""

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from gradcheck.bank.bundled import bank_dir, reference_path

REPO = Path(__file__).resolve().parent.parent


def test_a_checkout_uses_its_own_folders():
    assert bank_dir() == REPO / "exercises"
    assert reference_path() == REPO / "reference"


def test_an_installed_wheel_carries_the_bank_the_reference_and_the_reports(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist"), str(source)], check=True)
    site = tmp_path / "site"
    with zipfile.ZipFile(next((tmp_path / "dist").glob("gradcheck-*.whl"))) as wheel:
        wheel.extractall(site)
    probe = (f"import sys; sys.path.insert(0, {str(site)!r}); import json, gradcheck; "
             "import gradcheck.reports.gradescope, gradcheck.bank.schema; "
             "from gradcheck.bank.bundled import bank_dir, reference_path; "
             "print(json.dumps([gradcheck.__file__, str(bank_dir()), str(reference_path()), "
             "gradcheck.bank.schema.SCHEMA_PATH.is_file()]))")
    run = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                         text=True, check=True)
    module, bank, reference, schema = json.loads(run.stdout)
    assert module == str(site / "gradcheck" / "__init__.py")  # not the checkout's
    assert Path(bank) == site / "gradcheck" / "_bank"
    assert Path(reference) == site / "gradcheck" / "_reference"
    assert schema
    installed = sorted(p.relative_to(bank) for p in Path(bank).rglob("*.exercise.yaml"))
    assert installed == sorted(p.relative_to(source / "exercises")
                               for p in (source / "exercises").rglob("*.exercise.yaml"))
    assert installed
    assert (Path(reference) / "__init__.py").is_file()


#: what a failing check is about, for its hint: the numbers of first derivatives at points, a
#: random program's difference, second derivatives, the graph's facts, a behaviour step
HINT_FAMILIES = {"gradients": "derivatives", "sampled": "derivatives", "answers": "derivatives",
                 "random_programs": "random programs", "hessian": "second derivatives",
                 "graph": "graph facts", "behaviour": "behaviour steps"}


def test_every_bundled_check_has_a_hint_about_what_it_tests():
    # docs/exercise-format.md: the exercise's hint speaks to one family of its checks; every
    # check of another family has a hint of its own (a behaviour check in a chain-rule exercise
    # is told about accumulation, not slopes)
    from gradcheck.bank.loader import load_bank

    bank = load_bank(bank_dir())
    assert len(bank.exercises) >= 100 and not bank.broken
    for exercise in bank.exercises:
        falling_back = {HINT_FAMILIES[name]: name for name in exercise.checks.present()
                        if not getattr(exercise.checks, name).hint}
        assert len(falling_back) <= 1, (exercise.id, sorted(falling_back.values()))
        assert exercise.hint or not falling_back, exercise.id
