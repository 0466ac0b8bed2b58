"""The promises of docs/security.md, each proved against a hostile submission or a hostile
reply; each test is named after the promise it proves."""

import math
import os
import signal
import stat
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradcheck.engine.sandbox import Failure, Worker
from gradcheck.program.language import parse
from gradcheck.program.ops import OPS, fold_constant

ENGINES = Path(__file__).parent / "engines"


# --- the worker needs the standard library only ---------------------------------------------------


def test_a_worker_interpreter_with_the_standard_library_alone_grades_constants(tmp_path):
    """`python -I -S` has no site-packages (no numpy): a program whose constants are folded is
    still answered, by the worker, right."""
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    bare.chmod(bare.stat().st_mode | stat.S_IXUSR)
    program = parse("z = x * exp(0.5) + y / 3.0 + 2.0 ** 0.5", {"x": None, "y": None})
    request = {"kind": "gradients", "program": program.spec(), "points": [{"x": 1.0, "y": 2.0}],
               "requires_grad": ["x", "y"]}
    with Worker(ENGINES / "tiny.py", python=str(bare), import_timeout=10) as worker:
        reply = worker.request(request, timeout=10)
    assert not isinstance(reply, Failure), reply
    (result,) = reply["results"]
    assert result["error"] is None
    assert result["value"] == pytest.approx(math.exp(0.5) + 2 / 3 + math.sqrt(2), rel=1e-15)
    assert result["grads"] == pytest.approx({"x": math.exp(0.5), "y": 1 / 3}, rel=1e-15)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(OPS)), st.floats(-1e3, 1e3), st.floats(-10, 10))
def test_constants_fold_without_numpy_to_what_numpy_gives(name, a, b):
    op = OPS[name]
    if op.kind == "select":
        return
    args = (a, b)[:op.arity]
    with np.errstate(all="ignore"):
        expected = float(op.array(np, *map(np.float64, args))) if op.kind != "reduction" else a
    if math.isfinite(expected):
        assert fold_constant(op, *args) == pytest.approx(expected, rel=1e-15, abs=0)  # numpy's
        # own tanh, sin and cos may differ from libm's in the last bit
    else:
        with pytest.raises(ValueError, match="of constants gives"):
            fold_constant(op, *args)
