"""Interval bounds over programs, and the kinks, poles and domain edges they confirm
(gradcheck.bank.reach, from the `bound` and `edges` of each operation in the table)."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradcheck.bank.reach import bounded, reached
from gradcheck.program.language import parse
from gradcheck.program.ops import EDGE, KINK, OPS, POLE, REDUCTION, SELECT, Interval

INTERVALS = st.tuples(st.floats(-6, 6), st.floats(-6, 6)).map(sorted)


@pytest.mark.parametrize("name", sorted(OPS))
@given(data=st.data())
def test_each_operations_bounds_hold_its_values(name, data):
    """Every value of an operation at arguments inside their bounds lies inside the bounds its
    rule gives (interval arithmetic may be wide, never narrow)."""
    op = OPS[name]
    intervals = [data.draw(INTERVALS) for _ in range(op.arity)]
    if name == "pow" and data.draw(st.booleans()):  # a constant exponent: a point interval
        c = data.draw(st.sampled_from([2.0, 3.0, -1.0, -2.0, 0.5, 1.5, 0.0]))
        intervals[1] = [c, c]
    args = [g.ravel() for g in np.meshgrid(*(np.linspace(lo, hi, 41) for lo, hi in intervals))]
    vector = op.kind in (REDUCTION, SELECT)  # 41 elements of one value, not 41 values
    shape = args[0].shape if vector else ()
    bounds = [(np.full(shape, lo), np.full(shape, hi)) for lo, hi in intervals]
    index = (3,) if op.kind == SELECT else ()
    with np.errstate(all="ignore"):
        values = np.asarray(op.array(np, *args, *index))
        lo, hi = op.bound(np, *bounds, *index)
    finite = values[np.isfinite(values)]
    slack = 1e-9 * (1 + np.abs(finite))
    assert np.all(finite >= lo - slack), (intervals, lo)
    assert np.all(finite <= hi + slack), (intervals, hi)


def test_every_operation_has_a_bound_rule():
    assert [name for name, op in OPS.items() if op.bound is None] == []


def _reached(source, domains, values=None, margin=0.05):
    inputs = {name: None for name in domains}
    inputs.update({name: len(v) for name, v in (values or {}).items() if isinstance(v, list)})
    inputs.update({name: None for name in values or {} if name not in inputs})
    program = parse(source, inputs)
    fixed = {name: 0.5 for name in domains} | (values or {})
    return program, reached(program, fixed, {n: Interval(*d) for n, d in domains.items()},
                            margin)


@pytest.mark.parametrize("source, domains, kind, argument, roots", [
    # on any operation's argument, not only an input
    ("z = (u - 0.5).abs()", {"u": (-1, 1)}, KINK, "u - 0.5", (0.5,)),
    ("z = (x - 1).relu()", {"x": (-2, 2)}, KINK, "x - 1", (1.0,)),
    ("z = abs(x.sin())", {"x": (-5, 5)}, KINK, "x.sin()", (-3.14159, 0.0, 3.14159)),
    ("z = (x - 2).log()", {"x": (-1, 3)}, EDGE, "x - 2", (2.0,)),
    ("z = (x * x).sqrt()", {"x": (-1, 1)}, EDGE, "x * x", (0.0,)),
    ("z = 1 / (x - 1)", {"x": (-2, 2)}, POLE, "x - 1", (1.0,)),
    ("z = (x - 1) ** -2", {"x": (-2, 2)}, POLE, "x - 1", (1.0,)),
    ("z = (x - 1) ** 0.5", {"x": (-2, 2)}, EDGE, "x - 1", (1.0,)),
    ("z = x ** (x + 1)", {"x": (-1, 2)}, EDGE, "x", (0.0,)),  # a tensor exponent
    ("z = 2 / (x - y)", {"x": (-1, 1), "y": (-1, 1)}, POLE, "x - y", ()),
])
def test_an_edge_is_found_on_any_argument(source, domains, kind, argument, roots):
    _, [hit] = _reached(source, domains)
    assert (hit.kind, hit.argument.text, hit.roots) == (kind, argument, roots)
    assert hit.inputs == tuple(domains)


@pytest.mark.parametrize("source, domains", [
    ("z = (u - 0.5).abs()", {"u": (-1, 1, (0.5,))}),  # avoided
    ("z = (x - 2).log()", {"x": (2.5, 4)}),  # narrowed
    ("z = x ** 3 - x ** 2 + x ** 0", {"x": (-3, 3)}),  # whole powers are polynomials
    ("z = 2 ** x", {"x": (-3, 3)}),  # a positive constant base
    ("z = (x * x + 1).log()", {"x": (-3, 3)}),
])
def test_a_clear_domain_reaches_nothing(source, domains):
    assert _reached(source, domains)[1] == []


def test_a_corner_of_the_region_is_searched():
    """x * y < -3.7 only in two corners of (-1.95, 1.95)^2, a thousandth of the region."""
    _, [hit] = _reached("z = (x * y + 3.7).log()", {"x": (-2, 2), "y": (-2, 2)})
    assert hit.kind == EDGE and math.isclose(hit.lowest, 3.7 - 1.95 ** 2, abs_tol=1e-9)
    assert _reached("z = (x * y + 3.9).log()", {"x": (-2, 2), "y": (-2, 2)})[1] == []


def test_interval_arithmetic_alone_is_not_trusted():
    """`(x - 1) * (x - 1) + 1` is at least 1, but its bounds over (-1, 2) are [-1, 5]: the two
    factors are bounded as if they could differ. The candidate has no witness, so nothing is
    reported."""
    program, hits = _reached("a = x - 1\nz = (a * a + 1).sqrt()", {"x": (-1, 2)})
    assert [program.nodes[i].text for i, _, _ in bounded(program, {}, {"x": (-0.95, 1.95)})] \
        == ["(a * a + 1).sqrt()"]
    assert hits == []


def test_fixed_inputs_keep_their_values():
    """An input without a domain is not sampled: its value is a point interval, element by
    element (only w[1] is negative, and only its log is reached)."""
    program = parse("z = x * w[0].log() + w[1].log()", {"x": None, "w": 3})
    [hit] = reached(program, {"x": 0.5, "w": [0.5, -0.5, 2.0]}, {"x": Interval(-1, 1)}, 0.05)
    assert (hit.node.text, hit.inputs) == ("w[1].log()", ())
    assert reached(program, {"x": 0.5, "w": [0.5, 0.5, 2.0]}, {"x": Interval(-1, 1)}, 0.05) == []


def test_a_one_d_sampled_input():
    program = parse("z = (v - 1).relu().sum() + (v.sum() + 4).log() + v.mean().exp()",
                    {"v": 3})
    [kink, edge] = reached(program, {"v": [0.0, 0.0, 0.0]}, {"v": Interval(-2, 2)}, 0.05)
    # no value of v to avoid is named: avoid cuts each element, and a sum's crossing is not one
    assert (kink.node.text, kink.kind, kink.inputs, kink.roots) == ("(v - 1).relu()", KINK,
                                                                    ("v",), ())
    # the sum of three elements in (-1.95, 1.95) reaches -5.85: log(v.sum() + 4) is not defined
    assert (edge.node.text, edge.kind) == ("(v.sum() + 4).log()", EDGE)
    assert math.isclose(edge.lowest, -1.85, abs_tol=0.01)


def test_the_margin_is_what_is_sampled():
    """A kink just past the sampled region (x is kept 0.05 inside its ends) is not reached."""
    assert _reached("z = (x - 1.98).relu()", {"x": (-2, 2)})[1] == []
    assert _reached("z = (x - 1.9).relu()", {"x": (-2, 2)})[1] != []


def test_a_loop_reports_each_place_once():
    program, hits = _reached("y = x\nfor _ in range(5):\n    y = (y - 0.1).abs()", {"x": (-1, 1)})
    assert len(hits) == 1
