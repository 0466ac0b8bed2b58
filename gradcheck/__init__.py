"""gradcheck: a gradient checker and an exercise grader for courses on automatic differentiation.

The package reads as the pipeline (docs/design.md): `program/` the language and the table of
operations, `bank/` the exercises, `oracles/` and `engine/` (the submission's sandboxed worker),
`grading/`, `reports/`, and `course/` around them; `cli`, `plugin` and `check` are the ways in.
"""

from typing import Any

__version__ = "0.1.0"

# Imported eagerly, not through __getattr__: the function shares its name with the submodule
# gradcheck.check, and importing that submodule anywhere would otherwise rebind `gradcheck.check`
# to the module. It is cheap: gradcheck.check defers numpy, hypothesis and the oracles until a
# check runs.
from gradcheck.check import check  # noqa: E402

__all__ = ["check", "grade"]


def __getattr__(name: str) -> Any:
    # `gradcheck.grade` loads the grader (pydantic, numpy) only when it is asked for.
    if name == "grade":
        from gradcheck.grading.grader import grade

        return grade
    raise AttributeError(f"module 'gradcheck' has no attribute {name!r}")
