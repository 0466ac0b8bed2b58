"""The program language: a tiny, allow-listed subset of Python parsed with `ast`.

A program is a few assignments over named inputs, for example::

    y = x ** 2
    z = 2 * y + 1

It is never evaluated by Python. The parse gives a flat list of nodes (the intermediate form) that
every backend interprets from the table in :mod:`gradcheck.program.ops`: engines through the protocol
(`a * b`, `a.exp()`), numpy and jax through array functions.
"""

from __future__ import annotations

import ast
import functools
import itertools
import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from gradcheck.program.ops import (
    BINARY_BY_SYMBOL,
    CALLABLE,
    OPS,
    REDUCTION,
    Edge,
    Op,
    fold_constant,
)
from gradcheck.program.session import GRAD_SUFFIX

MAX_SOURCE_CHARS = 20_000
MAX_NODES = 200_000
MAX_STATEMENTS = 1_000_000  # statements run, loops unrolled (`y = x` adds no node)
MAX_CONSTANT = 1e12
MAX_VECTOR = 100_000

_TOO_DEEP = ("an expression is nested too deeply to read; split it into several assignments, "
             "like `a = x + x` then `b = a + x`")
_AST_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
_OTHER_OPERATORS = {ast.FloorDiv: "//", ast.Mod: "%", ast.MatMult: "@", ast.BitXor: "^",
                    ast.BitOr: "|", ast.BitAnd: "&", ast.LShift: "<<", ast.RShift: ">>",
                    ast.UAdd: "unary +", ast.Not: "not", ast.Invert: "~"}


class ProgramError(ValueError):
    """A program that is not in the language; `line` and `column` are 1-based, in the program."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column
        #: the program's other problems, independent of this one (in the order of the source)
        self.more: list[ProgramError] = []

    def __str__(self) -> str:
        return f"line {self.line}, column {self.column}: {self.message}"


class _Fatal(ProgramError):
    """A problem after which nothing more is read (the program is too large to go on)."""


class _Dependent(ProgramError):
    """A statement that reads a variable whose own assignment failed: not a problem of its own."""


@dataclass(frozen=True)
class Node:
    """One value of the program: an input, a constant or an operation on earlier nodes."""

    op: str  # "input", "const" or a name in gradcheck.program.ops.OPS
    args: tuple[int, ...] = ()
    size: int | None = None  # None for a scalar, else the length of a 1-D value
    name: str = ""  # the input's name, or the variable this node was assigned to
    value: float = 0.0  # for constants
    index: int = 0  # for select
    reduces_scalar: bool = False  # a sum or mean of a scalar: the identity on arrays
    text: str = ""  # the source expression, for feedback
    line: int = 0
    column: int = 0


def _with_args(node: Node, args: tuple[int, ...]) -> Node:
    """`node` with other `args`: a loop unrolled copies thousands of nodes, and a frozen
    dataclass's own constructor sets each of ten fields through a call."""
    moved = object.__new__(Node)
    moved.__dict__.update(node.__dict__, args=args)
    return moved


@dataclass(frozen=True)
class Program:
    """A parsed program. `names` maps each variable to the node it holds at the end."""

    source: str
    inputs: Mapping[str, int | None]
    output_name: str
    nodes: tuple[Node, ...]
    names: Mapping[str, int]

    @property
    def output(self) -> int:
        return self.names[self.output_name]

    def spec(self) -> dict[str, Any]:
        """Plain data from which :func:`parse` rebuilds this program (for the worker)."""
        return {"source": self.source, "inputs": dict(self.inputs), "output": self.output_name}

    def ops_used(self) -> set[str]:
        return {n.op for n in self.nodes if n.op in OPS}


def parse(source: str, inputs: Mapping[str, int | None], output: str | None = None,
          gradients: bool = False) -> Program:
    """Parse `source` over `inputs` (name -> None for a scalar, or a 1-D length). With
    `gradients` (a behaviour step's expression), an input may be a variable's gradient, named
    and written `x.grad`."""
    if len(source) > MAX_SOURCE_CHARS:
        raise ProgramError(f"the program has {len(source)} characters; the limit is "
                           f"{MAX_SOURCE_CHARS}")
    try:
        tree = ast.parse(source, mode="exec")
    except SyntaxError as exc:
        raise ProgramError(f"not valid syntax: {exc.msg}", exc.lineno or 1,
                           exc.offset or 1) from None
    except (RecursionError, MemoryError):  # Python's parser gives up on very deep expressions
        raise ProgramError(_TOO_DEEP) from None
    return _Parser(source, inputs, gradients).program(tree, output)


def parse_expression(expression: str, operands: Mapping[str, int | None]) -> Program:
    """A `compute` step's expression as a program whose output is its value, over `operands`
    (each name :func:`free_names` gives, `x.grad` among them, with its size); a problem's line
    and column are the expression's own."""
    target = next(f"result{i}" for i in range(len(operands) + 1) if f"result{i}" not in operands)
    prefix = f"{target} = "
    try:
        return parse(prefix + expression, operands, gradients=True)
    except ProgramError as error:
        for problem in (error, *error.more):
            if problem.line == 1:
                problem.column = max(1, problem.column - len(prefix))
        raise


#: an underscore that may start a name: one after a word character is inside a name or a number
#: (where Python refuses it: `1_x`), and the characters NFKC makes "_" of cannot start a name
UNDERSCORE_STARTS = re.compile(r"(?<!\w)_")


def _hidden_names(tree: ast.AST) -> list[ProgramError]:
    """Every name and attribute that starts with an underscore (`x.__class__`, `__import__`),
    each where it is written; the loop's own `_` is the one allowed."""
    loops = {id(node.target) for node in ast.walk(tree) if isinstance(node, ast.For)}
    found = []
    for node in ast.walk(tree):
        name = (node.id if isinstance(node, ast.Name) and id(node) not in loops
                else node.attr if isinstance(node, ast.Attribute) else "")
        if name.startswith("_"):
            found.append(_error(node, _UNDERSCORE.format(name=name)))
    return found


_UNDERSCORE = "names starting with an underscore ({name!r}) are not allowed"


def free_names(expression: str) -> dict[str, tuple[int, int]]:
    """What an expression reads (not the functions it calls): variables, and variables'
    gradients written `x.grad` (`session.target_name` gives the variable), each with the line
    and column (1-based) where it is first read; raises ProgramError if it is not a single
    expression."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise ProgramError(f"not valid syntax: {exc.msg}", exc.lineno or 1,
                           exc.offset or 1) from None
    except (RecursionError, MemoryError):
        raise ProgramError(_TOO_DEEP) from None
    skipped = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    names: list[tuple[str, ast.expr]] = []
    for node in ast.walk(tree):  # an `x.grad` is walked before its `x`, which it stands for
        if id(node) in skipped:
            continue
        if _is_gradient(node):
            names.append((node.value.id + GRAD_SUFFIX, node))  # type: ignore[attr-defined]
            skipped.add(id(node.value))  # type: ignore[attr-defined]
        elif isinstance(node, ast.Name):
            names.append((node.id, node))
    found: dict[str, tuple[int, int]] = {}
    for name, node in sorted(names, key=lambda item: (item[1].lineno, item[1].col_offset)):
        found.setdefault(name, (node.lineno, node.col_offset + 1))
    return found


def _is_gradient(node: ast.AST) -> bool:
    """`x.grad`: a variable's gradient, which a behaviour step's expression may read."""
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and "." + node.attr == GRAD_SUFFIX)


def spec_program(spec: Mapping[str, Any]) -> Program:
    """Rebuild a program from :meth:`Program.spec`. Remembered: the grader and the worker each
    check every request's program, several requests a program, and a looped one unrolls to
    thousands of nodes (a Program is frozen, so sharing one is safe)."""
    return known(spec["source"], spec["inputs"], spec["output"])


def known(source: str, inputs: Mapping[str, int | None], output: str | None = None) -> Program:
    """`parse(source, inputs, output)`, remembered as :func:`spec_program`'s are: the feedback
    of failed checks builds the same small programs again and again (one operation alone, for
    every check that blames it; a random program at one point after another, as it shrinks)."""
    key = _spec_key(source, inputs, output)
    program = _KNOWN.get(key)
    if program is None:
        program = _keep(key, remember(parse(source, inputs, output)))
    return program


def remember(program: Program) -> Program:
    """Keep `program` for :func:`spec_program` (the oldest of many is forgotten)."""
    return _keep(_spec_key(program.source, program.inputs, program.output_name), program)


def _keep(key: tuple[Any, ...], program: Program) -> Program:
    if len(_KNOWN) >= MAX_KNOWN:
        del _KNOWN[next(iter(_KNOWN))]
    _KNOWN[key] = program
    return program


def _spec_key(source: str, inputs: Mapping[str, int | None], output: str | None
              ) -> tuple[Any, ...]:
    return source, tuple(inputs.items()), output


MAX_KNOWN = 512
_KNOWN: dict[tuple[Any, ...], Program] = {}


class _Parser:
    def __init__(self, source: str, inputs: Mapping[str, int | None],
                 gradients: bool = False) -> None:
        self.source = source
        self.inputs = dict(inputs)
        self.gradients = gradients  # whether `x.grad` may be read (an input of that name)
        self.nodes: list[Node] = []
        self.names: dict[str, int] = {}
        self.last_assigned: str | None = None
        self.statements = 0  # statements run so far, loops unrolled
        self.texts: dict[int, str] = {}
        self.errors: dict[tuple[int, int], ProgramError] = {}  # by place: a loop repeats them
        self.broken: set[str] = set()  # variables whose assignment failed
        for name, size in self.inputs.items():
            plain = name.removesuffix(GRAD_SUFFIX) if gradients else name
            if not plain.isidentifier() or plain.startswith("_"):
                raise ProgramError(f"input name {name!r} is not a plain identifier")
            if size is not None and not 1 <= size <= MAX_VECTOR:
                raise ProgramError(f"input {name!r} has length {size}; use 1..{MAX_VECTOR}")
            self.names[name] = self._add(Node("input", size=size, name=name, text=name))

    def program(self, tree: ast.Module, output: str | None) -> Program:
        if not tree.body:
            raise ProgramError("the program is empty; write at least one assignment")
        # a name or attribute that starts with an underscore needs one in the source after a
        # character that cannot be part of that name (`UNDERSCORE_STARTS`): most programs have
        # none, and walking the tree for them was a third of a small program's parse
        for error in _hidden_names(tree) if UNDERSCORE_STARTS.search(self.source) else ():
            self.errors.setdefault((error.line, error.column), error)
        self._statements(tree.body)
        if self.errors:
            first, *others = sorted(self.errors.values(), key=lambda e: (e.line, e.column))
            first.more = others
            raise first
        name = output or self.last_assigned
        if name is None:
            raise ProgramError("the program assigns nothing, so it has no output")
        if name not in self.names:
            raise ProgramError(f"the output {name!r} is never assigned")
        return Program(self.source, self.inputs, name, tuple(self.nodes), dict(self.names))

    def _add(self, node: Node) -> int:
        if len(self.nodes) >= MAX_NODES:
            raise _Fatal(f"the program unrolls to more than {MAX_NODES} operations",
                               node.line, node.column)
        self.nodes.append(node)
        return len(self.nodes) - 1

    def _statements(self, body: Sequence[ast.stmt]) -> None:
        for stmt in body:
            # Counted as run, so nested loops over statements that add no node (`y = x`) end.
            self.statements += 1
            if self.statements > MAX_STATEMENTS:
                raise _error(stmt, f"the program unrolls to more than {MAX_STATEMENTS} "
                                   "statements; use fewer or shorter loops")
            if isinstance(stmt, ast.Assign):
                try:
                    self._assign(stmt)
                except RecursionError:  # an expression nested deeper than Python recurses
                    raise _Fatal(_TOO_DEEP, stmt.lineno, stmt.col_offset + 1) from None
                except _Fatal:
                    raise
                except ProgramError as error:  # read on: the next statements are checked too
                    if not isinstance(error, _Dependent):
                        self.errors.setdefault((error.line, error.column), error)
                    targets = stmt.targets
                    if len(targets) == 1 and isinstance(targets[0], ast.Name):
                        self.broken.add(targets[0].id)
            elif isinstance(stmt, ast.For):
                self._loop(stmt)
            else:
                error = _error(stmt, f"{_describe(stmt)} is not allowed; write assignments like "
                                     "`y = x ** 2`")
                self.errors.setdefault((error.line, error.column), error)

    def _assign(self, stmt: ast.Assign) -> None:
        if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            raise _error(stmt, "assign to exactly one plain name, like `y = ...`")
        target = stmt.targets[0].id
        _check_name(stmt.targets[0], target)
        if target in self.inputs:
            raise _error(stmt.targets[0], f"{target!r} is an input and cannot be reassigned")
        node_id = self._expr(stmt.value)
        self.broken.discard(target)
        node = self.nodes[node_id]
        if node.op != "input" and not node.name:
            self.nodes[node_id] = _with_name(node, target)
        self.names[target] = node_id
        self.last_assigned = target

    def _loop(self, stmt: ast.For) -> None:
        """Unroll the loop: each pass parsed as written until two passes in a row leave the same
        program but for where they are (every node, and every variable, of the later one is the
        earlier one's moved one pass on); the passes left are then copies of the last, which is
        what parsing them would give, since a pass depends on nothing else. A loop of 3,000
        passes costs a few instead of 3,000 walks of its body."""
        count = _range_count(stmt)
        if not isinstance(stmt.target, ast.Name) or stmt.target.id != "_":
            raise _error(stmt.target, "write loops as `for _ in range(N):`")
        first, last = len(self.nodes), None
        for done in range(1, count + 1):
            before = (len(self.nodes), self.statements, dict(self.names))
            self._statements(stmt.body)
            if last is not None and not self.errors and self._repeats(first, last, before):
                self._copy_passes(stmt.body, first, before, count - done)
                return
            last = before

    def _repeats(self, first: int, earlier: tuple[int, int, dict[str, int]],
                 later: tuple[int, int, dict[str, int]]) -> bool:
        """Whether the pass that began at `later` (nodes, statements, variables then) repeats
        the one that began at `earlier` one pass on: a node from `first` on stands for the one
        a pass later."""
        start, statements, _ = later
        size = start - earlier[0]
        if len(self.nodes) - start != size or self.statements - statements != statements - \
                earlier[1]:
            return False
        moved = lambda node: node + size if node >= first else node  # noqa: E731
        for old, new in zip(self.nodes[earlier[0]:start], self.nodes[start:]):
            if new != _with_args(old, tuple(map(moved, old.args))):
                return False
        return self.names == {name: moved(node) for name, node in later[2].items()}

    def _copy_passes(self, body: list[ast.stmt], first: int,
                     last: tuple[int, int, dict[str, int]], passes: int) -> None:
        """Add `passes` more passes, each the one that began at `last` moved on by one more."""
        start, statements, _ = last
        size = len(self.nodes) - start
        if len(self.nodes) + passes * size > MAX_NODES or \
                self.statements + passes * (self.statements - statements) > MAX_STATEMENTS:
            for _ in range(passes):  # then the pass that is too many says so, as written
                self._statements(body)
            return
        # Built a node of the pass at a time, all passes at once: for each node, its arguments
        # in every pass (moved on `size` a pass if made in the loop), then the passes in order.
        # A constant is the same frozen node in every pass.
        columns = []
        for node in self.nodes[start:]:
            if not node.args:
                columns.append(itertools.repeat(node, passes))
                continue
            moved = [range(a + size, a + size * passes + 1, size) if a >= first
                     else itertools.repeat(a, passes) for a in node.args]
            columns.append(map(functools.partial(_with_args, node), zip(*moved)))
        self.nodes.extend(itertools.chain.from_iterable(zip(*columns)))
        self.statements += passes * (self.statements - statements)
        self.names = {name: node + passes * size if node >= first else node
                      for name, node in self.names.items()}

    def _expr(self, expr: ast.expr) -> int:
        if isinstance(expr, ast.Constant):
            return self._constant(expr)
        if isinstance(expr, ast.Name):
            _check_name(expr, expr.id)
            return self._variable(expr, expr.id)
        if self.gradients and _is_gradient(expr):
            return self._variable(expr, expr.value.id + GRAD_SUFFIX)  # type: ignore[attr-defined]
        if isinstance(expr, ast.BinOp) and type(expr.op) in _AST_SYMBOL:
            op = BINARY_BY_SYMBOL[_AST_SYMBOL[type(expr.op)]]
            return self._apply(expr, op, [self._expr(expr.left), self._expr(expr.right)])
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
            return self._apply(expr, OPS["neg"], [self._expr(expr.operand)])
        if isinstance(expr, (ast.BinOp, ast.UnaryOp)):
            symbol = _OTHER_OPERATORS.get(type(expr.op), type(expr.op).__name__)
            raise _error(expr, f"the operator {symbol} is not allowed; the operators are "
                               "+ - * / ** and unary minus")
        if isinstance(expr, ast.Call):
            return self._call(expr)
        if isinstance(expr, ast.Subscript):
            return self._select(expr)
        if self.gradients and isinstance(expr, ast.Attribute):
            raise _error(expr, "attribute access is not allowed here; the one attribute an "
                               "expression reads is a variable's gradient, `x.grad`")
        raise _error(expr, f"{_describe(expr)} is not allowed in a program")

    def _variable(self, expr: ast.expr, name: str) -> int:
        if name in self.broken:
            raise _Dependent("", expr.lineno, expr.col_offset + 1)
        if name not in self.names:
            raise _error(expr, f"name {name!r} is not defined; declare it as an input or "
                               "assign it first")
        return self.names[name]

    def _constant(self, expr: ast.Constant) -> int:
        value = expr.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _error(expr, f"only numbers may appear as constants, not {value!r:.40}")
        if not abs(value) <= MAX_CONSTANT:
            raise _error(expr, f"the constant {value:.3g} is too large; keep constants within "
                               f"±{MAX_CONSTANT:.0e}")
        return self._add(Node("const", value=float(value), text=self._text(expr),
                              line=expr.lineno, column=expr.col_offset + 1))

    def _call(self, expr: ast.Call) -> int:
        func = expr.func
        if expr.keywords:
            raise _error(expr, "keyword arguments are not allowed")
        if isinstance(func, ast.Name):
            _check_name(func, func.id)
            op = CALLABLE.get(func.id)
            if op is None:
                raise _error(func, f"unknown function {func.id!r}; the functions are "
                                   f"{', '.join(sorted(CALLABLE))}")
            args = list(expr.args)
        elif isinstance(func, ast.Attribute):
            _check_name(func, func.attr)
            op = CALLABLE.get(func.attr)
            if op is None:  # said at the method's name, not at the start of `y.foo()`
                raise ProgramError(f"unknown method {func.attr!r}; the methods are "
                                   f"{', '.join(sorted(CALLABLE))}", func.end_lineno or 1,
                                   (func.end_col_offset or 0) - len(func.attr) + 1)
            if len(expr.args) == 1 and not expr.keywords:  # `math.exp(z)`, as in Python
                arg, owner = ast.unparse(expr.args[0]), ast.unparse(func.value)
                plain = isinstance(expr.args[0], (ast.Name, ast.Call, ast.Subscript))
                method = f"{arg}.{op.name}()" if plain else f"({arg}).{op.name}()"
                raise _error(expr, f"a program calls {op.name} as `{op.name}({arg})` or "
                                   f"`{method}`, not through `{owner}` (a program imports no "
                                   "module)")
            args = [func.value, *expr.args]
        else:
            raise _error(func, f"{_describe(func)} cannot be called")
        if any(isinstance(a, ast.Starred) for a in args) or len(args) != op.arity:
            raise _error(expr, f"{op.name} takes exactly one tensor, as `{op.name}(x)` or "
                               f"`x.{op.name}()`")
        return self._apply(expr, op, [self._expr(a) for a in args])

    def _select(self, expr: ast.Subscript) -> int:
        base = self._expr(expr.value)
        size = self.nodes[base].size
        index = expr.slice
        negative = isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub)
        literal = index.operand if negative else index  # type: ignore[attr-defined]
        if not (isinstance(literal, ast.Constant) and type(literal.value) is int):
            raise _error(index, "index with a whole number, like `v[0]`")
        i = -literal.value if negative else literal.value
        if size is None:
            raise _error(expr, "only a 1-D value can be indexed; this one is a scalar")
        if not -size <= i < size:
            raise _error(index, f"index {i} is out of range for length {size}")
        return self._add(Node("select", (base,), None, index=i % size, text=self._text(expr),
                              line=expr.lineno, column=expr.col_offset + 1))

    def _apply(self, expr: ast.expr, op: Op, args: list[int]) -> int:
        sizes = [self.nodes[a].size for a in args]
        if op.kind == REDUCTION:
            size = None
        else:
            vectors = {s for s in sizes if s is not None}
            if len(vectors) > 1:
                raise _error(expr, f"lengths {' and '.join(map(str, sorted(vectors)))} do not "
                                   "match")
            size = vectors.pop() if vectors else None
        if all(self.nodes[a].op == "const" for a in args):
            try:
                value = fold_constant(op, *(self.nodes[a].value for a in args))
            except (ValueError, ArithmeticError) as exc:
                raise _error(expr, str(exc)) from None
            if not abs(value) <= MAX_CONSTANT:
                raise _error(expr, f"the constant {self._text(expr)} = {value:.3g} is too large; "
                                   f"keep constants within ±{MAX_CONSTANT:.0e}")
            return self._add(Node("const", value=value, text=self._text(expr),
                                  line=expr.lineno, column=expr.col_offset + 1))
        return self._add(Node(op.name, tuple(args), size, text=self._text(expr),
                              reduces_scalar=op.kind == REDUCTION and sizes[0] is None,
                              line=expr.lineno, column=expr.col_offset + 1))

    def _text(self, expr: ast.expr) -> str:
        # Cached: loops revisit the same expressions, and each lookup splits the whole source.
        key = id(expr)
        if key not in self.texts:
            self.texts[key] = ast.get_source_segment(self.source, expr) or ""
        return self.texts[key]


def _with_name(node: Node, name: str) -> Node:
    return dataclasses.replace(node, name=name)


def _range_count(stmt: ast.For) -> int:
    it = stmt.iter
    if (stmt.orelse or not isinstance(it, ast.Call) or not isinstance(it.func, ast.Name)
            or it.func.id != "range" or len(it.args) != 1 or it.keywords
            or not isinstance(it.args[0], ast.Constant) or type(it.args[0].value) is not int):
        raise _error(stmt, "the only loop is `for _ in range(N):` with a whole number N")
    count = it.args[0].value
    if not 0 <= count <= MAX_NODES:
        raise _error(it.args[0], f"loop count {count} is outside 0..{MAX_NODES}")
    return count


def _check_name(node: ast.AST, name: str) -> None:
    if name.startswith("_"):
        raise _error(node, _UNDERSCORE.format(name=name))


def _describe(node: ast.AST) -> str:
    names = {ast.Lambda: "a lambda", ast.ListComp: "a comprehension",
             ast.GeneratorExp: "a generator", ast.Attribute: "attribute access",
             ast.Import: "an import", ast.ImportFrom: "an import", ast.Expr: "a bare expression",
             ast.FunctionDef: "a function definition", ast.List: "a list", ast.Tuple: "a tuple",
             ast.Compare: "a comparison", ast.IfExp: "a conditional", ast.If: "an if statement",
             ast.While: "a while loop", ast.AugAssign: "an augmented assignment (`y += ...`)"}
    return names.get(type(node), f"`{type(node).__name__}`")


def _error(node: ast.AST, message: str) -> ProgramError:
    return ProgramError(message, getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1)


# --- interpretation -----------------------------------------------------------------------------

Apply = Callable[[Op, list[Any], Node], Any]


def evaluate(program: Program, leaves: Mapping[str, Any], apply: Apply,
             const: Callable[[float], Any] = float) -> list[Any]:
    """Interpret every node in order; returns the value of each node (index = node id)."""
    values: list[Any] = []
    value = values.__getitem__  # map(value, ...): the arguments without a frame per node
    for node in program.nodes:
        op = node.op
        if op == "input":
            values.append(leaves[node.name])
        elif op == "const":
            values.append(const(node.value))
        else:
            values.append(apply(OPS[op], list(map(value, node.args)), node))
    return values


def critical_argument(program: Program, op: Op, args: list[Any], node: Node) -> Any:
    """The quantity whose sign change marks a kink, pole or edge of this node, if it has one
    (finite differences read where a stencil crosses one; random programs keep clear of it):
    the argument the table's edge is on, less the edge's point."""
    for edge in op.edges:  # at most one per operation in the table
        if edge.kind_for(constant_operand(program, node, edge)) is not None:
            return args[edge.arg] - edge.at
    return None


def constant_operand(program: Program, node: Node, edge: Edge) -> float | None:
    """The value of the operation's other argument, when that is a constant (the exponent of
    `x ** 2`), else None."""
    if len(node.args) != 2:
        return None
    other = program.nodes[node.args[1 - edge.arg]]
    return other.value if other.op == "const" else None


def engine_apply(op: Op, args: list[Any], node: Node) -> Any:
    """Apply an operation through the engine protocol (reference, a submission, torch)."""
    if op.name == "select":
        return op.engine(args[0], node.index)
    return op.engine(*args)


def array_apply(xp: Any) -> Apply:
    """Apply operations to arrays of the namespace `xp` (element axis first, batch axes last)."""

    def apply(op: Op, args: list[Any], node: Node) -> Any:
        if op.name == "select":
            return args[0][node.index]
        if node.reduces_scalar:
            return args[0]
        return op.array(xp, *args)

    return apply

