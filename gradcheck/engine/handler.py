"""What is asked of an engine: which operations it has, gradients, second derivatives, graph
facts, behaviour steps and a per-node trace.

`handle(engine, request)` is the one entry point. The worker calls it on a submission; the grader
calls it in its own process on :mod:`gradcheck.engine.torch_engine` to learn torch's behaviour, so
both sides of every comparison come from the same code. Only plain JSON data leaves: floats,
lists of floats, None, bools, short strings and error records.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any, Callable, Mapping

from gradcheck.engine import steps
from gradcheck.engine.run import (
    Progress,
    Record,
    Run,
    input_node,
    plain_flag,
    plain_grad,
    plain_value,
    type_name,
)
from gradcheck.engine.wire import GRAPH_FIELDS, check_request
from gradcheck.program.language import Program
from gradcheck.program.ops import BINARY, CREATE_GRAPH, OPS, SELECT, UNARY

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
    "grad": "in grad()",
    "compute": "while computing a step's expression",
}

_PROTOCOL_NAMES = ("tolist", "backward", "retain_grad", "detach", "requires_grad_", "grad",
                   "requires_grad", "is_leaf", "grad_fn")
#: what only the higher-order checks use: backward's create_graph, and the module's grad().
GRAD_FUNCTION = "grad()"
HIGHER_ORDER = (CREATE_GRAPH, GRAD_FUNCTION)
_DUNDER = {"+": "add", "-": "sub", "*": "mul", "/": "truediv", "**": "pow"}



def handle(engine: Any, request: Mapping[str, Any], progress: Progress | None = None,
           touched: bool = False) -> Record:
    """Answer one request on `engine`, calling `progress(phase)` whenever the phase changes.
    `touched`, asked of an oracle (torch, or the reference engine standing in for it) and never
    of a worker: each backward of a behaviour request that raised says which gradients it
    changed first (`steps.behaviour`)."""
    program = check_request(request)
    run = Run(engine, progress)
    with warnings.catch_warnings():  # torch warns on reading a non-leaf's .grad
        warnings.simplefilter("ignore")
        if touched and request["kind"] == "behaviour":
            return steps.behaviour(run, program, request, touched=True)
        return _HANDLERS[request["kind"]](run, program, request)


def _inspect(run: Run, program: None, request: Mapping[str, Any]) -> Record:
    run.enter("inspect")
    missing: dict[str, list[str]] = {}
    for name in ("tensor", "no_grad"):
        if not callable(getattr(run.engine, name, None)):
            missing[name] = [f"the module has no {name}()"]
    if not callable(getattr(run.engine, "grad", None)):
        missing[GRAD_FUNCTION] = ["the module has no grad() function (like torch.autograd.grad)"]
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
    order = ["tensor", "no_grad", *OPS, *_PROTOCOL_NAMES, *HIGHER_ORDER]
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
    if hasattr(t, "backward") and not _takes(t.backward, CREATE_GRAPH):
        found.append((CREATE_GRAPH, "have a backward() that takes no create_graph"))
    return found


def _takes(function: Any, keyword: str) -> bool:
    """Whether `function` accepts `keyword` (True when its signature cannot be read)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == keyword and p.kind != p.POSITIONAL_ONLY or p.kind == p.VAR_KEYWORD
               for p in parameters)


def _gradients(run: Run, program: Program, request: Mapping[str, Any]) -> Record:
    grad = set(request["requires_grad"])
    return {"results": [_gradients_at(run, program, point, grad) for point in request["points"]]}


def _gradients_at(run: Run, program: Program, point: Mapping[str, Any], grad: set[str]) -> Record:
    result: Record = {"value": None, "grads": dict.fromkeys(program.inputs), "error": None}
    try:
        leaves = run.leaves(program, point, grad)
        out = run.forward(program, leaves)[program.output_name]
        run.enter("read")
        result["value"] = run.read("value", out, program.output_name, program.output)
        run.enter("backward")
        run.using("backward", program.output, out)
        out.backward()
        run.enter("read")
        for name, leaf in leaves.items():
            if name in grad:  # only these are graded: another input's .grad is never read
                result["grads"][name] = run.read("grad", leaf, name, input_node(program, name))
    except Exception as exc:
        result["error"] = run.error(exc)
    return result


def _hessian(run: Run, program: Program, request: Mapping[str, Any]) -> Record:
    """Second derivatives by double backward: per point, one result per Hessian row (or one
    for the Hessian-vector product with `vector`), each shaped as a gradients result: `value`
    is the first derivative along the row's direction, `grads` that derivative's gradient."""
    names = request["requires_grad"]
    picks: list[Any] = ([(name, e) for name in names for e in range(program.inputs[name] or 1)]
                        if request["vector"] is None else [request["vector"]])
    results = []
    for point in request["points"]:
        results += _hessian_at(run, program, point, names, picks)
    return {"results": results}


def _hessian_at(run: Run, program: Program, point: Mapping[str, Any], names: list[str],
                picks: list[Any]) -> list[Record]:
    try:
        leaves = run.leaves(program, point, set(names))
        out = run.forward(program, leaves)[program.output_name]
        run.enter("backward")
        run.using(CREATE_GRAPH, program.output)
        out.backward(create_graph=True)
        run.enter("read")
        first = {name: leaves[name].grad for name in names}
        for leaf in leaves.values():
            leaf.grad = None
    except Exception as exc:
        error = run.error(exc)
        return [{"value": None, "grads": dict.fromkeys(program.inputs), "error": error}
                for _ in picks]
    return [_hessian_row(run, program, leaves, first, pick) for pick in picks]


def _hessian_row(run: Run, program: Program, leaves: dict, first: dict, pick: Any) -> Record:
    """d/d(inputs) of the first derivative along one direction: a unit (input, element), or
    a vector given per input."""
    result: Record = {"value": None, "grads": dict.fromkeys(program.inputs), "error": None}
    try:
        run.enter("forward")
        if isinstance(pick, tuple):
            name, e = pick
            g = first[name]
            parts = [g if g is None or program.inputs[name] is None else g[e]]
        else:
            parts = [_along(run, first[name], v, program.inputs[name])
                     for name, v in pick.items()]
        tensors = [p for p in parts if p is not None and hasattr(p, "backward")]
        numbers = [plain_value(p, "a gradient") for p in parts
                   if p is not None and not hasattr(p, "backward")]
        s = sum(tensors[1:], tensors[0]) if tensors else None
        run.enter("read")
        value = sum(numbers, plain_value(s, "the first derivative") if s is not None else 0.0)
        result["value"] = value
        zeros = {name: 0.0 if program.inputs[name] is None else [0.0] * program.inputs[name]
                 for name in first}
        if s is None or not plain_flag(s.requires_grad, "the first derivative.requires_grad"):
            result["grads"].update(zeros)  # no history: its derivative is 0, as in torch
            return result
        run.enter("backward")
        s.backward(retain_graph=True)
        run.enter("read")
        for name in first:
            g = plain_grad(leaves[name].grad, name)
            result["grads"][name] = zeros[name] if g is None else g
        for leaf in leaves.values():
            leaf.grad = None
    except Exception as exc:
        result["error"] = run.error(exc)
    return result


def _along(run: Run, g: Any, v: Any, size: int | None) -> Any:
    """The part of a directional derivative from one input: g . v (None if g is None)."""
    if g is None:
        return None
    if not hasattr(g, "backward"):  # a plain number or list: no history
        return sum(a * b for a, b in zip(g, v)) if size is not None else g * v
    return g * v if size is None else (g * run.engine.tensor(v)).sum()


def _graph(run: Run, program: Program, request: Mapping[str, Any]) -> Record:
    try:
        env = run.forward(program, run.leaves(program, request["point"],
                                              set(request["requires_grad"])))
    except Exception as exc:
        return {"nodes": {}, "error": run.error(exc)}
    run.enter("read")
    nodes = {name: {kind: run.field(kind, env[name], name, program.names[name])
                    for kind in GRAPH_FIELDS} for name in request["names"]}
    return {"nodes": nodes, "error": None}


def _trace(run: Run, program: Program, request: Mapping[str, Any]) -> Record:
    try:
        leaves = run.leaves(program, request["point"], set(request["requires_grad"]))
        run.enter("forward")
        values = run.evaluate(program, leaves)
    except Exception as exc:
        return {"nodes": [], "error": run.error(exc)}
    shown = [i for i, node in enumerate(program.nodes) if node.op != "const"]
    grads: dict[int, Any] = {}
    run.enter("retain_grad")
    for i in shown:
        if program.nodes[i].op != "input":
            try:
                values[i].retain_grad()
            except Exception as exc:  # the use is recorded only now: there are thousands
                run.using("retain_grad", i, values[i])
                grads[i] = {"error": run.error(exc)}
    error = None
    try:
        run.enter("backward")
        run.using("backward", program.output, values[program.output])
        values[program.output].backward()
    except Exception as exc:
        error = run.error(exc)
    run.enter("read")
    # Only what the engine computed: the grader has the program (its names, operations and
    # text), and a deep chain's trace has thousands of nodes, each read and sent here.
    nodes = []
    for i in shown:
        node = program.nodes[i]
        label = node.name or node.text or f"node {i}"
        if i not in grads:
            grads[i] = run.field("grad", values[i], label, i)
        nodes.append({"id": i, "value": run.field("value", values[i], label, i),
                      "grad": grads[i]})
    return {"nodes": nodes, "error": error}


_HANDLERS: dict[str, Callable[[Run, Any, Mapping[str, Any]], Record]] = {
    "inspect": _inspect, "gradients": _gradients, "graph": _graph, "behaviour": steps.behaviour,
    "trace": _trace, "hessian": _hessian,
}
