"""What is asked of an engine: gradients, graph facts, behaviour steps and a per-node trace.

`handle(engine, request)` is the one entry point. The worker calls it on a submission; the grader
calls it in its own process on :mod:`gradcheck.torch_engine` to learn torch's behaviour, so both
sides of every comparison come from the same code. Only plain JSON data leaves: floats, lists of
floats, None, bools, short strings and error records.

Converting what an engine returns is done defensively (a float subclass becomes the float it
stores, a grad left as a string becomes a named `ProtocolError`), so that honest mistakes are
reported plainly. This is not the security boundary: code running in the worker can fool the
worker. The grader trusts only the JSON it receives, after :func:`check_reply`.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping

from gradcheck.ops import BINARY, OPS, SELECT, UNARY
from gradcheck.program import MAX_VECTOR, Program, engine_apply, evaluate, spec_program

Progress = Callable[[str], None]
Record = dict[str, Any]

MAX_MESSAGE = 1000  # characters kept of an exception's message
MAX_NAME = 200  # characters kept of a grad_fn name

#: Where an engine can be, as progress frames name it; the text completes "timed out after 10 s".
PHASES = {
    "start": "before the request began",
    "import": "while importing the submission",
    "inspect": "while checking which operations the engine has",
    "forward": "in the forward pass",
    "backward": "in backward()",
    "read": "while reading values and gradients (.tolist(), .grad)",
    "zero_grad": "while setting .grad = None",
    "retain_grad": "in retain_grad()",
    "detach": "in detach()",
    "requires_grad": "in requires_grad_()",
    "sgd": "in a gradient descent step",
}

ACTIONS = ("forward", "backward", "zero_grad", "retain_grad", "detach", "requires_grad", "sgd")
EXPECT_KINDS = ("grad", "value", "requires_grad", "is_leaf", "grad_fn")
GRAPH_FIELDS = ("grad_fn", "is_leaf", "requires_grad", "value")
#: what a request may carry: programs and inputs, never an expected answer.
REQUEST_KEYS = {
    "inspect": {"kind"},
    "gradients": {"kind", "program", "points", "requires_grad"},
    "graph": {"kind", "program", "point", "requires_grad", "names"},
    "behaviour": {"kind", "program", "point", "requires_grad", "steps"},
    "trace": {"kind", "program", "point", "requires_grad"},
}
_PROTOCOL_NAMES = ("tolist", "backward", "retain_grad", "detach", "requires_grad_", "grad",
                   "requires_grad", "is_leaf", "grad_fn")
_DUNDER = {"+": "add", "-": "sub", "*": "mul", "/": "truediv", "**": "pow"}


class ProtocolError(Exception):
    """An engine returned something the protocol does not allow (a str where a number goes)."""


class RequestError(ValueError):
    """A malformed request: a bug in the grader, never the engine's fault."""


def handle(engine: Any, request: Mapping[str, Any], progress: Progress | None = None) -> Record:
    """Answer one request on `engine`, calling `progress(phase)` whenever the phase changes."""
    program = check_request(request)
    run = _Run(engine, progress)
    with warnings.catch_warnings():  # torch warns on reading a non-leaf's .grad
        warnings.simplefilter("ignore")
        return _HANDLERS[request["kind"]](run, program, request)


# --- plain data out of engine objects -----------------------------------------------------------


def type_name(obj: Any) -> str:
    """The real name of `obj`'s class (a metaclass cannot make it lie)."""
    return type.__dict__["__name__"].__get__(type(obj))


def error_record(exc: BaseException, phase: str) -> dict[str, str]:
    """`{"type", "message", "phase"}` of an exception, as plain strings."""
    try:
        message = str.__str__(str(exc))
    except Exception:
        message = "(its message could not be read)"
    return {"type": type_name(exc), "message": message[:MAX_MESSAGE], "phase": phase}


def _is_number(x: Any) -> bool:
    cls = type(x)
    return issubclass(cls, float) or (issubclass(cls, int) and not issubclass(cls, bool))


def _number(x: Any) -> float:
    # float.__float__ reads the stored double: a subclass's own __float__ or __eq__ play no part.
    return float.__float__(x) if issubclass(type(x), float) else float(int.__index__(x))


def plain_numbers(x: Any, what: str) -> float | list[float]:
    """A number or a flat list of numbers, as plain floats."""
    cls = type(x)
    if _is_number(x):
        return _number(x)
    if issubclass(cls, (list, tuple)):
        base = list if issubclass(cls, list) else tuple
        if base.__len__(x) > MAX_VECTOR:
            raise ProtocolError(f"{what} has {base.__len__(x)} elements; at most {MAX_VECTOR} "
                                "are expected")
        items = list(base.__iter__(x))
        for i, item in enumerate(items):
            if not _is_number(item):
                raise ProtocolError(f"element {i} of {what} is a {type_name(item)}, not a number")
        return [_number(item) for item in items]
    raise ProtocolError(f"{what} is a {type_name(x)}, not a number or a list of numbers")


def plain_value(t: Any, what: str) -> float | list[float]:
    """The value of a tensor through `tolist()` (a constant is already a number)."""
    if _is_number(t):
        return _number(t)
    return plain_numbers(t.tolist(), f"{what}.tolist()")


def plain_grad(g: Any, what: str) -> float | list[float] | None:
    """A `.grad`: None, a tensor, a number or a list of numbers."""
    if g is None:
        return None
    if _is_number(g) or issubclass(type(g), (list, tuple)):
        return plain_numbers(g, f"{what}.grad")
    tolist = getattr(g, "tolist", None)
    if not callable(tolist):
        raise ProtocolError(f"backward left {what}.grad as a {type_name(g)}; it should be None, "
                            "a tensor, a number or a list of numbers")
    return plain_numbers(tolist(), f"{what}.grad.tolist()")


def plain_flag(x: Any, what: str) -> bool:
    """`requires_grad` or `is_leaf`: exactly True or False."""
    if type(x) is not bool:
        raise ProtocolError(f"{what} is a {type_name(x)}, not True or False")
    return x


def plain_grad_fn(fn: Any, what: str) -> str | None:
    """The name of a `.grad_fn` (None for leaves and untracked results)."""
    if fn is None:
        return None
    name = fn.name()
    if not issubclass(type(name), str):
        raise ProtocolError(f"{what}.grad_fn.name() returned a {type_name(name)}, not a str")
    return str.__str__(name)[:MAX_NAME]


def _field(kind: str, obj: Any, name: str) -> Any:
    if kind == "grad":
        return plain_grad(obj.grad, name)
    if kind == "value":
        return plain_value(obj, name)
    if kind == "grad_fn":
        return plain_grad_fn(obj.grad_fn, name)
    return plain_flag(getattr(obj, kind), f"{name}.{kind}")  # requires_grad, is_leaf


# --- one request --------------------------------------------------------------------------------


class _Run:
    """One request on one engine: the phase it is in, and errors recorded with that phase."""

    def __init__(self, engine: Any, progress: Progress | None) -> None:
        self.engine = engine
        self.progress = progress
        self.phase = ""

    def enter(self, phase: str) -> None:
        if phase != self.phase:
            self.phase = phase
            if self.progress is not None:
                self.progress(phase)

    def error(self, exc: Exception) -> dict[str, str]:
        if isinstance(exc, MemoryError):
            raise exc  # the worker's state is suspect: the whole request fails, the worker restarts
        return error_record(exc, self.phase)

    def attempt(self, read: Callable[[], Any]) -> Any:
        """A plain value, or `{"error": record}` when reading it raised."""
        try:
            return read()
        except Exception as exc:
            return {"error": self.error(exc)}

    def leaves(self, program: Program, point: Mapping[str, Any], grad: set[str]) -> dict:
        self.enter("forward")
        return {name: self.engine.tensor(_floats(point[name]), requires_grad=name in grad)
                for name in program.inputs}

    def forward(self, program: Program, leaves: Mapping[str, Any], no_grad: bool = False) -> dict:
        """Every variable of the program, bound to what the engine computed."""
        self.enter("forward")
        if no_grad:
            with self.engine.no_grad():
                values = evaluate(program, leaves, engine_apply)
        else:
            values = evaluate(program, leaves, engine_apply)
        return {name: values[i] for name, i in program.names.items()}


def _floats(value: Any) -> float | list[float]:
    return [float(v) for v in value] if isinstance(value, list) else float(value)


def _lookup(env: Mapping[str, Any], name: str) -> Any:
    if name not in env:
        raise NameError(f"{name} was never made (an earlier step failed)")
    return env[name]


def _inspect(run: _Run, program: None, request: Mapping[str, Any]) -> Record:
    run.enter("inspect")
    missing: dict[str, list[str]] = {}
    for name in ("tensor", "no_grad"):
        if not callable(getattr(run.engine, name, None)):
            missing[name] = [f"the module has no {name}()"]
    error = None
    if "tensor" not in missing:
        for label, data, vector in (("tensor(1.0)", 1.0, False),
                                    ("tensor([1.0, 2.0])", [1.0, 2.0], True)):
            try:
                for name, why in _missing_on(run.engine.tensor(data, requires_grad=True), vector):
                    missing.setdefault(name, []).append(f"tensors made by {label} {why}")
            except Exception as exc:
                error = error or run.error(exc)
                reason = str(run.error(exc)["message"]).strip().splitlines()[:1]
                # a scalar engine without 1-D tensors loses only the programs that index
                lacking = "select" if vector and "tensor" not in missing else "tensor"
                missing.setdefault(lacking, []).append(
                    f"{label} raised {type_name(exc)}{': ' + reason[0][:200] if reason else ''}")
    order = ["tensor", "no_grad", *OPS, *_PROTOCOL_NAMES]
    names = sorted(missing, key=order.index)
    return {"missing": names, "details": {n: "; ".join(missing[n]) for n in names},
            "error": error}


def _missing_on(t: Any, vector: bool) -> list[tuple[str, str]]:
    """(name, why) for each protocol name `t` lacks; operators are looked up on its type."""
    found = []
    for op in OPS.values():
        if op.kind == BINARY:
            dunder = _DUNDER[op.symbol]
            names = (f"__{dunder}__", f"__r{dunder}__")
            lacks = [name for name in names if not hasattr(type(t), name)]
        elif op.kind == UNARY:
            lacks = [] if hasattr(type(t), "__neg__") else ["__neg__"]
        elif op.kind == SELECT:
            lacks = [] if not vector or hasattr(type(t), "__getitem__") else ["__getitem__"]
        else:  # FUNCTION, REDUCTION: methods
            lacks = [] if hasattr(t, op.name) else [op.name]
        if lacks:
            found.append((op.name, f"have no {' or '.join(lacks)}"))
    found += [(name, f"have no {name}") for name in _PROTOCOL_NAMES if not hasattr(t, name)]
    return found


def _gradients(run: _Run, program: Program, request: Mapping[str, Any]) -> Record:
    grad = set(request["requires_grad"])
    return {"results": [_gradients_at(run, program, point, grad) for point in request["points"]]}


def _gradients_at(run: _Run, program: Program, point: Mapping[str, Any], grad: set[str]) -> Record:
    result: Record = {"value": None, "grads": dict.fromkeys(program.inputs), "error": None}
    try:
        leaves = run.leaves(program, point, grad)
        out = run.forward(program, leaves)[program.output_name]
        run.enter("read")
        result["value"] = plain_value(out, program.output_name)
        run.enter("backward")
        out.backward()
        run.enter("read")
        for name, leaf in leaves.items():
            result["grads"][name] = plain_grad(leaf.grad, name)
    except Exception as exc:
        result["error"] = run.error(exc)
    return result


def _graph(run: _Run, program: Program, request: Mapping[str, Any]) -> Record:
    try:
        env = run.forward(program, run.leaves(program, request["point"],
                                              set(request["requires_grad"])))
    except Exception as exc:
        return {"nodes": {}, "error": run.error(exc)}
    run.enter("read")
    nodes = {name: {kind: run.attempt(lambda k=kind, n=name: _field(k, env[n], n))
                    for kind in GRAPH_FIELDS} for name in request["names"]}
    return {"nodes": nodes, "error": None}


def _behaviour(run: _Run, program: Program, request: Mapping[str, Any]) -> Record:
    try:
        env = run.forward(program, run.leaves(program, request["point"],
                                              set(request["requires_grad"])))
    except Exception as exc:
        return {"error": run.error(exc), "steps": []}
    steps = []
    for step in request["steps"]:
        action, args = _action(step)
        error = None
        try:
            run.enter(action)
            _STEPS[action](run, program, env, args)
        except Exception as exc:
            error = run.error(exc)
        run.enter("read")
        observed = {}
        for item in step.get("expect") or []:
            kind, name = item.split(".", 1)
            observed[item] = run.attempt(lambda k=kind, n=name: _field(k, _lookup(env, n), n))
        steps.append({"error": error, "observed": observed})
    return {"error": None, "steps": steps}


def _action(step: Mapping[str, Any]) -> tuple[str, Any]:
    return next((key, step[key]) for key in ACTIONS if step.get(key) is not None)


def _step_forward(run: _Run, program: Program, env: dict, args: Mapping[str, Any]) -> None:
    leaves = {name: _lookup(env, name) for name in program.inputs}
    env.update(run.forward(program, leaves, bool(args.get("no_grad"))))


def _step_backward(run: _Run, program: Program, env: dict, args: Mapping[str, Any]) -> None:
    target = _lookup(env, args.get("of") or program.output_name)
    kwargs: dict[str, Any] = {}
    if args.get("gradient") is not None:
        kwargs["gradient"] = run.engine.tensor(_floats(args["gradient"]))
    if args.get("retain_graph"):
        kwargs["retain_graph"] = True
    target.backward(**kwargs)


def _step_zero_grad(run: _Run, program: Program, env: dict, names: list[str]) -> None:
    for name in names:
        _lookup(env, name).grad = None


def _step_retain_grad(run: _Run, program: Program, env: dict, names: list[str]) -> None:
    for name in names:
        _lookup(env, name).retain_grad()


def _step_detach(run: _Run, program: Program, env: dict, args: Mapping[str, str]) -> None:
    env[args["name"]] = _lookup(env, args["of"]).detach()


def _step_requires_grad(run: _Run, program: Program, env: dict, flags: Mapping[str, bool]) -> None:
    for name, flag in flags.items():
        _lookup(env, name).requires_grad_(flag)


def _step_sgd(run: _Run, program: Program, env: dict, args: Mapping[str, Any]) -> None:
    lr = float(args["lr"])
    for name in args["params"]:
        w = _lookup(env, name)
        with run.engine.no_grad():
            g = w.grad
            if issubclass(type(g), (list, tuple)):  # the protocol allows a list for a 1-D grad
                g = run.engine.tensor(plain_numbers(g, f"{name}.grad"))
            new = w - lr * g
        new.requires_grad_()
        env[name] = new


def _trace(run: _Run, program: Program, request: Mapping[str, Any]) -> Record:
    try:
        leaves = run.leaves(program, request["point"], set(request["requires_grad"]))
        run.enter("forward")
        values = evaluate(program, leaves, engine_apply)
    except Exception as exc:
        return {"nodes": [], "error": run.error(exc)}
    shown = [i for i, node in enumerate(program.nodes) if node.op != "const"]
    grads: dict[int, Any] = {}
    run.enter("retain_grad")
    for i in shown:
        if program.nodes[i].op != "input":
            try:
                values[i].retain_grad()
            except Exception as exc:
                grads[i] = {"error": run.error(exc)}
    error = None
    try:
        run.enter("backward")
        values[program.output].backward()
    except Exception as exc:
        error = run.error(exc)
    run.enter("read")
    nodes = []
    for i in shown:
        node = program.nodes[i]
        label = node.name or node.text or f"node {i}"
        if i not in grads:
            grads[i] = run.attempt(lambda i=i, label=label: plain_grad(values[i].grad, label))
        nodes.append({"id": i, "name": node.name, "op": node.op, "text": node.text,
                      "value": run.attempt(lambda i=i, label=label: plain_value(values[i], label)),
                      "grad": grads[i]})
    return {"nodes": nodes, "error": error}


_STEPS: dict[str, Callable[..., None]] = {
    "forward": _step_forward, "backward": _step_backward, "zero_grad": _step_zero_grad,
    "retain_grad": _step_retain_grad, "detach": _step_detach,
    "requires_grad": _step_requires_grad, "sgd": _step_sgd,
}
_HANDLERS: dict[str, Callable[[_Run, Any, Mapping[str, Any]], Record]] = {
    "inspect": _inspect, "gradients": _gradients, "graph": _graph, "behaviour": _behaviour,
    "trace": _trace,
}


# --- requests and replies: the shapes both sides agree on ---------------------------------------


def check_request(request: Mapping[str, Any]) -> Program | None:
    """Raise RequestError unless `request` is well formed; returns its parsed program."""
    _need(isinstance(request, Mapping), "a request is a mapping")
    kind = request.get("kind")
    _need(kind in REQUEST_KEYS, f"unknown request kind {kind!r}")
    extra = set(request) - REQUEST_KEYS[kind]
    missing = REQUEST_KEYS[kind] - set(request)
    _need(not extra and not missing, f"a {kind} request has the keys "
          f"{sorted(REQUEST_KEYS[kind])}; got {sorted(request)}")
    if kind == "inspect":
        return None
    try:
        program = spec_program(request["program"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RequestError(f"the request's program does not parse: {exc}") from None
    grad = request["requires_grad"]
    _need(isinstance(grad, list) and set(grad) <= set(program.inputs),
          f"requires_grad must list inputs of the program, not {grad!r}")
    points = request["points"] if kind == "gradients" else [request["point"]]
    _need(isinstance(points, list), "points must be a list")
    for point in points:
        _check_point(program, point)
    if kind == "graph":
        _need(isinstance(request["names"], list) and set(request["names"]) <= set(program.names),
              f"graph names must be variables of the program, not {request['names']!r}")
    if kind == "behaviour":
        _check_steps(program, request["steps"])
    return program


def _need(condition: bool, message: str) -> None:
    if not condition:
        raise RequestError(message)


def _is_json_number(x: Any) -> bool:
    return type(x) in (int, float)


def _check_point(program: Program, point: Any) -> None:
    _need(isinstance(point, Mapping) and set(point) == set(program.inputs),
          f"a point gives exactly the inputs {sorted(program.inputs)}; got {point!r:.200}")
    for name, size in program.inputs.items():
        value = point[name]
        ok = (_is_json_number(value) if size is None else isinstance(value, list)
              and len(value) == size and all(_is_json_number(v) for v in value))
        _need(ok, f"input {name} needs {'a number' if size is None else f'{size} numbers'}")


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
        _need(used is not None, f"step {i}: malformed {action} arguments {args!r:.200}")
        _need(set(used) <= known, f"step {i} uses unknown names {sorted(set(used) - known)}")
        if action == "detach":
            known.add(args["name"])
        expect = step.get("expect") or []
        _need(isinstance(expect, list) and all(isinstance(e, str) and "." in e for e in expect),
              f"step {i}: expect is a list of KIND.NAME")
        for item in expect:
            kind, name = item.split(".", 1)
            _need(kind in EXPECT_KINDS and name in known, f"step {i}: cannot observe {item!r}")


def _step_names(action: str, args: Any, program: Program) -> list[str] | None:
    """The names a step uses, or None if its arguments are malformed."""
    names_list = isinstance(args, list) and all(isinstance(n, str) for n in args)
    if action == "forward":
        return [] if isinstance(args, Mapping) and set(args) <= {"no_grad"} else None
    if action == "backward":
        if not isinstance(args, Mapping) or not set(args) <= {"of", "gradient", "retain_graph"}:
            return None
        gradient = args.get("gradient")
        if gradient is not None and not (_is_json_number(gradient) or isinstance(gradient, list)
                                         and all(_is_json_number(g) for g in gradient)):
            return None
        return [args["of"]] if args.get("of") else []
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
    elif kind == "gradients":
        _keys(reply, {"results"})
        results = reply["results"]
        _shape(isinstance(results, list) and len(results) == len(request["points"]),
               "one result per point")
        for result in results:
            _keys(result, {"value", "grads", "error"})
            _shape(result["value"] is None or _numbers_ok(result["value"]), "value")
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
                _observation(item.split(".", 1)[0], value)
    else:
        _keys(reply, {"nodes", "error"})
        _optional_error(reply["error"])
        _shape(isinstance(reply["nodes"], list), "nodes")
        for node in reply["nodes"]:
            _keys(node, {"id", "name", "op", "text", "value", "grad"})
            _shape(type(node["id"]) is int and all(isinstance(node[k], str)
                                                   for k in ("name", "op", "text")), "node")
            _observation("value", node["value"])
            _observation("grad", node["grad"])


def _shape(condition: bool, what: str) -> None:
    if not condition:
        raise ProtocolError(f"malformed reply ({what})")


def _keys(obj: Any, keys: set[str]) -> None:
    _shape(isinstance(obj, dict) and set(obj) == keys, f"expected the keys {sorted(keys)}")


def _numbers_ok(x: Any) -> bool:
    return _is_json_number(x) or isinstance(x, list) and all(_is_json_number(v) for v in x)


def _optional_error(x: Any) -> None:
    _shape(x is None or isinstance(x, dict) and set(x) == {"type", "message", "phase"}
           and all(isinstance(v, str) for v in x.values()), "error record")


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
    else:
        _shape(isinstance(x, bool), kind)
