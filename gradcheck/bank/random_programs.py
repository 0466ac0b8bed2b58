"""hypothesis strategies for whole programs: random graphs drawn from the table of operations,
each with a point where every operation is clear of its kinks, poles and domain edges.

A drawn program is written in the program language (`a = x * y`, `b = a.exp() + 2`, one
operation per line), so whatever finds a difference with it can show it as it would show an
exercise's program. It may use every operation of :data:`gradcheck.program.ops.OPS`, a number
on either side of a binary operation, a value used by several later operations (fan-out, a leaf
on several paths, diamonds), chains, a 1-D input reduced by `sum` and `mean` or indexed, and
an input no operation uses (torch leaves its `.grad` None).

The draw puts the simple choices first: the number of operations is drawn first; each operand
is counted back from the newest value (0 is the value made just before), so a small draw is a
chain; numbers come from a short list of small ones before any other; a point's values are
whole numbers before other floats. A difference is shrunk by :func:`shrinks`, the simpler
programs in the order a shrink prefers them (fewer operations, fewer inputs, then simpler
numbers, then points nearer small integers), and :func:`smaller_sessions`, the same for a
behaviour session (gradcheck.grading.fuzzing tries them one at a time).

A point is accepted only when, evaluated in float64, every value is finite and at most
:data:`LARGEST` in size, and every kink, pole and domain edge (the quantity
:func:`gradcheck.program.language.critical_argument` names, the one finite differences watch)
is more than `margin` away: there, the oracles agree and finite differences are reliable.

:func:`sessions` adds a behaviour session to a program: steps of the kinds a behaviour check has
(backward twice with and without `retain_graph`, `.grad = None`, a forward under `no_grad`,
`detach`, `retain_grad`, backward of a 1-D value), each followed by what torch would be asked.
None runs again under `no_grad()` a program that indexes an input requiring grad
(:func:`makes_views`: torch makes a view there, which is not the protocol).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from gradcheck.bank.drawn_programs import Drawn, Session, unused_inputs
from gradcheck.program.language import (
    Program,
    array_apply,
    critical_argument,
    evaluate,
    known,
    parse,
)
from gradcheck.program.ops import BINARY, FUNCTION, OPS, REDUCTION, SELECT, UNARY, Op

#: Numbers a program may use, simplest first (the shrinker moves towards the front).
NUMBERS = (2, 3, -1, 0.5, -2, 1.5, 4, -0.5)
#: Exponents of `a ** c`, simplest first; 0 and 1 are left out (x ** 0 is a kink of its own).
EXPONENTS = (2, 3, -1, 0.5, -2, 1.5)
#: Bases of `c ** a`: positive, so that the power is real everywhere.
BASES = (2, 3, 0.5, 1.5)
#: Scalar inputs, in the order they are added, and the 1-D input.
SCALARS = ("x", "y", "z")
VECTOR = "v"
#: Where a point's values come from: whole numbers in this range first, then any float in it.
RANGE = 2.5
#: Values larger than this are refused: such programs say more about float64 than about an engine.
LARGEST = 1e4
MARGIN = 0.1
_NAMES = tuple(c for c in "abcdefghijklmnopqrstuw")


def operation_names(ops: Sequence[str] | None = None) -> tuple[str, ...]:
    """The operations to draw from, in the table's order; every one when `ops` is None."""
    if ops is None:
        return tuple(OPS)
    unknown = [name for name in ops if name not in OPS]
    if unknown or not ops:
        raise ValueError(f"unknown operation{'s' * (len(unknown) > 1)} "
                         f"{', '.join(unknown) or '(none given)'}; choose among "
                         f"{', '.join(OPS)}")
    return tuple(name for name in OPS if name in ops)


@st.composite
def programs(draw: st.DrawFn, ops: Sequence[str] | None = None, max_operations: int = 6,
             margin: float = MARGIN) -> Drawn:
    """A program of 1 to `max_operations` operations from `ops` (all of the table by default),
    and a point where it is safe (see the module's docstring)."""
    names = operation_names(ops)
    if max_operations < 1:
        raise ValueError(f"max_operations must be at least 1, not {max_operations}")
    count = draw(st.integers(1, max_operations))
    needs_vector = any(OPS[n].kind in (REDUCTION, SELECT) for n in names)
    scalars = SCALARS[:draw(st.integers(1, len(SCALARS)))]
    length = draw(st.integers(2, 3)) if needs_vector and draw(st.booleans()) else None
    inputs: dict[str, int | None] = {name: None for name in scalars}
    if length is not None:
        inputs[VECTOR] = length
    pool: list[tuple[str, int | None]] = list(inputs.items())  # (variable, size)
    lines: list[Line] = []
    for number in range(count):
        usable = [n for n in names if OPS[n].kind != SELECT or any(s for _, s in pool)]
        assume(usable)  # not when only select was asked for and there is no 1-D value
        op = OPS[draw(st.sampled_from(usable))]
        expression, size, operands = _expression(draw, op, pool)
        target = f"t{number}"
        lines.append((target, expression, operands))
        pool.append((target, size))
    if pool[-1][1] is not None:  # the output is a scalar: a 1-D result is summed
        lines.append((f"t{count}", f"{pool[-1][0]}.sum()", {pool[-1][0]}))
    source, inputs, _ = _assemble(lines, inputs)
    inputs = _ordered({**inputs, **draw(st.sampled_from(_unused_choices(inputs, needs_vector)))})
    program = parse(source, inputs)
    assume(differentiable(program))
    point = {name: draw(_values(size)) for name, size in inputs.items()}
    assume(safe(program, point, margin))
    return Drawn(source, inputs, point, program)


def _unused_choices(inputs: dict[str, int | None], vectors: bool
                   ) -> list[dict[str, int | None]]:
    """What may be added to a program's inputs without being used (its .grad must stay None):
    nothing (what shrinking prefers), a scalar, or a 1-D input of length 2 where the operations
    asked for include 1-D ones (an engine need not have 1-D tensors for the others)."""
    choices: list[dict[str, int | None]] = [{}]
    free = [name for name in SCALARS if name not in inputs]
    if free:
        choices.append({free[0]: None})
    if vectors and VECTOR not in inputs:
        choices.append({VECTOR: 2})
    return choices


def _ordered(inputs: dict[str, int | None]) -> dict[str, int | None]:
    """Scalar inputs first, in the order x, y, z; then the 1-D input."""
    return {name: inputs[name] for name in (*SCALARS, VECTOR) if name in inputs}


def differentiable(program: Program) -> bool:
    """Whether the output has a history to differentiate: it depends on an input along a path
    that no `detach` cuts (else torch's backward() refuses it, and there is nothing to grade)."""
    tracked: list[bool] = []
    for node in program.nodes:
        tracked.append(node.op == "input" or node.op != "const" and node.op != "detach"
                       and any(tracked[arg] for arg in node.args))
    return tracked[program.output]


Line = tuple[str, str, set[str]]  # (variable, expression, the names it uses)


def _assemble(lines: list[Line], inputs: dict[str, int | None]
              ) -> tuple[str, dict[str, int | None], dict[str, str]]:
    """The source of the lines the last one depends on, the inputs they use, and the new name of
    each kept input and variable: variables renamed a, b, c, ... in order, scalar inputs x, y, z,
    the 1-D input v."""
    live = _live(lines)
    used = set().union(*(operands for _, _, operands in live))
    kept = [name for name, size in inputs.items() if size is None and name in used]
    renamed: dict[str, int | None] = {new: None for new in SCALARS[:len(kept)]}
    vectors = [name for name, size in inputs.items() if size is not None and name in used]
    if vectors:
        renamed[VECTOR] = inputs[vectors[0]]
    names_of = {old: new for old, new in zip(kept, SCALARS)}
    names_of.update({old: VECTOR for old in vectors})
    names_of.update({target: _name(number) for number, (target, _, _) in enumerate(live)})
    source = "".join(f"{names_of.get(target, target)} = "
                     f"{re.sub(_IDENTIFIER, lambda m: names_of.get(m[0], m[0]), e)}\n"
                     for target, e, _ in live)
    return source, renamed, {old: names_of[old]
                             for old in [*kept, *vectors, *(target for target, _, _ in live)]}


_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"


def _name(number: int) -> str:
    return _NAMES[number] if number < len(_NAMES) else f"t{number}"


def _live(lines: list[Line]) -> list[Line]:
    """The lines the last one depends on: an operation the output ignores is left out, so that
    every operation of a drawn program counts."""
    needed = {lines[-1][0]}
    kept = []
    for line in reversed(lines):
        if line[0] in needed:
            kept.append(line)
            needed |= line[2]
    return kept[::-1]


def _expression(draw: st.DrawFn, op: Op, pool: list[tuple[str, int | None]]
                ) -> tuple[str, int | None, set[str]]:
    """One operation's expression over earlier values, the size of its result, and the values
    it uses."""
    if op.kind == BINARY:
        constant = draw(st.sampled_from(("neither", "right", "left")))
        if op.name == "pow":
            left = (_number(draw(st.sampled_from(BASES))) if constant == "left"
                    else _operand(draw, pool))
            right = (_number(draw(st.sampled_from(EXPONENTS))) if constant == "right"
                     else _operand(draw, pool))
        else:
            left = (_number(draw(st.sampled_from(NUMBERS))) if constant == "left"
                    else _operand(draw, pool))
            right = (_number(draw(st.sampled_from(NUMBERS))) if constant == "right"
                     else _operand(draw, pool))
        sizes = [s for text, s in pool if text in (left[0], right[0]) and s is not None]
        return (f"{left[0]} {op.symbol} {right[0]}", sizes[0] if sizes else None,
                {left[0], right[0]})
    if op.kind == REDUCTION:
        vectors = [(text, size) for text, size in pool if size is not None]
        text, _ = _operand(draw, vectors or pool)
        return f"{text}.{op.name}()", None, {text}
    if op.kind == SELECT:
        text, size = _operand(draw, [(t, s) for t, s in pool if s is not None])
        return f"{text}[{draw(st.integers(0, size - 1))}]", None, {text}
    text, size = _operand(draw, pool)
    if op.kind == UNARY:
        return f"-{text}", size, {text}
    assert op.kind == FUNCTION
    return f"{text}.{op.name}()", size, {text}


def _operand(draw: st.DrawFn, pool: list[tuple[str, int | None]]) -> tuple[str, int | None]:
    """A value made earlier: the newest one (which the shrinker prefers, so that a program
    is a chain), or one counted back from it."""
    if len(pool) == 1 or not draw(st.booleans()):
        return pool[-1]
    return pool[-2 - draw(st.integers(0, len(pool) - 2))]


def _number(value: float) -> tuple[str, None]:
    text = repr(int(value)) if float(value).is_integer() else repr(float(value))
    return (text if value >= 0 else f"({text})"), None


#: A name of a program -> its name in a program made smaller from it.
Renaming = dict[str, str]


def smaller(drawn: Drawn) -> list[Drawn]:
    """Programs simpler than `drawn` that may show the same difference (see :func:`shrinks`)."""
    return [candidate for candidate, _ in shrinks(drawn)]


def shrinks(drawn: Drawn) -> list[tuple[Drawn, Renaming]]:
    """Programs simpler than `drawn`, in the order a shrink prefers them, each with what its
    names were called in `drawn`: each earlier value as the output, at the same point; each
    operation alone on fresh inputs, at the values its operands had (and at those rounded to
    whole numbers); the same program without an input it does not use; then with one number
    simpler; then at a point nearer small whole numbers. Each is one step of a shrink, however
    many of the draw's choices it changes at once (drop the operations before a faulty one and
    rewire it to an input), and a behaviour session shrinks its program by them too."""
    program = drawn.program
    values = _node_values(program, drawn.point)
    lines = [(target, expression, set(re.findall(_IDENTIFIER, expression)))
             for target, expression in (line.split(" = ", 1)
                                        for line in drawn.source.splitlines())]
    found: list[tuple[Drawn, Renaming]] = []
    for number in range(len(lines) - 1):
        prefix = lines[:number + 1]
        if program.nodes[program.names[prefix[-1][0]]].size is not None:
            prefix.append(("t_sum", f"{prefix[-1][0]}.sum()", {prefix[-1][0]}))
        source, inputs, renamed = _assemble(prefix, dict(drawn.inputs))
        point = {new: drawn.point[old] for old, new in renamed.items() if old in drawn.inputs}
        found += [(candidate, {old: new for old, new in renamed.items() if old in program.names})
                  for candidate in _drawn(source, inputs, point)]
    for node_id, node in enumerate(program.nodes):
        if node.op in OPS and len(lines) > 1:
            found += _alone(program, node_id, values)
    unused = unused_inputs(drawn)
    found = [_with_unused(candidate, names, drawn, unused) for candidate, names in found]
    for name in unused:  # the same program without an input it never uses
        kept = {other: other for other in program.names if other != name}
        found += [(candidate, kept) for candidate in _drawn(
            drawn.source, {n: size for n, size in drawn.inputs.items() if n != name},
            {n: value for n, value in drawn.point.items() if n != name})]
    same = {name: name for name in program.names}
    return found + [(candidate, same) for candidate in _simpler_numbers(drawn)
                    + _nearer_points(drawn)]


def _alone(program: Program, node_id: int, values: list[Any]) -> list[tuple[Drawn, Renaming]]:
    """Operation `node_id` on inputs of its own, at its operands' values and rounded ones. An
    operation that works element by element on a 1-D value is first tried on each element of
    it alone, as a scalar (`x.tanh()` at the value of `v[1]`, for `v.tanh()`)."""
    node = program.nodes[node_id]
    elementwise = node.size is not None and OPS[node.op].kind in (UNARY, FUNCTION, BINARY)
    return [found for element in [*(range(node.size) if elementwise else ()), None]
            for found in _on_inputs_of_its_own(program, node_id, values, element)]


def _on_inputs_of_its_own(program: Program, node_id: int, values: list[Any],
                          element: int | None) -> list[tuple[Drawn, Renaming]]:
    """`_alone`'s programs: with an `element`, each 1-D operand is that element of it."""
    node = program.nodes[node_id]
    op = OPS[node.op]
    scalar = element is not None
    inputs: dict[str, int | None] = {}
    point: dict[str, Any] = {}
    names_of: dict[int, str] = {}
    texts = []
    for arg in node.args:
        argument = program.nodes[arg]
        if argument.op == "const":
            texts.append(_number(argument.value)[0])
            continue
        if arg not in names_of:
            scalars = [n for n, size in inputs.items() if size is None]
            if argument.size is not None and VECTOR in inputs:
                return []  # two different 1-D operands: one 1-D input is all a program has
            vector = argument.size is not None and not scalar
            names_of[arg] = VECTOR if vector else SCALARS[len(scalars)]
            inputs[names_of[arg]] = argument.size if vector else None
            value = np.asarray(values[arg])
            point[names_of[arg]] = (value[element] if argument.size is not None and scalar
                                    else value).tolist()
        texts.append(names_of[arg])
    if op.kind == BINARY:
        expression = f"{texts[0]} {op.symbol} {texts[1]}"
    elif op.kind == UNARY:
        expression = f"-{texts[0]}"
    elif op.kind == SELECT:
        expression = f"{texts[0]}[{node.index}]"
    else:
        expression = f"{texts[0]}.{op.name}()"
    lines: list[Line] = [("t0", expression, set(texts))]
    if node.size is not None and not scalar:
        lines.append(("t1", "t0.sum()", {"t0"}))
    source, used, renamed = _assemble(lines, inputs)
    at = {new: point[old] for old, new in renamed.items() if old in point}
    rounded = {name: (np.round(value) + 0.0).tolist() for name, value in at.items()}
    names = {program.nodes[arg].name: renamed[temporary] for arg, temporary in names_of.items()}
    names[node.name] = renamed["t0"]
    return [(candidate, names) for candidate in _drawn(source, used, rounded)
            + _drawn(source, used, at)]


def _with_unused(candidate: Drawn, names: Renaming, drawn: Drawn, unused: list[str]
                 ) -> tuple[Drawn, Renaming]:
    """`candidate` with the inputs `drawn` does not use added back, unused still, at the values
    they had, wherever a name is free for them."""
    inputs, point, names = dict(candidate.inputs), dict(candidate.point), dict(names)
    for name in unused:
        free = [n for n in (SCALARS if drawn.inputs[name] is None else (VECTOR,))
                if n not in inputs]
        if free:
            inputs[free[0]], point[free[0]], names[name] = drawn.inputs[name], drawn.point[name], \
                free[0]
    if len(inputs) == len(candidate.inputs):
        return candidate, names
    inputs = _ordered(inputs)
    point = {name: point[name] for name in inputs}
    return Drawn(candidate.source, inputs, point, known(candidate.source, inputs)), names


#: A number in a program's text: `2`, `0.5`, `(-1)` (not an index, not part of a name).
_CONSTANT = re.compile(r"\(-\d+(?:\.\d+)?\)|(?<![\w.\[])\d+(?:\.\d+)?(?![\w.\]])")


def simplicity(value: float) -> float:
    """How far a number is from simple: its place in NUMBERS (which holds every base and
    exponent too, in their lists' order); after them, by size, a fraction after a whole one."""
    if value in NUMBERS:
        return NUMBERS.index(value)
    return len(NUMBERS) + abs(value) + (not float(value).is_integer())


def _simpler_numbers(drawn: Drawn) -> list[Drawn]:
    """The program with one of its numbers replaced by a simpler one of the same list (a base
    of `c ** a` by a simpler base, an exponent by a simpler exponent), where it is safe."""
    lines = drawn.source.splitlines()
    found: list[Drawn] = []
    for number, line in enumerate(lines):
        target, expression = line.split(" = ", 1)
        for match in _CONSTANT.finditer(expression):
            value = float(match[0].strip("()"))
            choices = (BASES if expression[match.end():].lstrip().startswith("**")
                       else EXPONENTS if expression[:match.start()].rstrip().endswith("**")
                       else NUMBERS)
            for simpler in sorted(choices, key=simplicity):
                if simplicity(simpler) < simplicity(value):
                    text = f"{expression[:match.start()]}{_number(simpler)[0]}" \
                           f"{expression[match.end():]}"
                    source = "".join(f"{other}\n" for other in
                                     [*lines[:number], f"{target} = {text}", *lines[number + 1:]])
                    found += _drawn(source, dict(drawn.inputs), drawn.point)
    return found


def _nearer_points(drawn: Drawn) -> list[Drawn]:
    """The program at points nearer small whole numbers: every value rounded; one value
    rounded (to the nearer whole number, then to the other one either side), or a whole one
    moved one towards 0."""
    def whole(value: float) -> float:
        return float(np.round(value)) + 0.0

    rounded = {name: [whole(v) for v in value] if isinstance(value, list) else whole(value)
               for name, value in drawn.point.items()}
    points = [rounded] if rounded != drawn.point else []
    for name, value in drawn.point.items():
        for index, v in enumerate(value if isinstance(value, list) else [value]):
            sides = (whole(v), float(np.floor(v) + np.ceil(v)) - whole(v))
            for nearer in sides if v != whole(v) else (v - float(np.sign(v)),):
                if nearer == v:
                    continue
                if isinstance(value, list):
                    points.append({**drawn.point,
                                   name: [*value[:index], nearer, *value[index + 1:]]})
                else:
                    points.append({**drawn.point, name: nearer})
    return [d for point in points for d in _drawn(drawn.source, dict(drawn.inputs), point)]


def _drawn(source: str, inputs: dict[str, int | None], point: dict[str, Any]) -> list[Drawn]:
    """The program at `point`, if it is safe there."""
    program = known(source, inputs)
    keep = differentiable(program) and safe(program, point)
    return [Drawn(source, inputs, point, program)] if keep else []


def _node_values(program: Program, point: dict[str, Any]) -> list[Any]:
    leaves = {name: np.asarray(value, np.float64) for name, value in point.items()}
    with np.errstate(all="ignore"):
        return evaluate(program, leaves, array_apply(np))


def _values(size: int | None) -> st.SearchStrategy[Any]:
    """A scalar or a list of `size` values: whole numbers first, then any float in range."""
    scalar = st.one_of(st.integers(-2, 2).map(float),
                       st.floats(-RANGE, RANGE, allow_nan=False, allow_infinity=False))
    return scalar if size is None else st.lists(scalar, min_size=size, max_size=size)


def safe(program: Program, point: dict[str, Any], margin: float = MARGIN) -> bool:
    """Whether every value of `program` at `point` is finite and at most LARGEST, and every
    kink, pole and domain edge is more than `margin` away."""
    arrays = array_apply(np)
    clear = [True]

    def apply(op: Op, args: list[Any], node: Any) -> Any:
        critical = critical_argument(program, op, args, node)
        if critical is not None and np.any(np.abs(critical) <= margin):
            clear[0] = False
        if op.name == "pow" and program.nodes[node.args[1]].op != "const" \
                and np.any(np.asarray(args[0]) <= margin):
            clear[0] = False  # a tensor exponent: the base's log is in the gradient
        return arrays(op, args, node)

    leaves = {name: np.asarray(value, np.float64) for name, value in point.items()}
    with np.errstate(all="ignore"):
        values = evaluate(program, leaves, apply)
    return clear[0] and all(bool(np.all(np.isfinite(v))) and bool(np.all(np.abs(v) <= LARGEST))
                            for v in values)


def makes_views(program: Program, requires_grad: Sequence[str]) -> bool:
    """Whether the program, run again under `no_grad()`, would make a torch view that requires
    grad: `v[i]` of an input `v` that requires grad. torch's view reports `requires_grad=True`
    (it asks `v`), keeps it after `requires_grad_(False)`, loses it when `v` does, and takes no
    gradient; a scalar engine has no views and gives False, as the protocol's no_grad() rule
    says. That is torch's implementation, not the protocol: a session that would look at such a
    value is not drawn (docs/protocol.md, rule 6)."""
    return any(node.op == "select" and program.nodes[node.args[0]].op == "input"
               and program.nodes[node.args[0]].name in requires_grad for node in program.nodes)


#: The kinds of behaviour step a session draws from, simplest first.
STEP_KINDS = ("backward", "backward_retain", "zero_grad", "forward", "forward_no_grad",
              "retain_grad", "detach", "requires_grad_off", "backward_vector")


# --- behaviour sessions -------------------------------------------------------------------------


@st.composite
def sessions(draw: st.DrawFn, ops: Sequence[str] | None = None, max_operations: int = 4,
             max_steps: int = 4) -> Session:
    """A program, then up to `max_steps` behaviour steps on it (none at all is what shrinking
    prefers), each expecting what it changes."""
    drawn = draw(programs(ops, max_operations))
    inputs = list(drawn.inputs)
    made = [name for name in drawn.program.names if name not in drawn.inputs]
    vectors = [name for name in made if drawn.program.nodes[drawn.program.names[name]].size]
    out = drawn.output
    watch = [f"grad.{name}" for name in inputs]
    steps: list[dict[str, Any]] = []
    count = draw(st.integers(0, max_steps)) if max_steps else 0
    # some inputs may be made without requires_grad (what shrinking drops first)
    frozen = {name for name in inputs if count and draw(st.booleans())}
    kinds = [kind for kind in STEP_KINDS if kind != "forward_no_grad"
             or not makes_views(drawn.program, [n for n in inputs if n not in frozen])]
    for number in range(count):
        kind = draw(st.sampled_from(kinds))
        if kind == "backward":
            steps.append({"backward": {}, "expect": watch})
        elif kind == "backward_retain":
            steps.append({"backward": {"retain_graph": True}, "expect": watch})
        elif kind == "zero_grad":
            steps.append({"zero_grad": [draw(st.sampled_from(inputs))], "expect": watch})
        elif kind in ("forward", "forward_no_grad"):  # every value made has its grad_fn
            steps.append({"forward": {"no_grad": kind == "forward_no_grad"},
                          "expect": [f"requires_grad.{out}",
                                     *(f"grad_fn.{name}" for name in made)]})
        elif kind == "retain_grad":
            name = draw(st.sampled_from(made))
            steps.append({"retain_grad": [name]})
            steps.append({"backward": {"retain_graph": True}, "expect": [f"grad.{name}", *watch]})
        elif kind == "detach":
            name = f"d{number}"
            steps.append({"detach": {"name": name, "of": draw(st.sampled_from(made))},
                          "expect": [f"requires_grad.{name}", f"grad_fn.{name}",
                                     f"is_leaf.{name}", f"value.{name}"]})
        elif kind == "requires_grad_off":  # torch refuses it on a value that is not a leaf
            name = draw(st.sampled_from(inputs + made))
            steps.append({"requires_grad": {name: False}, "expect": [f"requires_grad.{name}"]})
        elif vectors:  # backward of a 1-D value: without `gradient`, torch's scalar-only rule
            name = draw(st.sampled_from(vectors))
            backward: dict[str, Any] = {"of": name}
            if draw(st.booleans()):
                size = drawn.program.nodes[drawn.program.names[name]].size
                backward["gradient"] = [float(draw(st.sampled_from(NUMBERS)))
                                        for _ in range(size or 1)]
            steps.append({"backward": backward, "expect": watch})
        else:
            steps.append({"backward": {}, "expect": watch})
    return Session(drawn, tuple(steps), tuple(n for n in inputs if n not in frozen))



def looks_at_views(session: Session) -> bool:
    """Whether the session runs its program under `no_grad()` where that makes torch views
    that require grad (:func:`makes_views`): such a session is never drawn or tried."""
    return any((step.get("forward") or {}).get("no_grad") for step in session.steps) \
        and makes_views(session.drawn.program, session.requires_grad)


def smaller_sessions(session: Session) -> list[Session]:
    """The session's steps on each program that :func:`shrinks` its own, renamed to match: a
    step on a value the smaller program does not have is left out, and the gradients watched
    are the new program's inputs'. An input of the smaller program is made with requires_grad
    unless it was one made without; where it stands for a value the program made, it is also
    tried without (a bug may show only where nothing requires grad)."""
    old = session.drawn
    frozen = set(old.inputs) - set(session.requires_grad)
    found = []
    for drawn, names in shrinks(old):
        names = {old.output: drawn.output, **names}
        tracked = tuple(new for new in drawn.inputs
                        if not any(names.get(name) == new for name in frozen))
        carried = tuple(new for new in tracked
                        if any(names.get(name) == new for name in session.requires_grad))
        steps = tuple(step for step in (_renamed(step, old, drawn, names)
                                        for step in session.steps) if step is not None)
        for requires_grad in dict.fromkeys((tracked, carried)):
            smaller_session = Session(drawn, steps, requires_grad)
            if not looks_at_views(smaller_session):
                found.append(smaller_session)
    return found


def _renamed(step: dict[str, Any], old: Drawn, new: Drawn, names: Renaming
             ) -> dict[str, Any] | None:
    """`step` of a session on `old` as a step on `new`, or None if what it acts on is gone."""
    def rename(name: str) -> str | None:  # a name `old` does not have (d0, of a detach) stays
        return names.get(name) if name in old.program.names else name

    action = next(key for key in step if key != "expect")
    args = step[action]
    if action in ("zero_grad", "retain_grad"):
        args = [renamed for renamed in map(rename, args) if renamed]
    elif action == "requires_grad":
        args = {renamed: flag for renamed, flag in
                ((rename(name), flag) for name, flag in args.items()) if renamed}
    elif action == "detach" or action == "backward" and "of" in args:
        target = rename(args["of"])
        if target is None or action == "backward" and _size_of(new, target) != _size_of(
                old, args["of"]):
            return None
        args = {**args, "of": target}
    if not args and action != "backward" and action != "forward":
        return None
    if "expect" not in step:
        return {action: args}
    watched = {f"grad.{name}" for name in old.inputs}
    expect = [f"{field}.{renamed}" for field, renamed in
              ((field, rename(name)) for field, name in
               (item.split(".", 1) for item in step["expect"] if item not in watched))
              if renamed]
    if watched & set(step["expect"]):
        expect += [f"grad.{name}" for name in new.inputs]
    return {action: args, "expect": list(dict.fromkeys(expect))}


def _size_of(drawn: Drawn, name: str) -> int | None:
    return drawn.program.nodes[drawn.program.names[name]].size
