"""Feedback that finds the bug: which operation's forward or backward is wrong, and why.

When a gradients check fails at a point, the program runs again on the submission with the probe's
`trace` request (retain_grad on every node; the value and gradient of each) and the submission's
numbers are compared with torch's chain-rule walk (:mod:`gradcheck.grading.chain_rule`):

- forward: the first node, in evaluation order, whose value is wrong although its operands are
  right is the faulty operation;
- backward: walking from the output, every node whose gradient is right is passed; the first
  node whose gradient is wrong received it along edges from nodes whose gradients are right, so
  one of those edges, or the adding up of several, is at fault. Each suspect operation is then run
  on its own on the submission (a `behaviour` request: the operation on fresh leaves, then
  backward) to tell a wrong local derivative from gradients that were not added up.

A submission whose retain_grad() does not work leaves the gradients inside the graph unknown;
then every operation backward reaches is run on its own, nearest the output first. When nothing
can be concluded, there is no finding and the check keeps its plain comparison. The submission
is only ever asked through the requests the walk yields (`Steps`: the grader asks them of the
sandboxed worker, and sends the replies back, one walk at a time, `run`, or many walks in rounds,
`Grader.give_feedback`); nothing it returns is trusted beyond the JSON shapes the probe checks.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Mapping, Sequence, TypeVar

import numpy as np

from gradcheck.bank.tolerances import Tolerance
from gradcheck.grading.chain_rule import Edge, Walk, WalkError, trace_request, walk
from gradcheck.grading.compare import Grading, point_text
from gradcheck.grading.digits import number_text, pair_text
from gradcheck.program.language import Program, known
from gradcheck.program.ops import BINARY, OPS, SELECT, UNARY
from gradcheck.program.session import WARNINGS, parse_expect

Ask = Callable[[dict[str, Any]], Any]  # a request -> the reply, or a sandbox Failure
T = TypeVar("T")
#: a walk on the submission: it yields each request it asks, is sent the reply (or a sandbox
#: Failure), and returns what it found
Steps = Generator[dict[str, Any], Any, T]
Truth = Callable[[int], "Walk | None"]  # a point's index -> torch's walk there, if known
#: operations run on their own in one request (the suspects, or, when the submission's trace has
#: no gradients inside the graph, those nearest the output).
MAX_ALONE = 100


@dataclass(frozen=True)
class Finding:
    """Where a submission goes wrong. The message's first line names the faulty operation."""

    kind: str  # forward, backward, alone, accumulate, order, seed, combine
    #: the operation at fault (accumulate: the node whose gradients were not summed; combine:
    #: None, as no single node is at fault)
    node: int | None
    message: str
    arg: int | None = None  # the operand that received a wrong gradient
    #: the submission's trace records by node id, where the finding was made
    found: Mapping[int, Any] | None = field(default=None, compare=False, repr=False)
    #: the place of the engine at fault, in words that are the same for every finding there
    #: ("the backward of `*` (MulBackward0)"): reports say it once for all the checks it fails
    cause: str = ""


def feedback(grading: Grading, program: Program, points: Sequence[Mapping[str, Any]],
             requires_grad: Sequence[str], ask: Ask, tolerance: Tolerance,
             truth: Truth | None = None) -> str:
    """A failed gradients check's message: the finding at the first failing point (when there is
    one), then the plain comparison. `truth(i)` gives torch's walk at point i, or None where it
    has none, and then the point is not walked (default: walked here, with torch)."""
    return run(diagnose(grading, program, points, requires_grad, tolerance, truth), ask)[0]


def run(steps: Steps[T], ask: Ask) -> T:
    """What a walk finds, each request it yields asked with `ask` in turn."""
    try:
        request = next(steps)
        while True:
            request = steps.send(ask(request))
    except StopIteration as done:
        return done.value


def diagnose(grading: Grading, program: Program, points: Sequence[Mapping[str, Any]],
             requires_grad: Sequence[str], tolerance: Tolerance,
             truth: Truth | None = None, located: dict[str, Finding] | None = None
             ) -> Steps[tuple[str, dict[str, Any]]]:
    """`feedback`'s message, and what a report draws the walk from, as plain data
    (`CheckResult.detail`): the first failing point, and there the engine's trace records and
    the node (and operand) at fault, when they were found. `located`: the findings at the
    points already walked for another check of the same program, requires_grad and tolerance
    (an exercise's `gradients` and `answers` checks often fail first at the same point); a
    point with a finding there is not walked again, and a finding made here is added."""
    failed = [i for i, v in enumerate(grading.verdicts) if v.status == "failed" and not v.error]
    if not failed:
        return grading.message, {}
    point = points[failed[0]]
    detail: dict[str, Any] = {"point": dict(point)}
    seen = json.dumps(point, sort_keys=True)
    finding = located.get(seen) if located is not None else None
    if finding is None:
        known = truth(failed[0]) if truth is not None else None
        # given a `truth` that does not hold this point (an answer key's), nothing is walked
        finding = None if truth is not None and known is None else (yield from locate(
            program, point, requires_grad, tolerance, known))
        # only a finding is kept: no finding may be this check's alone (its key holds no walk
        # at the point, its time ran out), and another check walks again
        if located is not None and finding is not None:
            located[seen] = finding
    if finding is None:
        return grading.message, detail
    detail.update(node=finding.node, arg=finding.arg, cause=finding.cause,
                  found=[dict(record) for _, record in sorted((finding.found or {}).items())])
    return f"{finding.message}\n{grading.message}", detail


def locate(program: Program, point: Mapping[str, Any], requires_grad: Sequence[str],
           tolerance: Tolerance, truth: Walk | None = None) -> Steps[Finding | None]:
    """The first place where the submission departs from torch's walk at `point` (`truth`, or
    walked here), or None; the finding holds the submission's trace records it came from."""
    try:
        truth = truth or walk(program, point, requires_grad)
    except WalkError:
        return None
    reply = yield trace_request(program, point, requires_grad)
    if not isinstance(reply, dict) or not reply.get("nodes"):
        return None
    found = {record["id"]: record for record in reply["nodes"]}
    if set(found) != set(truth.ids):
        return None
    finding = (_forward(truth, found, tolerance)
               or (yield from _backward(truth, found, tolerance)))
    return dataclasses.replace(finding, found=found, cause=_cause(truth, finding)) if finding else None


#: what is at fault, by the kind of finding, where no single operation is
_CAUSES = {"accumulate": "adding up (+=) the gradients of a value used more than once",
           "order": "the order backward() visits the nodes in",
           "seed": "the gradient backward() starts from",
           "combine": "how backward() combines the operations' gradients"}


def _cause(w: Walk, finding: Finding) -> str:
    """The place of the engine a finding blames, named from the program and torch's grad_fn
    names alone, so that every check that meets the same bug names it alike: a wrong backward by
    its grad_fn (torch computes `2 / x` as a product, so a bug in MulBackward0 is found there
    too), a wrong forward by its operation."""
    if finding.kind in _CAUSES or finding.node is None:
        return _CAUSES.get(finding.kind, "")
    node = w.node(finding.node)
    if finding.kind == "forward":
        return ("the number `tensor()` stores" if node.op == "input"
                else f"the forward of {operation_name(node.op)}")
    grad_fn = w.grad_fn(finding.node)
    if grad_fn is None:
        return f"the backward of {operation_name(node.op)}"
    op = re.sub(r"Backward\d+$", "", grad_fn).lower()
    return (f"the backward of {operation_name(op)} ({grad_fn})" if op in OPS
            else f"the backward of {grad_fn}")


def operation_name(op: str) -> str:
    """An operation as a student writes it: `*`, unary `-`, `.exp()`, indexing `[i]`."""
    kind, symbol = OPS[op].kind, OPS[op].symbol
    if kind == SELECT:
        return "indexing `[i]`"
    if kind == UNARY:
        return f"unary `{symbol}`"
    return f"`{symbol}`" if kind == BINARY else f"`.{op}()`"


# --- forward ------------------------------------------------------------------------------------


def _forward(w: Walk, found: Mapping[int, Any], tol: Tolerance) -> Finding | None:
    i = _first_wrong(w.needed(), found, "value", w.values, tol)
    if i is None:
        return None
    node = w.node(i)
    shown, want = _pair(found[i]["value"], w.values[i])
    if node.op == "input":
        message = (f"{_at(w)}the input {node.name} holds {shown} once tensor("
                   f"{number_text(w.values[i])}) made it; it should hold exactly the number it "
                   "was given (in float64).")
    else:
        message = (f"{_at(w)}the forward of {_where(w, i)} gives {shown}; torch gives {want} "
                   f"from the same operands ({_operands(w, i)}).")
    return Finding("forward", i, message)


def _first_wrong(ids: Sequence[int], found: Mapping[int, Any], field: str,
                 truth: Mapping[int, Any], tol: Tolerance) -> int | None:
    """The first of `ids` whose `field` ("value" or "grad") in the submission's trace records
    `found` is not torch's number in `truth` within `tol`. Compared as one array when every
    number is a plain float (a deep chain's thousands of nodes), else one by one."""
    got = [found[i][field] for i in ids]
    want = [truth[i] for i in ids]
    if set(map(type, got)) | set(map(type, want)) <= {float}:
        wrong = np.flatnonzero(~tol.close(got, want))
        return ids[wrong[0]] if wrong.size else None
    return next((i for i, g, e in zip(ids, got, want) if not same_numbers(g, e, tol)), None)


# --- backward -----------------------------------------------------------------------------------


def _backward(w: Walk, found: Mapping[int, Any], tol: Tolerance) -> Steps[Finding | None]:
    if not _is_numbers(found[w.output]["grad"]):  # no working retain_grad(): nothing inside
        return (yield from _alone(w, found, tol))
    i = _first_wrong(w.backward_order(), found, "grad", w.grads, tol)
    if i is None:
        return None
    got = found[i]["grad"]
    if i == w.output:
        shown, want = _pair(got, w.grads[i])
        return Finding("seed", i, f"{_at(w)}backward() should start from gradient {want} at "
                                  f"the output {w.label(i)}; its .grad is {shown}.")
    return (yield from _blame(w, i, got, tol))


def _blame(w: Walk, i: int, got: Any, tol: Tolerance) -> Steps[Finding | None]:
    """Node i got a wrong gradient from consumers whose own gradients are right."""
    edges = w.consumers(i)
    if not edges:
        return None
    alone = yield from passed_alone(w, sorted({c for c, _ in edges}, reverse=True)[:MAX_ALONE])
    for c, e in edges:
        key = (c, e.slot)
        if key in alone and not same_numbers(alone[key], e.passed, tol):
            return _wrong_edge(w, c, e, got if len(edges) == 1 else alone[key], "backward")
    if len(edges) == 1:
        c, e = edges[0]
        if (c, e.slot) not in alone:  # the operation could not run alone: trust the trace
            return _wrong_edge(w, c, e, got, "backward")
        shown, want = _pair(got, e.passed)
        return Finding("order", c, "\n".join([
            f"{_at(w)}the backward of {_where(w, c)} passed {shown} to {_operand(w, c, e)} "
            f"although its own gradient, {number_text(w.grads[c])}, is right; it should pass "
            f"{want}.",
            "Run on its own, this operation passes the right gradient, so backward() used it "
            "before all of its gradient had arrived, or more than once: visit the nodes in "
            "reverse topological order (every consumer of a node before the node), each once."]),
            e.arg)
    if all((c, e.slot) in alone for c, e in edges):
        return (yield from _not_added(w, i, got, edges, tol))
    return None


def _alone(w: Walk, found: Mapping[int, Any], tol: Tolerance) -> Steps[Finding | None]:
    """Without gradients inside the graph: run each operation alone, nearest the output first."""
    operations = [c for c in w.backward_order() if w.edges(c)]
    candidates = operations[:MAX_ALONE]
    alone = yield from passed_alone(w, candidates)
    for c in candidates:
        for e in w.edges(c):
            if (c, e.slot) in alone and not same_numbers(alone[(c, e.slot)], e.passed, tol):
                return _wrong_edge(w, c, e, alone[(c, e.slot)], "alone")
    every_one_ran = len(operations) <= MAX_ALONE and all(
        (c, e.slot) in alone for c in operations for e in w.edges(c))
    inputs_wrong = any(not same_numbers(found[i]["grad"], w.grads[i], tol)
                       for i in w.backward_order() if w.node(i).op == "input")
    if not (every_one_ran and inputs_wrong):
        return None
    return Finding("combine", None, "\n".join([
        f"{_at(w)}every operation's backward is right on its own, yet the gradients are wrong: "
        "the mistake is in how backward() combines them.",
        "Check that a value used more than once adds up (+=) every gradient it receives, and that "
        "backward() visits each node once, in reverse topological order. With a working "
        "retain_grad(), gradcheck could point at the exact node."]))


def _wrong_edge(w: Walk, c: int, e: Edge, passed: Any, kind: str) -> Finding:
    node = w.node(c)
    shown, want = _pair(passed, e.passed)
    operand = _operand(w, c, e)
    incoming = number_text(w.grads[c])
    if kind == "alone":
        head = (f"{_at(w)}the backward of {_where(w, c)}, run on its own, passes {shown} to "
                f"{operand}; it should pass {want}.")
        right = ""
    else:
        head = (f"{_at(w)}the backward of {_where(w, c)} passed {shown} to {operand}; it should "
                f"pass {want}.")
        right = " (that part is right)"
    of = f"{node.text} with respect to {w.label(e.arg)}"
    if isinstance(e.slope, list) or isinstance(w.grads[c], list):
        detail = (f"The gradient arriving at `{node.text}` is {incoming}{right}; the local slope "
                  f"of {of} is {number_text(e.slope)} (one per element) at "
                  f"{_operands(w, c)}, so {w.label(e.arg)} should receive {want}.")
    else:
        detail = (f"The gradient arriving at `{node.text}` is {incoming}{right}; the local slope "
                  f"of {of} is {number_text(e.slope)} at {_operands(w, c)}, so "
                  f"{w.label(e.arg)} should receive {number_text(e.slope)} × {incoming} = "
                  f"{want}.")
    lines = [head, detail]
    if kind == "alone":
        lines.append("(Found by running each operation on its own: retain_grad() does not work "
                     "in your engine, so the gradients inside the graph could not be read.)")
    return Finding(kind, c, "\n".join(lines), e.arg)


#: A value used twice by consumers at the same depth: a breadth-first backward() gets it right,
#: one that replaces (=) instead of adding (+=) does not. dz/dx = 1.5 * (2 + 3).
_TWO_USES = ("a = x * 1.5\nz = a * 2 + a * 3", 7.5)


def _adds_up() -> Steps[bool]:
    """Whether the submission adds up the gradients of a value used twice when both of its
    consumers run before it (`_TWO_USES`)."""
    source, right = _TWO_USES
    reply = yield {"kind": "gradients", "program": known(source, {"x": None}).spec(),
                   "points": [{"x": 1.0}], "requires_grad": ["x"]}
    if not isinstance(reply, dict) or reply["results"][0]["error"]:
        return False
    return reply["results"][0]["grads"]["x"] == right


def _not_added(w: Walk, i: int, got: Any, edges: list[tuple[int, Edge]],
               tol: Tolerance) -> Steps[Finding]:
    label = w.label(i)
    shown, want = _pair(got, w.grads[i])
    parts = [f"`{w.node(c).text}` ({w.grad_fn(c)}) passes {number_text(e.passed)}"
             for c, e in edges]
    only = [c for c, e in edges if same_numbers(got, e.passed, tol)]
    tail = f"; {shown} is only what `{w.node(only[0]).text}` passed" if only else ""
    if (yield from _adds_up()):
        return Finding("order", i, "\n".join([
            f"{_at(w)}backward() used the gradient of {label} before all of it had arrived: "
            f"{label} should get the sum of what its {len(edges)} consumers pass, {want}, but "
            f"got {shown}.",
            f"{'; '.join(parts)}, and each of these operations is right on its own{tail}. "
            "backward() does add up (+=) the gradients of a value whose consumers all run "
            f"first (checked on `{_TWO_USES[0].replace(chr(10), '; ')}`), so the order is at "
            "fault: visit the nodes in reverse topological order (every consumer of a node "
            "before the node), each once; a breadth-first walk from the output is not such an "
            "order."]))
    return Finding("accumulate", i, "\n".join([
        f"{_at(w)}backward() did not add up the {len(edges)} gradients that reach {label}: "
        f"{label} should get their sum, {want}, but got {shown}.",
        f"{'; '.join(parts)}, and each of these operations is right on its own{tail}. When a "
        "value is used more than once, add each incoming gradient to what is there (+=) instead "
        "of replacing it (=)."]))


# --- running operations alone on the submission -------------------------------------------------


def passed_alone(w: Walk, nodes: Sequence[int]) -> Steps[dict[tuple[int, int], Any]]:
    """(node, slot) -> what the submission passes along that edge when the operation runs alone
    on fresh leaves holding the operand values (torch's, which the submission's own agree with
    by now: a forward finding comes first), given the node's right gradient; edges the
    submission could not run are absent. The worker never receives that gradient: a scalar
    operation's backward() starts from 1 and its answer is multiplied here; a vector one's is
    given `probe_gradient` and its answer brought back to the node's gradient here."""
    nodes = [c for c in nodes if w.edges(c)]
    if not nodes:
        return {}
    reply = yield alone_request(w, nodes)
    if not isinstance(reply, dict) or reply.get("error"):
        return {}
    passed: dict[tuple[int, int], Any] = {}
    for k, (c, step) in enumerate(zip(nodes, reply["steps"])):
        if step["error"]:
            continue
        for e in w.edges(c):
            seen = step["observed"][f"grad.i{k}_{e.slot}"]
            if isinstance(seen, dict):  # reading the gradient raised
                continue
            if seen is not None and w.node(c).size is None:  # backward() gave the local slope
                seen = (np.asarray(seen, np.float64) * np.asarray(w.grads[c])).tolist()
            elif seen is not None:
                seen = _from_probe(w, c, e, seen)
            passed[(c, e.slot)] = seen
    return passed


def probe_gradient(size: int) -> list[float]:
    """The upstream gradient a vector operation run alone is given: every element nonzero and
    its neighbours different, so it tests a backward rule as well as the node's own gradient
    would, without sending torch's gradient to the worker (docs/security.md)."""
    return [float(1 + j % 3) for j in range(size)]


def _from_probe(w: Walk, c: int, e: Edge, seen: Any) -> Any:
    """What the submission passed along edge `e` of vector node `c` given `probe_gradient`,
    in terms of the node's real gradient: right there exactly when right here. An elementwise
    operand's element j scales by gradient_j / probe_j; a scalar operand (broadcast over the
    vector) receives a sum, so its distance from the right sum is kept."""
    probe = np.asarray(probe_gradient(len(w.grads[c])), np.float64)
    grad, slope = np.asarray(w.grads[c], np.float64), np.asarray(e.slope, np.float64)
    try:
        found = np.asarray(seen, np.float64)
        if w.node(e.arg).size is not None:
            return (found * grad / probe).tolist() if found.shape == grad.shape else seen
        return float(found) - float(np.sum(slope * probe)) + float(np.sum(slope * grad))
    except (TypeError, ValueError):  # not numbers of the right shape: wrong as it stands
        return seen


def alone_request(w: Walk, nodes: Sequence[int]) -> dict[str, Any]:
    """A behaviour request running each operation of `nodes` on fresh leaves (one per operand
    slot), then backward from it: with no argument for a scalar, with `probe_gradient` for a
    vector."""
    lines, inputs, point, steps = [], {}, {}, []
    for k, c in enumerate(nodes):
        node = w.node(c)
        operands = []
        for slot, a in enumerate(node.args):
            arg = w.node(a)
            if arg.op == "const":
                operands.append(f"({arg.value!r})")
                continue
            name = f"i{k}_{slot}"
            inputs[name], point[name] = arg.size, w.values[a]
            operands.append(name)
        lines.append(f"o{k} = {_expression(node, operands)}")
        backward: dict[str, Any] = {"of": f"o{k}"}
        if node.size is not None:
            backward["gradient"] = probe_gradient(node.size)
        steps.append({"backward": backward,
                      "expect": [f"grad.i{k}_{e.slot}" for e in w.edges(c)]})
    program = known("\n".join(lines), inputs)
    return {"kind": "behaviour", "program": program.spec(), "point": point,
            "requires_grad": list(inputs), "steps": steps}


def _expression(node: Any, operands: list[str]) -> str:
    op = OPS[node.op]
    if op.kind == BINARY:
        return f"{operands[0]} {op.symbol} {operands[1]}"
    if op.kind == UNARY:
        return f"-{operands[0]}"
    if op.kind == SELECT:
        return f"{operands[0]}[{node.index}]"
    return f"{operands[0]}.{op.name}()"


# --- behaviour steps ----------------------------------------------------------------------------


def step_code(step: Any, output: str) -> str:
    """A behaviour step as the engine code it runs, e.g. `z.backward(retain_graph=True)`."""
    action = step.action
    args = getattr(step, action)
    if action == "backward":
        given = [f"gradient=tensor({args.gradient!r})"] * (args.gradient is not None)
        return f"{args.of or output}.backward({', '.join(given + _flags(args))})"
    if action == "grad":
        several = isinstance(args.of, list)
        of = _tuple(args.of) if several else args.of or output
        seeds = [f"tensor({seed!r})" for seed in args.grad_outputs or ()]
        given = [f"grad_outputs={_tuple(seeds) if several else seeds[0]}"] if seeds else []
        call = ", ".join([of, _tuple(args.wrt), *given, *_flags(args)])
        return f"{', '.join(args.names)} = grad({call})"
    if action == "forward":
        return "the program again" + {
            "nested": " under no_grad(), after a nested no_grad() exited",
            "after_error": ", after a no_grad() block was left by an exception",
        }.get(args.no_grad, " under no_grad()" if args.no_grad else "")
    if action == "zero_grad":
        return "; ".join(f"{name}.grad = None" for name in args)
    if action == "retain_grad":
        return "; ".join(f"{name}.retain_grad()" for name in args)
    if action == "detach":
        return f"{args.name} = {args.of}.detach()"
    if action == "compute":
        return f"{args.name} = {args.expr}"
    if action == "requires_grad":
        return "; ".join(f"{name}.requires_grad_({flag})" for name, flag in args.items())
    return "; ".join(f"{p} = {p} - {p}.grad * {args.lr!r}" for p in args.params) + " (no_grad)"


def _tuple(items: list[str]) -> str:
    """Python's tuple of `items`: `(x,)` for one."""
    return f"({', '.join(items)}{',' * (len(items) == 1)})"


def _flags(args: Any) -> list[str]:
    """The keyword arguments a backward or grad step passes, as code."""
    given = [f"retain_graph={args.retain_graph}"] * (args.retain_graph is not None)
    given += ["create_graph=True"] * args.create_graph
    return given + ["allow_unused=True"] * bool(getattr(args, "allow_unused", False))


def observation_name(item: str) -> str:
    """`grad.x` as engine code: `x.grad`; `grad.x.is_leaf`: `x.grad.is_leaf`."""
    kind, name, field = parse_expect(item)
    if kind == WARNINGS:
        return "the warnings it issued (their categories)"
    if kind == "has_grad_fn":
        return f"whether {name}.grad_fn is set"
    if field == "has_grad_fn":
        return f"whether {name}.grad.grad_fn is set"
    return f"{name}.{kind}" + (f".{field}" if field else "")


# --- wording and comparison ---------------------------------------------------------------------


def _at(w: Walk) -> str:
    return f"At {point_text(w.point)}, "


def _where(w: Walk, i: int) -> str:
    node = w.node(i)
    several = len(w.program.source.strip().splitlines()) > 1
    line = f", line {node.line} of the program" if several else ""
    return f"`{node.text}` ({w.grad_fn(i) or node.op}{line})"


def _operand(w: Walk, c: int, e: Edge) -> str:
    args = w.node(c).args
    if args.count(e.arg) > 1:
        return f"{w.label(e.arg)} (its {('first', 'second')[e.slot]} operand)"
    return w.label(e.arg)


def _operands(w: Walk, i: int) -> str:
    args = dict.fromkeys(a for a in w.node(i).args if w.node(a).op != "const")
    return ", ".join(f"{w.label(a)} = {number_text(w.values[a])}" for a in args)


def observed_text(x: Any) -> str:
    """A value read from a submission: a number, a list, None, or the error reading it raised."""
    if isinstance(x, dict):
        return f"an error ({(x.get('error') or {}).get('type', 'Error')})"
    return number_text(x)


def _pair(found: Any, expected: Any) -> tuple[str, str]:
    if isinstance(found, dict):
        return observed_text(found), number_text(expected)
    if found is None:
        return "nothing (None)", number_text(expected)
    return pair_text(found, expected)


def _is_numbers(x: Any) -> bool:
    return type(x) in (int, float) or isinstance(x, list) and all(type(v) in (int, float)
                                                                   for v in x)


def same_numbers(found: Any, expected: Any, tol: Tolerance) -> bool:
    """Plain JSON numbers equal within `tol`; None only equals None."""
    if found is None or expected is None:
        return found is None and expected is None
    if type(found) in (int, float) and type(expected) in (int, float):
        return tol.close_number(found, expected)
    if not _is_numbers(found) or isinstance(found, list) != isinstance(expected, list):
        return False
    if isinstance(found, list) and len(found) != len(expected):
        return False
    return bool(np.all(tol.close(found, expected)))
