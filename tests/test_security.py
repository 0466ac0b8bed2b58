"""The promises of docs/security.md, each proved against a hostile submission or a hostile
reply; each test is named after the promise it proves."""

import errno
import json
import math
import os
import re
import shutil
import signal
import subprocess
import stat
import sys
import textwrap
import time
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fuzz import budget

from gradcheck.engine import memory
from gradcheck.engine.sandbox import Failure, Worker
from gradcheck.reports import WITHHELD, WITHHELD_BROKEN
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


# --- every malformed reply is a protocol error of its check ---------------------------------------

from gradcheck import oracles  # noqa: E402
from gradcheck.bank import bundled  # noqa: E402
from gradcheck.bank.loader import load_bank  # noqa: E402
from gradcheck.engine import census, handler, run, torch_engine, wire  # noqa: E402
from gradcheck.engine.sandbox import signal_name  # noqa: E402
from gradcheck.grading import compare, grader, localise, verdicts  # noqa: E402
from gradcheck.grading.chain_rule import trace_request  # noqa: E402
from gradcheck.grading.plan import torch_request  # noqa: E402

BANK = {exercise.id: exercise for exercise in load_bank(bundled.bank_dir()).exercises}
DOT = BANK["dot-product-weights"]  # 1-D inputs, gradient checks
LOSS = BANK["logistic-loss-goes-down"]  # a behaviour check with 1-D inputs
GRAPH = BANK["scalar-outputs"]


def _deep(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


_SPECIAL = st.sampled_from([10**400, -10**400, 2**1024, math.nan, math.inf, -0.0, True, None, "",
                            "x" * 30_000, [], {}, [[1.0]], [10**400], {"error": None},
                            _deep(5000)])
HOSTILE = st.one_of(_SPECIAL, _SPECIAL, _SPECIAL, st.integers(), st.floats(),
                    st.text(max_size=8), st.lists(st.floats(), max_size=12),
                    st.dictionaries(st.text(max_size=6), st.integers(), max_size=3))


def _paths(value, prefix=()):
    yield prefix
    items = value.items() if isinstance(value, dict) else enumerate(value) \
        if isinstance(value, list) else ()
    for key, item in items:
        yield from _paths(item, (*prefix, key))


def _mutated(data, honest):
    """`honest` with one place replaced by a hostile value, deleted, or given a stray key."""
    reply = wire.cut_strings(honest, 10**9)  # a copy
    path = data.draw(st.sampled_from(list(_paths(reply))[1:]))
    parent = reply
    for key in path[:-1]:
        parent = parent[key]
    action = data.draw(st.sampled_from(["replace", "replace", "delete", "add"]))
    if action == "replace":
        parent[path[-1]] = data.draw(HOSTILE)
    elif action == "delete":
        del parent[path[-1]]
    elif isinstance(parent[path[-1]], dict):
        parent[path[-1]][data.draw(st.text(max_size=6))] = data.draw(HOSTILE)
    return wire.read_frame(wire_bytes(reply))["reply"] if _encodable(reply) else reply


def wire_bytes(value) -> bytes:
    from gradcheck.engine.worker import pack
    return pack({"reply": value})[4:]


def _encodable(value) -> bool:
    try:
        wire_bytes(value)
    except (ValueError, RecursionError):
        return False
    return True


def _gradients_request(exercise):
    points = exercise.check_points("gradients", 0)
    return {"kind": "gradients", "program": exercise.program.spec(), "points": points,
            "requires_grad": exercise.grad_names}


def _consume(kind, exercise, request, honest, reply):
    """What the grader does with a reply that passed wire.check_reply."""
    program, grad = exercise.program, exercise.grad_names
    tolerance = exercise.tolerance.pair()
    if kind == "gradients":
        expected = oracles.compute(program, request["points"], grad, ["fd", "torch"])
        compare.grade(program, request["points"], grad, expected, reply["results"], tolerance,
                      exercise.convention).message
    elif kind == "graph":
        verdicts.graph(honest, reply, exercise)
    elif kind == "behaviour":
        grader._behaviour_verdict(honest, reply, exercise)
    elif kind == "trace":
        localise.run(localise.locate(program, request["point"], grad, tolerance.analytic),
                     lambda asked: reply if asked["kind"] == "trace"
                     else handler.handle(torch_engine, asked))
    else:
        "; ".join(reply["details"].values())


REQUESTS = {
    "gradients": (DOT, _gradients_request(DOT)),
    "graph": (GRAPH, torch_request(GRAPH, "graph")),
    "behaviour": (LOSS, torch_request(LOSS, "behaviour")),
    "trace": (DOT, trace_request(DOT.program, DOT.values, DOT.grad_names)),
    "inspect": (DOT, {"kind": "inspect"}),
}


@pytest.mark.parametrize("kind", sorted(REQUESTS))
@budget(100)
@given(data=st.data())
def test_a_malformed_reply_is_refused_or_read_without_fault(kind, data):
    """A reply with any value at any key (10**400, a 5000-deep list, a string for a number, a
    key missing or added) either fails wire.check_reply, a ProtocolError blamed on the engine,
    or is read by the grader without an exception."""
    exercise, request = REQUESTS[kind]
    honest = handler.handle(torch_engine, request)
    reply = _mutated(data, honest)
    try:
        wire.check_reply(request, reply)
    except wire.ProtocolError:
        return
    _consume(kind, exercise, request, honest, reply)


@budget(300)
@given(st.one_of(st.binary(max_size=200),
                 st.recursive(st.none() | st.booleans() | st.floats() | st.integers()
                              | st.text(max_size=10),
                              lambda inner: st.lists(inner, max_size=4)
                              | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                              max_leaves=30).map(lambda v: wire_bytes(v)[9:-1]),
                 st.integers(1, 300_000).map(lambda n: b"[" * n + b"]" * n),
                 st.integers(300, 5000).map(lambda n: b"9" * n)))
def test_any_frame_is_an_object_or_a_protocol_error(body):
    """The frame reader: arbitrary bytes, arbitrary JSON, nesting 300,000 deep, a 5000-digit
    integer; it returns a JSON object or raises ProtocolError, nothing else."""
    try:
        frame = wire.read_frame(body)
    except wire.ProtocolError:
        return
    assert isinstance(frame, dict)


def _strings(value):
    """Every string of a JSON value, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *_strings(v)]]
    return []


@budget(300)
@given(st.recursive(st.none() | st.floats() | st.integers() | st.text(),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(), inner, max_size=4), max_leaves=20),
       st.booleans(), st.integers(0, 12))
def test_a_frame_is_walked_whenever_a_string_in_it_may_be_over_the_limit(value, ascii_only,
                                                                         limit):
    """A frame is read without walking it when `may_hold_longer` says no string in it can be
    over the limit: it says so exactly when no string's JSON text is longer than the limit and
    no quote is escaped, whatever the text (escapes, quotes, backslashes, characters of several
    bytes); a string of more characters always has that much text."""
    body = json.dumps({"reply": value}, ensure_ascii=ascii_only).encode()
    strings = _strings(json.loads(body))
    texts = [len(json.dumps(s, ensure_ascii=ascii_only).encode()) - 2 for s in strings]
    said = wire.may_hold_longer(body, limit)
    assert said == (b'\\"' in body or max(texts) > limit)
    assert said or max(map(len, strings)) <= limit


_ANY_CHARACTER = st.text(st.characters() | st.characters(categories=["Cs"]))


@budget(120)
@given(st.recursive(st.none() | st.floats() | _ANY_CHARACTER,
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(_ANY_CHARACTER, inner, max_size=4), max_leaves=20))
def test_every_string_of_a_frame_can_be_written_as_utf8(value):
    """JSON's escapes carry a surrogate alone (`"\\ud800"`), which no report can encode: the
    frame is read with U+FFFD in its place, and a whole pair stays the character it makes."""
    body = json.dumps({"reply": value}).encode()
    strings = _strings(wire.read_frame(body))
    for text in strings:
        text.encode("utf-8")
    assert all(text == original for text, original in zip(strings, _strings(json.loads(body)))
               if not any("\ud800" <= c <= "\udfff" for c in original))


_SURROGATES = """
import sys
sys.path.append({engines!r})
from tiny import Tensor, _Fn, no_grad, tensor
{line}
"""


@pytest.mark.parametrize("line", [
    'raise ImportError("no engine \\ud800 here")',  # every check fails with it
    '_Fn.name = lambda self: "Mul\\udc00Backward0"\nTensor.exp = lambda self: 1 / 0 if False '
    'else (_ for _ in ()).throw(ValueError("exp \\ud83d alone"))',
])
def test_a_surrogate_in_an_engines_text_reaches_every_report_as_a_replacement(tmp_path, line,
                                                                              capsys):
    """A string the engine makes with a surrogate alone (a message, a grad_fn name) is read
    with U+FFFD in its place: the grading ends and writes every report."""
    submission = tmp_path / "surrogates.py"
    submission.write_text(_SURROGATES.format(engines=str(ENGINES), line=line))
    out = _grade_leaky_with(tmp_path, submission, "--html", str(tmp_path / "out" / "r.html"))
    for name in ("results.json", "junit.xml", "summary.md", "r.html"):
        assert (out / name).stat().st_size > 0
    assert "\ufffd" in json.loads((out / "results.json").read_text())["tests"][0]["output"] \
        + (out / "summary.md").read_text()
    assert "\ufffd" in capsys.readouterr().out


_FRAME_WRITER = """
import os, struct, sys
sys.path.append({engines!r})
from forge import _channel
from tiny import Tensor, no_grad, tensor
BODY = {body!r}
_backward = Tensor.backward


def backward(self, *args, **kwargs):
    data = memoryview(struct.pack(">I", len(BODY)) + BODY)
    while data:
        data = data[os.write(_channel(), data):]
    return _backward(self, *args, **kwargs)


Tensor.backward = backward
"""
ONE_POINT = {"kind": "gradients", "program": parse("z = x * y", {"x": None, "y": None}).spec(),
             "points": [{"x": 2.0, "y": 3.0}], "requires_grad": ["x", "y"]}
HUGE = "1" + "0" * 400


@pytest.mark.parametrize("body", [
    b'{"phase": []}', b'{"phase": {"a": 1}}', b"[" * 200_000 + b"]" * 200_000,
    b'{"reply": {"results": [{"value": ' + HUGE.encode() + b', "grads": {"x": 3.0, "y": 2.0}, '
    b'"error": null}]}}',
    b'{"reply": {"results": [{"value": 6.0, "grads": {"x": [' + HUGE.encode() + b'], "y": 2.0}, '
    b'"error": null}]}}',
    b'{"fatal": {"type": [], "message": 1}}', b'{"import_error": 3}', b"\xff\xfe", b"9" * 5000,
    b'{"reply": {"results": [{"value": 6.0, "grads": {"x": 3.0, "y": 2.0}, "error": '
    b'{"type": "E", "message": "' + b"m" * 100_000 + b'", "phase": "backward"}}]}}',
    b'{"reply": {"results": [{"value": 6.0, "grads": {"x": 3.0, "y": 2.0}, "error": null}], "'
    + b"k" * 1_000_000 + b'": 1}}',
    b'{"' + b"k" * 1_000_000 + b'": NaN}',
    b'{"reply": {"results": [{"value": null, "grads": {"x": 3.0, "y": 2.0}, "error": null}]}}',
], ids=["unhashable-phase", "dict-phase", "nested-200k", "huge-value", "huge-grad",
        "fatal-types", "import-error-int", "not-utf8", "5000-digits", "long-message",
        "huge-key", "huge-key-of-the-frame", "value-left-out"])
def test_a_malformed_frame_is_a_protocol_error_of_that_request_and_the_worker_goes_on(
        body, tmp_path):
    submission = tmp_path / "hostile.py"
    submission.write_text(_FRAME_WRITER.format(engines=str(ENGINES), body=body))
    with Worker(submission, import_timeout=10) as worker:
        for _ in range(2):  # after a failure, the next request gets a new worker
            reply = worker.request(ONE_POINT, timeout=10)
            if isinstance(reply, Failure):
                assert reply.kind == "protocol", reply
                assert reply.message.startswith("the engine "), reply
                assert len(reply.message) + len(reply.detail) < 1000
                continue
            # a frame the grader may ignore (a phase not its own), or a reply it may read
            (result,) = reply["results"]
            if result["error"] is None:
                assert result == {"value": 6.0, "grads": {"x": 3.0, "y": 2.0}, "error": None}
            else:
                assert len(result["error"]["message"]) == 1000 + len(wire.CUT)
                assert result["error"]["message"].endswith(wire.CUT)



_VALUE_LEFT_OUT = """
import math, sys
sys.path.append({engines!r})
import gradcheck.engine.handler as handler
from tiny import Tensor, no_grad, tensor


def _exp(self):  # the value wrong, the slope right
    return self._unary("ExpBackward0", math.exp(self.data) + 1.0, math.exp(self.data))


_at = handler._gradients_at


def _without_value(*args):  # the wrong value left out of every gradients reply
    result = _at(*args)
    result["value"] = None
    return result


Tensor.exp = _exp
handler._gradients_at = _without_value
"""


def test_an_answer_without_its_value_is_not_graded_on_its_gradients_alone(tmp_path):
    """A worker's gradients result holds the output's value unless it holds an error: an
    engine whose forward is wrong cannot leave the value out and be graded on its (right)
    gradients. Each such reply is a protocol error of its check."""
    from gradcheck.grading.grader import grade

    submission = tmp_path / "no_value.py"
    submission.write_text(_VALUE_LEFT_OUT.format(engines=str(ENGINES)))
    exercise = bundled.bank_dir() / "06-operations" / "op-exp.exercise.yaml"
    report = grade(submission, [exercise], seed=1, key=None)
    gradient = [r for r in report.results if r.check in ("gradients", "sampled")]
    assert gradient and all(r.status == "failed" and r.score == 0 for r in gradient)
    assert all("malformed reply (value)" in r.message for r in gradient), gradient

_DICTS = """
import os, struct, sys
sys.path.append({engines!r})
from forge import _channel
from tiny import Tensor, no_grad, tensor


def backward(self, *args, **kwargs):  # a reply of 20 million empty objects: 60 MB of JSON
    body = b'{{"reply": [' + b"{{}}," * 20_000_000 + b'{{}}]}}'
    data = memoryview(struct.pack(">I", len(body)) + body)
    while data:
        data = data[os.write(_channel(), data):]
    os._exit(0)


Tensor.backward = backward
"""


def test_a_frame_that_would_take_gigabytes_to_read_is_refused_unread(tmp_path):
    """A frame's JSON is at most 64 MB, but read, 60 MB of `{},` are 1.7 GB of the grader's
    memory: such a frame is refused before json.loads, a protocol error of its request."""
    import tracemalloc

    submission = tmp_path / "dicts.py"
    submission.write_text(_DICTS.format(engines=str(ENGINES)))
    with Worker(submission, import_timeout=10) as worker:
        tracemalloc.start()
        try:
            reply = worker.request(ONE_POINT, timeout=60)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert isinstance(reply, Failure) and reply.kind == "protocol", reply
    assert peak < wire.MAX_READ  # reading it would have taken 1.7 GB


def _reading_peak(body: bytes) -> int:
    """The most memory the grader takes to read `body`, as `Worker` does: the bound on its
    strings' length, then `wire.read_frame` (json.loads, then any walk)."""
    import tracemalloc

    tracemalloc.start()
    try:
        wire.may_hold_longer(body, run.MAX_MESSAGE)
        wire.read_frame(body)
    except wire.ProtocolError:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@settings(max_examples=60, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | _ANY_CHARACTER,
                    lambda inner: st.lists(inner, max_size=30)
                    | st.dictionaries(st.text(max_size=3), inner, max_size=30), max_leaves=400),
       st.booleans())
def test_the_cost_of_reading_a_frame_is_never_below_what_reading_takes(value, ascii_only):
    body = json.dumps({"reply": value}, ensure_ascii=ascii_only,
                      ).encode("utf-8", "surrogatepass")
    assert wire.reading_cost(body) >= _reading_peak(body)


_N = 50_000


@pytest.mark.parametrize("body", [
    b'{"r":[' + b"1234567890123456789," * _N + b"1]}",  # 44 bytes an integer
    b'{"r":[' + '"\u0101",'.encode() * _N + b'"\\ud800"]}',  # strings of 76 bytes, then a walk
    b'{"r":[' + b'"ab",' * _N + b'"' + b"a" * 20_001 + b'"]}',  # a walk for one long string
    b'{"r":[' + b"[]," * _N + b'"\\ud800"]}',  # a walk of many containers
    b"{" + b",".join(b'"%x":0' % i for i in range(_N)) + b',"\\ud800":0}',
    b'ab"' * _N,  # not JSON: refused, but not after splitting it at every quote
], ids=["integers", "wide-strings-and-a-surrogate", "strings-and-a-long-one",
        "containers-and-a-surrogate", "keys-and-a-surrogate", "quotes"])
def test_the_cost_of_reading_the_costliest_shapes_is_never_below_what_reading_takes(body):
    """The shapes that take the most memory per byte of JSON, found by an attacker: each a
    fifth of a frame that the bound must still count at its cost, walk included."""
    assert wire.reading_cost(body) >= _reading_peak(body)


def test_every_signal_has_a_name():
    names = [signal_name(number) for number in range(1, 65)]
    assert names[8] == "SIGKILL" and names[39] == f"SIGRTMIN+{40 - signal.SIGRTMIN}"
    assert len(set(names)) == 64


_SIGNALLER = """
import os, sys
sys.path.append({engines!r})
import tiny
from tiny import Tensor, no_grad


def tensor(data, requires_grad=False):
    if requires_grad and data >= 1:
        os.kill(os.getpid(), int(data))  # the signal numbered by the input
    return tiny.tensor(data, requires_grad=requires_grad)
"""
#: what a worker killed by each signal is, as its default action and Python's handlers make it
_NOT_KILLED = {signal.SIGCHLD, signal.SIGCONT, signal.SIGURG, signal.SIGWINCH,  # ignored
               signal.SIGPIPE,  # ignored by Python
               signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}  # an orphaned group: discarded
_KINDS = {signal.SIGINT: "raised", signal.SIGSTOP: "timeout", signal.SIGXCPU: "cpu",
          signal.SIGXFSZ: "output"}


@pytest.mark.slow
def test_a_worker_killed_by_any_signal_fails_its_request_by_name(tmp_path):
    """Each of the signals 1 to 64 sent to the worker (real-time ones too, which
    signal.Signals does not know) fails only its own request, with a named cause."""
    submission = tmp_path / "signaller.py"
    submission.write_text(_SIGNALLER.format(engines=str(ENGINES)))
    # a signal ignored where this run started (SIGHUP under nohup) is ignored by the worker too;
    # Python's own ignoring of SIGXFSZ is undone for a subprocess (restore_signals)
    not_killed = _NOT_KILLED | {number for number in signal.valid_signals() - {signal.SIGXFSZ}
                                if signal.getsignal(number) == signal.SIG_IGN}
    with Worker(submission, import_timeout=10) as worker:
        for number in range(1, 65):
            request = {**ONE_POINT, "points": [{"x": float(number), "y": 0.0}]}
            worker.crashes = 0  # each signal on its own: no crash limit here
            reply = worker.request(request, timeout=1)
            if number in not_killed:
                assert not isinstance(reply, Failure), (number, reply)
                continue
            assert isinstance(reply, Failure), (number, reply)
            assert reply.kind == _KINDS.get(number, "signal"), (number, reply)
            if reply.kind == "signal":
                assert reply.message == (f"the engine crashed with signal {signal_name(number)} "
                                         "in the forward pass")


#: an engine whose `*` raises with words that would drive a terminal: clear it, set its title,
#: reorder the text (a bidi override), return to the line's start and write over the verdict
_ESCAPING = """
def _mul(self, other):
    raise RuntimeError("\\033[2J\\033]0;title\\007 all passed \\u202edessap\\rforged")


Tensor.__mul__ = _mul
"""


def test_no_command_passes_on_what_an_engine_says_to_the_terminal(tmp_path):
    """What gradcheck prints besides its summary (`explain`, the pytest plugin, `fuzz`) escapes
    an engine's control characters as the summary does: a message is shown, never obeyed."""
    from gradcheck.bank.bundled import reference_path

    engine = tmp_path / "escaping.py"
    engine.write_text((reference_path() / "__init__.py").read_text() + _ESCAPING)
    exercise = str(bundled.bank_dir() / "06-operations" / "op-mul.exercise.yaml")
    runs = {
        "explain": ["-m", "gradcheck", "explain", exercise, "--submission", str(engine),
                    "--seed", "1"],
        "pytest": ["-m", "pytest", "-p", "no:cacheprovider", "-c", "/dev/null", "--rootdir",
                   str(tmp_path), "--submission", str(engine), "--gradcheck-seed", "1", exercise],
        "fuzz": ["-m", "gradcheck", "fuzz", str(engine), "--seed", "1", "--examples", "20",
                 "--ops", "mul", "--max-steps", "0"],
    }
    for name, command in runs.items():
        run = subprocess.run([sys.executable, *command], cwd=tmp_path, capture_output=True,
                             text=True, timeout=600)
        said = run.stdout + run.stderr
        # (a message's first line is shown: the return to the line's start ends it)
        assert "\\x1b[2J\\x1b]0;title\\x07 all passed \\u202edessap" in said, (name, said)
        assert not {"\033", "\007", "\r", "\u202e"} & set(said), name


# --- hidden exercises -------------------------------------------------------------------------

from gradcheck import cli  # noqa: E402
from another_user import PYTHON, UID, as_another_user, open_folder  # noqa: E402,F401

_EXERCISE = """id: {id}
title: {id}
topic: leaks
points: 2
visibility: {visibility}
inputs:
  x: {{value: 0.5}}
program: |
  y = x * {constant} + x.exp()
output: y
checks:
  gradients:
    points: [{{x: 1.5}}, {{x: -0.25}}]
    oracles: [fd, torch]
"""
#: each exercise's constant: what its program, if it leaked, would show
CONSTANTS = {"seen-1": "3.5", "seen-2": "2.25", "seen-3": "1.75", "secret-1": "7.125",
             "secret-2": "6.625", "late-1": "5.375"}


def _leak_bank(folder: Path) -> Path:
    folder.mkdir()
    for number, (name, constant) in enumerate(CONSTANTS.items()):
        visibility = {"seen": "visible", "secret": "hidden", "late": "after_due_date"}[
            name.partition("-")[0]]
        # hidden ones first in the bank's order: the grader still grades the visible first
        (folder / f"{5 - number}-{name}.exercise.yaml").write_text(
            _EXERCISE.format(id=name, visibility=visibility, constant=constant))
    return folder


def _grade_leaky(tmp_path, *options):
    return _grade_leaky_with(tmp_path, ENGINES / "leaky.py", *options)


def _grade_leaky_with(tmp_path, submission, *options):
    """Grade `submission` on the bank of visible and hidden exercises, with every report."""
    bank = _leak_bank(tmp_path / "bank")
    out = tmp_path / "out"
    code = cli.main(["grade", str(submission), "--exercises", str(bank), "--seed",
                     "1", "--results-json", str(out / "results.json"), "--junit",
                     str(out / "junit.xml"), "--markdown", str(out / "summary.md"), *options])
    assert code == 0
    return out


def _assert_nothing_of_the_hidden(text: str) -> None:
    for name, constant in CONSTANTS.items():
        if not name.startswith("seen"):
            assert f"x * {constant}" not in text, name


_SLOW_WHERE_HIDDEN = """
import sys, time
sys.path.append({engines!r})
from tiny import Tensor, no_grad, tensor

_mul = Tensor.__mul__


def slow_mul(self, other):  # 0.3 s wherever a hidden exercise's constant comes in
    if other in ({secrets}):
        time.sleep(0.3)
    return _mul(self, other)


Tensor.__mul__ = slow_mul
"""


def test_no_report_times_a_check_whose_details_are_withheld(tmp_path, capsys):
    """A worker that saw a hidden exercise chooses how long its checks take, so time could
    spell out what it saw: a student-facing report gives the time of the checks it shows
    alone (each withheld check 0 in JUnit), and only `--show-hidden` gives the whole."""
    secrets = ", ".join(c for name, c in CONSTANTS.items() if not name.startswith("seen"))
    submission = tmp_path / "slow.py"
    submission.write_text(_SLOW_WHERE_HIDDEN.format(engines=str(ENGINES), secrets=secrets))
    out = _grade_leaky_with(tmp_path, submission)
    suite = ElementTree.parse(out / "junit.xml").getroot().find("testsuite")
    shown = {case.get("classname"): float(case.get("time")) for case in suite.iter("testcase")}
    assert {name for name, time in shown.items() if time == 0} == {
        name for name in CONSTANTS if not name.startswith("seen")}
    assert float(suite.get("time")) == pytest.approx(sum(shown.values()), abs=0.01)
    data = json.loads((out / "results.json").read_text())
    assert data["execution_time"] == pytest.approx(sum(shown.values()), abs=0.01)
    captured = capsys.readouterr()
    terminal = captured.out
    # nor does the progress on stderr: no line when such an exercise ends (a CI log stamps
    # each line with its time), one for them all once they are graded, without a time
    lines = [line for line in captured.err.splitlines() if re.match(r"gradcheck: \[\d", line)]
    assert [re.sub(r"[\d.]+ s$", "T s", line) for line in lines] == [
        "gradcheck: [1/6] leaks: seen-3 graded, T s", "gradcheck: [2/6] leaks: seen-2 graded, T s",
        "gradcheck: [3/6] leaks: seen-1 graded, T s",
        "gradcheck: [6/6] 3 exercises whose details are withheld graded"], captured.err
    full = tmp_path / "full"
    code = cli.main(["grade", str(submission), "--exercises", str(tmp_path / "bank"), "--seed",
                     "1", "--show-hidden", "--junit", str(full)])
    assert code == 0
    whole = float(ElementTree.parse(full).getroot().find("testsuite").get("time"))
    assert whole > float(suite.get("time")) + 1.0  # three exercises of two slow points at least
    # the terminal's total shows the same time, to its one decimal (JUnit's has three)
    said = float(re.search(r"seed 1, ([\d.]+) s\)", terminal)[1])
    assert said == pytest.approx(float(suite.get("time")), abs=0.051)


def test_no_report_pytest_writes_times_a_check_whose_details_are_withheld(tmp_path):
    """The same through the pytest plugin: JUnit and --durations give a withheld check's time
    as 0, and the time of the checks shown as it is."""
    secrets = ", ".join(c for name, c in CONSTANTS.items() if not name.startswith("seen"))
    submission = tmp_path / "slow.py"
    submission.write_text(_SLOW_WHERE_HIDDEN.format(engines=str(ENGINES), secrets=secrets))
    run = _pytest_grading(tmp_path, submission, _leak_bank(tmp_path / "bank"), "-p",
                          "no:cacheprovider", "--junitxml", str(tmp_path / "junit.xml"),
                          "--durations", "0", "-vv")
    assert run.returncode == 0, run.stdout + run.stderr
    cases = ElementTree.parse(tmp_path / "junit.xml").getroot().iter("testcase")
    times = [(case.get("classname").split("-")[1], float(case.get("time"))) for case in cases]
    assert sorted(kind for kind, time in times if time == 0) == ["late", "secret", "secret"]
    assert [kind for kind, time in times if time > 0] == ["seen"] * 3
    durations = re.findall(r"^([\d.]+)s (?:setup|call|teardown) +\S+-(\w+)-\d\.exercise", run.stdout,
                           re.M)
    assert durations and {name for time, name in durations if float(time) > 0} == {"seen"}


_DROP_AND_TELL = """
import json, math, os, sys
sys.path.append({engines!r})
import gradcheck.engine.handler as handler
from tiny import Tensor, no_grad, tensor

if os.path.exists({drop!r}):  # what a worker before this one left: said where students read
    with open({drop!r}) as f:
        print("found: " + f.read())

_handle = handler.handle


def _dropping(engine, request, progress=None):  # every program it is asked, left for the next
    with open({drop!r}, "a") as f:
        f.write(json.dumps(request.get("program", {{}}).get("source", "")) + "\\n")
    return _handle(engine, request, progress)


def _exp(self):  # a wrong slope, so that every visible check fails and has feedback to give
    return self._unary("ExpBackward0", math.exp(self.data), 2.0)


handler.handle = _dropping
Tensor.exp = _exp
"""


def test_the_feedback_of_visible_exercises_comes_before_any_worker_sees_a_hidden_one(tmp_path,
                                                                                    capsys):
    """A worker whose words reach the student never starts after one that saw a hidden
    exercise: the feedback of the visible exercises' failed checks (the chain-rule walks) is
    worked out by their own worker before the withheld side starts, not by a new one after it
    (which would read, here, every hidden program a withheld worker left on disk, and print it
    where results.json shows it). `gradcheck grade` and `gradcheck.grade` alike."""
    from gradcheck.grading.grader import grade

    drop = tmp_path / "drop.txt"
    submission = tmp_path / "drop_and_tell.py"
    submission.write_text(_DROP_AND_TELL.format(engines=str(ENGINES), drop=str(drop)))
    out = _grade_leaky_with(tmp_path, submission)
    student = [(out / name).read_text() for name in ("results.json", "junit.xml", "summary.md")]
    student.append(capsys.readouterr().out)
    assert "x * 7.125" in drop.read_text()  # the hidden programs were asked, and left there
    for text in student:
        _assert_nothing_of_the_hidden(text)
    data = json.loads(student[0])
    seen = [test for test in data["tests"] if test["visibility"] == "visible"]
    assert len(seen) == 3 and all(test["score"] == 0 for test in seen)
    assert all("(ExpBackward0)" in test["output"] for test in seen)  # each walk found exp
    drop.unlink()
    report = grade(submission, tmp_path / "bank", seed=1)
    assert "x * 3.5" in drop.read_text()
    _assert_nothing_of_the_hidden(report.output)
    assert all("(ExpBackward0)" in r.message for r in report.results if r.status == "failed"
               and r.exercise_id.startswith("seen"))


def test_the_pytest_plugin_grades_the_hidden_exercises_after_every_visible_one(tmp_path):
    """pytest collects the bank in its files' order, here the hidden exercises first: the
    plugin runs their checks last, so that no visible exercise's worker starts after a worker
    that left the hidden programs on disk, and nothing of them reaches pytest's output or
    results.json."""
    drop = tmp_path / "drop.txt"
    submission = tmp_path / "drop_and_tell.py"
    submission.write_text(_DROP_AND_TELL.format(engines=str(ENGINES), drop=str(drop)))
    bank = _leak_bank(tmp_path / "bank")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "gradcheck.plugin", "-p", "no:cacheprovider",
         "-c", "/dev/null", "--rootdir", str(tmp_path), "--submission", str(submission),
         "--gradcheck-seed", "1", "--results-json", str(tmp_path / "results.json"), "-v",
         str(bank)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    ran = [line.split("::")[0] for line in run.stdout.splitlines()
           if "::gradients " in line and line.endswith("%]")]  # -v: each item as it runs
    assert [name.rpartition("-")[0].rpartition("/")[2] for name in ran] == \
        ["3-seen", "4-seen", "5-seen", "0-late", "1-secret", "2-secret"], run.stdout
    assert "x * 7.125" in drop.read_text()  # the hidden programs were asked, and left there
    for text in (run.stdout, run.stderr, (tmp_path / "results.json").read_text()):
        _assert_nothing_of_the_hidden(text)
    seen = [test for test in json.loads((tmp_path / "results.json").read_text())["tests"]
            if test["visibility"] == "visible"]
    assert len(seen) == 3 and all("(ExpBackward0)" in test["output"] for test in seen)


_DROP_WHERE_HIDDEN = """
import json, os, sys
sys.path.append({engines!r})
import gradcheck.engine.handler as handler
from tiny import Tensor, no_grad, tensor

FOUND = ""
if os.path.exists({drop!r}):  # what a worker before this one left: said where students read
    with open({drop!r}) as f:
        FOUND = f.read()
    print("found: " + FOUND)

_handle = handler.handle


def _dropping(engine, request, progress=None):
    source = json.dumps(request.get("program", {{}}).get("source", ""))
    if any(f"x * {{constant}}" in source for constant in {secrets!r}):
        with open({drop!r}, "a") as f:  # a hidden program, left for the next worker
            f.write(source + "\\n")
        raise RuntimeError("a hidden check fails, so that --ff runs it first")
    if FOUND:
        raise RuntimeError("found: " + FOUND)
    return _handle(engine, request, progress)


handler.handle = _dropping
"""


def _drop_where_hidden(tmp_path: Path) -> tuple[Path, Path]:
    """A submission that leaves every hidden program it is asked in a file and fails their
    checks, and whose worker, finding the file, says what it holds in every reply and print;
    and that file."""
    drop = tmp_path / "drop.txt"
    submission = tmp_path / "drop_where_hidden.py"
    secrets = [c for name, c in CONSTANTS.items() if not name.startswith("seen")]
    submission.write_text(_DROP_WHERE_HIDDEN.format(engines=str(ENGINES), drop=str(drop),
                                                    secrets=secrets))
    return submission, drop


def _pytest_grading(tmp_path: Path, submission: Path, bank: Path, *options: str
                    ) -> subprocess.CompletedProcess[str]:
    """pytest -v grading `bank`, with its cache provider (the cache in tmp_path)."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "gradcheck.plugin", "-c", "/dev/null",
         "--rootdir", str(tmp_path), "--submission", str(submission), "--gradcheck-seed", "1",
         "--results-json", str(tmp_path / "results.json"), "-v", *options, str(bank)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)


def _ran(run: subprocess.CompletedProcess[str]) -> list[str]:
    """The exercises whose gradients check ran, in the order they ran (-v: each as it runs)."""
    return [line.split("::")[0].rpartition("-")[0].rpartition("/")[2]
            for line in run.stdout.splitlines() if "::gradients " in line and line.endswith("%]")]


@pytest.mark.parametrize("reorder", ["--ff", "--nf"])
def test_the_pytest_plugin_grades_the_hidden_exercises_last_whatever_reorders_them(tmp_path,
                                                                                   reorder):
    """pytest's cache provider reorders the items after every plugin's
    pytest_collection_modifyitems: --ff puts the checks that failed last time first (here the
    hidden ones, which the submission fails), --nf the files that are new (here the hidden ones,
    added after a first run). The hidden checks still run last, so that the visible
    exercises' worker never finds the hidden programs a worker left on disk (it read them into
    results.json before)."""
    submission, drop = _drop_where_hidden(tmp_path)
    bank = _leak_bank(tmp_path / "bank")
    later = tmp_path / "later"
    if reorder == "--nf":  # the first run knows the visible exercises only
        later.mkdir()
        for file in bank.iterdir():
            if "seen" not in file.name:
                file.rename(later / file.name)
    first = _pytest_grading(tmp_path, submission, bank)
    assert first.returncode in (0, 1), first.stdout + first.stderr
    if reorder == "--nf":
        for file in later.iterdir():
            file.rename(bank / file.name)
    drop.unlink(missing_ok=True)  # only what this run's workers leave
    run = _pytest_grading(tmp_path, submission, bank, reorder)
    assert _ran(run) == ["3-seen", "4-seen", "5-seen", "0-late", "1-secret", "2-secret"], \
        run.stdout
    assert "x * 7.125" in drop.read_text()  # the hidden programs were asked, and left there
    results = (tmp_path / "results.json").read_text()
    for text in (run.stdout, run.stderr, results):
        _assert_nothing_of_the_hidden(text)
    seen = [test for test in json.loads(results)["tests"] if test["visibility"] == "visible"]
    assert len(seen) == 3 and all(test["status"] == "passed" for test in seen)


_HIDDEN_FIRST = """
import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):  # after every hook of collection: the hidden checks first
    session.items.sort(key=lambda item: "-seen-" in item.nodeid)
    return (yield)
"""


def test_a_visible_exercise_graded_after_a_hidden_one_shows_nothing_but_its_points(tmp_path):
    """Should the hidden checks run first all the same (here a plugin reorders the items as
    they are run), the visible exercises graded after them are graded as hidden ones: by the
    worker of the withheld side, their details withheld, with a note that says why. A worker of
    the shown side would find the hidden programs a worker left on disk (it read them into
    results.json before)."""
    from gradcheck.reports import WITHHELD_AFTER

    submission, drop = _drop_where_hidden(tmp_path)
    (tmp_path / "hidden_first.py").write_text(_HIDDEN_FIRST)
    run = _pytest_grading(tmp_path, submission, _leak_bank(tmp_path / "bank"), "-p",
                          "hidden_first")
    assert _ran(run) == ["0-late", "1-secret", "2-secret", "3-seen", "4-seen", "5-seen"], \
        run.stdout
    assert "x * 7.125" in drop.read_text()
    results = (tmp_path / "results.json").read_text()
    for text in (run.stdout, run.stderr, results):
        _assert_nothing_of_the_hidden(text)
    data = json.loads(results)
    seen = [test for test in data["tests"] if test["visibility"] == "visible"]
    assert len(seen) == 3 and all(test["output"] == WITHHELD_AFTER for test in seen)
    assert WITHHELD_AFTER in run.stdout and "found: " not in data.get("output", "")


def test_a_grader_driven_exercise_by_exercise_withholds_a_visible_one_after_a_hidden_one(
        tmp_path):
    """`Grader.grade_exercise`, a hidden exercise first: the visible one after it is graded as
    a hidden one, and no report shows what its worker said."""
    from gradcheck.grading.grader import Grader
    from gradcheck.reports import WITHHELD_AFTER, shown_message

    submission, drop = _drop_where_hidden(tmp_path)
    exercises = {e.id: e for e in load_bank(_leak_bank(tmp_path / "bank")).exercises}
    with Grader(submission, seed=1, hidden_feedback=False) as grader:
        first = grader.grade_exercise(exercises["seen-1"])
        grader.grade_exercise(exercises["secret-1"])
        after = grader.grade_exercise(exercises["seen-2"])
        assert "x * 7.125" in drop.read_text()
        output = grader.output
    assert "found: " not in output and "x * 7.125" not in shown_message(after[0])
    assert [shown_message(r) for r in after] == [WITHHELD_AFTER]
    assert [r.status for r in first] == ["passed"] and not first[0].after_withheld
    assert [r.after_withheld for r in after] == [True]


def test_a_hidden_exercise_that_cannot_be_loaded_shows_students_nothing_of_it(tmp_path, capsys):
    """A broken file's problems quote its program and hints. They reach students only when the
    file says it is visible; a hidden one's, or one whose visibility cannot be read (a YAML
    error), are withheld as a hidden exercise's messages are, and the instructor sees them."""
    bank = tmp_path / "bank"
    bank.mkdir()
    (bank / "a-seen.exercise.yaml").write_text(
        _EXERCISE.format(id="a-seen", visibility="visible", constant="3.5"))
    (bank / "b-secret.exercise.yaml").write_text(
        _EXERCISE.format(id="b-secret", visibility="hidden", constant="secret_weight"))
    (bank / "c-unreadable.exercise.yaml").write_text(
        _EXERCISE.format(id="c-unreadable", visibility="hidden", constant="secret_two")
        + "  \tbroken: [\n")
    out = tmp_path / "out"
    reports = ["--results-json", str(out / "results.json"), "--junit", str(out / "junit.xml"),
               "--markdown", str(out / "summary.md"), "--html", str(out / "report.html")]
    assert cli.main(["grade", "reference", "--exercises", str(bank), "--seed", "1",
                     *reports]) == 0
    student = [(out / name).read_text() for name in ("results.json", "junit.xml", "summary.md",
                                                     "report.html")]
    student.append(capsys.readouterr().out)
    for text in student:
        assert "secret_weight" not in text and "secret_two" not in text
    tests = {test["name"]: test for test in json.loads(student[0])["tests"]}
    broken = [test for name, test in tests.items() if "could not be loaded" in name]
    assert len(broken) == 2 and all(test["visibility"] == "hidden"
                                    and test["output"] == WITHHELD_BROKEN for test in broken)
    # its module: the topic it says where it is read, else its folder (docs/grading.md)
    assert [test["tags"] for test in broken] == [["leaks"], ["bank"]]
    assert cli.main(["grade", "reference", "--exercises", str(bank), "--seed", "1",
                     "--show-hidden"]) == 0
    instructor = capsys.readouterr().out
    assert "secret_weight' is not defined" in instructor and "c-unreadable" in instructor


def test_no_word_of_a_worker_that_saw_a_hidden_exercise_reaches_the_student(tmp_path, capsys):
    out = _grade_leaky(tmp_path)
    student = [(out / name).read_text() for name in ("results.json", "junit.xml", "summary.md")]
    student.append(capsys.readouterr().out)  # the terminal report
    for text in student:
        _assert_nothing_of_the_hidden(text)
    # the worker of the visible exercises leaks only what students may see, and is shown
    assert "x * 1.75" in student[0] and "could not be imported" in student[0]
    data = json.loads(student[0])
    hidden = [test for test in data["tests"] if test["visibility"] != "visible"]
    assert len(hidden) == 3 and all(test["output"] == WITHHELD for test in hidden)


def test_the_exercises_not_visible_are_graded_last_by_a_fresh_worker(tmp_path):
    """The instructor's report shows what the second worker said: its log begins afresh (a new
    HOME) and holds no visible program, which were all graded before it started."""
    out = _grade_leaky(tmp_path, "--show-hidden")
    instructor = (out / "junit.xml").read_text()
    withheld = instructor[instructor.index("--- the worker of the exercises not visible"):]
    withheld = withheld[:withheld.index("</system-out>")]
    assert "x * 5.375" in withheld and "could not be imported" in withheld
    assert all(f"x * {constant}" not in withheld
               for name, constant in CONSTANTS.items() if name.startswith("seen"))


def test_a_shown_worker_after_a_withheld_one_is_forked_by_a_new_zygote():
    """A worker of the shown side after one of the withheld side (the feedback `grade --watch`
    works out once every score is known) is forked by a zygote that no worker of the withheld
    side could reach."""
    from gradcheck.grading.workers import Workers

    exercises = {e.id: e for e in load_bank(bundled.bank_dir()).exercises}
    hidden, shown = exercises["nothing-tracked"], exercises["chain-rule-z"]
    workers = Workers(ENGINES / "tiny.py", {})
    try:
        zygotes = []
        for exercise in (shown, hidden, shown):
            workers.for_exercise(exercise, exercise is shown).request({"kind": "inspect"},
                                                                     timeout=10)
            zygotes.append(workers._zygote._proc.pid)
        assert zygotes[0] == zygotes[1] != zygotes[2]  # both sides of a grading, then anew
        assert not census.start_time(zygotes[1])  # the old one is gone
    finally:
        workers.close()


def test_a_fresh_worker_of_the_shown_side_starts_only_before_the_withheld_side_does():
    """The new worker that runs a visible random programs check's smallest program alone
    (`Workers.fresh`) is forked beside the shown side's worker, by the same zygote, and is
    refused once a worker of the withheld side has started."""
    from gradcheck.grading.workers import Workers

    exercises = {e.id: e for e in load_bank(bundled.bank_dir()).exercises}
    hidden, shown = exercises["nothing-tracked"], exercises["chain-rule-z"]
    workers = Workers(ENGINES / "tiny.py", {})
    try:
        current = workers.for_exercise(shown, True)
        current.request({"kind": "inspect"}, timeout=10)
        fresh = workers.fresh()
        assert fresh is not None
        with fresh:
            assert fresh.request({"kind": "inspect"}, timeout=10) == current.request(
                {"kind": "inspect"}, timeout=10)
            assert fresh.pid != current.pid
        assert workers.for_exercise(shown, True) is current  # the side's worker goes on
        workers.for_exercise(hidden, False).request({"kind": "inspect"}, timeout=10)
        assert workers.fresh() is None
    finally:
        workers.close()


@as_another_user
def test_no_fresh_worker_beside_a_worker_of_another_user():
    """A worker of a user of its own begins by ending every process of that user: a fresh one
    beside it would end it, so there is none."""
    from gradcheck.grading.workers import Workers

    shown = next(e for e in load_bank(bundled.bank_dir()).exercises if e.id == "chain-rule-z")
    workers = Workers(ENGINES / "tiny.py", {"user": UID, "python": PYTHON})
    try:
        worker = workers.for_exercise(shown, True)
        assert not isinstance(worker.request({"kind": "inspect"}, timeout=30), Failure)
        assert workers.fresh() is None
        assert not isinstance(worker.request({"kind": "inspect"}, timeout=30), Failure)
    finally:
        workers.close()


@as_another_user
@pytest.mark.slow
def test_hardened_no_word_of_a_worker_that_saw_a_hidden_exercise_reaches_the_student(
        tmp_path, capsys):
    """The same, with the worker as a user of its own (the bank and reports stay root's)."""
    out = _grade_leaky(tmp_path, "--worker-user", str(UID), "--worker-python", PYTHON)
    for name in ("results.json", "junit.xml", "summary.md"):
        _assert_nothing_of_the_hidden((out / name).read_text())
    _assert_nothing_of_the_hidden(capsys.readouterr().out)


_DROPPER = """
import json, os, sys
sys.path.append({engines!r})
import gradcheck.engine.handler as handler
from tiny import Tensor, no_grad, tensor

_handle = handler.handle


def _dropping(engine, request, progress=None):  # every program it is asked, left for others
    with open({drop!r}, "a") as f:
        f.write(json.dumps(request.get("program", {{}}).get("source", "")) + "\\n")
    os.chmod({drop!r}, 0o666)
    return _handle(engine, request, progress)


handler.handle = _dropping
"""
_PICKER = """
import os, sys
sys.path.append({engines!r})
from tiny import Tensor, no_grad, tensor

if os.path.exists({drop!r}):
    with open({drop!r}) as f:
        raise ImportError("found: " + f.read())
"""


@as_another_user
@pytest.mark.slow
def test_a_worker_user_leaves_nothing_in_the_shared_folders_for_the_next_submission(
        open_folder):
    """grade-batch -j 1 --worker-user UID: a submission writes every program it is asked, the
    hidden ones too, into a file of /tmp that any user may read; the next submission, graded as
    the same uid, looks for it at import and would show it in its import error. Every file of
    that uid in the folders anyone may write is removed when its worker stops."""
    from gradcheck.grading import answer_key

    bank = _leak_bank(open_folder / "bank")
    key = open_folder / "key.json"
    answer_key.build(load_bank(bank), 5, key)
    drop = f"/tmp/gradcheck-test-{os.getpid()}-drop"
    folder = open_folder / "submissions"
    folder.mkdir()
    (folder / "a_dropper.py").write_text(_DROPPER.format(engines=str(ENGINES), drop=drop))
    (folder / "b_picker.py").write_text(_PICKER.format(engines=str(ENGINES), drop=drop))
    out = open_folder / "out"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gradcheck", "grade-batch", str(folder), "--out", str(out),
             "-j", "1", "--key", str(key), "--exercises", str(bank), "--worker-user", str(UID),
             "--worker-python", PYTHON], capture_output=True, text=True, timeout=300)
        picked = (out / "b_picker.py" / "results.json").read_text()
        assert json.loads(picked)["score"] == 12, (picked[:2000], done.stderr)
        assert not os.path.exists(drop)
    finally:
        if os.path.exists(drop):
            os.unlink(drop)


# --- bounded time: crashes in a row, and the whole submission's time ----------------------------

from gradcheck.engine.sandbox import MAX_CRASHES  # noqa: E402


def test_after_three_crashes_in_a_row_the_worker_is_not_restarted():
    """Not for the exercise under way; the next one starts it once more (`move_on`), and
    stops it again at its first crash."""
    with Worker(ENGINES / "os_exit.py", import_timeout=10) as worker:
        replies = [worker.request(ONE_POINT, timeout=5) for _ in range(MAX_CRASHES + 2)]
        assert [reply.kind for reply in replies] == ["exit"] * MAX_CRASHES + ["crashes"] * 2
        assert replies[-1].message == ("the engine crashed 3 times in a row; not restarted for "
                                       "this exercise")
        assert worker.starts == MAX_CRASHES
        worker.move_on()
        replies = [worker.request(ONE_POINT, timeout=5) for _ in range(2)]
        assert [reply.kind for reply in replies] == ["exit", "crashes"]
        assert worker.starts == MAX_CRASHES + 1


def test_a_crash_in_one_operation_costs_only_the_exercises_that_use_it(tmp_path):
    """An engine whose sigmoid kills its process fails op-sigmoid's three checks, three crashes
    in a row; the exercise after it starts the engine again and passes, live and with a key."""
    bank = tmp_path / "bank"
    bank.mkdir()
    for name in ("op-sigmoid", "op-tanh"):
        shutil.copy(bundled.bank_dir() / "06-operations" / f"{name}.exercise.yaml", bank)
    source = (bundled.reference_path() / "__init__.py").read_text()
    crashing = "    def sigmoid(self) -> Tensor:\n"
    assert crashing in source
    engine = tmp_path / "engine.py"
    engine.write_text(source.replace(crashing, crashing + "        import os; os._exit(3)\n"))
    key = tmp_path / "key.json"
    assert cli.main(["key", "build", "--exercises", str(bank), "--seed", "1",
                     "--out", str(key)]) == 0
    for keyed in (None, key):
        report = grader.grade(engine, bank, seed=1, key=keyed)
        status = {(r.exercise_id, r.check): (r.status, r.message) for r in report.results}
        sigmoid = [message for (exercise, _), (_, message) in status.items()
                   if exercise == "op-sigmoid"]
        assert len(sigmoid) == 3 and all("exited with code 3" in text for text in sigmoid)
        assert {state for (exercise, _), (state, _) in status.items()
                if exercise == "op-tanh"} == {"passed"}


def test_a_reply_between_crashes_starts_the_count_again(tmp_path):
    """Only crashes in a row count: an engine that crashes on every other request is
    restarted each time."""
    submission = tmp_path / "every_other.py"
    submission.write_text(f"import os, sys\nsys.path.append({str(ENGINES)!r})\n"
                          "from tiny import Tensor, no_grad, tensor\n"
                          "_backward = Tensor.backward\n"
                          "def backward(self, *args, **kwargs):\n"
                          "    if self.data < 0:\n        os._exit(3)\n"
                          "    return _backward(self, *args, **kwargs)\n"
                          "Tensor.backward = backward\n")
    crashing = {**ONE_POINT, "points": [{"x": -2.0, "y": 3.0}]}
    with Worker(submission, import_timeout=10) as worker:
        for _ in range(MAX_CRASHES + 1):
            assert worker.request(crashing, timeout=5).kind == "exit"
            assert not isinstance(worker.request(ONE_POINT, timeout=5), Failure)
        assert worker.starts == MAX_CRASHES + 2


def test_the_whole_submission_is_graded_within_its_total_timeout(tmp_path):
    """--total-timeout bounds the grading of a submission that hangs on every request: the
    check it hangs in fails with the bound named, every later one at once."""
    bank = tmp_path / "bank"
    bank.mkdir()
    for number in range(4):
        (bank / f"{number}.exercise.yaml").write_text(_EXERCISE.format(
            id=f"hang-{number}", visibility="visible", constant="2.5"))
    results = tmp_path / "results.json"
    assert cli.main(["grade", str(ENGINES / "hang_forward.py"), "--exercises", str(bank),
                     "--seed", "1", "--timeout", "30", "--total-timeout", "3",
                     "--results-json", str(results)]) == 0
    data = json.loads(results.read_text())
    outputs = [test["output"] for test in data["tests"]]
    assert data["execution_time"] < 30  # one exercise's --timeout is 30 s
    assert outputs[0] == ("the submission's time ran out in the forward pass: grading it may take "
                          "3 s in all (--total-timeout); this check and those after it are not "
                          "graded")
    assert all(output.startswith("not run: the submission's time ran out: grading it may take "
                                 "3 s") for output in outputs[1:])


# --- output amplification ----------------------------------------------------------------------

from gradcheck.grading.results import CheckResult, GradeReport  # noqa: E402
from gradcheck.reports import MAX_SHOWN, shown_message  # noqa: E402
from gradcheck.reports.gradescope import results_json  # noqa: E402

_LOUD = """
import sys
import textwrap
import time
sys.path.append({engines!r})
import gradcheck.engine.handler as handler
from tiny import Tensor, no_grad, tensor

_handle = handler.handle


def loud(engine, request, progress=None):
    reply = _handle(engine, request, progress)
    for result in reply.get("results", []):
        result["error"] = {{"type": "Loud", "message": "?" * 1_000_000, "phase": "backward"}}
    return reply


handler.handle = loud
"""


def test_no_string_from_the_worker_makes_a_report_large(tmp_path):
    """A 1 MB error message is cut where it is read ("… (cut)"), and every check's message in
    every report is cut again: the reports stay small however long the engine's texts."""
    submission = tmp_path / "loud.py"
    submission.write_text(_LOUD.format(engines=str(ENGINES)))
    out = _grade_leaky_with(tmp_path, submission)
    text = (out / "results.json").read_text()
    data = json.loads(text)
    assert len(text) < 200_000
    assert all(len(test["output"]) <= MAX_SHOWN + len(wire.CUT) for test in data["tests"])
    assert len((out / "summary.md").read_text()) < 200_000
    long = CheckResult(exercise_id="e", check="gradients", title="t", score=0.0, max_score=1.0,
                       status="failed", message="why " * 50_000)
    assert shown_message(long) == long.message[:MAX_SHOWN] + wire.CUT


def test_results_json_stays_within_a_megabyte_whatever_the_checks_say():
    long = "why " * 50_000
    report = GradeReport(submission="e.py", seed=1, output="!" * 3_000_000, results=[
        CheckResult(exercise_id=f"e{i}", check="gradients", title="t", score=0.0,
                    max_score=1.0, status="failed", message=long) for i in range(2000)])
    text = json.dumps(results_json(report))
    assert len(text.encode()) < 1_000_000


# --- escaped processes -------------------------------------------------------------------------

from processes import alive, gone_within  # noqa: E402

_ESCAPER = """
import os, sys, time
sys.path.append({engines!r})
from tiny import Tensor, no_grad, tensor


def backward(self, *args, **kwargs):
    child = os.fork()
    if child == 0:
        os.setsid()  # a session of its own; its parent, the worker, exits before it
        with open({pidfile!r}, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(60)
        os._exit(0)
    while not (os.path.exists({pidfile!r}) and os.path.getsize({pidfile!r})):
        time.sleep(0.001)
    os._exit(3)


Tensor.backward = backward
"""


def _escaper(tmp_path: Path) -> tuple[Path, Path]:
    pidfile = tmp_path / "escaped.pid"
    submission = tmp_path / "escaper.py"
    submission.write_text(_ESCAPER.format(engines=str(ENGINES), pidfile=str(pidfile)))
    return submission, pidfile


def _escaped(pidfile: Path) -> int:
    for _ in range(200):
        if pidfile.exists() and pidfile.read_text():
            return int(pidfile.read_text())
        time.sleep(0.01)
    raise AssertionError("the engine's child never started")


def test_a_child_that_outlives_its_worker_comes_back_to_the_grader_and_is_killed(tmp_path):
    """setsid(), then the worker exits first: the child is no longer in the worker's session
    or tree; the grader, a child subreaper, adopts it and kills it."""
    submission, pidfile = _escaper(tmp_path)
    with Worker(submission, import_timeout=10) as worker:
        reply = worker.request(ONE_POINT, timeout=5)
        assert reply.kind == "exit"
        escaped = _escaped(pidfile)
        assert gone_within(escaped, 2)
        assert not [pid for pid in census.adopted(0) if alive(pid)]


_PARENT = """
import os, time
if os.fork() == 0:
    os.setsid()
    with open({pidfile!r}, "w") as f:
        f.write(str(os.getpid()))
time.sleep(60)
"""

_HANDED_OVER = """
import os, subprocess, sys, time
from gradcheck.engine import census
from gradcheck.engine.worker import adopt_orphans

adopt_orphans()
parent = subprocess.Popen([sys.executable, "-c", {parent!r}], start_new_session=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while not os.path.exists({pidfile!r}) or not open({pidfile!r}).read():
    time.sleep(0.01)
child = int(open({pidfile!r}).read())


def parent_of(pid):
    return int(open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[1])


def orphans():
    found = census.adopted(0)
    if parent.returncode is None:  # it dies now, handing its child over before the scan
        parent.kill()
        while parent_of(child) != os.getpid():
            time.sleep(0.001)
        parent.returncode = -9
    return found


census.kill_all(-1, orphans)
census.reap(census.adopted(0))
"""


def test_a_child_handed_over_as_its_parent_dies_during_the_kill_is_killed_too(tmp_path):
    """kill_all's race, made certain: an adopted orphan dies after the orphans were asked and
    before /proc was scanned, so its child, handed over to the subreaper meanwhile, is in
    neither; a later pass finds it (a grading killed at its timeout: its worker dies of it while
    the job slot's server sweeps)."""
    pidfile = tmp_path / "child.pid"
    script = _HANDED_OVER.format(pidfile=str(pidfile),
                                 parent=_PARENT.format(pidfile=str(pidfile)))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert not alive(_escaped(pidfile))


_UNREAPED = """
import ctypes, os, sys, time
sys.path.append({engines!r})
from tiny import Tensor, no_grad, tensor
_backward = Tensor.backward


def backward(self, *args, **kwargs):
    ctypes.CDLL(None).prctl(36, 0)  # the worker is a child subreaper no more
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:  # its parent exits: it is the grader's now, 300 processes and all
            with open({pidfile!r}, "w") as f:
                f.write(str(os.getpid()))
            for _ in range(300):
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
            time.sleep(60)
        os._exit(0)
    time.sleep(5)  # the worker itself goes on as if nothing happened
    return _backward(self, *args, **kwargs)


Tensor.backward = backward
"""


def test_the_orphans_the_grader_adopts_count_against_the_workers_limits(tmp_path):
    """A worker that stops being a subreaper, then daemonises a child: the daemon is reparented
    to the grader, outside the worker's session and tree, and still counts against its limits
    while the worker runs (here: 300 processes), then dies with it."""
    pidfile = tmp_path / "daemon.pid"
    submission = tmp_path / "unreaped.py"
    submission.write_text(_UNREAPED.format(engines=str(ENGINES), pidfile=str(pidfile)))
    with Worker(submission, import_timeout=10) as worker:
        reply = worker.request(ONE_POINT, timeout=10)
        assert isinstance(reply, Failure) and reply.kind == "tasks", reply
        assert gone_within(_escaped(pidfile), 2)
        assert not [pid for pid in census.adopted(0) if alive(pid)]


@as_another_user
def test_no_process_of_a_worker_user_outlives_its_worker(tmp_path, open_folder):
    """As a user of its own, every process of that uid is killed before the uid serves
    anyone else: a daemon that escaped even the grader's census does not survive."""
    submission, pidfile = _escaper(open_folder)
    pidfile.touch(mode=0o666)  # root's: a file of the worker's user would go with its worker
    pidfile.chmod(0o666)
    with Worker(submission, import_timeout=10, python=PYTHON, user=UID) as worker:
        assert worker.request(ONE_POINT, timeout=5).kind == "exit"
        assert gone_within(_escaped(pidfile), 2)
    assert census.processes_of(UID) == set()
    # a process of that uid left by someone else (a grader killed before its end) is killed
    # before a worker of that uid starts
    import subprocess
    stray = subprocess.Popen(["sleep", "60"], user=UID, group=UID, extra_groups=[])
    try:
        with Worker(ENGINES / "tiny.py", import_timeout=10, python=PYTHON, user=UID) as worker:
            assert not isinstance(worker.request(ONE_POINT, timeout=5), Failure)
            assert stray.wait(timeout=2) == -signal.SIGKILL
    finally:
        stray.kill()


_SABOTEUR = """
import os, signal, sys, time
sys.path.append({engines!r})
from tiny import Tensor, no_grad, tensor


def backward(self, *args, **kwargs):
    if os.fork() == 0:  # a daemon that outlives the worker, then kills all of its uid
        os.setsid()
        time.sleep(0.5)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                os.kill(-1, signal.SIGKILL)  # every process of this uid but itself
            except OSError:
                pass
            time.sleep(0.01)
        os._exit(0)
    os._exit(3)


Tensor.backward = backward
"""


@as_another_user
@pytest.mark.slow
def test_a_batch_never_lends_a_uid_to_the_next_submission_while_anything_of_it_runs(
        open_folder):
    """grade-batch -j 1 --worker-user UID: a submission leaves a daemon that kills every
    process of its uid; the next submission, graded as the same uid, still earns every
    point."""
    from grading_samples import write_bank

    from gradcheck.grading import answer_key

    bank = write_bank(open_folder / "bank")
    key = open_folder / "key.json"
    answer_key.build(load_bank(bank), 5, key)
    folder = open_folder / "submissions"
    folder.mkdir()
    (folder / "a_saboteur.py").write_text(_SABOTEUR.format(engines=str(ENGINES)))
    (folder / "b_honest.py").write_text(f"import sys\nsys.path.append({str(ENGINES)!r})\n"
                                        "from tiny import *\n")
    out = open_folder / "out"
    done = subprocess.run(
        [sys.executable, "-m", "gradcheck", "grade-batch", str(folder), "--out", str(out), "-j",
         "1", "--key", str(key), "--exercises", str(bank), "--worker-user", str(UID),
         "--worker-python", PYTHON], capture_output=True, text=True, timeout=300)
    rows = {line.split(",")[0]: line.split(",")
            for line in (out / "gradebook.csv").read_text().splitlines()[1:]}
    assert rows["b_honest.py"][1] == rows["b_honest.py"][2], (rows, done.stderr)
    assert census.processes_of(UID) == set()


# --- oracle values never reach the worker -------------------------------------------------------

from gradcheck.bank.tolerances import Tolerance  # noqa: E402
from gradcheck.grading.chain_rule import walk  # noqa: E402


def test_localisation_sends_the_worker_no_gradient_of_torchs():
    """Run alone, a vector operation gets `probe_gradient`, not torch's gradient there; a
    correct backward is still judged right (every operation right alone), and the finding is
    that the gradients were combined wrongly."""
    program = parse("u = v * w\nt = u.exp() * 3.0\ny = (t * v).sum()", {"v": 3, "w": 3})
    point = {"v": [0.5, -1.25, 2.0], "w": [1.5, 0.75, -0.5]}
    truth = walk(program, point, ["v", "w"])
    asked = []

    def ask(request):
        asked.append(request)
        reply = handler.handle(torch_engine, request)
        if request["kind"] == "trace":  # no retain_grad, and wrong gradients of the inputs
            for node in reply["nodes"]:
                node["grad"] = ([2 * g for g in node["grad"]]
                                if program.nodes[node["id"]].op == "input" else None)
        return reply

    finding = localise.run(localise.locate(program, point, ["v", "w"], Tolerance(1e-9, 1e-9),
                                           truth), ask)
    assert finding is not None and finding.kind == "combine", finding
    sent = [step["backward"].get("gradient") for request in asked if request["kind"] ==
            "behaviour" for step in request["steps"]]
    assert [3] == [len(g) for g in sent if g is not None][:1]
    oracle = [list(g) for g in truth.grads.values() if isinstance(g, list)]
    assert sent and not any(g in oracle for g in sent if g is not None)
    assert all(g is None or g == localise.probe_gradient(len(g)) for g in sent)


# --- memory outside every process's pages ------------------------------------------------------

_MEMFD_HOG = """
import os, sys, time
sys.path.append({engines!r})
from tiny import Tensor, no_grad, tensor


def backward(self, *args, **kwargs):
    kept = []  # each written, never mapped: in no RSS, PSS or RLIMIT_DATA; under RLIMIT_FSIZE
    for n in range({files}):
        kept.append(os.memfd_create(str(n)))
        os.write(kept[-1], b"x" * 1_900_000)
    time.sleep(30)


Tensor.backward = backward
"""


def test_memory_held_in_a_memfd_counts_against_the_limit(tmp_path):
    submission = tmp_path / "memfd_hog.py"
    submission.write_text(_MEMFD_HOG.format(engines=str(ENGINES), files=100))
    with Worker(submission, import_timeout=10, memory_mb=128, use_cgroup=False) as worker:
        reply = worker.request(ONE_POINT, timeout=20)
    assert isinstance(reply, Failure) and reply.kind == "memory", reply
    assert reply.message == "the engine ran out of memory (limit 128 MB) in backward()"


#: memory held in files no process holds open or maps, each under RLIMIT_FSIZE (2 MB), 200 MB in
#: all: written and closed in /dev/shm; the same in a folder there the engine then makes
#: unreadable; System V segments, written, then detached
_CLOSED_HOGS = {
    "closed files": """
    for n in range(100):
        with open(f"/dev/shm/{tag}-{{n}}", "wb") as f:
            f.write(b"x" * 2_000_000)
""",
    "a hidden folder": """
    os.mkdir("/dev/shm/{tag}")
    for n in range(100):
        with open(f"/dev/shm/{tag}/{{n}}", "wb") as f:
            f.write(b"x" * 2_000_000)
    os.chmod("/dev/shm/{tag}", 0)
""",
    "System V segments": """
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    for n in range(10):
        ident = libc.shmget(0, 20_000_000, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
        where = libc.shmat(ident, None, 0)
        ctypes.memset(where, 120, 20_000_000)
        libc.shmdt(ctypes.c_void_p(where))
""",
    "System V semaphores": """
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    for n in range(70):  # 2.2 million semaphores of 64 bytes: 143 MB of the kernel's memory
        libc.semget(0, 32_000, 0o1600)
""",
}
_CLOSED_HOG = """
import os, sys, time
sys.path.append({engines!r})
from tiny import Tensor, no_grad, tensor


def backward(self, *args, **kwargs):
{hog}
    time.sleep(30)


Tensor.backward = backward
"""


def _segments_of(uid: int) -> list[str]:
    """The System V segments, queues and semaphore sets `uid` made."""
    found = []
    for kind, column in (("shm", "shmid"), ("msg", "msqid"), ("sem", "semid")):
        with open(f"/proc/sysvipc/{kind}") as f:
            names, *rows = [line.split() for line in f.read().splitlines()]
        found += [f"{kind} {row[names.index(column)]}" for row in rows
                  if int(row[names.index("cuid")]) == uid]
    return found


@pytest.mark.parametrize("user", [None, pytest.param(UID, marks=as_another_user)],
                         ids=["default", "worker user"])
@pytest.mark.parametrize("hog", sorted(_CLOSED_HOGS))
def test_memory_left_in_closed_files_and_segments_counts_and_is_removed(hog, user, tmp_path,
                                                                        open_folder):
    """Memory that no process of the worker's holds or maps any more is counted by the poll
    all the same (here alone, as where no cgroup can be made): the worker is killed, the failure
    names the limit, and nothing of it is left once the worker stopped."""
    tag = f"gradcheck-test-{os.getpid()}-{hog.replace(' ', '-')}"
    submission = open_folder / "closed_hog.py"
    submission.write_text(_CLOSED_HOG.format(engines=str(ENGINES),
                                             hog=_CLOSED_HOGS[hog].format(tag=tag)))
    segments = set(_segments_of(user or os.geteuid()))
    options = {"user": user, "python": PYTHON} if user is not None else {}
    with Worker(submission, import_timeout=10, memory_mb=128, use_cgroup=False,
                **options) as worker:
        reply = worker.request(ONE_POINT, timeout=20)
        assert isinstance(reply, Failure) and reply.kind == "memory", reply
        assert reply.message == "the engine ran out of memory (limit 128 MB) in backward()"
        assert [p for p in Path("/dev/shm").glob(f"{tag}*")] == []
        assert set(_segments_of(user or os.geteuid())) <= segments



#: An engine (tiny's) that tries, at import, what a filesystem it serves itself would take (a
#: user and mount namespace, a mount, a userfaultfd), and a socket pair; and what an engine may
#: need (a thread, a child process). It exports what came of each as the module's `tried`.
_MOUNTER = """
import ctypes, json, os, shutil, socket, subprocess, sys, threading
sys.path.append({engines!r})
from tiny import Tensor, no_grad, tensor  # noqa: F401

libc = ctypes.CDLL(None, use_errno=True)
numbers = {numbers!r}


def call(name, *args):
    return [libc.syscall(ctypes.c_long(numbers[name]), *args), ctypes.get_errno()]


os.mkdir("m")
tried = {{"unshare": call("unshare", ctypes.c_ulong(0x10020000)),  # a user and mount namespace
         "mount": call("mount", b"none", os.path.abspath("m").encode(), b"tmpfs",
                       ctypes.c_ulong(0), None),
         "userfaultfd": call("userfaultfd", ctypes.c_ulong(0)),
         "clone3": call("clone3", None, ctypes.c_ulong(0)),
         "unshare -Urm": subprocess.run(["unshare", "-Urm", "true"], capture_output=True
                                        ).returncode if shutil.which("unshare") else 1}}
try:
    socket.socketpair()
    tried["socketpair"] = "made"
except OSError as error:
    tried["socketpair"] = error.errno
made = []
thread = threading.Thread(target=made.append, args=("thread",))
thread.start()
thread.join()
made.append(subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True,
                           text=True).stdout.strip())
tried["made"] = made
print("tried", json.dumps(tried), flush=True)
"""


@pytest.mark.parametrize("another", [False, True], ids=["as the grader's user", "as another user"])
def test_a_worker_mounts_nothing_and_makes_no_namespace_so_serves_itself_no_filesystem(
        open_folder, another):
    """A worker that could make a user and mount namespace of its own could serve a FUSE
    filesystem and never answer it: a page of a file mapped from it, read through
    /proc/PID/mem, held that process's memory map, and the grader's poll of its memory waited
    on it past every time limit (a red team's). Mounts, namespaces, userfaultfd and socket pairs
    fail with EACCES, clone3 with ENOSYS, in what the worker starts too; threads and children
    are made as ever."""
    if another and PYTHON is None:
        pytest.skip("needs root and a Python 3.11 that another user may run")
    from gradcheck.engine.syscalls import MACHINES

    machine = MACHINES[os.uname().machine]
    numbers = {"userfaultfd": machine.refused[3], "unshare": machine.refused[4],
               "mount": machine.refused[6], "clone3": machine.clone3}
    engine = open_folder / "mounter.py"
    engine.write_text(_MOUNTER.format(engines=str(ENGINES), numbers=numbers))
    program = parse("z = x * x", {"x": None})
    request = {"kind": "gradients", "program": program.spec(), "points": [{"x": 3.0}],
               "requires_grad": ["x"]}
    with Worker(engine, user=UID if another else None,
                python=PYTHON if another else sys.executable) as worker:
        reply = worker.request(request, timeout=30)
        said = worker.output
    assert not isinstance(reply, Failure), reply
    assert reply["results"][0]["grads"] == {"x": 6.0}  # graded as ever
    tried = json.loads(said.split("tried ", 1)[1].splitlines()[0])
    assert tried == {"unshare": [-1, errno.EACCES], "mount": [-1, errno.EACCES],
                     "userfaultfd": [-1, errno.EACCES], "clone3": [-1, errno.ENOSYS],
                     "unshare -Urm": 1, "socketpair": errno.EACCES, "made": ["thread", "42"]}


_KEYS = """
import ctypes, sys
sys.path.append({engines!r})
from tiny import Tensor, no_grad, tensor

_libc = ctypes.CDLL(None, use_errno=True)
_persistent = _libc.syscall(250, 22, -1, -2)  # keyctl(KEYCTL_GET_PERSISTENT, own uid)
for ring, name in ((-4, b"user"), (-5, b"user-session"), (-3, b"session"), (_persistent, b"kept")):
    _libc.syscall(248, b"user", b"{tag}-" + name, b"y = x * 7.125", 13, ring)  # add_key
"""
_FIND_KEYS = """
import ctypes, os, sys
if len(sys.argv) > 1:
    os.setgid(int(sys.argv[1])); os.setuid(int(sys.argv[1]))
libc = ctypes.CDLL(None, use_errno=True)
persistent = libc.syscall(250, 22, -1, -2)
print([name for ring, name in ((-4, "user"), (-5, "user-session"), (-3, "session"),
                               (persistent, "kept"))
       if libc.syscall(250, 10, ring, b"user", b"{tag}-" + name.encode(), 0) > 0])
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the test's system call numbers")
@pytest.mark.parametrize("user", [None, pytest.param(UID, marks=as_another_user)],
                         ids=["default", "worker user"])
def test_no_key_a_worker_adds_to_a_keyring_outlives_it(user, open_folder):
    """The kernel's keyrings outlive a worker (the persistent one for days): a worker that saw
    a hidden exercise could leave its program there for the next. Every key it added is gone
    once it stops, and what it added to its session keyring never was the grader's."""
    tag = f"gradcheck-test-{os.getpid()}"
    submission = open_folder / "keys.py"
    submission.write_text(_KEYS.format(engines=str(ENGINES), tag=tag))
    find = [sys.executable, "-c", _FIND_KEYS.replace("{tag}", tag)] + (
        [str(user)] if user is not None else [])
    options = {"user": user, "python": PYTHON} if user is not None else {}
    with Worker(submission, import_timeout=10, **options) as worker:
        assert not isinstance(worker.request(ONE_POINT, timeout=20), Failure)
        if user is None:  # the grader's own keyrings, but its session's, held the keys meanwhile
            assert subprocess.run(find, capture_output=True, text=True).stdout.strip() == \
                "['user', 'user-session', 'kept']"
    assert subprocess.run(find, capture_output=True, text=True).stdout.strip() == "[]"


def test_every_change_to_a_file_in_a_memory_filesystem_shows_in_the_next_count():
    """The poll walks the memory filesystems again only when one's count of used blocks or
    inodes changed: a file made empty, grown in place, shrunk and removed each changes one, and
    shows in the very next count."""
    held = memory.Held(os.geteuid(), own=False)
    path = Path("/dev/shm") / f"gradcheck-test-{os.getpid()}-counted"
    base = held.bytes([])
    try:
        with open(path, "wb") as f:
            assert held.bytes([]) == base + memory.INODE
            for size in (300_000, 900_000):
                f.write(b"x" * (size - f.tell()))
                f.flush()
                assert held.bytes([]) >= base + size
            f.truncate(4096)
            assert base + 4096 <= held.bytes([]) < base + 300_000
    finally:
        path.unlink()
    assert held.bytes([]) == base


from gradcheck.engine import cgroup  # noqa: E402

_GIVER = """
import os, sys, time
sys.path.append({engines!r})
from tiny import Tensor, no_grad, tensor

_backward = Tensor.backward


def backward(self, *args, **kwargs):
    for n in range(100):  # 200 MB in files of another user's, which the poll does not count
        with open(f"/dev/shm/{tag}-{{n}}", "wb") as f:
            os.fchown(f.fileno(), 61999, 61999)
            f.write(b"x" * 2_000_000)
    time.sleep(2)
    return _backward(self, *args, **kwargs)


Tensor.backward = backward
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may give a file to another user")
def test_memory_a_worker_gives_away_is_killed_at_its_cgroup_limit(tmp_path):
    """A root worker of the grader's own user (default mode) writes 200 MB into /dev/shm files
    it gives to another uid: no poll can tell them from that user's, but the kernel charges them
    to the worker's cgroup, and kills it at the limit. Without a cgroup the engine gets away
    with it."""
    made = cgroup.create(1 << 20)
    if isinstance(made, str):
        pytest.skip(made)
    made.close()
    tag = f"gradcheck-test-{os.getpid()}-giver"
    submission = tmp_path / "giver.py"
    submission.write_text(_GIVER.format(engines=str(ENGINES), tag=tag))
    try:
        with Worker(submission, import_timeout=10, memory_mb=128) as worker:
            assert "cgroup" in worker.memory_limit and "could not join" not in worker.memory_limit
            reply = worker.request(ONE_POINT, timeout=20)
        assert isinstance(reply, Failure) and reply.kind == "memory", reply
        assert reply.message == "the engine ran out of memory (limit 128 MB) in backward()"
        assert reply.detail.startswith("the kernel killed it at the limit of its cgroup (v")
        for path in Path("/dev/shm").glob(f"{tag}*"):
            path.unlink()
        with Worker(submission, import_timeout=10, memory_mb=128, use_cgroup=False) as worker:
            assert worker.memory_limit == ("128 MB, polled by the grader (no cgroup: not asked "
                                           "for)")
            assert not isinstance(worker.request(ONE_POINT, timeout=20), Failure)
    finally:
        for path in Path("/dev/shm").glob(f"{tag}*"):
            path.unlink()


@pytest.mark.parametrize("version", [1, 2])
def test_a_cgroup_of_either_version_kills_at_its_limit_and_says_so(version, tmp_path):
    """A process that joins the cgroup through the grader's descriptor, as the worker does, and
    writes past the limit in a closed /dev/shm file is killed by the kernel, which counts it."""
    made = cgroup.create(64 << 20, versions=(version,))
    if isinstance(made, str):
        pytest.skip(made)
    target = Path("/dev/shm") / f"gradcheck-test-{os.getpid()}-cgroup-v{version}"
    fd = made.join_descriptor()
    try:
        hog = subprocess.run(
            [sys.executable, "-c", "import os, sys\n"
             "os.write(int(sys.argv[1]), str(os.getpid()).encode()); os.close(int(sys.argv[1]))\n"
             "with open(sys.argv[2], 'wb') as f:\n"
             "    for _ in range(100): f.write(b'x' * (1 << 20))\n",
             str(fd), str(target)], pass_fds=(fd,), timeout=60)
        assert hog.returncode == -signal.SIGKILL
        assert made.oom_kills() == 1
        assert 0 < target.stat().st_size <= 64 << 20
    finally:
        os.close(fd)
        target.unlink(missing_ok=True)
        made.close()
    assert not made.path.exists()


_CGROUP_LEAVER = """
import json, os, sys
sys.path.append({engines!r})
from memory_hog_shared import Tensor, no_grad, tensor

mine = next(line.split(":")[2] for line in open("/proc/self/cgroup").read().splitlines()
            if ":memory:" in line or line.startswith("0::"))
tried = {{}}
for name, text in (("memory.limit_in_bytes", "-1"), ("memory.max", "max"),
                   ("../cgroup.procs", str(os.getpid()))):
    for root in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        path = os.path.normpath(root + mine + "/" + name)
        if os.path.exists(path):
            try:
                with open(path, "w") as f:
                    f.write(text)
                tried[path] = "written"
            except OSError as error:
                tried[path] = error.strerror
print(json.dumps([mine, tried]))
"""


@as_another_user
def test_a_worker_of_another_user_joins_its_cgroup_and_is_held_to_it(open_folder):
    """It is in its cgroup from its import on, may neither raise the limit nor leave, and
    shared memory past the limit ends it."""
    made = cgroup.create(1 << 20)
    if isinstance(made, str):
        pytest.skip(made)
    made.close()
    submission = open_folder / "leaver.py"
    submission.write_text(_CGROUP_LEAVER.format(engines=str(ENGINES)))
    with Worker(submission, import_timeout=10, memory_mb=128, python=PYTHON,
                user=UID) as worker:
        assert worker.request({"kind": "inspect"}, timeout=10)["missing"]
        mine, tried = json.loads(worker.output.splitlines()[1])
        assert str(worker._cgroup.path).endswith(mine)
        assert tried and set(tried.values()) == {"Permission denied"}, tried
        reply = worker.request(ONE_POINT, timeout=20)
    assert isinstance(reply, Failure) and reply.kind == "memory", reply


_LIMITS_REPORT = """
import json, os, resource, sys
sys.path.append({engines!r})
from tiny import Tensor, no_grad, tensor

print(json.dumps({{name: resource.getrlimit(getattr(resource, "RLIMIT_" + name))
                  for name in ("CORE", "CPU", "DATA", "FSIZE", "NOFILE", "MSGQUEUE", "NPROC")}}))
"""


@pytest.mark.parametrize("user", [None, pytest.param(UID, marks=as_another_user)],
                         ids=["default", "worker user"])
def test_the_worker_runs_under_the_limits_the_doc_names(user, open_folder):
    """Each kernel limit of docs/security.md's table, as the submission itself reads it: no core
    dump, CPU, memory, file size, open files, no POSIX message queue; and, as a user of its own,
    at most max_tasks processes."""
    submission = open_folder / "limits.py"
    submission.write_text(_LIMITS_REPORT.format(engines=str(ENGINES)))
    options = {"user": user, "python": PYTHON} if user is not None else {}
    with Worker(submission, import_timeout=10, memory_mb=512, **options) as worker:
        assert not isinstance(worker.request({"kind": "inspect"}, timeout=10), Failure)
        limits = json.loads(worker.output.splitlines()[1])
    assert limits["CORE"] == [0, 0]
    assert limits["CPU"] == [3600, 3605]
    assert limits["DATA"] == [512 << 20] * 2
    assert limits["FSIZE"] == [2_000_000] * 2
    assert limits["NOFILE"] == [128, 128]
    assert limits["MSGQUEUE"] == [0, 0]
    assert (limits["NPROC"] == [256, 256]) == (user is not None)


def test_a_worker_may_hold_few_files_open(tmp_path):
    """RLIMIT_NOFILE: 1,600 memfds of 1.9 MB each cannot be held; the engine's own error says
    so."""
    submission = tmp_path / "many_files.py"
    submission.write_text(f"import os, sys\nsys.path.append({str(ENGINES)!r})\n"
                          "from tiny import Tensor, no_grad, tensor\n"
                          "_kept = [os.memfd_create(str(n)) for n in range(1600)]\n")
    with Worker(submission, import_timeout=10) as worker:
        reply = worker.request(ONE_POINT, timeout=5)
    assert isinstance(reply, Failure) and reply.kind == "import", reply
    assert "Too many open files" in reply.message


_HIDER = """
import os, sys, time
sys.path.append({engines!r})
from tiny import Tensor, no_grad, tensor

if os.fork() == 0:  # a daemon in a session of its own, outside the worker's
    os.setsid()
    with open({pidfile!r}, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(120)
    os._exit(0)


def backward(self, *args, **kwargs):
    time.sleep(120)  # past the submission's time: its grader is killed, not closed


Tensor.backward = backward
"""


@pytest.mark.slow
def test_a_grader_killed_at_the_submission_timeout_leaves_no_process_behind(tmp_path):
    """grade-batch in default mode: the grading is killed with its session at
    --submission-timeout, its worker dies with it, and the worker's daemon, adopted by the
    job slot's server, is killed before the next submission."""
    from grading_samples import write_bank

    from gradcheck.grading import answer_key

    bank = write_bank(tmp_path / "bank")
    key = tmp_path / "key.json"
    answer_key.build(load_bank(bank), 5, key)
    folder = tmp_path / "submissions"
    folder.mkdir()
    pidfile = tmp_path / "daemon.pid"
    (folder / "hider.py").write_text(_HIDER.format(engines=str(ENGINES), pidfile=str(pidfile)))
    done = subprocess.run(
        [sys.executable, "-m", "gradcheck", "grade-batch", str(folder), "--out",
         str(tmp_path / "out"), "-j", "1", "--key", str(key), "--exercises", str(bank),
         "--timeout", "60", "--submission-timeout", "4"], capture_output=True, text=True,
        timeout=300)
    assert "timeout" in (tmp_path / "out" / "gradebook.csv").read_text(), done.stderr
    assert gone_within(_escaped(pidfile), 2)


# --- no network: a worker opens no socket -------------------------------------------------------

#: An engine (tiny's) that tries, at import, to reach a server with a socket of every family a
#: submission could use, and from a child process, and to make an io_uring (which can make
#: sockets without socket()); it exports what came of each as the module's `tried`.
_KNOCKER = """
import ctypes, json, socket, subprocess, sys
sys.path.append({engines!r})
from tiny import Tensor, no_grad, tensor  # noqa: F401

tried = {{}}
for family in (socket.AF_INET, socket.AF_INET6, socket.AF_UNIX):
    try:
        socket.socket(family).close()
        tried[family.name] = "made"
    except OSError as error:
        tried[family.name] = error.errno
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
except OSError:
    pass
subprocess.run([sys.executable, "-c", "import socket; "
                "socket.create_connection(('127.0.0.1', {port}), timeout=2)"])
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
tried["io_uring"] = [libc.syscall(ctypes.c_long(425), ctypes.c_ulong(4), params),
                     ctypes.get_errno()]
print("tried", json.dumps(tried), flush=True)
"""


@pytest.mark.parametrize("another", [False, True], ids=["as the grader's user", "as another user"])
def test_a_worker_opens_no_socket_so_reaches_no_server_and_no_dask_scheduler(open_folder,
                                                                             another):
    """A submission that could open sockets could reach what its machine reaches; on a Dask
    cluster, the scheduler, which runs what any client sends as the Dask worker's user (root):
    a submission of a user of its own became root and rewrote every grade. Its worker's
    `socket()` and `io_uring_setup()` fail, in what it starts too, and a server listening on the
    loopback address is never reached."""
    if another and PYTHON is None:
        pytest.skip("needs root and a Python 3.11 that another user may run")
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    reached = []
    threading.Thread(target=lambda: reached.append(server.accept()), daemon=True).start()
    engine = open_folder / "knocker.py"
    engine.write_text(_KNOCKER.format(engines=str(ENGINES), port=server.getsockname()[1]))
    program = parse("z = x * x", {"x": None})
    request = {"kind": "gradients", "program": program.spec(), "points": [{"x": 3.0}],
               "requires_grad": ["x"]}
    try:
        with Worker(engine, user=UID if another else None,
                    python=PYTHON if another else sys.executable) as worker:
            reply = worker.request(request, timeout=30)
            said = worker.output
    finally:
        server.close()
    assert not isinstance(reply, Failure), reply
    assert reply["results"][0]["grads"] == {"x": 6.0}  # graded as ever
    assert reached == []
    tried = json.loads(said.split("tried ", 1)[1].splitlines()[0])
    assert tried == {"AF_INET": 13, "AF_INET6": 13, "AF_UNIX": 13, "io_uring": [-1, 13]}


def test_a_scratch_folder_whose_maker_dies_while_removing_it_is_swept_later(tmp_path):
    """A Dask worker lost, or a grading stopped, as it removes its folder: the lock file goes
    last, so whenever its maker dies, what is left still holds a lock the next sweep can take.
    A folder whose lock went first (the order of a plain removal is the directory's) and whose
    maker then died was never removed: a cluster machine kept an unpacked submission."""
    from gradcheck.engine import scratch

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    removing = textwrap.dedent("""
        import os, sys
        from gradcheck.engine import scratch
        folder = scratch.make(scratch.SUBMISSIONS)
        for part in ("in", "out", "in/engine", "out/reports"):
            (folder / part).mkdir()
        for name in "abcdefgh":
            for part in ("", "in/", "in/engine/", "out/", "out/reports/"):
                (folder / f"{part}{name}").write_text(name)
        removals, broken = [], []
        def watched(real):
            def call(path, *args, **kwargs):
                real(path, *args, **kwargs)
                removals.append(path)
                others = [e for e in os.listdir(folder) if e != scratch.LOCK] \
                    if os.path.isdir(folder) else []
                if others and not os.path.exists(folder / scratch.LOCK):
                    broken.append(str(path))
                if len(removals) == int(sys.argv[1]):
                    os._exit(0)  # its maker dies here
            return call
        os.unlink, os.rmdir = watched(os.unlink), watched(os.rmdir)
        scratch.remove(folder)
        print(broken)
    """)
    done = subprocess.run([sys.executable, "-c", removing, "0"], env=env, capture_output=True,
                          text=True, check=True, cwd=Path(__file__).parents[1])
    assert done.stdout.strip() == "[]"  # the lock stayed while anything else was there
    subprocess.run([sys.executable, "-c", removing, "7"], env=env, check=True,
                   cwd=Path(__file__).parents[1])
    [left] = [path for path in tmp_path.iterdir() if path.name.startswith(scratch.SUBMISSIONS)]
    swept = subprocess.run([sys.executable, "-c", "from gradcheck.engine import scratch; "
                            "print(len(scratch.sweep(scratch.SUBMISSIONS)))"], env=env,
                           capture_output=True, text=True, check=True,
                           cwd=Path(__file__).parents[1])
    assert swept.stdout.strip() == "1" and not left.exists()


@pytest.mark.skipif(PYTHON is None, reason="needs root and a Python 3.11 that another user may run")
def test_a_worker_users_uid_that_another_gradcheck_holds_is_refused_not_shared(tmp_path):
    """A worker of a user of its own has every process and file of its uid removed as it
    starts: two gradings of one machine with the same uid at the same time broke each other,
    and the first failed as a fault of gradcheck's. The second is refused, saying what to do;
    once the first ends, the uid grades again."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the machine's folder of uid locks
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import time\nfrom gradcheck.engine import uids\n"
         f"with uids.held([{UID} + 1]):\n    print('held', flush=True)\n    time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, env=env)
    assert holder.stdout.readline() == "held\n"
    bank = tmp_path / "bank"
    bank.mkdir()
    (bank / "seen-1.exercise.yaml").write_text(
        _EXERCISE.format(id="seen-1", visibility="visible", constant="3.5"))
    grade = [sys.executable, "-m", "gradcheck", "grade", str(ENGINES / "tiny.py"), "--exercises",
             str(bank), "--worker-python", PYTHON, "--worker-user"]
    batch = [sys.executable, "-m", "gradcheck", "grade-batch", str(ENGINES / "independent"),
             "--exercises", str(bank), "--out", str(tmp_path / "out"), "-j", "2",
             "--worker-python", PYTHON, "--worker-user", str(UID)]
    try:
        refused = subprocess.run([*grade, str(UID + 1)], capture_output=True, text=True, env=env)
        assert refused.returncode == 2, refused.stderr
        assert (f"--worker-user {UID + 1}: uid {UID + 1} is in use by another gradcheck on this "
                "machine") in refused.stderr
        assert "give each grading that runs at the same time uids of its own" in refused.stderr
        refused = subprocess.run(batch, capture_output=True, text=True, env=env)  # UID and UID+1
        assert refused.returncode == 2 and f"uid {UID + 1} is in use" in refused.stderr
        assert not (tmp_path / "out" / "gradebook.csv").exists()
    finally:
        holder.kill()
        holder.wait()
    graded = subprocess.run([*grade, str(UID + 1)], capture_output=True, text=True, env=env)
    assert graded.returncode == 0 and "total 2/2" in graded.stdout, graded.stderr
