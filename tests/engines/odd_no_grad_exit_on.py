"""`no_grad()`'s exit turns recording on, rather than restoring the mode it found on entry."""
from odd import reference

_engine = reference()


def _exit(self, *exc):
    _engine._grad_enabled = True


_engine.no_grad.__exit__ = _exit
tensor, no_grad = _engine.tensor, _engine.no_grad
