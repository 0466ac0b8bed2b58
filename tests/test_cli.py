"""`gradcheck grade` and `gradcheck validate`: arguments, exit status, reports always written."""

import json
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET

import pytest
from another_user import ENGINES, PYTHON, UID, as_another_user, open_folder  # noqa: F401
from grading_samples import BROKEN, FLOAT32, read_results, write_bank, write_fd_bank
from processes import gradcheck_command

from gradcheck.bank.bundled import bank_dir, starter_path
from gradcheck.cli import main
from gradcheck.engine.sandbox import preflight
from gradcheck.reports import WITHHELD


@pytest.fixture
def bank(tmp_path):
    return write_bank(tmp_path / "bank")


def grade(*args):
    return main(["grade", *map(str, args)])


# --- without a grader: arguments and the bank --------------------------------------------------


def test_help_lists_the_subcommands():
    run = subprocess.run([sys.executable, "-m", "gradcheck", "--help"], capture_output=True,
                         text=True, check=True)
    assert "grade" in run.stdout and "validate" in run.stdout


def test_a_missing_submission_is_a_bad_argument_but_still_leaves_results(tmp_path, capsys):
    results = tmp_path / "out" / "results.json"
    assert grade(tmp_path / "nope.py", "--results-json", results) == 2
    assert f"no submission at {tmp_path / 'nope.py'}" in capsys.readouterr().err
    data = read_results(results)
    assert data["score"] == 0 and data["output"].startswith("The grader could not run")


def test_an_unknown_oracle_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as exit_:
        grade("torch", "--oracles", "fd,sympy")
    assert exit_.value.code == 2
    assert "'fd,sympy': choose among fd, torch, jax" in capsys.readouterr().err


def test_root_is_no_worker_user_and_a_missing_worker_python_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        grade("reference", "--worker-user", "0")
    assert exit_.value.code == 2
    assert "'0': give a user id >= 1 (not root's 0)" in capsys.readouterr().err
    assert grade("reference", "--worker-python", tmp_path / "python9") == 2
    assert f"--worker-python {tmp_path / 'python9'}: no such program" in capsys.readouterr().err


# --- a worker of another user: checked once, before grading -------------------------------------

ENGINE = "def tensor(data, requires_grad=False):\n    return data\n"


@as_another_user
def test_a_worker_python_the_worker_user_cannot_run_is_named_before_grading(open_folder,
                                                                            tmp_path, capsys):
    """A Python in a folder only root may enter, as the test run's own under /root."""
    private = open_folder / "private"
    private.mkdir(mode=0o700)
    python = private / "python3"
    python.symlink_to(PYTHON)
    engine = open_folder / "engine.py"
    engine.write_text(ENGINE)
    results = tmp_path / "results.json"
    assert grade(engine, "--worker-user", UID, "--worker-python", python,
                 "--results-json", results) == 2
    said = (f"the worker's user (uid {UID}) cannot run {python} (Permission denied): give "
            f"--worker-python a Python 3.11 or later that this user may run (such as "
            f"/usr/bin/python3); see docs/security.md")
    assert said in capsys.readouterr().err
    assert said in read_results(results)["output"]


@as_another_user
@pytest.mark.parametrize("submission, files, closed, mode, fix", [
    ("engine.py", ["engine.py"], "engine.py", 0o600, "chmod -R a+rX {submission}"),
    ("closed/engine.py", ["closed/engine.py"], "closed", 0o700, "chmod a+x {closed}"),
    ("engine", ["engine/__init__.py", "engine/helpers.py"], "engine/helpers.py", 0o600,
     "chmod -R a+rX {submission}"),
], ids=["file", "folder above", "file of a package"])
def test_a_submission_the_worker_user_cannot_read_is_named_before_grading(
        submission, files, closed, mode, fix, open_folder, capsys):
    for name in files:
        (open_folder / name).parent.mkdir(exist_ok=True)
        (open_folder / name).write_text(ENGINE)
    submission, closed = open_folder / submission, open_folder / closed
    closed.chmod(mode)
    assert grade(submission, "--worker-user", UID, "--worker-python", PYTHON) == 2
    fix = fix.format(submission=submission, closed=closed)
    assert (f"the worker's user (uid {UID}) cannot read {closed} (Permission denied), which the "
            f"submission {submission} needs: {fix}, or grade from a folder every user may "
            "enter; see docs/security.md") in capsys.readouterr().err
    closed.chmod(mode | 0o055)  # then the same worker may read it all
    assert preflight(submission, UID, PYTHON) == ""


def test_a_folder_without_exercises_cannot_be_graded(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    results = tmp_path / "results.json"
    assert grade("torch", "--exercises", empty, "--results-json", results) == 2
    assert f"no *.exercise.yaml files in {empty}" in capsys.readouterr().err
    assert "no *.exercise.yaml files" in read_results(results)["output"]


def test_a_misnamed_exercise_file_is_warned_about(tmp_path, capsys):
    folder = tmp_path / "bank"
    folder.mkdir()
    (folder / "addmul.exercise.yml").write_text("id: addmul\n")
    assert grade("torch", "--exercises", folder) == 2
    err = capsys.readouterr().err
    assert (f"gradcheck grade: warning: {folder / 'addmul.exercise.yml'}: a bank's folder is "
            "searched for *.exercise.yaml files only, so this file is not graded") in err
    assert "rename it addmul.exercise.yaml" in err
    assert f"no *.exercise.yaml files in {folder}" in err


def test_strict_refuses_a_bank_with_a_broken_file_and_says_where(bank, tmp_path, capsys):
    (bank / "broken.exercise.yaml").write_text(BROKEN)
    results = tmp_path / "results.json"
    assert grade("torch", "--exercises", bank, "--strict", "--results-json", results) == 2
    assert "broken.exercise.yaml:4: points:" in capsys.readouterr().err
    assert "broken.exercise.yaml:4: points:" in read_results(results)["output"]


def test_validate_passes_every_argument_to_gradcheck_validate(tmp_path, capsys):
    broken = tmp_path / "broken.exercise.yaml"
    broken.write_text(BROKEN)
    assert main(["validate", str(broken)]) == 1
    assert f"{broken}:4: points:" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["validate", "--help"])
    assert exit_.value.code == 0
    assert "usage: gradcheck validate" in capsys.readouterr().out


# --- grading -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_torch_gets_full_marks_and_every_report_is_written(bank, tmp_path):
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "gradcheck", "grade", "torch", "--exercises", str(bank),
         "--seed", "7", "--results-json", str(out / "results.json"),
         "--junit", str(out / "junit.xml"), "--markdown", str(out / "summary.md")],
        capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    data = read_results(out / "results.json")
    assert data["score"] == 5 and len(data["tests"]) == 4
    assert "--seed 7" in data["output"]
    cases = ET.parse(out / "junit.xml").getroot().iter("testcase")
    assert sorted((c.get("classname"), c.get("name")) for c in cases) == [
        ("secret-cube", "gradients"), ("square", "gradients"), ("square", "graph"),
        ("square", "sampled")]
    assert (out / "summary.md").read_text().startswith("## gradcheck: 5 / 5 points")
    assert "total 5/5" in run.stdout and "\033[" not in run.stdout  # no colour into a pipe


@pytest.mark.slow
def test_the_bundled_reference_engine_gets_full_marks(bank, tmp_path, capsys):
    results = tmp_path / "results.json"
    assert grade("reference", "--exercises", bank, "--results-json", results, "--quiet") == 0
    assert read_results(results)["score"] == 5
    assert capsys.readouterr().out.startswith("5/5 (seed ")


@pytest.mark.slow
def test_a_wrong_engine_loses_points_and_hidden_details_stay_hidden(bank, tmp_path, capsys):
    engine = tmp_path / "engine.py"
    engine.write_text(FLOAT32)
    results, junit = tmp_path / "results.json", tmp_path / "junit.xml"
    assert grade(engine, "--exercises", bank, "--seed", 3, "--results-json", results) == 0
    data = read_results(results)
    # secret-cube.gradients, then square's gradients (exact at 0.5), sampled, graph
    assert [(t["score"], t["status"]) for t in data["tests"]] == [
        (0, "failed"), (1, "passed"), (0, "failed"), (1, "passed")]
    assert data["score"] == 2
    assert [t["output"] for t in data["tests"] if t["visibility"] == "hidden"] == [WITHHELD]
    terminal = capsys.readouterr().out
    assert "partial" in terminal
    assert "1 failed check belongs to exercises whose details are not shown." in terminal

    # The instructor's view (JUnit with --show-hidden) has the message the others withheld.
    assert grade(engine, "--exercises", bank, "--seed", 3, "--junit", junit, "--show-hidden",
                 "--fail-under", 5) == 1
    secret = next(c.find("failure").text for c in ET.parse(junit).getroot().iter("testcase")
                  if c.get("classname") == "secret-cube")
    assert secret != WITHHELD and secret not in terminal and secret not in json.dumps(data)


@pytest.mark.slow
def test_a_submission_that_cannot_be_imported_still_gets_a_results_file(bank, tmp_path):
    engine = tmp_path / "engine.py"
    engine.write_text(textwrap.dedent("""\
        import math
        def tensor(data, requires_grad=False)
            return data
    """))
    results = tmp_path / "results.json"
    assert grade(engine, "--exercises", bank, "--results-json", results) == 0
    data = read_results(results)
    assert data["score"] == 0
    assert "could not be imported" in data["output"] and "SyntaxError" in data["output"]


def test_ctrl_c_stops_grading_quietly_and_leaves_the_results_so_far(bank, tmp_path):
    """SIGINT while the worker is busy: exit status 130, one line saying so, no traceback, and a
    results.json that says grading did not finish."""
    engine = tmp_path / "engine.py"
    engine.write_text("import time\n\ndef tensor(data, requires_grad=False):\n"
                      "    time.sleep(600)\n")
    results = tmp_path / "results.json"
    run = subprocess.Popen(
        gradcheck_command("grade", str(engine), "--exercises", str(bank), "--results-json",
                          str(results), "--timeout", "600"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not results.is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # the grader now waits for the worker, which sleeps
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 130
    assert err.strip().splitlines()[-1] == "gradcheck grade: interrupted"
    assert "Traceback" not in err
    assert read_results(results)["output"].startswith("Grading did not finish")


@pytest.mark.slow
def test_a_broken_exercise_costs_only_itself(bank, tmp_path):
    (bank / "broken.exercise.yaml").write_text(BROKEN)
    results = tmp_path / "results.json"
    assert grade("torch", "--exercises", bank, "--results-json", results) == 0
    data = read_results(results)
    load = [t for t in data["tests"] if t["status"] == "failed"]
    assert len(load) == 1 and "broken.exercise.yaml:4: points:" in load[0]["output"]
    assert data["score"] == 5


def test_gradcheck_grade_is_the_library_call_grading_md_shows():
    import gradcheck
    from gradcheck.grading.grader import grade

    assert gradcheck.grade is grade
    one = bank_dir() / "02-backward" / "chain-rule.exercise.yaml"
    report = gradcheck.grade("reference", one)
    assert {r.exercise_id for r in report.results} == {"chain-rule-z"}
    assert report.score == report.max_score > 0


def test_the_library_call_gives_every_score_then_the_feedback(tmp_path):
    """`gradcheck.grade(progress=...)`: each exercise's results come to `progress` as they are
    scored, the plain comparison; the walk's finding is in them by the time the call returns."""
    import gradcheck

    bank = write_fd_bank(tmp_path / "bank")
    seen = {}

    def progress(exercise_id, results):
        seen[exercise_id] = [(r.check, r.status, r.score, r.message) for r in results]

    report = gradcheck.grade(ENGINES / "wrong_mul.py", bank, seed=1, oracles=["fd"],
                             progress=progress)
    product = next(r for r in report.results if r.exercise_id == "product")
    scored = dict((check, rest) for check, *rest in seen["product"])["gradients"]
    assert scored[:2] == ["failed", 0.0] and (product.status, product.score) == ("failed", 0.0)
    finding = "the backward of `x * y` (MulBackward0) passed -0.5 to y; it should pass 1.5"
    assert finding not in scored[2] and "expected 1.5" in scored[2]
    assert finding in product.message


def test_the_starters_report_fits_in_60_lines_with_its_root_cause_said_once(capsys):
    engine = starter_path() / "engine.py"
    assert main(["grade", str(engine), "--exercises", str(bank_dir()), "-k", "not wide",
                 "--seed", "5"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) <= 60
    assert lines[1].startswith("  1. Implement `tensor()` first: ")
    assert "Failed checks:" not in out  # each check tensor() blocks is in that one line
    assert lines[-1] == (f"Reproduce: gradcheck grade {engine} --exercises {bank_dir()} "
                         "-k 'not wide' --seed 5")


def test_a_behaviour_message_names_the_exercise_file_in_the_bank_with_its_line(tmp_path, capsys):
    engine = tmp_path / "engine.py"
    engine.write_text((bank_dir().parent / "reference" / "__init__.py").read_text()
                      .replace("g if leaf._grad is None else leaf._grad + g", "g"))
    assert "leaf._grad = g\n" in engine.read_text()  # backward() replaces .grad
    assert main(["grade", str(engine), "--exercises", "two-passes-add-up"]) == 0
    out = capsys.readouterr().out
    assert "(04-accumulation/two-passes-add-up.exercise.yaml:" in out


KINK_ONLY = """\
id: kink-only
title: A kink only
topic: 01-test
points: 2
inputs:
  x: {value: 0.0, requires_grad: true}
  y: {value: 2.0, requires_grad: false}
program: |
  z = x.abs() * y
checks:
  gradients: {}
  answers:
    cases:
      - at: {x: 1.0, y: 2.0}
        grads: {x: 2.0}
"""


@pytest.mark.slow
def test_a_check_that_grades_no_point_scores_zero_and_is_a_warning(tmp_path, capsys):
    (tmp_path / "kink-only.exercise.yaml").write_text(KINK_ONLY)
    out = tmp_path / "results.json"
    assert grade("reference", "--exercises", tmp_path, "--seed", 1, "--results-json", out) == 0
    tests = {t["name"].split(": ")[-1]: t for t in json.loads(out.read_text())["tests"]}
    assert [(t["score"], t["max_score"]) for t in tests.values()] == [(0.0, 1.0), (1.0, 1.0)]
    warning = capsys.readouterr().err.splitlines()[-1]
    assert warning.startswith("gradcheck grade: warning: kink-only::gradients was not graded and "
                              "scores 0: no gradient of this check could be graded")
