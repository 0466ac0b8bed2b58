"""The program language: what it accepts, what it refuses and where it says the problem is."""

from __future__ import annotations

import sys
import unicodedata

import numpy as np
import pytest

from gradcheck.program.language import (
    MAX_NODES,
    MAX_SOURCE_CHARS,
    ProgramError,
    array_apply,
    evaluate,
    parse,
    spec_program,
)
from gradcheck.program.ops import CALLABLE

INPUTS = {"x": None, "u": None, "v": 3, "w": 2}

# (source, line, column, words the message must contain): each construct outside the allow-list.
FORBIDDEN = {
    "attribute read": ("y = x.grad", 1, 5, "attribute access"),
    "dunder attribute": ("y = x.__class__", 1, 5, "names starting with an underscore"),
    "dunder method": ("y = x.__neg__()", 1, 5, "underscore"),
    "dunder builtin": ("y = __import__('os')", 1, 5, "underscore"),
    "protocol method that is no operation": ("y = x.backward()", 1, 7, "unknown method"),
    "unknown function": ("y = open(x)", 1, 5, "unknown function 'open'"),
    "a module's function": ("z = x * 2\ny = math.exp(z)", 2, 5,
                            "calls exp as `exp(z)` or `z.exp()`, not through `math`"),
    "undefined name": ("y = x\nz = y * q", 2, 9, "'q' is not defined"),
    "name used before assignment": ("z = y * 2\ny = x", 1, 5, "'y' is not defined"),
    "lambda": ("y = (lambda a: a)(x)", 1, 6, "lambda"),
    "lambda value": ("f = lambda: x", 1, 5, "lambda"),
    "list comprehension": ("y = sum([x for _ in range(3)])", 1, 9, "comprehension"),
    "generator": ("y = sum(x for x in [1])", 1, 8, "generator"),
    "string": ("y = x * 'a'", 1, 9, "only numbers"),
    "f-string": ("y = f'{x}'", 1, 5, "JoinedStr"),
    "bool constant": ("y = x * True", 1, 9, "only numbers"),
    "None": ("y = x + None", 1, 9, "only numbers"),
    "complex constant": ("y = x * 2j", 1, 9, "only numbers"),
    "oversized constant": ("y = x * 1e13", 1, 9, "too large"),
    "oversized negative constant": ("y = x * -1e13", 1, 10, "too large"),
    "oversized folded constant": ("y = x * 10 ** 20", 1, 9, "too large"),
    "constant that overflows": ("y = x * 10.0 ** 400", 1, 9, "inf"),
    "import": ("y = x\nimport os", 2, 1, "import"),
    "from import": ("from os import path", 1, 1, "import"),
    "function definition": ("def f(a):\n    return a", 1, 1, "function definition"),
    "if": ("y = x\nif y:\n    z = y", 2, 1, "if statement"),
    "while": ("while x:\n    y = x", 1, 1, "while loop"),
    "with": ("with x:\n    y = x", 1, 1, "With"),
    "try": ("try:\n    y = x\nexcept Exception:\n    y = x", 1, 1, "Try"),
    "class": ("class A:\n    pass", 1, 1, "ClassDef"),
    "bare expression": ("y = x\nprint(y)", 2, 1, "bare expression"),
    "comparison": ("y = x > 1", 1, 5, "comparison"),
    "conditional": ("y = x if x else 1", 1, 5, "conditional"),
    "walrus": ("y = (z := x)", 1, 6, "NamedExpr"),
    "tuple unpacking": ("a, b = x, y", 1, 1, "exactly one plain name"),
    "chained assignment": ("a = b = x", 1, 1, "exactly one plain name"),
    "subscript assignment": ("v[0] = x", 1, 1, "exactly one plain name"),
    "attribute assignment": ("x.grad = 1", 1, 1, "exactly one plain name"),
    "augmented assignment": ("y = x\ny += 1", 2, 1, "augmented assignment"),
    "reassigned input": ("y = x\nx = y * 2", 2, 1, "'x' is an input"),
    "underscore target": ("_y = x", 1, 1, "underscore"),
    "keyword argument": ("y = exp(x, out=x)", 1, 5, "keyword"),
    "two arguments": ("y = exp(x, y)", 1, 5, "exactly one tensor"),
    "starred argument": ("y = exp(*v)", 1, 5, "exactly one tensor"),
    "call of a call": ("y = exp(x)(x)", 1, 5, "cannot be called"),
    "floor division": ("y = x // 2", 1, 5, "operator //"),
    "modulo": ("y = x % 2", 1, 5, "operator %"),
    "matrix product": ("y = v @ v", 1, 5, "operator @"),
    "bitwise xor": ("y = x ^ 2", 1, 5, "operator ^"),
    "unary plus": ("y = +x", 1, 5, "unary +"),
    "not": ("y = not x", 1, 5, "operator not"),
    "slice": ("y = v[0:2]", 1, 7, "whole number"),
    "index by a variable": ("i = 1\ny = v[i]", 2, 7, "whole number"),
    "index by a float": ("y = v[1.0]", 1, 7, "whole number"),
    "list": ("y = [x, y]", 1, 5, "a list"),
    "dict": ("y = {}", 1, 5, "Dict"),
    "loop over a name": ("y = x\nfor i in range(3):\n    y = y * 2", 2, 5, "for _ in range(N)"),
    "loop with start": ("y = x\nfor _ in range(1, 3):\n    y = y * 2", 2, 1, "range(N)"),
    "loop to a variable": ("n = 3\nfor _ in range(n):\n    y = x", 2, 1, "whole number N"),
    "loop over a list": ("for _ in [1, 2]:\n    y = x", 1, 1, "range(N)"),
    "loop with else": ("for _ in range(2):\n    y = x\nelse:\n    y = x", 1, 1, "range(N)"),
    "loop variable read": ("y = x\nfor _ in range(2):\n    y = y * _", 3, 13, "underscore"),
    "oversized loop": ("y = x\nfor _ in range(300000):\n    y = y + x", 2, 16, "outside"),
    "syntax error": ("y = = x", 1, 5, "not valid syntax"),
    "empty program": ("# nothing here", 1, 1, "empty"),
    "return": ("return x", 1, 1, "Return"),
    "global": ("global y", 1, 1, "Global"),
}


@pytest.mark.parametrize("source, line, column, words", FORBIDDEN.values(), ids=FORBIDDEN.keys())
def test_each_forbidden_construct_is_refused_with_its_position(source, line, column, words):
    with pytest.raises(ProgramError) as info:
        parse(source, INPUTS)
    error = info.value
    assert (error.line, error.column) == (line, column), str(error)
    assert words in error.message
    assert str(error).startswith(f"line {line}, column {column}: ")


def test_a_program_longer_than_the_limit_is_refused_before_parsing():
    source = "y = x\n" + "y = y + x\n" * (MAX_SOURCE_CHARS // 10)
    with pytest.raises(ProgramError, match="characters; the limit is"):
        parse(source, INPUTS)


@pytest.mark.slow
def test_a_program_that_unrolls_past_the_node_limit_is_refused_at_the_loop_body():
    source = "y = x\nfor _ in range(1000):\n    for _ in range(1000):\n        y = y + x\n"
    with pytest.raises(ProgramError, match=f"more than {MAX_NODES} operations") as info:
        parse(source, INPUTS)
    assert info.value.line == 4


@pytest.mark.parametrize("inputs, words", [
    ({"_x": None}, "not a plain identifier"),
    ({"x y": None}, "not a plain identifier"),
    ({"v": 0}, "length 0"),
])
def test_bad_input_declarations_are_refused(inputs, words):
    with pytest.raises(ProgramError, match=words):
        parse("z = 1 + 1", inputs)


def test_an_output_that_is_never_assigned_is_refused():
    with pytest.raises(ProgramError, match="'q' is never assigned"):
        parse("y = x * 2", INPUTS, output="q")


# --- shapes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("source, line, column, words", [
    ("z = v + w", 1, 5, "lengths 2 and 3 do not match"),
    ("a = v * 2\nz = a / w.exp()", 2, 5, "lengths 2 and 3 do not match"),
    ("z = x[0]", 1, 5, "only a 1-D value can be indexed"),
    ("s = v.sum()\nz = s[0]", 2, 5, "only a 1-D value can be indexed"),
    ("z = v[3]", 1, 7, "index 3 is out of range for length 3"),
    ("z = v[-4]", 1, 7, "index -4 is out of range for length 3"),
])
def test_shape_errors_name_the_lengths_and_the_position(source, line, column, words):
    with pytest.raises(ProgramError) as info:
        parse(source, INPUTS)
    assert (info.value.line, info.value.column) == (line, column)
    assert words in info.value.message


def test_sizes_follow_elementwise_operations_reductions_and_selection():
    program = parse("a = v * x\nb = a.exp() + 1\nc = b.sum()\nd = v[-1]\nz = c + d + mean(v)",
                    INPUTS)
    size = {name: program.nodes[i].size for name, i in program.names.items()}
    assert size == {"x": None, "u": None, "v": 3, "w": 2, "a": 3, "b": 3, "c": None, "d": None,
                    "z": None}
    select = program.nodes[program.names["d"]]
    assert select.op == "select" and select.index == 2


# --- what is accepted ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CALLABLE))
def test_every_function_is_accepted_as_a_call_and_as_a_method(name):
    argument = "v" if CALLABLE[name].kind == "reduction" else "x"
    as_call = parse(f"z = {name}({argument})", INPUTS)
    as_method = parse(f"z = {argument}.{name}()", INPUTS)
    assert as_call.nodes[as_call.output].op == as_method.nodes[as_method.output].op == name


def test_operators_numbers_and_unary_minus_build_the_expected_nodes():
    program = parse("a = x + u\nb = a - 2\nc = 3 * b / u\nd = -c ** 0.5\nz = d", INPUTS)
    ops = [program.nodes[i].op for i in (program.names[n] for n in "abcd")]
    assert ops == ["add", "sub", "div", "neg"]
    power = program.nodes[program.nodes[program.names["d"]].args[0]]
    assert power.op == "pow" and program.nodes[power.args[1]].value == 0.5


def test_constants_are_folded_at_parse_time():
    program = parse("z = x * (2 ** 3 - -1) + exp(0)", INPUTS)
    assert [n.op for n in program.nodes if n.op not in ("input", "const")] == ["mul", "add"]
    add = program.nodes[program.output]
    mul = program.nodes[add.args[0]]
    assert program.nodes[mul.args[1]].value == 9.0 and program.nodes[add.args[1]].value == 1.0


def test_the_output_defaults_to_the_last_assignment_and_can_be_chosen():
    assert parse("y = x * 2\nz = y + 1", INPUTS).output_name == "z"
    assert parse("y = x * 2\nz = y + 1", INPUTS, output="y").output_name == "y"


def test_nodes_keep_their_source_text_line_column_and_variable():
    program = parse("y = x ** 2\nz = 2 * y + 1", INPUTS)
    z = program.nodes[program.output]
    assert (z.text, z.line, z.column, z.name) == ("2 * y + 1", 2, 5, "z")
    y = program.nodes[program.names["y"]]
    assert (y.text, y.line, y.column, y.name) == ("x ** 2", 1, 5, "y")


def test_a_program_rebuilds_from_its_plain_spec():
    program = parse("y = v.tanh()\nz = y.sum() * x", INPUTS)
    again = spec_program(program.spec())
    assert again.nodes == program.nodes and again.output_name == program.output_name


# --- loops --------------------------------------------------------------------------------------


def test_a_loop_unrolls_into_repeated_nodes():
    program = parse("y = x\nfor _ in range(4):\n    y = y * 2 + 1", INPUTS)
    ops = [n.op for n in program.nodes if n.op not in ("input", "const")]
    assert ops == ["mul", "add"] * 4
    values = evaluate(program, {"x": 1.0, "u": 0.0, "v": None, "w": None},
                      array_apply(np))
    assert values[program.output] == 31.0  # 1 -> 3 -> 7 -> 15 -> 31


def test_nested_loops_multiply_and_a_zero_count_runs_nothing():
    nested = parse("y = x\nfor _ in range(3):\n    for _ in range(2):\n        y = y + x", INPUTS)
    assert sum(n.op == "add" for n in nested.nodes) == 6
    empty = parse("y = x\nfor _ in range(0):\n    y = y * 2\nz = y", INPUTS)
    assert empty.nodes[empty.output].op == "input"


def test_an_error_inside_a_loop_reports_the_line_in_the_body():
    with pytest.raises(ProgramError) as info:
        parse("y = x\nfor _ in range(3):\n    y = y * 2\n    z = y.grad", INPUTS)
    assert (info.value.line, info.value.column) == (4, 9)


# --- loops: the passes after two alike are copies ---------------------------------------------

import ast  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gradcheck.program import language  # noqa: E402


class _EveryPass(language._Parser):
    """The parser with every pass of a loop parsed as written."""

    def _loop(self, stmt: ast.For) -> None:
        for _ in range(language._range_count(stmt)):
            self._statements(stmt.body)


def _both(source: str, inputs: dict) -> tuple:
    """The program parsed, and parsed with every pass as written; or the two errors."""
    def one(parse):
        try:
            return parse()
        except ProgramError as error:
            return (type(error), str(error), error.line, error.column)
    return (one(lambda: parse(source, inputs)),
            one(lambda: _EveryPass(source, inputs).program(ast.parse(source), None)))


_NAMES = ("a", "b", "c", "y")
_TERMS = st.sampled_from(["x", "2", "0.5", "v[1]", "v.sum()", *_NAMES])


@st.composite
def _loop_programs(draw: st.DrawFn) -> str:
    """Programs of a few assignments and loops, nested too, over x (a scalar) and v (length 3);
    some read a variable before the loop assigns it, some fold constants, some chain names."""
    def body(depth: int, indent: str) -> list[str]:
        lines = []
        for _ in range(draw(st.integers(1, 3))):
            if depth < 2 and draw(st.booleans()):
                lines.append(f"{indent}for _ in range({draw(st.integers(0, 7))}):")
                lines += body(depth + 1, indent + "    ")
            else:
                left, right = draw(_TERMS), draw(_TERMS)
                op = draw(st.sampled_from(["+", "*", "-"]))
                call = draw(st.sampled_from(["", ".tanh()", ".sin()"]))
                lines.append(f"{indent}{draw(st.sampled_from(_NAMES))} = ({left} {op} {right}){call}")
        return lines
    head = [f"{name} = {draw(st.sampled_from(['x', '1', 'x * 2']))}" for name in _NAMES]
    return "\n".join(head + body(0, "") + ["z = a + b + c + y"]) + "\n"


@settings(max_examples=300, deadline=None)
@given(_loop_programs())
def test_a_loop_copied_after_two_passes_alike_is_the_loop_parsed_pass_by_pass(source):
    fast, slow = _both(source, {"x": None, "v": 3})
    assert fast == slow


@pytest.mark.parametrize("source", [
    # names that move one place a pass: the variables settle three passes after the nodes do
    "c = x\nb = x * 2\na = x + 1\ny = x\nfor _ in range(9):\n    c = b\n    b = a\n    a = y\n"
    "    y = y * 2\nz = c + b\n",
    "y = 2\nfor _ in range(6):\n    y = y * 3\nz = y * x\n",  # folded to a new constant each pass
    f"y = x\nfor _ in range({language.MAX_NODES}):\n    y = y + 1\n",  # too many nodes, said alike
    "y = x\nfor _ in range(5):\n    y = y + q\n",  # an error in every pass
])
def test_the_loops_that_copying_could_get_wrong_parse_as_pass_by_pass(source):
    fast, slow = _both(source, {"x": None})
    assert fast == slow


@pytest.mark.parametrize("source", [
    "y = x.__class__", "y = __import__('os')", "_y = x", "y = x*_a", "y = (_a)", "y = [x,_a][0]",
    "y = x\n_a = y", "y = x;_a = y", "y = x.\\\n__class__", "y = x\u0301 + _a",
    "y = x if x else _a", "for _ in range(2):\n    y = x._z",
])
def test_every_name_that_starts_with_an_underscore_is_looked_for(source):
    """A name Python's tokenizer reads as starting with "_" is found by the quick test that
    decides whether the parser looks for such names at all."""
    import io
    import tokenize
    lines = source.splitlines(keepends=True)
    names = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
             if t.type == tokenize.NAME and t.string.startswith("_")]
    starts = {sum(map(len, lines[:t.start[0] - 1])) + t.start[1] for t in names}
    assert starts <= {m.start() for m in language.UNDERSCORE_STARTS.finditer(source)}
    with pytest.raises(ProgramError) as caught:  # the loop's own `_` is allowed
        parse(source, {"x": None})
    assert any("underscore" in str(e) for e in (caught.value, *caught.value.more))


def test_an_underscore_inside_a_name_is_not_taken_for_one_that_starts_it():
    assert language.UNDERSCORE_STARTS.search("i0_1 = x * 2\nz_2 = i0_1 + x") is None
    assert parse("i0_1 = x * 2\nz_2 = i0_1 + x", {"x": None}).output_name == "z_2"


def test_no_name_starts_with_an_underscore_unless_the_source_has_one():
    """The parser looks for names that start with an underscore only in a source that has one:
    every other character Python reads as "_" (NFKC) cannot start a name or an attribute."""
    lookalikes = [chr(c) for c in range(0x80, sys.maxunicode + 1)
                  if unicodedata.normalize("NFKC", chr(c)).startswith("_")]
    assert lookalikes  # there are some: U+FE4D, U+FF3F, ...
    for ch in lookalikes:
        for source in (f"y = x.{ch}{ch}class{ch}{ch}", f"y = {ch}{ch}import{ch}{ch}('os')",
                       f"{ch}y = x"):
            with pytest.raises(ProgramError):
                parse(source, {"x": None})


def test_a_memo_serves_only_the_very_objects_it_was_given_and_forgets_the_oldest():
    """`memo.Memo`, which the stages keep what they build from the same objects in (a program's
    steps, a request and its frame): by identity, names and numbers by value, bounded."""
    from gradcheck.program.memo import Memo

    memo = Memo(2)
    first, equal = [1.0], [1.0]
    assert memo.keep("a", "gradients", first, 7) == "a"
    assert memo.get("gradients", first, 7) == "a"
    assert memo.get("gradients", equal, 7) is None  # equal, but another object
    assert memo.get("gradients", first, 8) is None and memo.get("hessian", first, 7) is None
    memo.keep("b", equal)
    memo.keep("c", first)
    assert memo.get("gradients", first, 7) is None  # the oldest, forgotten past its size
    assert (memo.get(equal), memo.get(first)) == ("b", "c")
