"""A buggy engine of tests/engines made a submission of its own: most import tiny.py, the engine
they patch, from beside them, and a batch grades each submission alone, where nothing of the
others is beside it (gradcheck.course.slots.private_copy), as a cluster's worker does."""

import shutil
from pathlib import Path

ENGINES = Path(__file__).parent / "engines"


def package(folder: Path, engine: str) -> None:
    """tests/engines/ENGINE.py as a package that brings its own copy of tiny.py."""
    folder.mkdir(parents=True)
    shutil.copy(ENGINES / "tiny.py", folder / "tiny.py")
    source = (ENGINES / f"{engine}.py").read_text().replace("from tiny import", "from .tiny import")
    (folder / "__init__.py").write_text(source)
