"""Where the bundled exercise bank, reference engine and student starter are, in a checkout or
once installed.

In a checkout they are the top-level `exercises/`, `reference/` and `examples/starter/` folders;
an installed wheel carries the same folders as the packages `gradcheck._bank`,
`gradcheck._reference` and `gradcheck._starter` (see pyproject.toml), so `pip install gradcheck`
then `gradcheck grade reference` works anywhere.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[2]


def bank_dir() -> Path:
    """The folder of the bundled exercise bank."""
    return _locate("exercises", "gradcheck._bank")


def reference_path() -> Path:
    """The folder (package) of the bundled reference engine."""
    return _locate("reference", "gradcheck._reference")


def starter_path() -> Path:
    """The folder of the student starter engine, which `gradcheck init` copies into a course."""
    return _locate("examples/starter", "gradcheck._starter")


def _locate(folder: str, package: str) -> Path:
    if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "exercises").is_dir():
        return _CHECKOUT / folder
    # Installed: the folder is a package directory. find_spec locates it without running its
    # __init__ and, unlike importlib.resources.files, gives a plain path for a namespace package.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the bundled {folder}/ is missing: package {package} not found")
    return Path(next(iter(spec.submodule_search_locations)))
