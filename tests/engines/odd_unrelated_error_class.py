"""Errors of the engine's own class, not derived from torch's: every `RuntimeError` it raises is
an `AutogradError(Exception)`, which an `except RuntimeError` does not catch."""
from odd import reference

_engine = reference()


class AutogradError(Exception):
    pass


_engine.RuntimeError = AutogradError  # the name it raises by
tensor, no_grad = _engine.tensor, _engine.no_grad
