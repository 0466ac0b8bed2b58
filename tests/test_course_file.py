"""gradcheck.toml: `gradcheck init` writes it, and the commands run in the course folder or below
it read the course's bank (and its other defaults) instead of the bundled one, and say so."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gradcheck.bank.bundled import bank_dir, reference_path
from gradcheck.bank.course_file import (
    FILE_NAME,
    WORKER_USER,
    CourseFileError,
    find_course,
    key_seed,
    read_course,
)
from gradcheck.cli import main
from gradcheck.course.scaffold import EXAMPLE
from gradcheck.grading import answer_key

BANK_LINE = "bank: {folder}, the course's bank ({file}): 1 exercise"


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """An --empty course (its one exercise: chain-rule-z, 4 points), with a folder below it."""
    folder = tmp_path_factory.mktemp("course") / "mycourse"
    assert main(["init", str(folder), "--empty"]) == 0
    (folder / "work" / "deep").mkdir(parents=True)
    return folder.resolve()


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradcheck", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_COLOR": "1"})


def bank_line(course: Path) -> str:
    return BANK_LINE.format(folder=course / "exercises", file=course / FILE_NAME)


def test_init_writes_the_course_file_with_a_seed_of_its_own(course, tmp_path):
    read = read_course(course / FILE_NAME)
    assert read.exercises == course / "exercises" and read.submission == "engine.py"
    assert read.worker_user == WORKER_USER and isinstance(read.seed, int)
    assert find_course(course / "work" / "deep") == read
    assert main(["init", str(tmp_path / "other"), "--empty"]) == 0
    assert read_course(tmp_path / "other" / FILE_NAME).seed != read.seed  # 1 in 2**32 to fail


@pytest.mark.slow
def test_validate_and_grade_below_the_course_read_its_bank_and_say_so(course):
    done = run(["validate", "--static"], course / "work" / "deep")
    assert done.returncode == 0, done.stderr
    assert bank_line(course) in done.stderr and "1 exercise file(s)" in done.stderr
    done = run(["grade", "reference"], course / "work")
    assert done.returncode == 0, done.stderr
    assert bank_line(course) in done.stderr
    assert "total 4/4 " in done.stdout  # the course's exercise alone, not the bundled 84


def test_outside_a_course_the_bundled_bank_is_named(tmp_path):
    done = run(["validate", "--static"], tmp_path)
    assert "bank: gradcheck's bundled bank (no gradcheck.toml here or above): " in done.stderr


@pytest.mark.slow
def test_key_build_takes_the_course_bank_and_seed(course, tmp_path):
    done = run(["key", "build", "--out", str(tmp_path / "key.json")], course)
    assert done.returncode == 0, done.stderr
    assert bank_line(course) in done.stderr
    key = answer_key.load(tmp_path / "key.json")
    assert sorted(key.exercises) == ["chain-rule-z"]
    assert key.seed == read_course(course / FILE_NAME).seed


@pytest.mark.slow
def test_bundle_with_no_option_packs_the_course_and_its_settings(course, tmp_path):
    """The file students submit and the worker's user come from the course file too."""
    mine = tmp_path / "mine"
    shutil.copytree(course, mine)
    text = (mine / FILE_NAME).read_text()
    text = text.replace('submission = "engine.py"', 'submission = "autograd.py"')
    (mine / FILE_NAME).write_text(text.replace(f"worker_user = {WORKER_USER}",
                                               'worker_user = "none"'))
    done = run(["bundle", "gradescope", "--out", "autograder.zip"], mine)
    assert done.returncode == 0, done.stderr
    assert bank_line(mine) in done.stderr
    with zipfile.ZipFile(mine / "autograder.zip") as archive:
        assert [n for n in archive.namelist() if n.startswith("exercises/")] == [
            f"exercises/{EXAMPLE.as_posix()}"]
        script = archive.read("run_autograder").decode()
        key = json.loads(archive.read("key.json"))
    assert 'entry="autograd.py"' in script and 'GRADCHECK_WORKER_USER:-none}' in script
    assert key["seed"] == read_course(mine / FILE_NAME).seed


@pytest.mark.slow
def test_grade_batch_takes_the_course_bank(course, tmp_path):
    (tmp_path / "subs").mkdir()
    shutil.copy(reference_path() / "__init__.py", tmp_path / "subs" / "ada.py")
    done = run(["grade-batch", str(tmp_path / "subs"), "--out", str(tmp_path / "out"), "-j", "1"],
               course / "work")
    assert done.returncode == 0, done.stderr
    assert bank_line(course) in done.stderr
    assert (tmp_path / "out" / "gradebook.csv").read_text().splitlines()[1].startswith(
        "ada.py,4,4,graded,")


@pytest.mark.parametrize("text, message", [
    ("seed = -1\n", "seed: -1: give a whole number from 0 to 2**32 - 1, or \"random\""),
    ("worker_user = 0\n", "worker_user: 0: give a user id above 0, or \"none\""),
    ('submission = "engine"\n', "submission: 'engine': give a file name ending in .py"),
    ("bank = 'x'\n", "bank: not a key of the course file; the keys are exercises, submission, "
                     "worker_user, seed"),
    ("seed = \n", "Invalid value (at line 1, column 8)"),
    ('exercises = "bank"\n', "exercises: 'bank': there is no folder "),
])
def test_a_broken_course_file_is_refused_with_where_and_what(tmp_path, text, message):
    (tmp_path / FILE_NAME).write_text(text)
    with pytest.raises(CourseFileError) as error:
        find_course(tmp_path)
    assert str(error.value).startswith(f"{tmp_path / FILE_NAME}: ") and message in str(error.value)


def test_every_command_that_reads_a_bank_stops_at_a_broken_course_file(tmp_path):
    (tmp_path / FILE_NAME).write_text("seed = -1\n")
    message = f"{tmp_path / FILE_NAME}: seed: -1: give a whole number"
    for command in (["validate", "--static"], ["grade", "reference"],
                    ["key", "build", "--out", "k.json"], ["bundle", "gradescope", "--out", "a.zip"],
                    ["grade-batch", ".", "--out", str(tmp_path.parent / "o")]):
        done = run(command, tmp_path)
        assert done.returncode == 2 and message in done.stderr, (command, done.stderr)


def test_the_seed_of_a_key_is_the_one_given_else_the_courses_else_a_new_one(course, tmp_path):
    mine = read_course(course / FILE_NAME)
    assert key_seed(7, mine) == (7, "given by --seed")
    assert key_seed(None, mine) == (mine.seed, f"the course's, in {mine.file}")
    # outside a course no fixed default: courses that skip `init` would share their points
    (first, why), (second, _) = key_seed(None, None), key_seed(None, None)
    assert first != second  # 1 in 2**32 to fail
    assert why == (f"drawn at random, as no --seed is given, and no {FILE_NAME} here or above "
                   f"sets one; give --seed {first} to build the same key again")
    for text in ('seed = "random"\n', ""):  # a course file without a seed is the same
        (tmp_path / FILE_NAME).write_text(text)
        (tmp_path / "exercises").mkdir(exist_ok=True)
        random = read_course(tmp_path / FILE_NAME)
        assert random.seed is None and key_seed(None, random)[0] != key_seed(None, random)[0]
        assert f"{random.file} sets no fixed seed" in key_seed(None, random)[1]


@pytest.mark.slow
def test_key_build_outside_a_course_says_the_seed_it_drew(tmp_path):
    shutil.copy(bank_dir() / "02-backward" / "chain-rule.exercise.yaml", tmp_path)
    done = run(["key", "build", "--exercises", str(tmp_path), "--out", "key.json"], tmp_path)
    assert done.returncode == 0, done.stderr
    seed = answer_key.load(tmp_path / "key.json").seed
    assert f"seed {seed}: drawn at random, as no --seed is given" in done.stderr
    assert f"give --seed {seed} to build the same key again" in done.stderr


def test_explain_finds_exercises_by_id_in_the_course_bank(course):
    done = run(["explain", "relu-kink-torch"], course / "work")  # bundled, not the course's
    assert done.returncode == 2
    assert (f"no exercise 'relu-kink-torch' in the course's bank {course / 'exercises'}; its "
            "exercises are chain-rule-z") in done.stderr


@pytest.mark.slow
def test_the_pytest_plugin_grades_the_course_bank_and_names_it(course):
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "gradcheck.plugin",
                           "--submission", "reference", "-p", "no:cacheprovider"],
                          cwd=course / "work", capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode == 0, done.stdout[-3000:]
    assert bank_line(course) in done.stdout
    assert "5 passed" in done.stdout and "chain-rule.exercise.yaml" in done.stdout
