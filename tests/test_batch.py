"""`gradcheck grade-batch`: every submission gets a gradebook row and a results file, whatever it
does (crash, hang, fail to import), and the batch carries on."""

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grading_samples import PRODUCT, read_results, write_bank

from gradcheck.batch import submissions
from gradcheck.bundled import reference_path
from gradcheck.cli import main

ENGINES = Path(__file__).parent / "engines"


@pytest.fixture
def folder(tmp_path):
    """Six submissions: the reference (a package), a correct and a buggy module, one that
    segfaults in backward, one whose import never ends, a folder that is not a package."""
    subs = tmp_path / "submissions"
    shutil.copytree(reference_path(), subs / "ref", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("tiny", "wrong_mul", "segfault", "hang_import"):
        shutil.copy(ENGINES / f"{name}.py", subs / f"{name}.py")
    (subs / "notes").mkdir()
    (subs / "notes" / "engine.py").write_text("print('no __init__.py here')\n")
    (subs / "__pycache__").mkdir()
    (subs / "README.txt").write_text("not a submission\n")
    return subs


def test_each_module_and_folder_is_one_submission(folder):
    assert [p.name for p in submissions(folder)] == [
        "hang_import.py", "notes", "ref", "segfault.py", "tiny.py", "wrong_mul.py"]


@pytest.mark.slow
def test_a_batch_with_crashing_and_hanging_engines_completes_with_every_row(folder, tmp_path):
    bank = write_bank(tmp_path / "bank")  # square (3 points), a hidden cube (2), product (2)
    (bank / "product.exercise.yaml").write_text(PRODUCT)
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "gradcheck", "grade-batch", str(folder), "-j", "2", "--out",
         str(out), "--exercises", str(bank), "--seed", "5", "--submission-timeout", "40"],
        capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stderr  # some submissions could not be graded
    with open(out / "gradebook.csv", newline="") as f:
        rows = {row["submission"]: row for row in csv.DictReader(f)}
    assert list(rows) == [p.name for p in submissions(folder)]
    assert {name: (row["status"], float(row["score"]), float(row["max"]))
            for name, row in rows.items() if name not in ("wrong_mul.py", "segfault.py")} == {
        "hang_import.py": ("timeout", 0, 7), "notes": ("error", 0, 7), "ref": ("graded", 7, 7),
        "tiny.py": ("graded", 7, 7)}
    for buggy in ("wrong_mul.py", "segfault.py"):
        assert rows[buggy]["status"] == "graded" and float(rows[buggy]["score"]) < 7
    assert float(rows["hang_import.py"]["time"]) >= 40
    for name in rows:  # a Gradescope file for every submission, even those never graded
        assert "score" in read_results(out / name / "results.json")
    assert "did not finish" in read_results(out / "hang_import.py" / "results.json")["output"]
    assert "is a folder without __init__.py" in (out / "notes" / "grader.log").read_text()
    # torch and jax ran once, into a key the graders used; progress: a line per submission
    assert (out / "key.json").is_file() and "answer key" in run.stderr
    assert sorted(line.split("]")[0] for line in run.stderr.splitlines()
                  if line.startswith("[")) == [f"[{i}/6" for i in range(1, 7)]


def test_bad_arguments_are_refused_before_any_grading(folder, tmp_path, capsys):
    assert main(["grade-batch", str(folder), "--out", str(folder / "out")]) == 2
    assert "is inside" in capsys.readouterr().err
    assert main(["grade-batch", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")]) == 2
    assert "no such folder of submissions" in capsys.readouterr().err
    assert main(["grade-batch", str(folder), "--out", str(tmp_path / "o"), "--key",
                 str(tmp_path / "nokey.json")]) == 2
    assert "--key" in capsys.readouterr().err and not (tmp_path / "o").exists()
