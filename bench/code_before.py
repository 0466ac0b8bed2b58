"""The code of another revision beside this checkout's, for a benchmark that runs both.

A `git archive` copy holds no bytecode, and this machine sets `PYTHONDONTWRITEBYTECODE=1`, so
every process of the copy compiled gradcheck from source while this checkout's may have had
bytecode left from an earlier run: the code before paid a start-up the code now did not.
Both trees are compiled here, so that each side starts as an installed wheel does.
"""

from __future__ import annotations

import compileall
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def checkout(revision: str, folder: Path, paths: list[str]) -> Path:
    """`paths` of `revision` in `folder` (made here), compiled, and this checkout's gradcheck
    compiled too."""
    folder.mkdir()
    archive = subprocess.run(["git", "archive", revision, *paths], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    for tree in (folder / "gradcheck", ROOT / "gradcheck"):
        compileall.compile_dir(tree, quiet=1)
    return folder
