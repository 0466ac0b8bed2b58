"""`gradcheck bundle`: Gradescope's autograder zip, run as Gradescope runs it, and the student
template's exercises and key.

`run_autograder` runs in bash against a temporary folder laid out like /autograder
(GRADCHECK_AUTOGRADER_ROOT), with the Python of this test run (GRADCHECK_PYTHON, where gradcheck
is installed) in place of the virtual environment setup.sh would make. Run as root, as here, it
runs the worker as another user, as on Gradescope: the folder is one that user may enter, and
GRADCHECK_WORKER_PYTHON a Python it may run (tests/another_user.py).
"""

import importlib.metadata
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from another_user import PYTHON, as_another_user, key_reader, open_folder  # noqa: F401
from grading_samples import CUBE, DETACH_HESSIAN, PRODUCT, read_results

import gradcheck
from gradcheck import __version__
from gradcheck.bank.bundled import bank_dir, reference_path, starter_path
from gradcheck.bank.loader import load_bank
from gradcheck.cli import main
from gradcheck.course import bundle
from gradcheck.course.wheel import wheel_name
from gradcheck.grading import answer_key

ENGINES = Path(__file__).parent / "engines"


@pytest.fixture(scope="module")
def bank(tmp_path_factory):
    """A visible exercise (2 points, two checks) and a hidden one (2 points)."""
    folder = tmp_path_factory.mktemp("bank")
    (folder / "product.exercise.yaml").write_text(PRODUCT)
    (folder / "hidden").mkdir()
    (folder / "hidden" / "secret-cube.exercise.yaml").write_text(CUBE)
    return folder


@pytest.fixture(scope="module")
def key_file(bank, tmp_path_factory):
    path = tmp_path_factory.mktemp("key") / "key.json"
    answer_key.build(load_bank(bank), 11, path)
    return path


@pytest.fixture(scope="module")
def autograder(bank, key_file, tmp_path_factory):
    """The zip, and the folder it unpacks to (what Gradescope puts in /autograder/source)."""
    out = tmp_path_factory.mktemp("zip") / "autograder.zip"
    bundle.gradescope([bank], out, key=key_file)
    source = out.with_name("source")
    with zipfile.ZipFile(out) as archive:
        archive.extractall(source)
    return out, source


def autograder_env(root: Path, python: str = sys.executable, **more: str) -> dict[str, str]:
    """run_autograder's variables: the layout at `root`, the grader's Python and, for its worker
    user (run as root), a Python that user may run, or no worker user if there is none."""
    worker = {"GRADCHECK_WORKER_PYTHON": PYTHON} if PYTHON else {"GRADCHECK_WORKER_USER": "none"}
    return {**os.environ, "GRADCHECK_AUTOGRADER_ROOT": str(root), "GRADCHECK_PYTHON": python,
            **worker, **more}


def run_autograder(source: Path, folder: Path, files: dict[str, Path],
                   python: str = sys.executable, **env: str) -> dict:
    """Lay out folder as /autograder with `files` as the submission, run run_autograder, and
    return results.json (checked against Gradescope's schema)."""
    root = folder / "autograder"
    shutil.copytree(source, root / "source")
    (root / "submission").mkdir(parents=True)
    for name, path in files.items():
        shutil.copy(path, root / "submission" / name)
    # PYTHONPATH is cleared for the grader (`env -i`, `-I`): this one must change nothing.
    env = autograder_env(root, python, PYTHONPATH=str(folder / "nowhere"), **env)
    done = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, cwd=folder,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return read_results(root / "results" / "results.json")


def checks_of(results: dict, exercise_id: str) -> list[dict]:
    return [t for t in results["tests"] if t["name"].endswith(f"({exercise_id})")]


# --- the zip ------------------------------------------------------------------------------------


def test_zip_has_the_scripts_at_its_root_and_the_bank_byte_for_byte(bank, autograder):
    out, _ = autograder
    with zipfile.ZipFile(out) as archive:
        names = set(archive.namelist())
        modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
        assert names == {"setup.sh", "run_autograder", "requirements.txt", "key.json",
                         "README.md", wheel_name(), "exercises/product.exercise.yaml",
                         "exercises/hidden/secret-cube.exercise.yaml"}
        assert modes["setup.sh"] & stat.S_IXUSR and modes["run_autograder"] & stat.S_IXUSR
        # the wheel, then the packages it runs with here, that built and checked the key
        version = importlib.metadata.version
        assert archive.read("requirements.txt").decode().splitlines() == [
            f"./{wheel_name()}", *sorted(f"{name}=={version(name)}" for name in (
                "numpy", "pyyaml", "pytest", "hypothesis", "pydantic", "jsonschema"))]
        assert "run_autograder" in archive.read("README.md").decode()
        for name in ("product.exercise.yaml", "hidden/secret-cube.exercise.yaml"):
            assert archive.read(f"exercises/{name}") == (bank / name).read_bytes()
        run_autograder_text = archive.read("run_autograder").decode()
    assert 'entry="engine.py"' in run_autograder_text


def installed_wheel(wheel: Path, requirement: str, cwd: Path, target: Path) -> Path:
    """Install the gradcheck that `requirement` (a line naming `wheel`) names into `target`, as
    pip does it from the folder `cwd`, without its dependencies; check that what is installed
    is this gradcheck, file for file, and runs from there; return `target`."""
    (cwd / "req.txt").write_text(requirement)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--target", str(target), "-r", "req.txt"], cwd=cwd, check=True)
    package = Path(gradcheck.__file__).parent
    for path in package.rglob("*.py"):
        assert (target / "gradcheck" / path.relative_to(package)).read_bytes() == \
            path.read_bytes(), path
    for path in bank_dir().rglob("*.exercise.yaml"):
        assert (target / "gradcheck" / "_bank" / path.relative_to(bank_dir())).is_file()
    info = target / f"gradcheck-{__version__}.dist-info"
    assert "gradcheck = gradcheck.cli:command" in (info / "entry_points.txt").read_text()
    assert "Requires-Dist: numpy" in (info / "METADATA").read_text()
    assert "MIT License" in (info / "licenses" / "LICENSE").read_text()
    done = subprocess.run(
        [sys.executable, "-c", "import gradcheck.bank.bundled as b\n"
         "print(b.bank_dir(), b.reference_path(), b.starter_path())"],
        env={**os.environ, "PYTHONPATH": str(target)}, cwd=target.parent, check=True,
        capture_output=True, text=True)
    assert done.stdout.split() == [str(target / "gradcheck" / name)
                                   for name in ("_bank", "_reference", "_starter")]
    return target


def test_zip_carries_the_wheel_of_this_gradcheck(autograder, tmp_path):
    """The default: the index serves only third-party packages."""
    _, source = autograder
    wheel = source / wheel_name()
    requirement = (source / "requirements.txt").read_text().splitlines()[0]  # then its pins
    shutil.copy(wheel, tmp_path)
    installed_wheel(wheel, requirement, tmp_path, tmp_path / "site")


def test_a_wheel_or_requirement_given_replaces_the_built_wheel(bank, key_file, tmp_path):
    out = bundle.gradescope([bank], tmp_path / "a.zip", key=key_file,
                            requirement="gradcheck @ git+https://example.org/g.git")
    with zipfile.ZipFile(out) as archive:
        assert archive.read("requirements.txt") == b"gradcheck @ git+https://example.org/g.git\n"
        assert wheel_name() not in archive.namelist()


def test_a_key_with_random_programs_pins_the_hypothesis_that_drew_them(tmp_path):
    """A key's random programs are replayed only under the hypothesis that drew them (another
    may draw others, and then they are drawn live): requirements.txt pins that version."""
    folder = tmp_path / "bank"
    shutil.copytree(bank_dir() / "02-backward", folder,
                    ignore=lambda _, names: [n for n in names if n.endswith(".yaml")
                                             and n != "mixed-arithmetic.exercise.yaml"])
    out = bundle.gradescope([folder], tmp_path / "a.zip",
                            requirement="gradcheck @ git+https://example.org/g.git")
    with zipfile.ZipFile(out) as archive:
        assert archive.read("requirements.txt").decode() == (
            "gradcheck @ git+https://example.org/g.git\n"
            f"hypothesis=={importlib.metadata.version('hypothesis')}\n")


def test_a_bank_with_broken_exercises_is_refused_naming_every_one(tmp_path):
    """As `validate` does: an instructor fixes them all in one round, not one bundle at a time."""
    folder = tmp_path / "bank"
    folder.mkdir()
    (folder / "a.exercise.yaml").write_text("id: a\ntitle: A\ntopic: t\npoints: three\n")
    (folder / "b.exercise.yaml").write_text("id: b\n\ttitle: B\n")
    with pytest.raises(bundle.BundleError) as refused:
        bundle.gradescope([folder], tmp_path / "a.zip",
                          requirement="gradcheck @ git+https://example.org/g.git")
    said = str(refused.value)
    assert said.startswith("a broken exercise cannot be bundled; fix it (see `gradcheck "
                           "validate`):\n")
    assert f"{folder / 'a.exercise.yaml'}:4: points:" in said
    assert f"{folder / 'b.exercise.yaml'}:2:" in said
    assert not (tmp_path / "a.zip").exists()


def test_a_hessian_of_a_detach_is_bundled_and_one_that_grades_nothing_is_refused(tmp_path):
    """The key built for the bundle holds torch's and jax's second derivatives where finite
    differences cannot give them; with finite differences its only oracle, the check would
    grade nothing on Gradescope, so the bundle is refused with `validate`'s line for it."""
    folder = tmp_path / "bank"
    folder.mkdir()
    path = folder / "detach-hessian.exercise.yaml"
    path.write_text(DETACH_HESSIAN)
    out = bundle.gradescope([folder], tmp_path / "a.zip", seed=3,
                            requirement="gradcheck @ git+https://example.org/g.git")
    with zipfile.ZipFile(out) as archive:
        archive.extract("key.json", tmp_path)
    stored = json.loads((tmp_path / "key.json").read_text())
    assert {"fd", "torch", "jax"} <= set(stored["exercises"]["detach-hessian"]["checks"]["hessian"])
    path.write_text(DETACH_HESSIAN + "    oracles: [fd]\n")
    with pytest.raises(bundle.BundleError, match=(
            "a check that grades nothing cannot be bundled; fix it \\(see `gradcheck "
            f"validate`\\):\n{path}:16: checks.hessian.oracles: finite differences along")):
        bundle.gradescope([folder], tmp_path / "b.zip",
                          requirement="gradcheck @ git+https://example.org/g.git")
    assert not (tmp_path / "b.zip").exists()


def test_scripts_are_valid_bash(autograder):
    _, source = autograder
    for script in ("setup.sh", "run_autograder"):
        subprocess.run(["bash", "-n", str(source / script)], check=True)


def test_zip_key_holds_the_bank_and_is_accepted_by_the_grader(bank, autograder):
    _, source = autograder
    key = answer_key.load(source / "key.json")
    assert key.seed == 11 and sorted(key.exercises) == ["product", "secret-cube"]
    assert key.stale(load_bank(source / "exercises")) == []


def test_a_key_that_does_not_fit_the_bank_is_refused(bank, key_file, tmp_path):
    changed = tmp_path / "bank"
    shutil.copytree(bank, changed)
    path = changed / "product.exercise.yaml"
    path.write_text(path.read_text().replace("points: 2", "points: 3"))
    with pytest.raises(bundle.BundleError, match="exercise product changed since"):
        bundle.gradescope([changed], tmp_path / "a.zip", key=key_file)
    assert not (tmp_path / "a.zip").exists()


def test_bundle_command_says_what_is_wrong(bank, tmp_path, capsys):
    assert main(["bundle", "gradescope", "--exercises", str(tmp_path / "nope"), "--out",
                 str(tmp_path / "a.zip")]) == 2
    assert f"--exercises {tmp_path / 'nope'}: no such file or folder" in capsys.readouterr().err
    assert main(["bundle", "gradescope", "--exercises", str(bank), "--gradcheck",
                 str(tmp_path / "gradcheck-9.whl"), "--out", str(tmp_path / "a.zip")]) == 2
    assert "gradcheck-9.whl: no such file" in capsys.readouterr().err
    assert main(["bundle", "gradescope", "--exercises", str(bank), "--gradcheck",
                 "gradcheck[all]==0.1.0", "--out", str(tmp_path / "a.zip")]) == 2
    assert "leave out the extras torch, jax and all" in capsys.readouterr().err
    assert main(["bundle", "gradescope", "--exercises", str(bank), "--entry", 'a";rm -rf .py',
                 "--out", str(tmp_path / "a.zip")]) == 2
    assert "give the file name students submit, like engine.py" in capsys.readouterr().err
    assert not (tmp_path / "a.zip").exists()


def test_without_a_key_the_bundle_builds_one_with_the_seed_given(bank, tmp_path):
    out = bundle.gradescope([bank], tmp_path / "a.zip", seed=3)
    with zipfile.ZipFile(out) as archive:
        archive.extract("key.json", tmp_path)
    key = answer_key.load(tmp_path / "key.json")
    assert key.seed == 3 and key.stale(load_bank(bank)) == []


# --- run_autograder against good, buggy and crashing submissions -------------------------------


def test_good_submission_gets_every_point(autograder, open_folder):
    _, source = autograder
    results = run_autograder(source, open_folder,
                             {"engine.py": reference_path() / "__init__.py"})
    assert results["score"] == 4
    assert all(t["status"] == "passed" for t in results["tests"])
    hidden, = checks_of(results, "secret-cube")
    assert hidden["visibility"] == "hidden" and hidden["output"] == "Details are not shown for " \
                                                                    "this exercise."


@pytest.mark.slow
def test_buggy_submission_loses_the_points_of_its_bug(autograder, open_folder):
    _, source = autograder
    results = run_autograder(source, open_folder, {"engine.py": ENGINES / "wrong_mul.py",
                                                "tiny.py": ENGINES / "tiny.py"})
    gradients, graph = checks_of(results, "product")
    assert gradients["status"] == "failed" and "x * y" in gradients["output"]
    assert graph["status"] == "passed"
    assert checks_of(results, "secret-cube")[0]["status"] == "passed"
    assert results["score"] == graph["score"] + 2


def test_crashing_submission_loses_what_crashes_and_says_why(autograder, open_folder):
    _, source = autograder
    results = run_autograder(source, open_folder, {"engine.py": ENGINES / "segfault.py",
                                                "tiny.py": ENGINES / "tiny.py"})
    gradients, graph = checks_of(results, "product")
    assert "the engine crashed with signal SIGSEGV in backward()" in gradients["output"]
    assert checks_of(results, "secret-cube")[0]["status"] == "failed"
    assert results["score"] == graph["score"] > 0  # what needs no backward still counts


def test_a_missing_engine_is_said_in_a_students_words_and_a_package_folder_is_graded(
        autograder, open_folder):
    _, source = autograder
    results = run_autograder(source, open_folder, {"notes.txt": ENGINES / "tiny.py",
                                                   "my_engine.py": ENGINES / "tiny.py"})
    assert results["score"] == 0 and results["tests"] == []
    assert results["output"] == "Submit a file named engine.py (found: my_engine.py, notes.txt)"
    root = open_folder / "autograder"
    for name in ("notes.txt", "my_engine.py"):
        (root / "submission" / name).unlink()
    shutil.copytree(reference_path(), root / "submission" / "engine",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(root / "results")
    subprocess.run(["bash", str(root / "source" / "run_autograder")], env=autograder_env(root),
                   check=True, capture_output=True)
    assert read_results(root / "results" / "results.json")["score"] == 4


def test_results_are_written_even_when_gradcheck_cannot_start(autograder, tmp_path):
    _, source = autograder
    # A "Python" that prints what a broken install might, quotes, backslashes and control
    # characters included, and fails: the shell's fallback must still write valid JSON.
    broken = tmp_path / "broken-python"
    broken.write_text("#!/bin/sh\nprintf 'ImportError: \"numpy\" \\\\ C:\\\\x\\001\\tend\\n'\n"
                      "exit 3\n")
    broken.chmod(0o755)
    results = run_autograder(source, tmp_path, {"engine.py": ENGINES / "tiny.py"},
                             python=str(broken))
    assert results["score"] == 0 and results["tests"] == []
    assert "gradcheck exited with status 3" in results["output"]
    assert 'ImportError: "numpy" \\ C:\\x end' in results["output"]


@as_another_user
def test_as_root_the_worker_cannot_read_the_key(autograder, open_folder):
    """run_autograder's default as root: the worker runs as uid 61000 (the tests above grade as
    it too, the good submission with every point). The key-reading engine (no derivatives;
    torch's gradients copied from key.json) then earns only what needs no gradient, as with no
    key to read; with GRADCHECK_WORKER_USER=none it reads the key and earns every point."""
    _, source = autograder

    def graded(name: str, **env: str) -> dict:
        folder = open_folder / name
        folder.mkdir()
        reader = key_reader(folder / "reader.py", folder / "autograder" / "source" / "key.json")
        return run_autograder(source, folder, {"engine.py": reader}, **env)

    as_root = graded("as-root", GRADCHECK_WORKER_USER="none")
    assert as_root["score"] == 4
    results = graded("default")
    gradients, graph = checks_of(results, "product")
    assert results["score"] == graph["score"] > 0
    assert gradients["status"] == checks_of(results, "secret-cube")[0]["status"] == "failed"
    root = open_folder / "default" / "autograder"
    assert stat.S_IMODE((root / "source" / "key.json").stat().st_mode) == 0o600
    bank = [root / "source" / "exercises", *(root / "source" / "exercises").rglob("*")]
    assert {stat.S_IMODE(path.stat().st_mode) & 0o077 for path in bank} == {0}
    assert stat.S_IMODE((root / "submission" / "engine.py").stat().st_mode) & 0o444 == 0o444


@as_another_user
def test_a_worker_user_that_cannot_start_the_worker_is_said_in_the_results(autograder,
                                                                         tmp_path):
    """tmp_path lies in a folder only root may enter, and the grader's Python under /root."""
    _, source = autograder
    results = run_autograder(source, tmp_path, {"engine.py": ENGINES / "tiny.py"},
                             GRADCHECK_WORKER_PYTHON="")
    assert results["score"] == 0 and results["tests"] == []
    assert results["output"].startswith("The grader could not run: the worker's user (uid 61000) "
                                        "cannot ")
    assert "docs/security.md" in results["output"]


@as_another_user
def test_setup_refuses_a_python_the_worker_user_cannot_run(autograder, open_folder):
    """A Python inside a folder of mode 0700, as under /root or a home folder: setup.sh fails
    at once, saying so and what to do, and makes no virtual environment."""
    _, source = autograder
    private = Path(tempfile.mkdtemp())  # mode 0700
    try:
        (private / "python3").symlink_to(PYTHON)
        root = open_folder / "autograder"
        shutil.copytree(source, root / "source")
        done = subprocess.run(["bash", str(root / "source" / "setup.sh")],
                              env={**os.environ, "GRADCHECK_AUTOGRADER_ROOT": str(root),
                                   "GRADCHECK_SETUP_PYTHON": str(private / "python3")},
                              capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(private)
    assert done.returncode == 1
    assert done.stderr.startswith("setup.sh: no Python 3.11 or later that the worker's user "
                                  "(uid 61000) may run.\n")
    assert f"tried: {private / 'python3'}" in done.stderr and "a home folder of mode 0700" in \
        done.stderr
    assert not (root / "venv").exists()


# --- the student template -----------------------------------------------------------------------


def test_classroom_publishes_visible_exercises_and_their_key_only(bank, key_file, tmp_path):
    out = tmp_path / "student"
    stale = out / "exercises" / "old" / "gone.exercise.yaml"
    written = bundle.classroom([bank], out, key=key_file)  # a new folder: the template first
    assert (out / "engine.py").read_text() == (starter_path() / "engine.py").read_text()
    stale.parent.mkdir(parents=True)
    stale.write_text(CUBE)  # published before, hidden since
    assert bundle.classroom([bank], out, key=key_file) == written
    assert sorted(p.relative_to(out).as_posix() for p in (out / "exercises").rglob("*")) == [
        "exercises/product.exercise.yaml"]
    assert (out / "exercises" / "product.exercise.yaml").read_bytes() == (
        bank / "product.exercise.yaml").read_bytes()
    key = answer_key.load(out / "key.json")
    assert sorted(key.exercises) == ["product"] and key.seed == 11
    assert "secret-cube" not in (out / "key.json").read_text()
    assert json.loads((out / "schema" / "exercise.schema.json").read_text())["$schema"]


def test_classroom_refuses_a_bank_with_nothing_visible(bank, key_file, tmp_path):
    with pytest.raises(bundle.BundleError, match="no exercise of the bank is visible"):
        bundle.classroom([bank / "hidden"], tmp_path / "student", key=key_file)
