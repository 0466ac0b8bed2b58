"""A failed use of the engine, worded from the grader's own program (gradcheck.grading.uses)."""

from gradcheck.grading.uses import describe
from gradcheck.program.language import parse

PROGRAM = parse("z = 2 ** x + x ** 2 + v.sum()", {"x": None, "v": 2})


def record(piece, node=None, absent=False, kind="TypeError", message="boom", phase="forward"):
    error = {"type": kind, "message": message, "phase": phase, "piece": piece, "absent": absent}
    return error if node is None else {**error, "node": node}


def node_of(text):
    return next(i for i, n in enumerate(PROGRAM.nodes) if n.text == text)


def test_an_absent_reflected_operator_is_named_with_its_form():
    use = describe(PROGRAM, record("__rpow__", node_of("2 ** x"), absent=True,
                                   message="unsupported operand type(s)\nsecond line"))
    assert (use.piece, use.missing) == ("__rpow__", True)
    assert use.sentence == ("your engine is missing `__rpow__`: `2 ** x` needs it (TypeError: "
                            "unsupported operand type(s))")


def test_a_stub_counts_as_missing_and_a_bug_does_not():
    stub = describe(PROGRAM, record("sum", node_of("v.sum()"), kind="NotImplementedError",
                                    message="not written yet"))
    assert (stub.piece, stub.missing) == ("sum()", True)
    assert stub.sentence == ("your engine is missing `sum()`: `v.sum()` needs it, and it raised "
                             "NotImplementedError: not written yet")
    bug = describe(PROGRAM, record("__pow__", node_of("x ** 2"), kind="ZeroDivisionError"))
    assert not bug.missing
    assert bug.sentence == "your engine raised ZeroDivisionError in `x ** 2` (`__pow__`): boom"


def test_a_vector_leaf_that_cannot_be_made_means_no_1d_tensors():
    v = next(i for i, n in enumerate(PROGRAM.nodes) if n.name == "v" and n.op == "input")
    use = describe(PROGRAM, record("tensor", v, message="float() argument must be a real number"))
    assert (use.piece, use.missing) == ("tensor([...])", True)
    assert use.sentence.startswith("your engine is missing 1-D tensors: `tensor([...])`, a 1-D "
                                   "tensor, is not supported (making the input v raised")


def test_a_grad_read_after_backward_is_a_wrong_value_not_a_missing_piece():
    use = describe(PROGRAM, record("grad", 0, absent=True, kind="AttributeError", phase="read"))
    assert not use.missing
    assert use.sentence.startswith("your engine raised AttributeError reading `x.grad` after "
                                   "backward()")


def test_records_that_name_nothing_or_nonsense_give_no_use():
    assert describe(PROGRAM, {"type": "E", "message": "", "phase": "forward"}) is None
    assert describe(PROGRAM, record("__rpow__", 999)) is None
    assert describe(PROGRAM, record("os.system")) is None
