"""One request on one engine: the phase it is in, errors recorded with that phase, and plain data
read out of the engine's objects.

Converting what an engine returns is done defensively (a float subclass becomes the float it
stores, a grad left as a string becomes a named `ProtocolError`), so that honest mistakes are
reported plainly. This is not the security boundary: code running in the worker can fool the
worker. The grader trusts only the JSON it receives, after :func:`gradcheck.engine.wire.check_reply`.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping

from gradcheck.engine.wire import MAX_KINDS, ProtocolError
from gradcheck.program.language import MAX_KNOWN, MAX_VECTOR, Node, Program
from gradcheck.program.memo import Memo
from gradcheck.program.ops import OPS, Op, method_of

Progress = Callable[[str], None]
Record = dict[str, Any]

MAX_MESSAGE = 1000  # characters kept of an exception's message
MAX_NAME = 200  # characters kept of a grad_fn name


def type_name(obj: Any) -> str:
    """The real name of `obj`'s class (a metaclass cannot make it lie)."""
    return type.__dict__["__name__"].__get__(type(obj))


def type_label(obj: Any) -> str:
    """`obj`'s class as a message names it: with its module unless it is a builtin, so that
    numpy's bool reads `numpy.bool` and not a `bool` that is not True or False."""
    module = type.__dict__["__module__"].__get__(type(obj))
    name = type_name(obj)
    return name if module == "builtins" or type(module) is not str else f"{module}.{name}"


def builtin_kinds(cls: type) -> list[str]:
    """The builtin classes among `cls` and its bases, most derived first: what an `except` or a
    warnings filter of torch's class catches it as (an engine's AutogradError(RuntimeError)
    is a RuntimeError, as torch's own error is)."""
    mro = type.__dict__["__mro__"].__get__(cls)[:-1]  # object, the last, is no kind of error
    return [type.__dict__["__name__"].__get__(base) for base in mro
            if type.__dict__["__module__"].__get__(base) == "builtins"][:MAX_KINDS]


def error_record(exc: BaseException, phase: str) -> dict[str, Any]:
    """`{"type", "kinds", "message", "phase"}` of an exception, as plain strings."""
    try:
        message = str.__str__(str(exc))
    except Exception:
        message = "(its message could not be read)"
    return {"type": type_name(exc), "kinds": builtin_kinds(type(exc)),
            "message": message[:MAX_MESSAGE], "phase": phase}


def _is_number(x: Any) -> bool:
    """A float or an int (a subclass too), not a bool; told by the class, which is looked up
    once: every operation of every request asks it of its first argument."""
    cls = type(x)
    known = _NUMBER_CLASSES.get(cls)
    if known is None:
        known = issubclass(cls, float) or (issubclass(cls, int) and not issubclass(cls, bool))
        if len(_NUMBER_CLASSES) < MAX_CLASSES:  # an engine that makes classes without end
            _NUMBER_CLASSES[cls] = known
    return known


#: `_is_number` by class (Python refuses to give a made class a number's base or take one away,
#: so the answer never changes)
_NUMBER_CLASSES: dict[type, bool] = {}
MAX_CLASSES = 1024


def _number(x: Any) -> float:
    # float.__float__ reads the stored double: a subclass's own __float__ or __eq__ play no part.
    return float.__float__(x) if issubclass(type(x), float) else float(int.__index__(x))


def plain_numbers(x: Any, what: str, suffix: str = "") -> float | list[float]:
    """A number or a flat list of numbers, as plain floats. `what` and `suffix` name `x` in an
    error; joined only then, as most reads are of thousands of nodes that never fail."""
    cls = type(x)
    if cls is float:  # the usual number: already plain
        return x
    if _is_number(x):
        return _number(x)
    if issubclass(cls, (list, tuple)):
        base = list if issubclass(cls, list) else tuple
        if base.__len__(x) > MAX_VECTOR:
            raise ProtocolError(f"{what}{suffix} has {base.__len__(x)} elements; at most "
                                f"{MAX_VECTOR} are expected")
        items = list(base.__iter__(x))
        for i, item in enumerate(items):
            if not _is_number(item):
                raise ProtocolError(f"element {i} of {what}{suffix} is a {type_label(item)}, "
                                    "not a number")
        return [_number(item) for item in items]
    raise ProtocolError(f"{what}{suffix} is a {type_label(x)}, not a number or a list of numbers")


def plain_value(t: Any, what: str) -> float | list[float]:
    """The value of a tensor through `tolist()` (a constant is already a number)."""
    if _is_number(t):
        return _number(t)
    return plain_numbers(t.tolist(), what, ".tolist()")


def plain_grad(g: Any, what: str) -> float | list[float] | None:
    """A `.grad`: None, a tensor, a number or a list of numbers."""
    if g is None:
        return None
    if type(g) in (int, float, list, tuple):
        return plain_numbers(g, what, ".grad")
    zero = getattr(g, "_is_zerotensor", None)
    if callable(zero) and zero() is True:
        g = g.clone()  # torch's efficient zeros (a second derivative) refuse tolist() until copied
    tolist = getattr(g, "tolist", None)
    if callable(tolist):  # a tensor: the engine's own subclass of list or float too
        return plain_numbers(tolist(), what, ".grad.tolist()")
    if _is_number(g) or issubclass(type(g), (list, tuple)):
        return plain_numbers(g, what, ".grad")
    raise ProtocolError(f"backward left {what}.grad as a {type_label(g)}; it should be None, "
                        "a tensor, a number or a list of numbers")


def plain_flag(x: Any, what: str) -> bool:
    """`requires_grad` or `is_leaf`: True or False, or numpy's bool of either (an engine that
    keeps its flags in numpy gives the same answer as torch)."""
    if type(x) is bool:
        return x
    if type_label(x) in ("numpy.bool", "numpy.bool_"):
        return x.item() is True
    raise ProtocolError(f"{what} is a {type_label(x)}, not True or False")


def plain_grad_fn(fn: Any, what: str) -> str | None:
    """The name of a `.grad_fn` (None for leaves and untracked results)."""
    if fn is None:
        return None
    name = fn.name()
    if not issubclass(type(name), str):
        raise ProtocolError(f"{what}.grad_fn.name() returned a {type_label(name)}, not a str")
    return str.__str__(name)[:MAX_NAME]


def has(owner: Any, name: str) -> bool:
    """Whether `owner` has the attribute `name`, looked up without running any of its code.
    An operator's method is looked up on the class, as Python does; an object with its own
    `__getattr__` may make any name, so it is never said to lack one."""
    if name.startswith("__"):
        return any(name in vars(k) for k in type.__dict__["__mro__"].__get__(type(owner)))
    try:
        inspect.getattr_static(owner, name)
        return True
    except AttributeError:
        return hasattr(type(owner), "__getattr__")
    except Exception:  # a lookup that fails in some other way: not known to be absent
        return True


def read_field(kind: str, obj: Any, name: str) -> Any:
    if kind == "grad":
        return plain_grad(obj.grad, name)
    if kind == "value":  # None: what grad(..., allow_unused=True) gives for an unused input
        return None if obj is None else plain_value(obj, name)
    if kind == "grad_fn":
        return plain_grad_fn(obj.grad_fn, name)
    if kind == "has_grad_fn":
        return obj.grad_fn is not None
    return plain_flag(getattr(obj, kind), f"{name}.{kind}")  # requires_grad, is_leaf


def read_grad_field(field: str, obj: Any, name: str) -> bool | None:
    """`grad.NAME.FIELD`: a flag of `NAME.grad` (None while there is no gradient)."""
    g = obj.grad
    if g is None:
        return None
    # a plain number or list has no history; an engine's tensor that subclasses float or list
    # has its own flags
    if issubclass(type(g), (int, float, list, tuple)) and not has(g, "requires_grad"):
        return {"requires_grad": False, "is_leaf": True, "has_grad_fn": False}[field]
    return read_field(field, g, f"{name}.grad")


class _LeftByError(Exception):
    """Raised inside a `no_grad()` block to leave it as an error would."""


class Run:
    """One request on one engine: the phase it is in, and errors recorded with that phase."""

    def __init__(self, engine: Any, progress: Progress | None) -> None:
        self.engine = engine
        self.progress = progress
        self.phase = ""
        #: the use of the engine under way: (piece of ops.PIECES, node index or None, the object
        #: that should have the piece); an error is recorded with it, so the grader can say
        #: what was done (`2 ** x` needs `__rpow__`) and whether the piece is there at all.
        self.use: tuple[str, int | None, Any] | None = None
        #: the classes of the tensors the engine's tensor() made in this request (`_engines`)
        self._made: set[type] = set()

    def enter(self, phase: str) -> None:
        if phase != self.phase:
            self.phase = phase
            self.use = None
            if self.progress is not None:
                self.progress(phase)

    def using(self, piece: str, node: int | None = None, owner: Any = None) -> None:
        """What the engine is asked next: `piece` of `owner` (for the program's node `node`)."""
        self.use = (piece, node, owner)

    def error(self, exc: Exception) -> dict[str, Any]:
        if isinstance(exc, MemoryError):
            raise exc  # the worker's state is suspect: the whole request fails, the worker restarts
        record: dict[str, Any] = error_record(exc, self.phase)
        if self.use is not None:
            piece, node, owner = self.use
            record["piece"] = piece
            if node is not None:
                record["node"] = node
            record["absent"] = (owner is not None and self._engines(owner)
                                and not has(owner, piece))
        return record

    def _engines(self, owner: Any) -> bool:
        """Whether `owner` is the engine, of a class its tensor() made, or of a class defined in
        it: of anything else (a numpy array an operation on a numpy `.grad` gave) a missing
        piece is not the engine's to write, and the error is said as raised, not as missing."""
        if owner is self.engine or type(owner) in self._made:
            return True
        home = getattr(self.engine, "__name__", None)
        module = type.__dict__["__module__"].__get__(type(owner))
        return (type(home) is str and type(module) is str
                and (module == home or module.startswith(home + ".")))

    def read(self, kind: str, obj: Any, name: str, node: int | None = None) -> Any:
        """A field of `obj` (grad, value, grad_fn, ...) read as plain data, as a use of it."""
        self.using("tolist" if kind == "value" else kind, node, obj)
        return read_field(kind, obj, name)

    def field(self, kind: str, obj: Any, name: str, node: int) -> Any:
        """`attempt(read, ...)`, with the use recorded only if reading raises: a trace reads
        two fields of each of thousands of nodes, and an error record is all the use is for."""
        try:
            return read_field(kind, obj, name)
        except Exception as exc:
            self.using("tolist" if kind == "value" else kind, node, obj)
            return {"error": self.error(exc)}

    def attempt(self, read: Callable[..., Any], *args: Any) -> Any:
        """`read(*args)` as a plain value, or `{"error": record}` when it raised. The arguments
        are passed, not closed over: a trace reads thousands of nodes this way."""
        try:
            return read(*args)
        except Exception as exc:
            return {"error": self.error(exc)}

    def leaves(self, program: Program, point: Mapping[str, Any], grad: set[str]) -> dict:
        self.enter("forward")
        made = {}
        for name in program.inputs:
            self.using("tensor", input_node(program, name), self.engine)
            made[name] = self.engine.tensor(floats(point[name]), requires_grad=name in grad)
            self._made.add(type(made[name]))
        self.use = None
        return made

    def forward(self, program: Program, leaves: Mapping[str, Any],
                no_grad: bool | str = False) -> dict:
        """Every variable of the program, bound to what the engine computed; inside
        `no_grad()` if `no_grad`, after a nested `no_grad()` exited if "nested", and after a
        `no_grad()` left by an exception (so recording) if "after_error"."""
        self.enter("forward")
        if not no_grad:
            values = self.evaluate(program, leaves)
            return {name: values[i] for name, i in program.names.items()}
        self.using("no_grad", None, self.engine)
        if no_grad == "after_error":
            try:
                with self.engine.no_grad():
                    raise _LeftByError
            except _LeftByError:
                pass
            values = self.evaluate(program, leaves)
        else:
            with self.engine.no_grad():
                if no_grad == "nested":
                    with self.engine.no_grad():
                        pass
                values = self.evaluate(program, leaves)
        return {name: values[i] for name, i in program.names.items()}

    def evaluate(self, program: Program, leaves: Mapping[str, Any]) -> list[Any]:
        """The value of every node, each operation recorded as a use of its method."""
        values: list[Any] = []
        append, value = values.append, values.__getitem__
        for i, (op, args, extra) in enumerate(engine_steps(program)):
            if op is None:  # an input (its name) or a constant (its value)
                append(leaves[args] if type(args) is str else args)
                continue
            args = list(map(value, args))
            # as `using`, inline: this runs once per operation of every request
            if op.arity == 2 and _is_number(args[0]):
                self.use = (_REFLECTED[op.name], i, args[1])
            else:
                self.use = (_METHOD[op.name], i, args[0])
            append(op.engine(*args, *extra))
        self.use = None
        return values


def engine_steps(program: Program) -> list[tuple[Op | None, Any, tuple[int, ...]]]:
    """`program` as `Run.evaluate` runs it, a step per node: (None, the input's name or the
    constant's value, ()), or (the operation, its arguments' node indices, the select's index
    or ()). Remembered with the program, as the program itself is (`spec_program`): a looped
    program has thousands of nodes and every point of every request is evaluated."""
    return _STEPS.get(program) or _STEPS.keep([_step(node) for node in program.nodes], program)


def _step(node: Node) -> tuple[Op | None, Any, tuple[int, ...]]:
    if node.op == "input":
        return None, node.name, ()
    if node.op == "const":
        return None, float(node.value), ()
    return OPS[node.op], node.args, (node.index,) if node.op == "select" else ()


_STEPS: Memo[list[tuple[Op | None, Any, tuple[int, ...]]]] = Memo(MAX_KNOWN)


#: the method each operation calls (`method_of`), and the reflected one a number on its left
#: calls (`2 ** x` is `x.__rpow__(2)`)
_METHOD = {name: method_of(op) for name, op in OPS.items()}
_REFLECTED = {name: method_of(op, True) for name, op in OPS.items()}


def input_node(program: Program, name: str) -> int:
    """The index of the input `name`'s node."""
    return next(i for i, node in enumerate(program.nodes) if node.op == "input"
                and node.name == name)


def floats(value: Any) -> float | list[float]:
    return [float(v) for v in value] if isinstance(value, list) else float(value)


def lookup(env: Mapping[str, Any], name: str) -> Any:
    if name not in env:
        raise NameError(f"{name} was never made (an earlier step failed)")
    return env[name]
