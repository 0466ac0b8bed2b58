"""The whole Gradescope path, with nothing set by hand: a fresh `gradcheck init` course, one
exercise written by its instructor, `gradcheck bundle gradescope --out autograder.zip` with no
other option, the zip unpacked into a folder laid out as /autograder, `setup.sh` (which installs
gradcheck from the wheel in the zip, into a virtual environment of a Python the worker's user may
run), then `run_autograder` for each submission, as root with the default worker user when the
tests run as root (the user is created if the machine has no such account), and results.json
checked against Gradescope's schema.

setup.sh installs gradcheck's dependencies from the package index (pip's cache and the machine's
pip configuration make a second run quick); grading with the key needs neither torch nor jax, so
setup.sh installs neither.
"""

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from another_user import PYTHON
from grading_samples import read_results
from test_docs import DOCS, runnable

from gradcheck.bank.bundled import reference_path
from gradcheck.bank.course_file import WORKER_USER
from gradcheck.cli import main
from gradcheck.course.mutants import CATALOGUE
from gradcheck.course.mutation import mutate
from gradcheck.course.wheel import wheel_name

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() == 0 and PYTHON is None,
                       reason="as root, needs a Python 3.11 that another user may run"),
]
#: the instructor's exercise: the one docs/instructors.md has them write
MINE = "exercises/08-mine/product-rule.exercise.yaml"
#: run_autograder's and setup.sh's variables, which must not leak in from the test run
OURS = ("GRADCHECK_AUTOGRADER_ROOT", "GRADCHECK_PYTHON", "GRADCHECK_WORKER_USER",
        "GRADCHECK_WORKER_PYTHON", "GRADCHECK_SETUP_PYTHON", "VIRTUAL_ENV", "PYTHONPATH")


@pytest.fixture(scope="module")
def worker_account():
    """As root: the default worker user, as an account (created here if missing, removed after)."""
    created = False
    if os.geteuid() == 0:
        try:
            pwd.getpwuid(WORKER_USER)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                            "/usr/sbin/nologin", "--uid", str(WORKER_USER),
                            "gradcheck-worker"], check=True)
            created = True
    yield
    if created:
        subprocess.run(["userdel", "gradcheck-worker"], check=True)


def environment(root: Path) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in OURS}
    return {**env, "GRADCHECK_AUTOGRADER_ROOT": str(root)}


@pytest.fixture(scope="module")
def autograder(tmp_path_factory, worker_account):
    """/autograder after setup.sh: the bundle of a fresh course, set up. Lies in a folder every
    user may enter, as /autograder does."""
    course = tmp_path_factory.mktemp("instructor") / "mycourse"
    assert main(["init", str(course), "--empty"]) == 0
    (text,) = [body for _, body, path in runnable(DOCS / "instructors.md") if path == MINE]
    (course / MINE).parent.mkdir(parents=True)
    (course / MINE).write_text(text)
    done = subprocess.run([sys.executable, "-m", "gradcheck", "bundle", "gradescope", "--out",
                           "autograder.zip"], cwd=course, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert "the course's bank" in done.stderr and ": 2 exercises" in done.stderr

    layout = Path(tempfile.mkdtemp(prefix="gradcheck-autograder-"))
    layout.chmod(0o755)
    root = layout / "autograder"
    with zipfile.ZipFile(course / "autograder.zip") as archive:
        archive.extractall(root / "source")
    for script in ("setup.sh", "run_autograder"):  # zipfile leaves the modes behind
        (root / "source" / script).chmod(0o755)
    done = subprocess.run(["bash", str(root / "source" / "setup.sh")], env=environment(root),
                          cwd=layout, capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    yield root, done.stdout
    shutil.rmtree(layout)


def run_autograder(root: Path, engine: str) -> dict:
    """Grade `engine` (the source of engine.py) as Gradescope does; results.json, checked."""
    shutil.rmtree(root / "submission", ignore_errors=True)
    shutil.rmtree(root / "results", ignore_errors=True)
    (root / "submission").mkdir()
    (root / "submission" / "engine.py").write_text(engine)
    done = subprocess.run([str(root / "source" / "run_autograder")], env=environment(root),
                          cwd="/", capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return read_results(root / "results" / "results.json")


def test_setup_installs_gradcheck_from_the_wheel_in_the_zip(autograder):
    root, output = autograder
    # the wheel, then the dependencies pinned as they are where the key was built
    assert (root / "source" / "requirements.txt").read_text().splitlines()[0] == \
        f"./{wheel_name()}"
    done = subprocess.run([str(root / "venv" / "bin" / "python"), "-I", "-c",
                           "import gradcheck, importlib.metadata as m\n"
                           "print(gradcheck.__file__)\n"
                           "print(m.distribution('gradcheck').read_text('direct_url.json'))"],
                          capture_output=True, text=True, check=True, cwd="/")
    where, origin = done.stdout.splitlines()[:2]
    assert Path(where).is_relative_to(root / "venv")
    assert wheel_name() in origin  # pip recorded the wheel of the zip as where it came from
    if os.geteuid() == 0:
        assert f"the worker starts as uid {WORKER_USER}" in output


def test_the_reference_engine_gets_full_marks(autograder):
    root, _ = autograder
    results = run_autograder(root, (reference_path() / "__init__.py").read_text())
    assert results["tests"] and all(t["status"] == "passed" for t in results["tests"]), results
    assert results["score"] == sum(t["max_score"] for t in results["tests"]) == 7


def test_a_broken_engine_loses_the_points_of_its_bug(autograder):
    """The second path into a value overwrites the first one's gradient: the instructor's
    exercise, where x reaches f along two paths, catches it."""
    root, _ = autograder
    mutant, = [m for m in CATALOGUE if m.name == "grad-overwritten-between-paths"]
    results = run_autograder(root, mutate((reference_path() / "__init__.py").read_text(),
                                          mutant))
    failed = {t["name"] for t in results["tests"] if t["status"] == "failed"}
    assert "The product rule through a graph: gradients at sampled points (product-rule)" in \
        failed, failed
    assert 0 < results["score"] < 7
