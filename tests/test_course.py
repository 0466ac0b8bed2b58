"""`gradcheck init`: the course folder, its student template, and the GitHub Actions workflow that
grades a student's repository (its grading command run here as the workflow runs it)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gradcheck import __version__
from gradcheck.bank.bundled import bank_dir, reference_path, starter_path
from gradcheck.bank.loader import exercise_files, load_bank
from gradcheck.cli import main
from gradcheck.course import bundle, validate
from gradcheck.bank.schema import COURSE_SCHEMA
from gradcheck.course.scaffold import ENGINE, EXAMPLE, REQUIREMENTS, WORKFLOW
from gradcheck.course.wheel import wheel_name
from test_bundle import installed_wheel
from gradcheck.grading import answer_key
from gradcheck.grading.results import CheckResult, GradeReport
from gradcheck.reports.github import annotate, error_line

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def full_course(tmp_path_factory):
    folder = tmp_path_factory.mktemp("full") / "course"
    assert main(["init", str(folder)]) == 0
    return folder


@pytest.fixture(scope="module")
def workflow(full_course):
    return yaml.safe_load((full_course / "student" / WORKFLOW).read_text())


def _runs(workflow) -> list[str]:
    return [step["run"] for step in workflow["jobs"]["grade"]["steps"] if "run" in step]


# --- the course folder --------------------------------------------------------------------------


def test_init_copies_the_bundled_bank_with_schema_lines_that_lead_to_the_schema(full_course):
    bundled = load_bank(bank_dir())
    copied = load_bank(full_course / "exercises")
    assert [e.id for e in copied.exercises] == [e.id for e in bundled.exercises]
    assert not copied.broken
    for file in exercise_files(full_course / "exercises"):
        assert validate.file_problems(file) == [], file
        assert (file.parent / file.read_text().splitlines()[0].split("$schema=")[1]).resolve() \
            == (full_course / COURSE_SCHEMA).resolve()


def test_init_empty_starts_from_one_example_that_validates(tmp_path, capsys):
    course = tmp_path / "course"
    assert main(["init", str(course), "--empty"]) == 0
    files = exercise_files(course / "exercises")
    assert [f.relative_to(course / "exercises") for f in files] == [EXAMPLE]
    assert validate.main(["--static", str(course / "exercises")]) == 0
    assert "1 exercise(s)" in capsys.readouterr().out


def test_init_refuses_a_folder_in_use_and_a_bad_requirement(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["init", str(tmp_path)]) == 2
    assert f"{tmp_path} already exists and is not an empty folder" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine" and len(list(tmp_path.iterdir())) == 1
    assert main(["init", str(tmp_path / "new"), "--gradcheck", "-e ."]) == 2
    assert "give one pip requirement" in capsys.readouterr().err


def test_student_template_has_the_starter_readme_and_requirement(tmp_path):
    requirement = "gradcheck @ git+https://example.org/course/gradcheck@v" + __version__
    assert main(["init", str(tmp_path / "c"), "--empty", "--gradcheck", requirement]) == 0
    student = tmp_path / "c" / "student"
    assert (student / ENGINE).read_text() == (starter_path() / ENGINE).read_text()
    assert (student / REQUIREMENTS).read_text() == requirement + "\n"
    assert "gradcheck grade engine.py --exercises exercises --key key.json" in (
        student / "README.md").read_text()


def test_student_template_carries_the_wheel_of_this_gradcheck(full_course, tmp_path):
    """By default the workflow installs the gradcheck that built the key, from the repository."""
    student = full_course / "student"
    line = (student / REQUIREMENTS).read_text()
    assert line == f"./.github/{wheel_name()}\n"
    work = tmp_path / "student"
    shutil.copytree(student / ".github", work / ".github")
    installed_wheel(student / ".github" / wheel_name(), line, work, tmp_path / "site")


def test_classroom_replaces_the_wheel_of_an_earlier_gradcheck(tmp_path):
    course = tmp_path / "c"
    assert main(["init", str(course), "--empty"]) == 0
    github = course / "student" / ".github"
    (github / wheel_name()).rename(github / "gradcheck-0.0.1-py3-none-any.whl")
    (course / "student" / REQUIREMENTS).write_text("./.github/gradcheck-0.0.1-py3-none-any.whl\n")
    bundle.classroom([course / "exercises"], course / "student", seed=0)
    assert sorted(p.name for p in github.glob("*.whl")) == [wheel_name()]
    assert (course / "student" / REQUIREMENTS).read_text() == f"./.github/{wheel_name()}\n"


def test_course_readme_commands_are_those_of_the_instructors_guide(full_course):
    guide = (ROOT / "docs" / "instructors.md").read_text()
    block = re.search(r"```bash\n(.*?)```", (full_course / "README.md").read_text(), re.S)[1]
    commands = block.strip().splitlines()
    assert len(commands) == 4
    for command in commands:
        assert command in guide, command


# --- the workflow -------------------------------------------------------------------------------


def test_workflow_is_valid_and_runs_on_push(workflow):
    # PyYAML reads the bare key `on` as YAML 1.1's True; GitHub reads it as "on".
    assert "push" in workflow[True] and "pull_request" in workflow[True]
    steps = workflow["jobs"]["grade"]["steps"]
    assert steps[0]["uses"].startswith("actions/checkout@")
    assert steps[1]["with"]["python-version"] == "3.11"


def test_workflow_commands_are_the_documented_ones(workflow):
    guide = (ROOT / "docs" / "instructors.md").read_text()
    blocks = "\n".join(re.findall(r"```bash\n(.*?)```", guide, re.S)).splitlines()
    runs = _runs(workflow)
    assert len(runs) == 2 and runs[0].startswith("python -m pip install -r ")
    for command in runs:
        assert command in blocks, f"docs/instructors.md does not give `{command}`"
    assert runs[0].split()[-1] == REQUIREMENTS.as_posix()


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    """A student's repository: the template of an --empty course, published with its key."""
    course = tmp_path_factory.mktemp("classroom") / "course"
    assert main(["init", str(course), "--empty"]) == 0
    answer_key.build(load_bank(course / "exercises"), 0, course / "key.json")
    bundle.classroom([course / "exercises"], course / "student", key=course / "key.json")
    return course / "student"


def _run_workflow_grading(workflow, student: Path, summary: Path) -> subprocess.CompletedProcess:
    """The workflow's grading command, in the student's repository, as a GitHub runner runs it."""
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(summary), "NO_COLOR": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-e", "-c", _runs(workflow)[1]], cwd=student, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_workflow_grades_the_starter_reference_and_a_broken_engine(workflow, student, tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("an earlier step's summary\n")
    done = _run_workflow_grading(workflow, student, summary)
    assert done.returncode == 0, done.stderr
    written = summary.read_text()
    assert written.startswith("an earlier step's summary\n")  # appended, not replaced
    assert "## gradcheck: 0 / 4 points" in written
    errors = [line for line in done.stdout.splitlines() if line.startswith("::error ")]
    checks = ["gradients", "sampled", "answers", "graph", "behaviour"]
    assert len(errors) == len(checks)
    lines = (student / "exercises" / EXAMPLE).read_text().splitlines()
    for error, check in zip(errors, checks):
        line = int(re.match(r"::error file=exercises/02-backward/chain-rule\.exercise\.yaml,"
                            r"line=(\d+),title=", error)[1])
        assert lines[line - 1].strip() == f"{check}:"

    shutil.copy(reference_path() / "__init__.py", student / ENGINE)
    done = _run_workflow_grading(workflow, student, summary)
    assert "## gradcheck: 4 / 4 points" in summary.read_text()
    assert "::error" not in done.stdout

    (student / ENGINE).write_text("import math\n\n\ndef tensor(data, requires_grad=False)\n")
    done = _run_workflow_grading(workflow, student, summary)
    assert done.stdout.count("::error ") == 1
    assert "::error file=engine.py,line=4,title=your engine could not be imported::" in done.stdout


#: an engine that says what GitHub's runner would take for workflow commands: a forged notice
#: and a mask at import, indented as gradcheck's summary indents what an engine printed, and the
#: old form `##[...]`, which the runner finds anywhere in a line, in an exception's message
_COMMANDING = """
print("::notice title=gradcheck::4/4: every check passed")
print("    ::add-mask::failed")
print("::stop-commands::forged")
print("\\033[2J\\033]0;title\\007")


def _pow(self, other):
    raise RuntimeError("broken ##[error]forged in pow \\033[2J")


Tensor.__pow__ = _pow
"""


def _commands(output: str) -> list[str]:
    """The lines of a step's output that GitHub's runner takes for workflow commands (its
    ActionCommandManager): a line that begins with `::` once its leading blanks are gone, or holds
    `##[` anywhere; while commands are stopped, only the line with their token, which resumes."""
    taken, token = [], None
    for line in output.splitlines():
        text = line.lstrip()
        if token is not None:
            if text == f"::{token}::":
                token = None
            continue
        if text.startswith("::stop-commands::"):
            token = text.removeprefix("::stop-commands::")
        if text.startswith("::") or "##[" in line:
            taken.append(text)
    return taken


@pytest.mark.slow
def test_no_word_of_the_engine_is_taken_for_a_workflow_command(workflow, student, tmp_path):
    (student / ENGINE).write_text((reference_path() / "__init__.py").read_text() + _COMMANDING)
    done = _run_workflow_grading(workflow, student, tmp_path / "summary.md")
    assert "every check passed" in done.stdout and "##[error]forged" in done.stdout  # shown
    taken = _commands(done.stdout)
    assert taken[0].startswith("::stop-commands::") and len(taken[0]) == 17 + 32
    errors = taken[1:]
    assert errors and all(line.startswith("::error file=exercises/02-backward/chain-rule")
                          for line in errors), errors
    assert "\033" not in done.stdout + done.stderr
    assert not _commands(done.stderr)


# --- annotations --------------------------------------------------------------------------------


def _failed(message: str, visibility: str = "visible") -> CheckResult:
    return CheckResult(exercise_id="ex", check="gradients", title="T: gradients", score=0,
                       max_score=1, status="failed", message=message, visibility=visibility,
                       file="exercises/ex.exercise.yaml", line=7)


def test_an_annotation_is_one_line_whatever_the_message_holds():
    line = error_line("a: b, c", "50% off\r\n::add-mask::secret\n", "dir/a,b.yaml", 3)
    assert line == ("::error file=dir/a%2Cb.yaml,line=3,title=a%3A b%2C c::"
                    "50%25 off%0D%0A::add-mask::secret%0A\n")


def test_an_import_failure_the_submission_wrote_itself_is_one_annotation(tmp_path):
    """The import error's traceback is the submission's to write: a frame with a line number
    of 5,000 digits, or a NUL in its path, made `--github` crash with a ValueError. Such a frame
    is passed over for the next one in the submission's own file."""
    engine = tmp_path / "engine.py"
    engine.write_text("x = 1\n")
    for forged in (f'File "{engine}", line ' + "9" * 5000, f'File "{engine}\x00", line 3'):
        traceback = f'Traceback:\n  File "{engine}", line 1, in <module>\n  {forged}\nImportError'
        report = GradeReport(submission=str(engine), seed=1, import_error=traceback)
        lines = annotate(report, engine).splitlines()
        assert len(lines) == 1 and lines[0].startswith("::error file=") and ",line=1," in lines[0]


def test_annotations_withhold_what_students_may_not_see():
    report = GradeReport(submission="engine.py", seed=1,
                         results=[_failed("got 2.0, expected 3.0"), _failed("secret", "hidden")])
    lines = annotate(report).splitlines()
    assert lines[0] == ("::error file=exercises/ex.exercise.yaml,line=7,title=T%3A gradients "
                        "(ex)::got 2.0, expected 3.0")
    assert lines[1].endswith("::Details are not shown for this exercise.")
    assert "secret" in annotate(report, show_hidden=True)
