"""What the tests of a worker run as another user share.

Worker(user=UID) needs the grader to be root and an interpreter that user may run: PYTHON, here
/usr/bin/python3 (the test run's own lives under /root, where no other user may go). Tests that
need both are marked `as_another_user`; the files such a worker reads go in `open_folder`.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ENGINES = Path(__file__).parent / "engines"
UID = 61_234  # no process of this machine runs as this user (nor as the next few)


def _usable_by_others(path: str) -> bool:
    path = os.path.realpath(path)
    parents = [os.path.dirname(path)]
    while parents[-1] != "/":
        parents.append(os.path.dirname(parents[-1]))
    return (os.path.isfile(path) and os.stat(path).st_mode & 0o005 == 0o005
            and all(os.stat(p).st_mode & 0o001 for p in parents))


def _python_for_others() -> str | None:
    for path in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        if _usable_by_others(path) and subprocess.run(
                [path, "-c", "import sys; assert sys.version_info >= (3, 11)"]).returncode == 0:
            return path
    return None


PYTHON = _python_for_others() if os.geteuid() == 0 else None
as_another_user = pytest.mark.skipif(PYTHON is None, reason="needs root and a Python 3.11 that "
                                                          "another user may run")


@pytest.fixture
def open_folder():
    """A folder another user may read (tmp_path lies under a folder only root may enter)."""
    folder = Path(tempfile.mkdtemp(prefix="gradcheck-another-user-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def private_copy(key: Path, folder: Path) -> Path:
    """A copy of the answer key in a folder only root may enter, as docs/security.md asks."""
    secret = folder / "secret"
    secret.mkdir(mode=0o700)
    copy = secret / key.name
    shutil.copy(key, copy)
    copy.chmod(0o600)
    return copy


def key_reader(path: Path, key: Path) -> Path:
    """A submission at `path`: tests/engines/key_lookup.py, which has no derivatives and copies
    torch's gradients from the answer key at `key` when it can read it."""
    path.write_text(f"import sys\nsys.path.append({str(ENGINES)!r})\n"
                    f"from key_lookup import arm\ntensor, no_grad = arm({str(key)!r})\n")
    return path


def record_uids(submissions: Path, marks: Path) -> None:
    """Make each submission in `submissions` write the uid it runs as into `marks`/its name, a
    file of root's (what a worker user makes in a folder anyone may write goes with its
    worker)."""
    marks.mkdir()
    for submission in submissions.iterdir():
        mark = marks / submission.name
        mark.touch()
        mark.chmod(0o666)
        submission.write_text(f"import os\nwith open({str(mark)!r}, 'a') as f:\n"
                              "    f.write(f'{os.getuid()} ')\n" + submission.read_text())


def uids_recorded(marks: Path) -> dict[str, set[int]]:
    """The uids each submission ran as, by `record_uids`."""
    return {mark.name: {int(uid) for uid in mark.read_text().split()}
            for mark in marks.iterdir()}
