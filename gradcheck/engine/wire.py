"""What may cross the worker's socket: the keys of each request and the shape of each reply,
checked on both sides. A request carries programs and inputs, never an expected answer; a reply
is read only after :func:`check_reply`, since code in the worker can write anything to the socket.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

from gradcheck.program.language import Program, ProgramError, free_names, spec_program
from gradcheck.program.ops import PIECES
from gradcheck.program.session import (
    ACTIONS,
    EXPECT_KINDS,
    GRAD_FIELDS,
    WARNINGS,
    parse_expect,
    target_name,
)

GRAPH_FIELDS = ("grad_fn", "is_leaf", "requires_grad", "value")
#: an error record's keys: the first three always, the rest when it came from a use of the engine
ERROR_KEYS = {"type", "kinds", "message", "phase", "piece", "node", "absent"}
#: builtin classes kept of an exception's (`kinds`; BaseException is the 4th of most)
MAX_KINDS = 8
#: what a request may carry: programs and inputs, never an expected answer.
REQUEST_KEYS = {
    "inspect": {"kind"},
    "gradients": {"kind", "program", "points", "requires_grad"},
    "graph": {"kind", "program", "point", "requires_grad", "names"},
    "behaviour": {"kind", "program", "point", "requires_grad", "steps"},
    "trace": {"kind", "program", "point", "requires_grad"},
    # second order: one reply per point and direction, shaped as a gradients reply
    "hessian": {"kind", "program", "points", "requires_grad", "vector"},
}


#: characters kept of any string a worker sends (a traceback, a message, a grad_fn name): the
#: grader copies them into reports, so a long one would be copied into every check's message.
MAX_TEXT = 20_000
CUT = "… (cut)"
#: bytes of the grader's memory a frame may take once read (`reading_cost`): a frame's JSON
#: is bounded (worker.MAX_FRAME), but 64 MB of `{},` are 21 million dicts, 1.8 GB
MAX_READ = 384 << 20
_LARGEST = int(sys.float_info.max)  # a JSON integer past this has no float: 10**400


class ProtocolError(Exception):
    """An engine returned something the protocol does not allow (a str where a number goes)."""


class RequestError(ValueError):
    """A malformed request: a bug in the grader, never the engine's fault."""


class Sealed(dict):  # type: ignore[type-arg]
    """A request that cannot change once built (a grading's plan builds them, and a batch's job
    slot builds them once for every grading it forks): so its checked frame can be kept
    (`gradcheck.engine.sandbox.frame`). Its values are the builder's, never changed either."""

    def _sealed(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a sealed request cannot change; build another")

    __setitem__ = __delitem__ = __ior__ = _sealed  # type: ignore[assignment]
    update = pop = popitem = clear = setdefault = _sealed  # type: ignore[assignment]


def check_request(request: Mapping[str, Any]) -> Program | None:
    """Raise RequestError unless `request` is well formed; returns its parsed program."""
    _need(isinstance(request, Mapping), "a request is a mapping")
    kind = request.get("kind")
    _need(kind in REQUEST_KEYS, lambda: f"unknown request kind {kind!r}")
    extra = set(request) - REQUEST_KEYS[kind]
    missing = REQUEST_KEYS[kind] - set(request)
    _need(not extra and not missing, lambda: f"a {kind} request has the keys "
          f"{sorted(REQUEST_KEYS[kind])}; got {sorted(request)}")
    if kind == "inspect":
        return None
    try:
        program = spec_program(request["program"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RequestError(f"the request's program does not parse: {exc}") from None
    grad = request["requires_grad"]
    _need(isinstance(grad, list) and set(grad) <= set(program.inputs),
          lambda: f"requires_grad must list inputs of the program, not {grad!r}")
    points = request["points"] if "points" in request else [request["point"]]
    _need(isinstance(points, list), "points must be a list")
    for point in points:
        _check_point(program, point)
    if kind == "graph":
        _need(isinstance(request["names"], list) and set(request["names"]) <= set(program.names),
              lambda: f"graph names must be variables of the program, not {request['names']!r}")
    if kind == "behaviour":
        _check_steps(program, request["steps"])
    if kind == "hessian":
        vector = request["vector"]
        _need(vector is None or isinstance(vector, Mapping) and set(vector) == set(grad),
              "vector gives a number (or list) for each input that requires grad, or is null")
        for name in vector or {}:
            _check_value(program, name, vector[name])
    return program


def _need(condition: bool, message: str | Callable[[], str]) -> None:
    """Raise RequestError with `message` unless `condition`. A message that costs more to write
    than the check (a point's repr) is a function, called only on failure: the grader and the
    worker check every point of every request."""
    if not condition:
        raise RequestError(message if isinstance(message, str) else message())


def _is_json_number(x: Any) -> bool:
    return type(x) is float or type(x) is int and -_LARGEST <= x <= _LARGEST


def _all_numbers(values: list[Any]) -> bool:
    """Whether every item of `values` is a JSON number (`_is_json_number`): a list of floats,
    the common case on every request and reply, is told by one pass in C."""
    kinds = set(map(type, values))
    return kinds <= _FLOAT or kinds <= _NUMBER and all(map(_is_json_number, values))


_FLOAT, _NUMBER = {float}, {float, int}


#: a surrogate code point alone: JSON's escapes can make one (`"\\ud800"`), UTF-8 cannot
#: carry it, so no report could be written with it in
_SURROGATE = re.compile("[\ud800-\udfff]")
#: a JSON escape that may make one (or half of a pair, which json.loads joins)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def cut(text: str, limit: int) -> str:
    """`text`, or its first `limit` characters and a note that the rest was cut; a surrogate
    alone in it is made U+FFFD."""
    text = _SURROGATE.sub("\ufffd", text)
    return text if len(text) <= limit else text[:limit] + CUT


def read_frame(body: bytes) -> dict[str, Any]:
    """The JSON object a worker sent, every string in it cut to MAX_TEXT characters and
    writable as UTF-8 (`cut`); a ProtocolError for anything else (not UTF-8 JSON, nested
    deeper than json reads, not an object), so that no frame, however made, raises anything
    but that in the grader."""
    if reading_cost(body) > MAX_READ:
        raise ProtocolError(f"frame that would take more than {MAX_READ >> 20} MB to read")
    try:
        frame = json.loads(body)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise ProtocolError("frame that is not JSON") from None
    if not isinstance(frame, dict):
        raise ProtocolError("frame that is not a JSON object")
    if not may_hold_longer(body, MAX_TEXT) and not _SURROGATE_ESCAPE.search(body):
        return frame
    return cut_strings(frame, MAX_TEXT)


def reading_cost(body: bytes) -> int:
    """At least the bytes json.loads takes to read this JSON text, and `cut_strings` to walk
    it, from counts of its bytes: an array or object (80; measured 67 and 75), an element (a
    comma, 56: a float 36, a 19-digit integer 44, and a list grows by an eighth), an object's
    entry (a colon, 120; 154 with its string key counted), a string (two quotes, 80: one of
    two characters takes 51, of one character outside Latin-1 76), each byte of the text
    again (strings and long integers), four times if any string may hold a character beyond
    Latin-1 (a byte past ASCII, or an escape: then every character of its string may take
    four), and 4 kB for the decoder itself. A comma, colon, quote or bracket inside a string
    only makes the bound larger."""
    wide = 4 if b"\\u" in body or not body.isascii() else 1
    return (80 * (body.count(b"[") + body.count(b"{")) + 56 * body.count(b",")
            + 120 * body.count(b":") + 40 * body.count(b'"') + wide * len(body) + 4096)


def may_hold_longer(body: bytes, limit: int) -> bool:
    """Whether a string of this JSON text (a key too) may have more than `limit` characters.
    With no escaped quote, each string lies between two quotes and a character takes a byte
    at least: one match of a pattern that pairs the quotes tells, in C, with nothing
    allocated, however many strings there are. With one, yes. A reply of thousands of numbers
    or trace records then needs no walk (cut_strings)."""
    return b'\\"' in body or _longer_than(limit).match(body) is not None


@functools.lru_cache(maxsize=4)
def _longer_than(limit: int) -> re.Pattern[bytes]:
    """Matches a JSON text with a quoted run of more than `limit` bytes: each short string and
    what follows it up to the next quote is taken whole, never given back (possessive), so
    the match either stops at the opening quote of a long string or fails at the end."""
    return re.compile(rb'[^"]*+(?:"[^"]{0,%d}+"[^"]*+)*+"' % limit)


def cut_strings(value: Any, limit: int) -> Any:
    """`value` with every string in it (keys too) cut to `limit` characters, a surrogate alone
    made U+FFFD (`cut`), each list and object changed in place. No recursion, and the stack
    holds containers, not elements: json.loads already refused what nests deeper than
    Python's stack, but walking that deep here would not, and a list of millions of strings
    would take as many entries again."""
    top: list[Any] = [value]
    stack: list[Any] = [top]
    while stack:
        container = stack.pop()
        if type(container) is dict and any(cut(k, limit) != k for k in container):
            items = [(cut(k, limit), v) for k, v in container.items()]
            container.clear()
            container.update(items)
        for key, item in (enumerate(container) if type(container) is list
                          else container.items()):
            if type(item) is str:
                container[key] = cut(item, limit)
            elif type(item) is list or type(item) is dict:
                stack.append(item)
    return top[0]


def _check_point(program: Program, point: Any) -> None:
    _need(isinstance(point, Mapping) and set(point) == set(program.inputs),
          lambda: f"a point gives exactly the inputs {sorted(program.inputs)}; got {point!r:.200}")
    for name in program.inputs:
        _check_value(program, name, point[name])


def _check_value(program: Program, name: str, value: Any) -> None:
    size = program.inputs[name]
    ok = (_is_json_number(value) if size is None else isinstance(value, list)
          and len(value) == size and _all_numbers(value))
    _need(ok, lambda: f"input {name} needs {'a number' if size is None else f'{size} numbers'}")


def directions(request: Mapping[str, Any]) -> int:
    """How many results a request gives per point: 1, or for a Hessian one per element of the
    inputs that require grad (one per row of the Hessian)."""
    if request["kind"] != "hessian" or request["vector"] is not None:
        return 1
    sizes = request["program"]["inputs"]
    return sum(sizes[name] or 1 for name in request["requires_grad"])


def _check_steps(program: Program, steps: Any) -> None:
    _need(isinstance(steps, list), "steps must be a list")
    known = set(program.names)
    for i, step in enumerate(steps):
        _need(isinstance(step, Mapping), f"step {i} is not a mapping")
        actions = [key for key in ACTIONS if step.get(key) is not None]
        _need(len(actions) == 1, f"step {i} needs exactly one action of {ACTIONS}")
        _need(set(step) <= {*ACTIONS, "expect"}, f"step {i} has unknown keys")
        action, args = actions[0], step[actions[0]]
        used = _step_names(action, args, program)
        _need(used is not None, lambda: f"step {i}: malformed {action} arguments {args!r:.200}")
        _need(set(used) <= known,
              lambda: f"step {i} uses unknown names {sorted(set(used) - known)}")
        if action == "detach":
            known.add(args["name"])
        if action == "grad":
            known.update(args["names"])
        if action == "compute":
            known.add(args["name"])
        expect = step.get("expect") or []
        _need(isinstance(expect, list) and all(isinstance(e, str) and ("." in e or e == WARNINGS)
                                               for e in expect),
              f"step {i}: expect is a list of KIND.NAME (or warnings)")
        for item in expect:
            kind, name, field = parse_expect(item)
            _need(item == WARNINGS or kind in EXPECT_KINDS and name in known
                  and (field is None or kind == "grad" and field in GRAD_FIELDS),
                  f"step {i}: cannot observe {item!r}")


def _step_names(action: str, args: Any, program: Program) -> list[str] | None:
    """The names a step uses, or None if its arguments are malformed."""
    names_list = isinstance(args, list) and all(isinstance(n, str) for n in args)
    if action == "forward":
        return [] if isinstance(args, Mapping) and set(args) <= {"no_grad"} else None
    if action == "backward":
        if not isinstance(args, Mapping) or not set(args) <= {"of", "gradient", "retain_graph",
                                                              "create_graph"}:
            return None
        gradient = args.get("gradient")
        if gradient is not None and not _numbers_ok(gradient):
            return None
        return _of(args)
    if action == "grad":
        ok = (isinstance(args, Mapping) and {"wrt", "names"} <= set(args) <= {
            "of", "grad_outputs", "wrt", "names", "create_graph", "retain_graph", "allow_unused"}
              and isinstance(args["wrt"], list) and isinstance(args["names"], list)
              and len(args["wrt"]) == len(args["names"]) >= 1
              and all(isinstance(n, str) for n in args["wrt"] + args["names"])
              and (args.get("grad_outputs") is None or isinstance(args["grad_outputs"], list)
                   and all(_numbers_ok(seed) for seed in args["grad_outputs"])))
        return _of(args) + list(args["wrt"]) if ok else None
    if action == "compute":
        if not (isinstance(args, Mapping) and set(args) == {"name", "expr"}
                and all(isinstance(v, str) for v in args.values())):
            return None
        try:
            return [target_name(name) for name in free_names(args["expr"])]
        except ProgramError:
            return None
    if action in ("zero_grad", "retain_grad"):
        return list(args) if names_list else None
    if action == "detach":
        ok = isinstance(args, Mapping) and set(args) == {"name", "of"}
        return [args["of"]] if ok and all(isinstance(v, str) for v in args.values()) else None
    if action == "requires_grad":
        ok = isinstance(args, Mapping) and all(type(v) is bool for v in args.values())
        return list(args) if ok else None
    ok = (isinstance(args, Mapping) and set(args) == {"lr", "params"}  # sgd
          and _is_json_number(args["lr"]) and isinstance(args["params"], list))
    if not ok or not set(args["params"]) <= set(program.inputs):
        return None
    return list(args["params"])


def _of(args: Mapping[str, Any]) -> list[str]:
    of = args.get("of")
    targets = of if isinstance(of, list) else [of] if of else []
    return [target_name(one) for one in targets if isinstance(one, str) and one]


def check_reply(request: Mapping[str, Any], reply: Any) -> None:
    """Raise ProtocolError unless `reply` (decoded JSON from a worker) has the shape `handle`
    gives for `request`, so the grader can read it without trusting whoever wrote it."""
    kind = request["kind"]
    inputs = set(request["program"]["inputs"]) if kind != "inspect" else set()
    _shape(isinstance(reply, dict), "the reply is not an object")
    if kind == "inspect":
        _keys(reply, {"missing", "details", "error"})
        _shape(isinstance(reply["missing"], list) and all(isinstance(m, str)
                                                          for m in reply["missing"]), "missing")
        _shape(isinstance(reply["details"], dict) and all(
            isinstance(v, str) for v in reply["details"].values()), "details")
        _optional_error(reply["error"])
    elif kind in ("gradients", "hessian"):
        _keys(reply, {"results"})
        results = reply["results"]
        _shape(isinstance(results, list) and len(results) == len(request["points"])
               * directions(request), "one result per point (and direction)")
        for result in results:
            if (type(result) is dict and result.keys() == _RESULT_KEYS
                    and result["error"] is None and type(result["value"]) is float
                    and type(result["grads"]) is dict and result["grads"].keys() == inputs
                    and all(type(g) is float for g in result["grads"].values())):
                continue  # the usual result, a number and its gradients, told in one test
            _keys(result, _RESULT_KEYS)
            # a result without an error has its value: the handler reads it before any
            # gradient, and an engine that left it out would be graded on gradients alone
            _shape(_numbers_ok(result["value"]) if result["error"] is None
                   else result["value"] is None or _numbers_ok(result["value"]), "value")
            _keys(result["grads"], inputs)
            _shape(all(g is None or _numbers_ok(g) for g in result["grads"].values()), "grads")
            _optional_error(result["error"])
    elif kind == "graph":
        _keys(reply, {"nodes", "error"})
        _shape(isinstance(reply["nodes"], dict) and set(reply["nodes"]) <= set(request["names"]),
               "nodes")
        for node in reply["nodes"].values():
            _keys(node, set(GRAPH_FIELDS))
            for field, value in node.items():
                _observation(field, value)
        _optional_error(reply["error"])
    elif kind == "behaviour":
        _keys(reply, {"error", "steps"})
        _optional_error(reply["error"])
        steps = reply["steps"]
        _shape(isinstance(steps, list) and len(steps) == (0 if reply["error"] else
                                                          len(request["steps"])), "steps")
        for step, asked in zip(steps, request["steps"]):
            _keys(step, {"error", "observed"})
            _optional_error(step["error"])
            _keys(step["observed"], set(asked.get("expect") or []))
            for item, value in step["observed"].items():
                kind, _, field = parse_expect(item)
                _observation(field or kind, value)
    else:
        _keys(reply, {"nodes", "error"})
        _optional_error(reply["error"])
        _shape(isinstance(reply["nodes"], list), "nodes")
        for node in reply["nodes"]:  # a deep chain's trace has thousands: the usual node,
            # exact types and float numbers, is told in one test, any other checked in full
            if not (type(node) is dict and node.keys() == _TRACE_KEYS
                    and type(node["id"]) is int
                    and type(node["value"]) is float and type(node["grad"]) is float):
                _keys(node, _TRACE_KEYS)
                _shape(type(node["id"]) is int, "node")
                _observation("value", node["value"])
                _observation("grad", node["grad"])


_TRACE_KEYS = {"id", "value", "grad"}
_RESULT_KEYS = {"value", "grads", "error"}


def _shape(condition: bool, what: str | Callable[[], str]) -> None:
    """Raise ProtocolError saying `what` is malformed unless `condition` (`what` as `_need`'s
    message)."""
    if not condition:
        raise ProtocolError(f"malformed reply ({what if isinstance(what, str) else what()})")


def _keys(obj: Any, keys: set[str]) -> None:
    _shape(isinstance(obj, dict) and obj.keys() == keys,
           lambda: f"expected the keys {sorted(keys)}")


def _numbers_ok(x: Any) -> bool:
    return _is_json_number(x) or isinstance(x, list) and _all_numbers(x)


def _optional_error(x: Any) -> None:
    """None, or `{"type", "message", "phase"}` (strings) with the builtin classes the error is
    (`kinds`, a list of strings) and, when the error came from a use of the engine, the piece
    used (a name of ops.PIECES), its node and whether the piece is absent."""
    if x is None:
        return
    _shape(isinstance(x, dict) and {"type", "message", "phase"} <= set(x) <= ERROR_KEYS
           and all(isinstance(x[k], str) for k in ("type", "message", "phase")), "error record")
    _shape(x.get("piece", "tensor") in PIECES and type(x.get("node", 0)) is int
           and x.get("node", 0) >= 0 and type(x.get("absent", False)) is bool, "error record")
    kinds = x.get("kinds", [])
    _shape(type(kinds) is list and len(kinds) <= MAX_KINDS
           and all(type(kind) is str for kind in kinds), "error record")


def _observation(kind: str, x: Any) -> None:
    """A field read from the engine: its plain value, or `{"error": record}`."""
    if isinstance(x, dict):
        _keys(x, {"error"})
        _optional_error(x["error"])
        _shape(x["error"] is not None, "error record")
    elif kind in ("grad", "value"):
        _shape(x is None or _numbers_ok(x), kind)
    elif kind == "grad_fn":
        _shape(x is None or isinstance(x, str), kind)
    elif kind == WARNINGS:
        _shape(isinstance(x, list) and all(isinstance(w, str) for w in x), kind)
    elif kind in GRAD_FIELDS and x is None:  # grad.x.FIELD while x.grad is None
        pass
    else:
        _shape(isinstance(x, bool), kind)
