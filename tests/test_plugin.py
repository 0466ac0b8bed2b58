"""The pytest plugin, run as graders and students run it: pytest in a subprocess."""

import json
import xml.etree.ElementTree as ET

import pytest
from grading_samples import BROKEN, CUBE, FLOAT32, read_results, write_bank

from gradcheck.reports import WITHHELD
from gradcheck.reports.gradescope import UNFINISHED

pytest_plugins = ["pytester"]

#: The hardened command of docs/grading.md (with PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 set).
HARDENED = ["-p", "gradcheck.plugin", "--noconftest", "-c", "/dev/null", "-p", "no:cacheprovider",
            "--rootdir", "exercises", "exercises"]

# What a submission's conftest.py could do if pytest imported it in the grading process.
CHEATING_CONFTEST = """\
import pathlib

import pytest

import gradcheck.reports.gradescope as gradescope

pathlib.Path(__file__).with_name("conftest-ran").touch()
gradescope.results_json = lambda report, **options: {"score": 100.0, "tests": []}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


@pytest.fixture
def exercises(pytester):
    return write_bank(pytester.path / "exercises")


def test_without_a_submission_exercise_files_are_not_collected(pytester, exercises):
    pytester.makepyfile(test_plain="def test_one():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)
    assert "exercise.yaml" not in result.stdout.str()


def test_each_check_is_an_item_and_a_broken_file_is_one(pytester, exercises):
    (exercises / "broken.exercise.yaml").write_text(BROKEN)
    result = pytester.runpytest_subprocess("--submission", "torch", "--collect-only", "-q",
                                           "exercises")
    result.stdout.fnmatch_lines([
        "exercises/broken.exercise.yaml::load",
        "exercises/square.exercise.yaml::gradients",
        "exercises/square.exercise.yaml::sampled",
        "exercises/square.exercise.yaml::graph",
        "exercises/secret-cube.exercise.yaml::gradients",  # a hidden exercise's checks last
        "5 tests collected*",
    ])


def test_strict_stops_the_run_at_a_broken_file_with_its_line(pytester, exercises):
    (exercises / "broken.exercise.yaml").write_text(BROKEN)
    result = pytester.runpytest_subprocess("--submission", "torch", "--gradcheck-strict",
                                           "exercises")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*broken.exercise.yaml:4: points: *"])
    result.assert_outcomes(errors=1)


#: A test-side plugin: as each item's call ends, which exercises the session has graded.
GRADED_AS_EACH_ENDS = """\
import pytest
from gradcheck import plugin


def pytest_runtest_logreport(report):
    if report.when == "call":
        graded = sorted(path.name for path in pytest_config.stash[plugin._SESSION].graded)
        print("ended", report.nodeid, graded)


def pytest_configure(config):
    global pytest_config
    pytest_config = config
"""


@pytest.mark.slow
def test_the_hidden_exercises_are_graded_together_at_the_first_of_their_items(pytester,
                                                                             exercises):
    """pytest prints a line as each item ends: were a hidden exercise graded at its own first
    item, a CI log's times would show how long each took, which its worker chooses and which
    could spell out what it saw. So the first hidden item grades them all."""
    (exercises / "secret-square.exercise.yaml").write_text(
        CUBE.replace("secret-cube", "secret-square").replace("x ** 3", "x ** 2"))
    pytester.makeconftest(GRADED_AS_EACH_ENDS)
    result = pytester.runpytest_subprocess("--submission", "torch", "-s", "exercises")
    ended = [line.split("ended ", 1)[1].split(" ", 1) for line in result.outlines
             if "ended " in line]
    hidden = [graded for item, graded in ended if "secret" in item]
    assert len(hidden) == 2 and [item for item, _ in ended][-2:] == [
        "exercises/secret-cube.exercise.yaml::gradients",
        "exercises/secret-square.exercise.yaml::gradients"]
    everything = "['secret-cube.exercise.yaml', 'secret-square.exercise.yaml', " \
                 "'square.exercise.yaml']"
    assert hidden == [everything, everything]


@pytest.mark.slow
def test_torch_passes_every_item_and_the_results_file_matches(pytester, exercises):
    result = pytester.runpytest_subprocess("--submission", "torch", "--results-json",
                                           "results.json", "--gradcheck-seed", "11", "exercises")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*gradcheck score*", "5/5 (seed 11)"])
    data = read_results(pytester.path / "results.json")
    assert data["score"] == 5 and len(data["tests"]) == 4
    assert UNFINISHED not in data["output"]


@pytest.mark.slow
def test_failures_show_the_message_not_a_traceback_and_hidden_ones_nothing(pytester, exercises):
    (pytester.path / "engine.py").write_text(FLOAT32)
    result = pytester.runpytest_subprocess("--submission", "engine.py", "--results-json",
                                           "results.json", "--junitxml", "junit.xml", "exercises")
    out = result.stdout.str()
    result.assert_outcomes(passed=2, failed=2)
    assert "Traceback" not in out and "def runtest" not in out and "CheckFailed" not in out
    data = read_results(pytester.path / "results.json")
    visible = [t for t in data["tests"] if t["visibility"] == "visible" and t["status"] == "failed"]
    assert visible and all(t["output"] in out for t in visible)
    assert WITHHELD in out
    hidden = [t for t in data["tests"] if t["visibility"] == "hidden"]
    assert [t["output"] for t in hidden] == [WITHHELD]
    cases = list(ET.parse(pytester.path / "junit.xml").getroot().iter("testcase"))
    assert len(cases) == len(data["tests"]) == 4


@pytest.mark.slow
def test_a_broken_file_fails_alone_and_a_stopped_run_says_it_did_not_finish(pytester, exercises):
    (exercises / "broken.exercise.yaml").write_text(BROKEN)
    result = pytester.runpytest_subprocess("--submission", "torch", "--results-json",
                                           "results.json", "exercises")
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(["*broken.exercise.yaml:4: points: *"])
    assert UNFINISHED not in read_results(pytester.path / "results.json")["output"]

    # -x stops at the broken file, the first collected: the results so far, marked unfinished.
    result = pytester.runpytest_subprocess("--submission", "torch", "--results-json",
                                           "results.json", "-x", "exercises")
    result.assert_outcomes(failed=1)
    data = read_results(pytester.path / "results.json")
    assert data["output"].startswith(UNFINISHED) and len(data["tests"]) == 1


@pytest.mark.slow
def test_a_conftest_shipped_in_the_submission_changes_nothing_when_hardened(pytester,
                                                                             exercises,
                                                                             monkeypatch):
    # A student's repository: their engine, their pytest.ini and conftest.py at its root.
    (pytester.path / "engine.py").write_text(FLOAT32)
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(CHEATING_CONFTEST)
    grading = ["--submission", "engine.py", "--results-json", "results.json",
               "--gradcheck-seed", "5"]
    marker, results = pytester.path / "conftest-ran", pytester.path / "results.json"

    # Run naively, the conftest is imported and wins: the test can tell.
    plain = pytester.runpytest_subprocess(*grading, "exercises")
    plain.assert_outcomes(passed=4)
    assert marker.exists() and json.loads(results.read_text())["score"] == 100
    marker.unlink()

    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    hardened = pytester.runpytest_subprocess(*HARDENED, *grading)
    assert not marker.exists()
    # The grade the float32 engine earns on its own (see test_cli): square's gradients and graph.
    hardened.assert_outcomes(passed=2, failed=2)
    data = read_results(results)
    assert data["score"] == 2 and len(data["tests"]) == 4
