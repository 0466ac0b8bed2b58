"""The library API: check a program's or a function's gradients against the oracles.

    >>> report = gradcheck.check("z = (x * y).tanh()", at={"x": 0.5, "y": -1.0})
    >>> report.ok
    True
    >>> gradcheck.check("z = (x * y).tanh()", at={"x": 0.5, "y": -1.0}, order=2).ok
    True

The target is a program in the exercise language, or a Python function written against the engine
protocol (`x * y`, `x.exp()`, `v[0]`, `v.sum()`), which is traced into the same program form by
calling it once on recording objects; it is never evaluated as text. Points are given with `at`, or
drawn by hypothesis from `domains`. Without an `engine`, the report says where the oracles agree
and classifies where they do not; with one (a module with `tensor()`, such as your own engine),
the engine runs here, in this process, and its gradients are graded as the grader would.
With `order=2` the second derivatives are checked instead, as torch's `gradgradcheck` and jax's
`check_grads(order=2)` do: every row of the Hessian (or the Hessian-vector product with
`vector`), by torch's double backward, jax's jvp of grad and differences of finite-difference
gradients, and an engine's by `backward(create_graph=True)` and a backward of each gradient.
"""

from __future__ import annotations

import inspect
import math
import numbers
import operator
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from gradcheck.program.language import Program, ProgramError, engine_apply, evaluate, parse
from gradcheck.program.ops import CALLABLE, REDUCTION, Interval

# numpy, hypothesis and the oracles are imported when a check runs, not with the package: the
# grader's worker process imports gradcheck and should start fast.
if TYPE_CHECKING:
    import numpy as np

    from gradcheck.bank.tolerances import Tolerances
    from gradcheck.grading.compare import Agreement, Grading
    from gradcheck.oracles import OracleResult, Skipped


@dataclass
class CheckReport:
    """What :func:`check` found; `str(report)` is a short readable summary."""

    program: Program
    points: dict[str, np.ndarray]  # the batch that was checked
    requires_grad: tuple[str, ...]
    results: dict[str, OracleResult | Skipped]
    agreement: Agreement
    grading: Grading | None = None  # when an engine was checked
    engine: str | None = None
    seed: int | None = None  # when points were drawn
    #: 2: second derivatives; each row of `points` is then a point and a direction
    order: int = 1
    #: when the engine failed: the grader's feedback, naming the operation at fault first
    diagnosis: str = ""

    @property
    def skipped(self) -> dict[str, str]:
        return dict(self.agreement.skipped)

    @property
    def ok(self) -> bool:
        """The engine passed every graded point, and some point was graded (a check of nothing
        proves nothing); without an engine, the oracles agreed everywhere."""
        if self.grading is not None:
            return self.grading.passed and not self.grading.nothing_graded
        return not any(d.graded_by is None for d in self.agreement.disagreements())

    def __str__(self) -> str:
        from gradcheck.grading.compare import ORACLE_LABELS
        from gradcheck.oracles import OracleResult

        n = self.agreement.n
        inputs = ", ".join(name if size is None else f"{name}[{size}]"
                           for name, size in self.program.inputs.items())
        unjudged = self.grading is not None and self.grading.nothing_graded
        lines = [f"gradcheck: {'ok' if self.ok else 'NOTHING GRADED' if unjudged else 'FAILED'}",
                 f"  program: {_one_line(self.program.source)} -> {self.program.output_name}; "
                 f"inputs {inputs}",
                 f"  points: {n}" + (f" (drawn with seed {self.seed})"
                                     if self.seed is not None else "")
                 + (" (second order: one per point and direction)" if self.order == 2 else "")]
        ran = [ORACLE_LABELS[k] for k, r in self.results.items() if isinstance(r, OracleResult)]
        lines.append(f"  oracles: {', '.join(ran) or 'none'}")
        lines += [f"  {name}: {reason}" for name, reason in self.skipped.items()]
        disagreements = self.agreement.disagreements()
        graded = int(self.agreement.graded_points().sum())
        lines.append(f"  the oracles agree at {n - len({d.point for d in disagreements})} of "
                     f"{n} points" + ("" if graded == n else f"; {n - graded} not graded"))
        if self.grading is not None:
            failed = self.grading.count("failed")
            lines.append(f"  engine {self.engine}: " + (
                f"FAILED at {failed} of {n} points" if failed
                else "nothing graded" if unjudged else "passed"))
            for line in (self.diagnosis or self.grading.message).splitlines():
                lines.append(f"    {line}")
            lines += [f"  note: {note}" for note in self.grading.author_notes
                      if not note.startswith(tuple(self.skipped))]
        else:
            for d in disagreements[:5]:
                how = f"graded by {d.graded_by}'s convention" if d.graded_by else "not graded"
                lines.append(f"  {d.reason} ({how}): "
                             + d.describe(self.agreement.point_text(d.point)))
            if len(disagreements) > 5:
                lines.append(f"  ... {len(disagreements) - 5} more")
        return "\n".join(lines)


def check(target: str | Callable[..., Any], *,
          inputs: Mapping[str, int | None] | Sequence[str] | None = None,
          output: str | None = None,
          at: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
          domains: Mapping[str, Interval | Sequence[Any] | Mapping[str, Any]] | None = None,
          samples: int = 20, margin: float = 0.0, seed: int = 0,
          requires_grad: Sequence[str] | None = None,
          oracles: Sequence[str] = ("fd", "torch", "jax"),
          tolerance: Tolerances | None = None, convention: str | None = None,
          engine: Any = None, order: int = 1,
          vector: Mapping[str, Any] | None = None) -> CheckReport:
    """Check gradients of `target` at the points `at` and at `samples` points drawn from `domains`
    (each kept `margin` away from its edges and avoided points), against the chosen oracles, and,
    if given, an engine module run in this process. `order=2` checks second derivatives: the
    Hessian's rows, or its product with `vector` (a value for each input that requires grad)."""
    if order not in (1, 2):
        raise ValueError(f"order is 1 (gradients) or 2 (second derivatives), not {order!r}")
    if vector is not None and order != 2:
        raise ValueError("vector= is the direction of a Hessian-vector product: give order=2")
    from gradcheck.bank.domains import draw, points
    from gradcheck.bank.tolerances import Tolerances
    from gradcheck.grading.compare import agree, grade
    from gradcheck.oracles import as_batch, compute

    listed = [at] if isinstance(at, Mapping) else list(at or [])
    declared = _declared_inputs(target, inputs, listed, domains)
    program = (parse(target, declared, output) if isinstance(target, str)
               else trace(target, declared))
    wanted = tuple(requires_grad) if requires_grad is not None else tuple(program.inputs)
    drawn: list[dict[str, Any]] = []
    if domains is not None:
        intervals = {name: _interval(name, d) for name, d in domains.items()}
        drawn = draw(points(program.inputs, intervals, margin), samples, seed)
    if not listed and not drawn:
        raise ValueError("no points to check: give them with at=..., or give domains=... to draw "
                         "them from")
    tolerances = tolerance or Tolerances()
    if order == 2:
        return _check_second(program, listed + drawn, wanted, vector, oracles, tolerances,
                             convention, engine, seed if drawn else None)
    batch = as_batch(program, listed + drawn)
    results = compute(program, batch, wanted, oracles)
    report = CheckReport(program, batch, wanted, results,
                         agree(program, results, wanted, batch, tolerances, convention),
                         seed=seed if drawn else None)
    if engine is not None:
        replies = run_engine(engine, program, batch, wanted)
        report.grading = grade(program, batch, wanted, results, replies, tolerances, convention)
        report.engine = getattr(engine, "__name__", type(engine).__name__)
        if not report.grading.passed:
            report.diagnosis = _diagnosis(engine, program, listed + drawn, wanted,
                                          report.grading, tolerances)
    return report


def _diagnosis(engine: Any, program: Program, points: list[Mapping[str, Any]],
               wanted: tuple[str, ...], grading: Grading, tolerances: Tolerances) -> str:
    """The grader's feedback on a failed check: the engine asked in this process (trusted code)
    through the same requests the worker answers, so the first line names the faulty
    operation, as `gradcheck grade` does."""
    from gradcheck.engine import handler
    from gradcheck.grading import localise

    plain = [{name: _plain_point(p[name]) for name in program.inputs} for p in points]
    return localise.feedback(grading, program, plain, wanted,
                             lambda request: handler.handle(engine, request), tolerances.analytic)


def _check_second(program: Program, listed: list[Mapping[str, Any]], wanted: tuple[str, ...],
                  vector: Mapping[str, Any] | None, oracles: Sequence[str],
                  tolerances: Tolerances, convention: str | None, engine: Any,
                  seed: int | None) -> CheckReport:
    """`check(..., order=2)`: one row per point and direction, graded as first order is."""
    from gradcheck.engine import handler
    from gradcheck.grading.compare import agree, grade
    from gradcheck.oracles import as_batch, second_order

    points = [{name: _plain_point(p[name]) for name in program.inputs} for p in listed]
    if vector is not None:
        vector = {name: _plain_point(vector[name]) for name in wanted}
    rows, _, labels = second_order.expand(points, second_order.directions(program, wanted,
                                                                          vector))
    batch = as_batch(program, rows)
    results = second_order.compute(program, points, wanted, vector, oracles)
    report = CheckReport(program, batch, wanted, results,
                         agree(program, results, wanted, batch, tolerances, convention, labels),
                         seed=seed, order=2)
    if engine is not None:
        reply = handler.handle(engine, {"kind": "hessian", "program": program.spec(),
                                        "points": points, "requires_grad": list(wanted),
                                        "vector": vector})
        report.grading = grade(program, batch, wanted, results, reply["results"], tolerances,
                               convention, labels)
        report.engine = getattr(engine, "__name__", type(engine).__name__)
    return report


def _plain_point(value: Any) -> Any:
    """A point's value as JSON data: a float, or a list of floats."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    return [float(v) for v in value] if isinstance(value, (list, tuple)) else float(value)


def run_engine(engine: Any, program: Program, batch: Mapping[str, np.ndarray],
               requires_grad: Sequence[str]) -> list[dict[str, Any]]:
    """Run `program` on an engine module in this process, one point at a time, and return its
    replies in the worker's JSON form (for trusted code only: grading uses a sandbox)."""
    replies = []
    n = len(next(iter(batch.values()))) if batch else 0
    for i in range(n):
        point = {name: batch[name][i].tolist() for name in program.inputs}
        replies.append(_run_point(engine, program, point, requires_grad))
    return replies


def _run_point(engine: Any, program: Program, point: Mapping[str, Any],
               requires_grad: Sequence[str]) -> dict[str, Any]:
    phase = "forward"
    try:
        leaves = {name: engine.tensor(value, requires_grad=name in requires_grad)
                  for name, value in point.items()}
        out = evaluate(program, leaves, engine_apply)[program.output]
        value = _plain(out)
        phase = "backward"
        (out if program.nodes[program.output].size is None else out.sum()).backward()
        return {"value": value, "grads": {name: _plain(leaves[name].grad)
                                          for name in requires_grad}, "error": None}
    except Exception as exc:  # the engine's failure is a result here, not a crash of the check
        return {"value": None, "grads": {},
                "error": {"type": type(exc).__name__, "message": str(exc), "phase": phase}}


def _plain(x: Any) -> Any:
    return x.tolist() if hasattr(x, "tolist") else x


# --- tracing a Python function into a program --------------------------------------------------


def trace(function: Callable[..., Any], inputs: Mapping[str, int | None]) -> Program:
    """The program `function` computes, recorded by calling it once on tracing tensors."""
    recorder = _Recorder(inputs)
    try:
        result = function(**{name: _Traced(recorder, name, size)
                             for name, size in inputs.items()})
    except _TraceError as exc:
        raise TypeError(f"cannot trace {_name(function)}: {exc}") from None
    value = result._name if isinstance(result, _Traced) and result._recorder is recorder \
        else _operand(result)
    # Name the output after the function, so that reports say df/dx.
    output = getattr(function, "__name__", "")
    if (not output.isidentifier() or output.startswith("_") or output in inputs
            or re.fullmatch(recorder.prefix + r"\d+", output)):
        output = "out"
    recorder.lines.append(f"{output} = {value}")
    try:
        return parse(recorder.source(), inputs, output)
    except ProgramError as exc:
        line = recorder.lines[exc.line - 1] if 0 < exc.line <= len(recorder.lines) else ""
        raise ValueError(f"cannot trace {_name(function)}: {exc.message} (in the recorded step "
                         f"`{line}`)") from None


class _TraceError(TypeError):
    pass


class _Recorder:
    """Collects one assignment per operation, in the program language."""

    def __init__(self, inputs: Mapping[str, int | None]) -> None:
        self.prefix = "t"
        while any(re.fullmatch(self.prefix + r"\d+", name) for name in inputs):
            self.prefix += "t"
        self.lines: list[str] = []

    def record(self, expression: str, size: int | None) -> _Traced:
        name = f"{self.prefix}{len(self.lines)}"
        self.lines.append(f"{name} = {expression}")
        return _Traced(self, name, size)

    def source(self) -> str:
        return "\n".join(self.lines) + "\n"


class _Traced:
    """Stands for a tensor while a function is traced; each operation records one step."""

    __slots__ = ("_recorder", "_name", "_size")

    def __init__(self, recorder: _Recorder, name: str, size: int | None) -> None:
        self._recorder, self._name, self._size = recorder, name, size

    def _binary(self, other: Any, symbol: str, reflected: bool = False) -> _Traced:
        size = self._size if self._size is not None else getattr(other, "_size", None)
        left, right = _operand(self), _operand(other)
        if reflected:
            left, right = right, left
        return self._recorder.record(f"{left} {symbol} {right}", size)

    def __add__(self, other: Any) -> _Traced:
        return self._binary(other, "+")

    def __radd__(self, other: Any) -> _Traced:
        return self._binary(other, "+", True)

    def __sub__(self, other: Any) -> _Traced:
        return self._binary(other, "-")

    def __rsub__(self, other: Any) -> _Traced:
        return self._binary(other, "-", True)

    def __mul__(self, other: Any) -> _Traced:
        return self._binary(other, "*")

    def __rmul__(self, other: Any) -> _Traced:
        return self._binary(other, "*", True)

    def __truediv__(self, other: Any) -> _Traced:
        return self._binary(other, "/")

    def __rtruediv__(self, other: Any) -> _Traced:
        return self._binary(other, "/", True)

    def __pow__(self, other: Any) -> _Traced:
        return self._binary(other, "**")

    def __rpow__(self, other: Any) -> _Traced:
        return self._binary(other, "**", True)

    def __neg__(self) -> _Traced:
        return self._recorder.record(f"-{self._name}", self._size)

    def __abs__(self) -> _Traced:
        return self._recorder.record(f"{self._name}.abs()", self._size)

    def __getitem__(self, index: Any) -> _Traced:
        i = operator.index(index)
        if self._size is None:
            raise _TraceError("a scalar cannot be indexed")
        if not -self._size <= i < self._size:
            raise IndexError(f"index {i} is out of range for length {self._size}")
        return self._recorder.record(f"{self._name}[{i}]", None)

    def __len__(self) -> int:
        if self._size is None:
            raise _TraceError("a scalar has no length")
        return self._size

    def __iter__(self) -> Iterator[_Traced]:
        return (self[i] for i in range(len(self)))

    def __bool__(self) -> bool:
        raise _TraceError("the function branches on a tensor's value (if, and, or, a "
                          "comparison); only the protocol's operations can be traced")

    def __float__(self) -> float:
        raise _TraceError("the function converts a tensor to a number (math.exp(x)?); use the "
                          "tensor's methods, like x.exp()")

    def _compare(self, other: Any) -> bool:
        return self.__bool__()

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _compare  # type: ignore[assignment]
    __hash__ = None  # type: ignore[assignment]


def _method(name: str, reduces: bool) -> Callable[[_Traced], _Traced]:
    def method(self: _Traced) -> _Traced:
        return self._recorder.record(f"{self._name}.{name}()", None if reduces else self._size)

    method.__name__ = name
    return method


for _op in CALLABLE.values():
    setattr(_Traced, _op.name, _method(_op.name, _op.kind == REDUCTION))


def _operand(x: Any) -> str:
    if isinstance(x, _Traced):
        return x._name
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        value = float(x)
        if not math.isfinite(value):
            raise _TraceError(f"the constant {value} is not a finite number")
        return repr(value) if value >= 0 else f"({value!r})"
    raise _TraceError(f"{type(x).__name__} values cannot be traced; use tensors and numbers")


def _name(function: Callable[..., Any]) -> str:
    return getattr(function, "__qualname__", repr(function))


# --- arguments ----------------------------------------------------------------------------------


def _declared_inputs(target: str | Callable[..., Any],
                     inputs: Mapping[str, int | None] | Sequence[str] | None,
                     listed: list[Mapping[str, Any]],
                     domains: Mapping[str, Any] | None) -> dict[str, int | None]:
    """Input names and sizes: as declared, else from the function's parameters, else from the
    points' values (a list is a 1-D input) or the domains' names (scalars)."""
    if isinstance(inputs, Mapping):
        return dict(inputs)
    if inputs is not None:
        names = list(inputs)
    elif not isinstance(target, str):
        names = list(inspect.signature(target).parameters)
    elif listed:
        names = list(listed[0])
    elif domains:
        names = list(domains)
    else:
        raise ValueError("declare the program's inputs, e.g. inputs={'x': None, 'v': 3}")
    first = listed[0] if listed else {}
    return {name: (len(first[name]) if isinstance(first.get(name), (list, tuple))
                   or getattr(first.get(name), "ndim", 0) == 1 else None) for name in names}


def _interval(name: str, domain: Interval | Sequence[Any] | Mapping[str, Any]) -> Interval:
    if isinstance(domain, Interval):
        return domain
    if isinstance(domain, Mapping):
        return Interval(float(domain["low"]), float(domain["high"]),
                        tuple(float(a) for a in domain.get("avoid", ())))
    values = list(domain)
    if len(values) not in (2, 3):
        raise ValueError(f"the domain of {name!r} should be (low, high) or (low, high, avoid)")
    return Interval(float(values[0]), float(values[1]),
                    tuple(float(a) for a in (values[2] if len(values) == 3 else ())))


def _one_line(source: str) -> str:
    text = "; ".join(line.strip() for line in source.strip().splitlines())
    return text if len(text) <= 70 else text[:67] + "..."

