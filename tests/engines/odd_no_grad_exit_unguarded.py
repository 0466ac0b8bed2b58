"""`no_grad()`'s exit restores the mode it found only when its block ends without an error."""
from odd import reference

_engine = reference()


def _exit(self, error_type, *exc):
    if error_type is None:
        _engine._grad_enabled = self._previous


_engine.no_grad.__exit__ = _exit
tensor, no_grad = _engine.tensor, _engine.no_grad
