"""gradcheck writes nothing into the folder it runs in but the files it is asked for: hypothesis's
cache (`.hypothesis/`) goes to the user's cache folder."""

import os
import subprocess
import sys

import pytest
from grading_samples import SQUARE


@pytest.fixture
def places(tmp_path):
    """An empty folder to run in, a bank elsewhere, a cache folder, and the environment."""
    here, bank, cache = tmp_path / "here", tmp_path / "bank", tmp_path / "cache"
    here.mkdir()
    bank.mkdir()
    # 60 sampled points: hypothesis reads (and caches) constants for some draws, not all
    (bank / "square.exercise.yaml").write_text(SQUARE.replace("count: 5", "count: 60"))
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_STORAGE_DIRECTORY"}
    env["XDG_CACHE_HOME"] = str(cache)
    return here, bank, cache, env


def run(here, env, *arguments):
    return subprocess.run([sys.executable, *arguments], cwd=here, env=env, capture_output=True,
                          text=True, timeout=300)


def test_grading_leaves_the_folder_as_it_found_it(places):
    here, bank, _, env = places
    graded = run(here, env, "-m", "gradcheck", "grade", "reference", "--exercises", str(bank),
                 "--oracles", "fd", "--quiet")
    assert graded.returncode == 0, graded.stderr
    assert os.listdir(here) == []


@pytest.mark.slow
def test_grade_with_jax_validate_and_check_leave_the_folder_as_they_found_it(places):
    here, bank, _, env = places
    for arguments in [("-m", "gradcheck", "grade", "reference", "--exercises", str(bank)),
                      ("-m", "gradcheck", "validate", str(bank)),
                      ("-m", "gradcheck", "fuzz", "reference", "--examples", "20"),
                      ("-c", "import gradcheck; print(gradcheck.check('y = x * x', "
                             "domains={'x': (-1, 1)}, samples=5))")]:
        done = run(here, env, *arguments)
        assert done.returncode in (0, 1), done.stderr  # (the sample bank has no schema line)
        assert os.listdir(here) == [], arguments
