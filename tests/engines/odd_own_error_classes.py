"""Errors and warnings of the engine's own classes, derived from torch's: every `RuntimeError` it
raises is an `AutogradError(RuntimeError)`, every `UserWarning` an `EngineWarning(UserWarning)`."""
from odd import reference

_engine = reference()


class AutogradError(RuntimeError):
    pass


class EngineWarning(UserWarning):
    pass


_engine.RuntimeError, _engine.UserWarning = AutogradError, EngineWarning  # the names it uses
tensor, no_grad = _engine.tensor, _engine.no_grad
