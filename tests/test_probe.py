"""The probe on torch (gradcheck.engine.torch_engine), checked against torch used directly, and the
probe's conversion of whatever an engine returns into plain data."""

import json
import math
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gradcheck.engine import handler, run, torch_engine, wire
from gradcheck.program.language import parse

pytestmark = pytest.mark.filterwarnings("error")  # the probe must silence torch's own warnings


def spec(source, **inputs):
    return parse(source, inputs or {"x": None}).spec()


def t(value, requires_grad=True):
    return torch.tensor(value, dtype=torch.float64, requires_grad=requires_grad)


def raised(action):
    """(type name, message) of what `action` raises on torch, or None."""
    try:
        action()
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return None


def behaviour(source, point, steps, requires_grad=("x",), **inputs):
    request = {"kind": "behaviour", "program": spec(source, **inputs), "point": point,
               "requires_grad": list(requires_grad), "steps": steps}
    reply = handler.handle(torch_engine, request)
    wire.check_reply(request, json.loads(json.dumps(reply)))
    assert reply["error"] is None
    return reply["steps"]


# --- gradients ----------------------------------------------------------------------------------

CASES = [
    ("z = x * y + x.exp()", {"x": None, "y": None}, {"x": 0.7, "y": -1.3},
     lambda x, y: x * y + x.exp()),
    ("z = (2 - x) / y ** 2 + sigmoid(x) * tanh(y)", {"x": None, "y": None}, {"x": 1.5, "y": 0.4},
     lambda x, y: (2 - x) / y ** 2 + x.sigmoid() * y.tanh()),
    ("z = (v * v).sum() + v[1] * w - mean(v.log())", {"v": 3, "w": None},
     {"v": [0.5, 1.5, 2.5], "w": -2.0},
     lambda v, w: (v * v).sum() + v[1] * w - v.log().mean()),
    ("z = relu(x) + abs(x) + x.sqrt() + sin(x) * cos(x)", {"x": None}, {"x": 0.0},
     lambda x: x.relu() + x.abs() + x.sqrt() + x.sin() * x.cos()),
]


@pytest.mark.parametrize("source, inputs, point, torch_fn", CASES, ids=[c[0] for c in CASES])
def test_gradients_are_torchs(source, inputs, point, torch_fn):
    request = {"kind": "gradients", "program": spec(source, **inputs), "points": [point],
               "requires_grad": list(inputs)}
    result = handler.handle(torch_engine, request)["results"][0]
    leaves = {name: t(value) for name, value in point.items()}
    out = torch_fn(**leaves)
    out.backward()
    assert result == {"value": out.item(), "error": None,
                      "grads": {name: leaf.grad.tolist() for name, leaf in leaves.items()}}


def test_gradients_report_each_point_on_its_own():
    request = {"kind": "gradients", "program": spec("z = x.log()"),
               "points": [{"x": 2.0}, {"x": 0.0}, {"x": -1.0}], "requires_grad": ["x"]}
    results = handler.handle(torch_engine, request)["results"]
    assert [r["value"] for r in results[:2]] == [math.log(2.0), -math.inf]
    assert results[1]["grads"] == {"x": math.inf}
    assert math.isnan(results[2]["value"]) and results[2]["grads"] == {"x": -1.0}


def test_an_input_without_requires_grad_has_no_grad():
    request = {"kind": "gradients", "program": spec("z = x * y", x=None, y=None),
               "points": [{"x": 2.0, "y": 3.0}], "requires_grad": ["x"]}
    assert handler.handle(torch_engine, request)["results"][0]["grads"] == {"x": 3.0, "y": None}


def test_progress_names_each_phase_as_it_is_entered():
    phases = []
    request = {"kind": "gradients", "program": spec("z = x ** 2"),
               "points": [{"x": 1.0}, {"x": 2.0}], "requires_grad": ["x"]}
    handler.handle(torch_engine, request, phases.append)
    assert phases == ["forward", "read", "backward", "read"] * 2
    assert set(phases) <= set(handler.PHASES)


# --- graph --------------------------------------------------------------------------------------

GRAPH = "a = x + 2\nb = 2 - x\nc = 2 / x\nd = 2 ** x\ne = x ** y\nf = -x\ng = v[0]\nh = v.mean()"


def test_graph_facts_are_torchs():
    inputs = {"x": None, "y": None, "v": 2}
    request = {"kind": "graph", "program": spec(GRAPH, **inputs),
               "point": {"x": 1.5, "y": 2.0, "v": [1.0, 2.0]}, "requires_grad": ["x", "v"],
               "names": ["x", "y", "a", "b", "c", "d", "e", "f", "g", "h"]}
    reply = handler.handle(torch_engine, request)
    x, y, v = t(1.5), t(2.0, requires_grad=False), t([1.0, 2.0])
    made = {"x": x, "y": y, "a": x + 2, "b": 2 - x, "c": 2 / x, "d": 2 ** x, "e": x ** y,
            "f": -x, "g": v[0], "h": v.mean()}
    assert reply["error"] is None
    for name, tensor in made.items():
        assert reply["nodes"][name] == {
            "grad_fn": tensor.grad_fn.name() if tensor.grad_fn else None,
            "is_leaf": tensor.is_leaf, "requires_grad": tensor.requires_grad,
            "value": tensor.tolist()}, name


# --- behaviour ----------------------------------------------------------------------------------


def test_a_second_backward_through_saved_values_raises_torchs_error():
    steps = behaviour("y = x ** 2\nz = 2 * y + 1", {"x": 3.0}, [
        {"backward": {"retain_graph": True}, "expect": ["grad.x"]},
        {"backward": {}, "expect": ["grad.x"]},
        {"backward": {}, "expect": ["grad.x"]},
    ])
    x = t(3.0)
    z = 2 * x ** 2 + 1
    z.backward(retain_graph=True)
    z.backward()
    error = raised(z.backward)
    assert [s["observed"]["grad.x"] for s in steps] == [12.0, 24.0, 24.0]
    assert [s["error"] for s in steps[:2]] == [None, None]
    assert (steps[2]["error"]["type"], steps[2]["error"]["message"]) == error
    assert steps[2]["error"]["phase"] == "backward"


def test_zero_grad_retain_grad_and_a_non_leafs_grad():
    steps = behaviour("y = x * 3\nz = y * y", {"x": 2.0}, [
        {"retain_grad": ["y"]},
        {"backward": {}, "expect": ["grad.x", "grad.y", "grad.z"]},
        {"zero_grad": ["x"], "expect": ["grad.x"]},
    ])
    x = t(2.0)
    y = x * 3
    y.retain_grad()
    (y * y).backward()
    assert steps[1]["observed"] == {"grad.x": x.grad.item(), "grad.y": y.grad.item(),
                                    "grad.z": None}
    assert steps[2]["observed"] == {"grad.x": None}


def test_detach_no_grad_and_requires_grad_on_a_non_leaf():
    steps = behaviour("y = x.exp()\nz = y + 1", {"x": 0.5}, [
        {"detach": {"name": "d", "of": "y"},
         "expect": ["requires_grad.d", "is_leaf.d", "grad_fn.d", "value.d"]},
        {"requires_grad": {"y": False}},
        {"backward": {"of": "d"}},
        {"forward": {"no_grad": True}, "expect": ["requires_grad.z", "is_leaf.z", "grad_fn.z"]},
    ])
    y = t(0.5).exp()
    d = y.detach()
    assert steps[0]["observed"] == {"requires_grad.d": False, "is_leaf.d": True,
                                    "grad_fn.d": None, "value.d": d.item()}
    assert (steps[1]["error"]["type"], steps[1]["error"]["message"]) == raised(
        lambda: y.requires_grad_(False))
    assert (steps[2]["error"]["type"], steps[2]["error"]["message"]) == raised(d.backward)
    assert steps[3]["observed"] == {"requires_grad.z": False, "is_leaf.z": True,
                                    "grad_fn.z": None}


def test_a_vector_backward_takes_a_gradient_and_checks_its_shape():
    steps = behaviour("y = v ** 2", {"v": [1.0, 2.0, 3.0]}, [
        {"backward": {"gradient": [1.0, 0.1, 0.01]}, "expect": ["grad.v"]},
        {"forward": {}},
        {"backward": {"gradient": [1.0, 1.0]}},
        {"forward": {}},
        {"backward": {}},
    ], requires_grad=("v",), v=3)
    v = t([1.0, 2.0, 3.0])
    y = v ** 2
    y.backward(gradient=t([1.0, 0.1, 0.01], requires_grad=False))
    assert steps[0]["observed"]["grad.v"] == v.grad.tolist()
    y2 = v ** 2
    assert (steps[2]["error"]["type"], steps[2]["error"]["message"]) == raised(
        lambda: y2.backward(gradient=t([1.0, 1.0], requires_grad=False)))
    assert (steps[4]["error"]["type"], steps[4]["error"]["message"]) == raised(
        lambda: (v ** 2).backward())


def test_sgd_makes_a_new_leaf_from_the_gradient():
    steps = behaviour("z = (w - 1) ** 2", {"w": 3.0}, [
        {"backward": {}},
        {"sgd": {"lr": 0.25, "params": ["w"]},
         "expect": ["value.w", "grad.w", "is_leaf.w", "requires_grad.w"]},
        {"forward": {}},
        {"backward": {}, "expect": ["grad.w"]},
    ], requires_grad=("w",), w=None)
    w = t(3.0)
    ((w - 1) ** 2).backward()
    with torch.no_grad():
        w = w - 0.25 * w.grad
    w.requires_grad_()
    assert steps[1]["observed"] == {"value.w": w.item(), "grad.w": None, "is_leaf.w": True,
                                    "requires_grad.w": True}
    ((w - 1) ** 2).backward()
    assert steps[3]["observed"] == {"grad.w": w.grad.item()}


# --- trace --------------------------------------------------------------------------------------


def test_trace_gives_every_nodes_value_and_grad_as_torch_does():
    request = {"kind": "trace", "program": spec("y = x ** 2\nz = 2 * y + 1"),
               "point": {"x": 3.0}, "requires_grad": ["x"]}
    reply = handler.handle(torch_engine, request)
    x = t(3.0)
    nodes = [x, x ** 2]
    nodes.append(2 * nodes[1])
    nodes.append(nodes[2] + 1)
    for node in nodes[1:]:
        node.retain_grad()
    nodes[3].backward()
    assert reply["error"] is None
    program = parse(request["program"]["source"], {"x": None})
    assert [program.nodes[n["id"]].text for n in reply["nodes"]] == ["x", "x ** 2", "2 * y",
                                                                    "2 * y + 1"]
    assert all(set(n) == {"id", "value", "grad"} for n in reply["nodes"])
    assert [n["value"] for n in reply["nodes"]] == [n.item() for n in nodes]
    assert [n["grad"] for n in reply["nodes"]] == [n.grad.item() for n in nodes]


def test_trace_records_torchs_refusal_to_retain_a_grad_that_needs_none():
    request = {"kind": "trace", "program": spec("y = c * 2\nz = y * x", x=None, c=None),
               "point": {"x": 3.0, "c": 1.0}, "requires_grad": ["x"]}
    y = t(1.0, requires_grad=False) * 2
    program = parse(request["program"]["source"], {"x": None, "c": None})
    nodes = {program.nodes[n["id"]].name: n
             for n in handler.handle(torch_engine, request)["nodes"]}
    error = nodes["y"]["grad"]["error"]
    assert (error["type"], error["message"]) == raised(y.retain_grad)
    assert nodes["x"]["grad"] == 2.0



def test_a_trace_names_the_use_that_raised_at_its_node_and_reads_every_other():
    """A trace reads two fields of thousands of nodes and records what was used only when a
    read raises (`Run.field`): the record still names the piece, the node and whether the
    object has it, and every other node is read as ever."""
    class Refusing(torch.Tensor):  # y's class; what it adds to is a plain tensor again
        pass

    def tensor(data, requires_grad=False):
        return torch.tensor(data, dtype=torch.float64, requires_grad=requires_grad)

    def refuse(*args):
        raise ValueError("not this one")

    request = {"kind": "trace", "program": spec("y = x * 2\nz = y + 1"),
               "point": {"x": 3.0}, "requires_grad": ["x"]}
    program = parse(request["program"]["source"], {"x": None})
    y_node = program.names["y"]
    original = torch.Tensor.__mul__

    def mul(self, other):  # y: a tensor whose tolist() and retain_grad() raise
        return original(self, other).as_subclass(Refusing)

    Refusing.tolist = refuse
    Refusing.retain_grad = refuse
    Refusing.__add__ = lambda self, other: self.as_subclass(torch.Tensor) + other
    engine = SimpleNamespace(tensor=tensor, no_grad=torch.no_grad)
    torch.Tensor.__mul__ = mul
    try:
        nodes = {n["id"]: n for n in handler.handle(engine, request)["nodes"]}
    finally:
        torch.Tensor.__mul__ = original
    value, grad = nodes[y_node]["value"]["error"], nodes[y_node]["grad"]["error"]
    assert (value["type"], value["message"], value["piece"], value["node"], value["absent"]) == (
        "ValueError", "not this one", "tolist", y_node, False)
    assert (grad["piece"], grad["node"], grad["phase"]) == ("retain_grad", y_node,
                                                             "retain_grad")
    z = nodes[program.names["z"]]
    assert (z["value"], z["grad"]) == (7.0, 1.0)
    assert nodes[program.names["x"]]["grad"] == 2.0


# --- inspect ------------------------------------------------------------------------------------


def test_torch_has_the_whole_protocol():
    assert handler.handle(torch_engine, {"kind": "inspect"}) == {
        "missing": [], "details": {}, "error": None}


def test_inspect_names_missing_operators_and_functions():
    class Half:  # has __add__ but not __radd__, and no methods at all
        def __add__(self, other):
            return self

    engine = SimpleNamespace(tensor=lambda data, requires_grad=False: Half())
    reply = handler.handle(engine, {"kind": "inspect"})
    assert reply["missing"][:3] == ["no_grad", "add", "sub"]
    assert reply["details"]["add"] == ("tensors made by tensor(1.0) have no __radd__; tensors "
                                       "made by tensor([1.0, 2.0]) have no __radd__")
    assert "tanh" in reply["missing"] and "grad_fn" in reply["missing"]


# --- plain data ---------------------------------------------------------------------------------


class Liar(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__

    def __float__(self):
        return 0.0


def test_float_subclasses_become_the_float_they_store():
    value = run.plain_numbers(Liar(2.5), "x")
    assert type(value) is float and value == 2.5
    assert run.plain_numbers([Liar(1.0), np.float64(2.0), 3], "v") == [1.0, 2.0, 3.0]
    assert all(type(v) is float for v in run.plain_numbers((np.float64(1.0), 2), "v"))


def test_nan_and_infinities_pass_through():
    values = run.plain_numbers([math.nan, math.inf, -math.inf], "v")
    assert math.isnan(values[0]) and values[1:] == [math.inf, -math.inf]


@pytest.mark.parametrize("value, message", [
    (True, "x is a bool, not a number or a list of numbers"),
    ("1.0", "x is a str, not a number or a list of numbers"),
    ([1.0, [2.0]], "element 1 of x is a list, not a number"),
    ([1.0, None], "element 1 of x is a NoneType, not a number"),
    ([0.0] * 100_001, "x has 100001 elements; at most 100000 are expected"),
    (np.array([1.0]), "x is a numpy.ndarray, not a number or a list of numbers"),
])
def test_anything_else_is_a_protocol_error_that_names_it(value, message):
    with pytest.raises(wire.ProtocolError) as caught:
        run.plain_numbers(value, "x")
    assert str(caught.value) == message


def test_grads_go_through_tolist_and_are_checked_again():
    assert run.plain_grad(t([1.0, 2.0]), "v") == [1.0, 2.0]
    assert run.plain_grad(np.array([1.0, 2.0]), "v") == [1.0, 2.0]
    assert run.plain_grad(None, "v") is None
    lying = SimpleNamespace(tolist=lambda: "12.0")
    with pytest.raises(wire.ProtocolError, match=r"^v.grad.tolist\(\) is a str"):
        run.plain_grad(lying, "v")
    with pytest.raises(wire.ProtocolError, match="^backward left x.grad as a dict"):
        run.plain_grad({}, "x")


def test_flags_and_grad_fn_names_must_be_exactly_what_torch_gives():
    assert run.plain_flag(True, "x.is_leaf") is True
    with pytest.raises(wire.ProtocolError, match=r"^x.is_leaf is a int, not True or False$"):
        run.plain_flag(1, "x.is_leaf")
    named = SimpleNamespace(name=lambda: 42)
    with pytest.raises(wire.ProtocolError, match=r"grad_fn.name\(\) returned a int"):
        run.plain_grad_fn(named, "y")
    assert run.plain_grad_fn(SimpleNamespace(name=lambda: "AddBackward0" * 50), "y") == (
        "AddBackward0" * 50)[:run.MAX_NAME]


def test_error_records_survive_unprintable_and_lying_exceptions():
    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no")

    class Meta(type):
        @property
        def __name__(cls):
            return "RuntimeError"

    class Disguised(Exception, metaclass=Meta):
        pass

    assert run.error_record(Unprintable(), "read") == {
        "type": "Unprintable", "kinds": ["Exception", "BaseException"],
        "message": "(its message could not be read)", "phase": "read"}
    # the builtin classes it derives from, by their real names too: no RuntimeError among them
    assert run.error_record(Disguised("x" * 5000), "backward") == {
        "type": "Disguised", "kinds": ["Exception", "BaseException"],
        "message": "x" * run.MAX_MESSAGE, "phase": "backward"}


def test_memory_errors_are_not_recorded_but_end_the_request():
    def tensor(data, requires_grad=False):
        raise MemoryError

    engine = SimpleNamespace(tensor=tensor, no_grad=torch_engine.no_grad)
    request = {"kind": "gradients", "program": spec("z = x * 2"), "points": [{"x": 1.0}],
               "requires_grad": ["x"]}
    with pytest.raises(MemoryError):
        handler.handle(engine, request)


# --- requests and replies -----------------------------------------------------------------------

GOOD = {"kind": "gradients", "program": spec("z = x * 2"), "points": [{"x": 1.0}],
        "requires_grad": ["x"]}


@pytest.mark.parametrize("change, message", [
    ({"expected": [2.0]}, "keys"),
    ({"kind": "evaluate"}, "unknown request kind"),
    ({"points": [{"x": "1"}]}, "input x needs a number"),
    ({"points": [{"y": 1.0}]}, "a point gives exactly the inputs"),
    ({"requires_grad": ["y"]}, "requires_grad must list inputs"),
    ({"program": {"source": "z = x.grad", "inputs": {"x": None}, "output": "z"}},
     "does not parse"),
])
def test_malformed_requests_are_refused(change, message):
    with pytest.raises(wire.RequestError, match=message):
        wire.check_request({**GOOD, **change})


class _Float(float):
    """A float subclass: an engine's, whose arithmetic could be anything; never a JSON number."""


_ANY_ITEM = st.one_of(st.floats(), st.integers(), st.integers(10**308, 10**400),
                      st.booleans(), st.none(), st.text(max_size=3), st.floats().map(_Float))


@settings(max_examples=300, deadline=None)
@given(st.lists(_ANY_ITEM, min_size=3, max_size=3))
def test_a_vector_input_is_refused_unless_every_element_is_a_json_number(values):
    """Requests and replies read a list of numbers in one pass over the types; a bool, a string,
    None, an integer no double holds, or a float subclass anywhere in it is still refused."""
    numbers = all(type(v) is float or type(v) is int and abs(v) <= sys.float_info.max
                  for v in values)
    request = {"kind": "gradients", "program": spec("z = v.sum()", v=3), "points": [{"v": values}],
               "requires_grad": ["v"]}
    if numbers:
        wire.check_request(request)
    else:
        with pytest.raises(wire.RequestError, match="input v needs 3 numbers"):
            wire.check_request(request)
    reply = {"results": [{"value": 1.0, "grads": {"v": values}, "error": None}]}
    if numbers:
        wire.check_reply(request, reply)
    else:
        with pytest.raises(wire.ProtocolError, match="grads"):
            wire.check_reply(request, reply)


@pytest.mark.parametrize("steps, message", [
    ([{"backward": {}, "forward": {}}], "exactly one action"),
    ([{"zero_grad": ["q"]}], "unknown names"),
    ([{"backward": {}, "expect": ["grad.q"]}], "cannot observe"),
    ([{"sgd": {"lr": 0.1, "params": ["z"]}}], "malformed sgd"),
    ([{"detach": {"name": "d"}}], "malformed detach"),
])
def test_malformed_steps_are_refused(steps, message):
    request = {"kind": "behaviour", "program": spec("z = x * 2"), "point": {"x": 1.0},
               "requires_grad": ["x"], "steps": steps}
    with pytest.raises(wire.RequestError, match=message):
        wire.check_request(request)


def test_steps_as_the_exercise_model_dumps_them_are_accepted():
    from gradcheck.bank.models import Step

    steps = [Step.model_validate(s).model_dump() for s in (
        {"backward": None, "expect": ["grad.x"]}, {"detach": {"name": "d", "of": "z"}},
        {"sgd": {"lr": 0.1, "params": ["x"]}, "expect": ["value.x"]})]
    request = {"kind": "behaviour", "program": spec("z = x * 2"), "point": {"x": 1.0},
               "requires_grad": ["x"], "steps": steps}
    reply = handler.handle(torch_engine, request)
    assert [s["observed"] for s in reply["steps"]] == [{"grad.x": 2.0}, {}, {"value.x": 0.8}]


def test_replies_of_every_kind_pass_the_check_and_forgeries_do_not():
    requests = [
        {"kind": "inspect"}, GOOD,
        {"kind": "graph", "program": GOOD["program"], "point": {"x": 1.0}, "requires_grad": [],
         "names": ["x", "z"]},
        {"kind": "trace", "program": GOOD["program"], "point": {"x": 1.0},
         "requires_grad": ["x"]},
    ]
    for request in requests:
        wire.check_reply(request, json.loads(json.dumps(handler.handle(torch_engine, request))))
    forged = [{"results": [{"value": 2.0, "grads": {"x": "2.0"}, "error": None}]},
              {"results": []},
              {"results": [{"value": 2.0, "grads": {"x": 2.0}, "error": "none"}]},
              {"results": [{"value": True, "grads": {"x": 2.0}, "error": None}]},
              {"results": [{"value": None, "grads": {"x": 2.0}, "error": None}]},
              [1.0]]
    for reply in forged:
        with pytest.raises(wire.ProtocolError, match="^malformed reply"):
            wire.check_reply(GOOD, reply)



# --- uses: what an error was doing ---------------------------------------------------------------


def test_an_error_names_the_use_that_failed_and_python_s_own_fallbacks_count():
    class Forward:  # __pow__ but no __rpow__, as many small engines
        def __init__(self, v):
            self.v = v

        def __pow__(self, e):
            return Forward(self.v ** e)

        def tolist(self):
            return self.v

        def backward(self):
            pass

    engine = SimpleNamespace(tensor=lambda data, requires_grad=False: Forward(data),
                             no_grad=None)
    square = parse("z = x ** 2", {"x": None}).spec()
    reply = handler.handle(engine, {"kind": "gradients", "program": square,
                                    "points": [{"x": 3.0}], "requires_grad": []})
    assert reply["results"][0]["value"] == 9.0 and reply["results"][0]["error"] is None
    base = parse("z = 2 ** x", {"x": None}).spec()
    error = handler.handle(engine, {"kind": "gradients", "program": base, "points": [{"x": 3.0}],
                                    "requires_grad": ["x"]})["results"][0]["error"]
    assert (error["type"], error["piece"], error["node"], error["absent"]) == (
        "TypeError", "__rpow__", 2, True)
    wire.check_reply({"kind": "gradients", "program": base, "points": [{"x": 3.0}]},
                     {"results": [{"value": None, "grads": {"x": None}, "error": error}]})
    with pytest.raises(wire.ProtocolError):  # a piece outside the closed list is refused
        wire.check_reply({"kind": "gradients", "program": base, "points": [{"x": 3.0}]},
                         {"results": [{"value": None, "grads": {"x": None},
                                       "error": {**error, "piece": "anything you like"}}]})


def test_a_fresh_tensor_without_grad_costs_nothing_until_grad_is_read():
    class NoGradYet:  # .grad appears at the first backward, as in some course solutions
        def __init__(self, v):
            self.v = v

        def __mul__(self, other):
            return NoGradYet(self.v * (other.v if isinstance(other, NoGradYet) else other))

        def tolist(self):
            return self.v

        def backward(self):
            self.grad = 1.0

    engine = SimpleNamespace(tensor=lambda data, requires_grad=False: NoGradYet(data))
    program = parse("z = x * 3", {"x": None, "y": None}).spec()
    reply = handler.handle(engine, {"kind": "gradients", "program": program,
                                    "points": [{"x": 1.0, "y": 2.0}], "requires_grad": ["x"]})
    error = reply["results"][0]["error"]  # x.grad was read (y's never is: it is not graded)
    assert (error["type"], error["phase"], error["piece"], error["absent"]) == (
        "AttributeError", "read", "grad", True)
