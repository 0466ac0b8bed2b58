"""Grading is a function of the submission, the bank and the seed: the same three give the same
results, timings aside, in one process and across processes (whatever their hash seed); and the
reference engine passes every sampled point whatever the seed.
"""

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from grading_samples import read_results

from gradcheck.bank import yaml_reader
from gradcheck.bank.bundled import bank_dir
from gradcheck.bank.loader import load_bank, load_exercise
from gradcheck.bank.models import Checks
from gradcheck.grading.grader import Grader
from gradcheck.reports.gradescope import results_json

ENGINES = Path(__file__).parent / "engines"
FILES = sorted(bank_dir().rglob("*.exercise.yaml"))
SEED = 20260


def subset() -> list[Path]:
    """The first bundled exercises that, together, have every kind of check, a 1-D input and a
    hidden exercise: a small bank that still goes through every part of the grader."""
    chosen: dict[str, Path] = {}
    for path in FILES:
        exercise = load_exercise(path)
        kinds = exercise.checks.present()
        kinds += ["1-D"] if any(exercise.sizes.values()) else []
        kinds += ["hidden"] if exercise.visibility != "visible" else []
        for kind in kinds:
            chosen.setdefault(kind, path)
    return sorted(set(chosen.values()))


SUBSET = subset()


def mutant(folder: Path) -> Path:
    """The reference engine with a wrong derivative of `*` (tests/engines/mutant.py): some checks
    fail, with feedback that localises the bug, so messages are compared too, not only passes."""
    path = folder / "engine_mul.py"
    path.write_text(f"import sys\nsys.path.append({str(ENGINES)!r})\nfrom mutant import load\n"
                    "_engine = load('mul')\ntensor, no_grad = _engine.tensor, _engine.no_grad\n")
    return path


def timeless(report) -> dict:
    """A report as plain data, durations left out."""
    data = report.to_dict()
    del data["duration"]
    for result in data["results"]:
        del result["duration"]
    return data


def document(results: dict) -> dict:
    """A results.json document without its execution time."""
    return {key: value for key, value in results.items() if key != "execution_time"}


def test_the_subset_has_every_kind_of_check():
    kinds = {kind for path in SUBSET for kind in load_exercise(path).checks.present()}
    assert kinds == set(Checks.model_fields)
    assert len(SUBSET) <= 8


@pytest.mark.slow
def test_ten_runs_in_one_process_give_identical_results(tmp_path):
    bank = load_bank(SUBSET)
    engine = mutant(tmp_path)
    runs = []
    for _ in range(10):
        with Grader(engine, seed=SEED) as grader:  # a new grader and worker each time
            runs.append(grader.grade_bank(bank))
    first = timeless(runs[0])
    statuses = {r["status"] for r in first["results"]}
    assert {"passed", "failed"} <= statuses  # both kinds of outcome are being compared
    for report in runs[1:]:
        assert timeless(report) == first
        assert document(results_json(report)) == document(results_json(runs[0]))


@pytest.mark.slow
def test_processes_with_different_hash_seeds_give_identical_results(tmp_path):
    engine = mutant(tmp_path)
    exercises = [arg for path in SUBSET for arg in ("--exercises", str(path))]
    graders = []
    for hash_seed in ("1", "2"):  # set and dict orders differ between these processes
        out = tmp_path / f"results-{hash_seed}.json"
        command = [sys.executable, "-m", "gradcheck", "grade", str(engine), *exercises,
                   "--seed", str(SEED), "--results-json", str(out), "--quiet"]
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        graders.append((subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True), out))
    documents = []
    for process, out in graders:
        _, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr
        documents.append(document(read_results(out)))
    with Grader(engine, seed=SEED) as grader:  # and this process too
        here = document(json.loads(json.dumps(results_json(grader.grade_bank(
            load_bank(SUBSET))))))
    assert documents[0] == documents[1] == here


def sampled_only(folder: Path) -> Path:
    """The bundled exercises that have a `sampled` check, with only that check: the one check
    whose points depend on the seed (the others grade the same points whatever it is)."""
    folder.mkdir()
    for path in FILES:
        data = yaml_reader.load(path.read_text()).data
        if "sampled" in data["checks"]:
            data["checks"] = {"sampled": data["checks"]["sampled"]}
            (folder / path.name).write_text(yaml_reader.dump(data))
    return folder


@pytest.mark.slow
def test_the_reference_engine_passes_every_sampled_point_whatever_the_seed(tmp_path):
    """20 random seeds, one grader each, on the sampled checks of the whole bundled bank: no
    point is drawn where the oracles cannot judge (a kink, a pole, ill-conditioning) or where a
    tolerance is too tight. About 4 s per seed once torch and jax are warm."""
    bank = load_bank(sampled_only(tmp_path / "bank"))
    assert not bank.broken and len(bank.exercises) >= 20
    seeds = [secrets.randbelow(2**32) for _ in range(20)]
    for seed in seeds:
        with Grader("reference", seed=seed) as grader:
            report = grader.grade_bank(bank)
        problems = [(r.exercise_id, r.status, r.message, r.author_notes) for r in report.results
                    if r.status != "passed" or r.author_notes]
        assert problems == [], f"seed {seed} (of {seeds})"
