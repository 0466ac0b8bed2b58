"""Ready for a package index: `python -m build` makes an sdist and a wheel that `twine check`
passes, each installs in a fresh virtual environment and grades the reference engine at full
marks there, and the version has one source. Nothing is uploaded.

The environments see the test run's own packages (`--system-site-packages`), so gradcheck's
dependencies, torch's CPU build among them, are not installed again; gradcheck itself is, from
the file built, and each run checks that the gradcheck it imported is that one. Grading uses an
answer key built here, so it takes seconds (tests/test_gradescope_path.py and
tests/test_classroom_path.py install a wheel with its dependencies from the index).
"""

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import gradcheck
from gradcheck.bank.bundled import bank_dir
from gradcheck.bank.loader import load_bank
from gradcheck.course.wheel import wheel_name
from gradcheck.grading import answer_key

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_has_one_source():
    project = PYPROJECT["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "gradcheck.__version__"}


def test_the_metadata_is_complete():
    project = PYPROJECT["project"]
    assert project["license"] == "MIT" and (ROOT / project["license-files"][0]).is_file()
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    classifiers = project["classifiers"]
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert "Intended Audience :: Education" in classifiers
    assert project["readme"] == "README.md" and project["authors"] and project["keywords"]


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """The sdist and the wheel, the wheel built from the sdist, each in an isolated environment
    with the setuptools pyproject.toml asks for, as `python -m build` does."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    version = gradcheck.__version__
    return out / f"gradcheck-{version}.tar.gz", out / f"gradcheck-{version}-py3-none-any.whl"


@pytest.mark.slow
def test_twine_check_passes(dist):
    done = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, dist)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    path = tmp_path_factory.mktemp("key") / "key.json"
    answer_key.build(load_bank(bank_dir()), 0, path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sdist", "wheel"])
def test_each_file_installs_in_a_fresh_environment_and_grades_the_reference(dist, key, kind,
                                                                            tmp_path):
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    file = dist[0] if kind == "sdist" else dist[1]
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall",
                    str(file)], check=True, timeout=900)
    env = {name: value for name, value in os.environ.items()
           if name not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run([python, "-c", "import gradcheck; print(gradcheck.__file__)"],
                           capture_output=True, text=True, check=True, cwd=tmp_path, env=env)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout
    done = subprocess.run([str(venv / "bin" / "gradcheck"), "grade", "reference", "--key",
                           str(key), "--quiet"], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    points, total = done.stdout.split()[0].split("/")
    assert points == total and float(total) > 200, done.stdout

    # Installed so, not from a checkout, gradcheck still packs itself for a course template.
    done = subprocess.run([str(venv / "bin" / "gradcheck"), "init", "course", "--empty"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(tmp_path / "course" / "student" / ".github" / wheel_name()) as packed, \
            zipfile.ZipFile(dist[1]) as built:
        packed_names, built_names = set(packed.namelist()), set(built.namelist())
    assert {n for n in packed_names if ".dist-info/" not in n} == {
        n for n in built_names if ".dist-info/" not in n}
    info = f"gradcheck-{gradcheck.__version__}.dist-info/"
    assert {info + name for name in ("METADATA", "entry_points.txt", "licenses/LICENSE")} <= \
        packed_names
