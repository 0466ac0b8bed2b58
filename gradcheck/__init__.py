"""gradcheck: a gradient checker and an exercise grader for courses on automatic differentiation."""

__version__ = "0.1.0"

# Imported eagerly, not through a module __getattr__: the function shares its name with the
# submodule gradcheck.check, and importing that submodule anywhere would otherwise rebind
# `gradcheck.check` to the module. It is cheap: gradcheck.check defers numpy, hypothesis and the
# oracles until a check runs.
from gradcheck.check import check  # noqa: E402

__all__ = ["check"]
