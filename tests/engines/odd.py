"""The reference engine with one odd trait, for the corpus of partial and odd engines
(tests/test_odd_engines.py). Each `odd_*.py` beside this file is one engine: it takes a fresh copy
of the reference (`reference()`), changes one thing the way real engines differ from torch, and
exports `tensor` and `no_grad`. `read_grad(engine, change)` makes `.grad` read through
`change(tensor, torch_like_grad)`.
"""

import struct
import types

from mutant import load


def reference(*mutations: str) -> types.ModuleType:
    """A fresh copy of the reference engine, with mutant.py's named textual changes."""
    return load(*mutations)


def read_grad(engine: types.ModuleType, change) -> None:
    """Every `.grad` read as `change(tensor, what the reference gives)`."""
    original = engine.Tensor.grad
    engine.Tensor.grad = property(lambda self: change(self, original.fget(self)), original.fset)


def float32(x: float) -> float:
    """`x` rounded to single precision, as an engine storing float32 holds it."""
    return struct.unpack("f", struct.pack("f", x))[0]
