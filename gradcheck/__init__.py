"""gradcheck: a gradient checker and an exercise grader for courses on automatic differentiation."""

__version__ = "0.1.0"

from gradcheck.check import check  # noqa: E402  (the library API)

__all__ = ["check"]
