"""The GitHub Classroom path, with nothing set by hand: a fresh `gradcheck init` course, its
student template published by `gradcheck bundle classroom --out student` with no other option,
then every `run` step of the template's workflow, taken from its YAML, run as a GitHub runner
runs them: in the student's repository, with a fresh Python environment first on PATH (what
`actions/setup-python` gives), so the first step installs gradcheck from the wheel the template
carries and its dependencies from the package index, and the second grades engine.py into the
run's summary. Once with the starter, once with a correct engine.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gradcheck.bank.bundled import reference_path
from gradcheck.cli import main
from gradcheck.course.scaffold import ENGINE, WORKFLOW

pytestmark = pytest.mark.slow
#: variables of this test run that a runner would not have
OURS = ("VIRTUAL_ENV", "PYTHONPATH", "GITHUB_STEP_SUMMARY")


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    """The student's repository, as the template gives it: the published template of an
    --empty course (one visible exercise, chain-rule-z, 4 points)."""
    course = tmp_path_factory.mktemp("classroom") / "mycourse"
    assert main(["init", str(course), "--empty"]) == 0
    done = subprocess.run([sys.executable, "-m", "gradcheck", "bundle", "classroom", "--out",
                           "student"], cwd=course, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return course / "student"


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    """A Python with nothing installed, as actions/setup-python leaves it: its bin folder."""
    folder = tmp_path_factory.mktemp("runner") / "python"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(folder)],
                   check=True)
    return folder / "bin"


def runner_env(runner: Path, summary: Path) -> dict[str, str]:
    """A runner's environment: its Python first on PATH, none of this test run's."""
    env = {name: value for name, value in os.environ.items() if name not in OURS}
    return {**env, "PATH": f"{runner}{os.pathsep}{env['PATH']}", "NO_COLOR": "1",
            "GITHUB_STEP_SUMMARY": str(summary), "CI": "true", "GITHUB_ACTIONS": "true"}


def run_workflow(student: Path, runner: Path, summary: Path) -> list[subprocess.CompletedProcess]:
    """Each `run` step of the workflow, in order, in the repository, as a runner runs it."""
    workflow = yaml.safe_load((student / WORKFLOW).read_text())
    env = runner_env(runner, summary)
    runs = []
    for step in workflow["jobs"]["grade"]["steps"]:
        if "run" in step:
            done = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=student, env=env,
                                  capture_output=True, text=True, timeout=900,
                                  stdin=subprocess.DEVNULL)
            assert done.returncode == 0, f"{step['name']}:\n{done.stdout[-3000:]}{done.stderr}"
            runs.append(done)
    return runs


def test_the_workflow_installs_gradcheck_from_the_template_and_grades(student, runner, tmp_path):
    summary = tmp_path / "summary.md"
    install, grade = run_workflow(student, runner, summary)
    done = subprocess.run([str(runner / "python"), "-c",
                           "import gradcheck; print(gradcheck.__file__)"], capture_output=True,
                          text=True, check=True, cwd=tmp_path, env=runner_env(runner, summary))
    assert Path(done.stdout.strip()).is_relative_to(runner.parent)  # not this test run's gradcheck
    assert re.search(r"Processing \./\.github/gradcheck-\S+\.whl", install.stdout), install.stdout
    assert "## gradcheck: 0 / 4 points" in summary.read_text()  # the starter
    assert grade.stdout.count("::error file=exercises/") >= 1

    shutil.copy(reference_path() / "__init__.py", student / ENGINE)
    summary.unlink()
    _, grade = run_workflow(student, runner, summary)
    assert "## gradcheck: 4 / 4 points" in summary.read_text()
    assert "::error" not in grade.stdout
