"""gradcheck.engine.trees: folder trees removed, walked and copied whatever their depth."""

import os
import stat
from pathlib import Path

import pytest
from another_user import UID

from gradcheck.engine import trees


def deep(top, depth: int, name: str = "d") -> str:
    """A chain of `depth` folders under `top`, made as a submission makes one (each `mkdir`
    relative to the last), so that it may go past PATH_MAX; the deepest folder's path."""
    here = os.getcwd()
    os.makedirs(top, exist_ok=True)
    os.chdir(top)
    try:
        for _ in range(depth):
            os.mkdir(name)
            os.chdir(name)
        open("bottom", "w").close()
    finally:
        os.chdir(here)
    return os.path.join(top, *[name] * depth)


def test_a_tree_deeper_than_python_recurses_and_than_path_max_is_removed(tmp_path):
    """3,000 folders of 3 characters: a RecursionError for shutil.rmtree, and a path of 12,000
    characters, past what any call taking a path accepts."""
    deep(tmp_path / "tree", 3000, "abc")
    trees.remove(tmp_path / "tree")
    assert os.listdir(tmp_path) == []
    trees.remove(tmp_path / "tree")  # gone already: nothing to do, nothing raised


def test_walk_goes_as_deep_as_the_tree_and_leaves_out_what_is_pruned(tmp_path):
    deep(tmp_path / "tree" / "kept", 1500)
    deep(tmp_path / "tree" / "pruned", 5)
    seen = []
    for folder, subfolders, files in trees.walk(tmp_path / "tree"):
        seen.append((folder, files))
        if "pruned" in subfolders:
            subfolders.remove("pruned")
    assert len(seen) == 1 + 1 + 1500  # the top, kept, and its chain
    assert not any("pruned" in folder for folder, _ in seen)
    assert seen[-1][1] == ["bottom"]
    trees.remove(tmp_path / "tree")  # pytest's own clean-up of old runs recurses


@pytest.mark.skipif(os.geteuid() != 0, reason="gives files to another group: needs root")
def test_a_copy_for_a_group_lets_it_read_and_run_but_not_write(tmp_path):
    source = tmp_path / "engine"
    source.mkdir()
    (source / "__init__.py").write_text("x = 1\n")
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / "run.sh").chmod(0o755)
    (source / "link").symlink_to("/etc/shadow")
    os.mkfifo(source / "pipe")
    trees.copy_for_group(source, tmp_path / "copy", UID)
    copy = tmp_path / "copy"
    assert sorted(os.listdir(copy)) == ["__init__.py", "link", "run.sh"]  # no FIFO
    assert (copy / "__init__.py").read_text() == "x = 1\n"
    modes = {name: os.lstat(copy / name) for name in ("", "__init__.py", "run.sh", "link")}
    assert all(info.st_uid == 0 and info.st_gid == UID for info in modes.values())
    assert stat.S_IMODE(modes[""].st_mode) == 0o750
    assert stat.S_IMODE(modes["__init__.py"].st_mode) == 0o640
    assert stat.S_IMODE(modes["run.sh"].st_mode) == 0o650
    assert os.readlink(copy / "link") == "/etc/shadow"  # a link, followed with the worker's rights


@pytest.mark.skipif(os.geteuid() != 0, reason="gives files to another group: needs root")
@pytest.mark.parametrize("make, says", [
    (lambda p: deep(p, trees.COPY_DEPTH + 1), f"more than {trees.COPY_DEPTH} deep"),
    (lambda p: os.truncate(_file(p / "big.bin"), trees.COPY_BYTES + 1), "larger than 100 MB"),
    (lambda p: [_file(p / f"{i}.py") for i in range(trees.COPY_ENTRIES + 1)],
     "more than 10,000 files and folders"),
])
def test_a_submission_too_deep_too_large_or_too_many_is_refused(tmp_path, make, says):
    source = tmp_path / "engine"
    source.mkdir()
    make(source)
    with pytest.raises(trees.CopyRefused, match=says):
        trees.copy_for_group(source, tmp_path / "copy", UID)


def test_a_fifo_or_a_device_is_no_submission_to_copy(tmp_path):
    os.mkfifo(tmp_path / "engine.py")
    with pytest.raises(trees.CopyRefused, match="engine.py is not a file or a folder"):
        trees.copy_for_group(tmp_path / "engine.py", tmp_path / "copy", os.getgid())
    with pytest.raises(trees.CopyRefused, match="null is not a file or a folder"):
        trees.copy_for_group(Path("/dev/null"), tmp_path / "copy", os.getgid())


def _file(path) -> str:
    open(path, "w").close()
    return str(path)
