"""Comparison: tolerances, whether the oracles agree, and what a wrong answer is told.

Grading happens in two steps, both vectorised over all points:

1. Agreement (:func:`agree`): at every point, for the output's value and every differentiated input
   element, the oracles must agree with each other before anything is graded. Where they do not,
   the value is not graded and the reason is classified for the exercise's author: a kink, a
   convention (torch and jax differ, e.g. abs'(0)), a domain edge or pole (non-finite values), or
   ill-conditioning (the two finite-difference stencils differ). An exercise may instead grade such
   values against one oracle's convention (`convention="torch"`), labelled as such; where that
   oracle did not run, no other stands in for it and nothing is graded.
2. Grading (:func:`grade`): the values an engine reported (plain JSON numbers) are compared with
   the expected ones. Non-finite values are compared as such before any relative error, so NaN
   never passes by arithmetic accident, and an input the output does not depend on is expected to
   have `.grad` None, as in torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from gradcheck.bank.tolerances import Tolerance, Tolerances, same
from gradcheck.grading.digits import GAVE_UNREADABLE, UNREADABLE, number_text
from gradcheck.grading.uses import Use, describe
from gradcheck.oracles import OracleResult, Skipped, as_batch, reached_inputs
from gradcheck.program.language import Program
from gradcheck.program.ops import OPS

KINK = "kink"
CONVENTION = "convention"
EDGE = "domain edge or pole"
ILL = "ill-conditioning"
_REASONS = ("", KINK, CONVENTION, EDGE, ILL)  # indexed by the codes kept in the arrays below
_AGREED, _KINK, _CONVENTION, _EDGE, _ILL = range(len(_REASONS))
ORACLE_LABELS = {"fd": "finite differences", "torch": "torch", "jax": "jax",
                 "reference": "the reference engine"}
#: the oracles that differentiate exactly; the reference engine stands in for torch where torch
#: cannot be used (random programs graded with an answer key, `gradcheck fuzz` without torch)
ANALYTIC = ("torch", "jax", "reference")
_ORDER = (*ANALYTIC, "fd")


# --- agreement ----------------------------------------------------------------------------------


@dataclass
class Quantity:
    """One graded quantity at every point: the output's value or one input's gradient.

    Arrays have shape (n, w): w = 1 for a scalar, the length of a 1-D value otherwise.
    """

    name: str  # "value" or the input's name
    label: str  # "z" or "dz/dx"
    size: int | None
    reached: bool  # False: the output ignores this input, so its .grad is None (torch)
    estimates: dict[str, np.ndarray]  # each oracle that ran -> its values
    expected: np.ndarray
    tolerance: Tolerance
    graded: np.ndarray  # bool
    reason: np.ndarray  # codes into _REASONS, _AGREED where the oracles agree
    by_convention: np.ndarray  # bool: graded against `convention` although the oracles differ
    crossing: np.ndarray | None = None  # fd: node whose kink or edge the stencil crosses, or -1

    def element_label(self, element: int) -> str:
        return self.label if self.size is None else f"{self.label}[{element}]"


@dataclass
class Agreement:
    """Where the oracles agree, for every quantity at every point of a batch."""

    program: Program
    batch: dict[str, np.ndarray]
    quantities: list[Quantity]
    skipped: dict[str, str]  # oracle -> reason
    convention: str | None = None
    #: second order: each row's direction (`e(a)`, `vector`), shown with its point
    directions: Sequence[str] | None = None
    #: point_text by point: every wrong value names its point, thousands of them for an engine
    #: wrong on a 3,000-element vector, at a few points
    _texts: dict[int, str] = field(default_factory=dict, init=False, repr=False, compare=False)
    #: what `graded_points`, `judged` and `disagreements` worked out, as they depend on nothing
    #: else (`settle`)
    _memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def n(self) -> int:
        return len(next(iter(self.batch.values()))) if self.batch else 0

    def settle(self) -> None:
        """Work out now what every grading reads of this agreement: an answer key's is the
        same at every grading (`Key.agreement`), and a batch's job slot settles it once for
        every grading it forks."""
        self.graded_points()
        self.judged()
        self.disagreements()
        _all_match(self)

    def graded_points(self) -> np.ndarray:
        """Points where at least one value is graded (read-only)."""
        if "graded" not in self._memo:
            marks = [q.graded.any(axis=1) for q in self.quantities]
            self._memo["graded"] = _fixed(np.any(marks, axis=0) if marks
                                          else np.zeros(self.n, bool))
        return self._memo["graded"]

    def judged(self) -> np.ndarray:
        """Per point, whether a gradient is graded there (a value, for a check of values alone):
        the value alone (log's nan, agreed by every oracle, below its domain) grades no gradient
        (read-only)."""
        if "judged" not in self._memo:
            slopes = [q for q in self.quantities if q.name != "value"] or self.quantities
            self._memo["judged"] = _fixed(np.any([q.graded.any(axis=1) for q in slopes], axis=0))
        return self._memo["judged"]

    def distinct(self, rows: Iterable[int]) -> int:
        """How many points `rows` are: rows at one point (the inputs' value listed again as a
        point; a Hessian's rows, one per direction) are one point to whoever reads a count."""
        return len({self._point_key(i) for i in rows})

    def distinct_values(self, values: Iterable[tuple[int, str]]) -> int:
        """How many values the (row, label) pairs are, a value at a point listed twice once."""
        return len({(self._point_key(i), self.directions[i] if self.directions else "", label)
                    for i, label in values})

    def _point_key(self, i: int) -> bytes | int:
        if not self.batch:
            return i
        return b"".join(self.batch[name][i].tobytes() for name in self.program.inputs)

    def disagreements(self) -> list[Disagreement]:
        """Every value where the oracles disagree, classified, in point order."""
        if "disagreements" not in self._memo:
            found = []
            for q in self.quantities:
                for i, e in np.argwhere(q.reason != _AGREED):
                    found.append(Disagreement(
                        int(i), q.element_label(int(e)), _REASONS[q.reason[i, e]],
                        {k: float(v[i, e]) for k, v in q.estimates.items()},
                        self._detail(q, int(i), int(e)),
                        self.convention if q.by_convention[i, e] else None))
            self._memo["disagreements"] = tuple(sorted(found, key=lambda d: d.point))
        return list(self._memo["disagreements"])

    def point_text(self, i: int) -> str:
        if i not in self._texts:
            text = format_point(self.program, self.batch, i)
            self._texts[i] = (text if self.directions is None
                              else f"{text}, direction {self.directions[i]}")
        return self._texts[i]

    def _detail(self, q: Quantity, i: int, e: int) -> str:
        """Why the oracles disagree on this value: those whose answer is not a number, if only
        some are; the kink, pole or domain edge that the finite-difference stencil crosses."""
        node_id = -1 if q.crossing is None else int(q.crossing[i, e])
        near = ""
        if node_id >= 0:
            node = self.program.nodes[node_id]
            what = "kink" if OPS[node.op].kinks else "pole or domain edge"
            near = (f"the {what} of {node.op} in `{node.text}` (line {node.line}, column "
                    f"{node.column})")
        odd = [k for k, v in q.estimates.items() if not math.isfinite(v[i, e])]
        if odd and len(odd) < len(q.estimates):
            text = (" and ".join(ORACLE_LABELS.get(k, k) for k in odd) + " give"
                    + "s" * (len(odd) == 1) + " no finite value here")
            return text + (f", next to {near}" if near else "")
        return f"the finite-difference stencil crosses {near}" if near else ""


@dataclass(frozen=True)
class Disagreement:
    """A value where the oracles differ: not graded, or graded by a declared convention."""

    point: int
    label: str  # "dz/dv[1]"
    reason: str
    oracles: dict[str, float]
    detail: str = ""
    graded_by: str | None = None

    def describe(self, point_text: str) -> str:
        """`dz/dx at x=0.0: torch 0, jax 1, finite differences 0; <why>`."""
        text = f"{self.label} at {point_text}: {_each(self.oracles)}" + _apart(self.oracles)
        return text + (f"; {self.detail}" if self.detail else "")


def agree(program: Program, results: Mapping[str, OracleResult | Skipped],
          requires_grad: Sequence[str], points: Any = None,
          tolerance: Tolerances = Tolerances(), convention: str | None = None,
          directions: Sequence[str] | None = None) -> Agreement:
    """Judge, at every point, whether the oracles agree on the value and on each gradient.

    With `directions` the results are second order (gradcheck.oracles.second_order): row i is
    a point and a direction d, its value the first derivative along v, and its gradients
    those of that derivative (a row of the Hessian, or H d), which always exist (0 where
    nothing depends on an input). With a `convention` whose oracle did not run, nothing is
    graded: the oracles left would decide at a kink by their own conventions."""
    if convention not in (None, "torch", "jax"):
        raise ValueError(f"convention must be 'torch' or 'jax', not {convention!r}")
    # analytic oracles first, so that reports read "torch ..., jax ..., finite differences ..."
    ran = {k: results[k] for k in sorted(results, key=_ORDER.index)
           if isinstance(results[k], OracleResult)}
    skipped = {k: r.reason for k, r in results.items() if isinstance(r, Skipped)}
    if convention is not None and convention not in ran:
        # No other oracle stands in for the convention's: where it did not run, which values
        # it would decide is unknown, and any graded there could cost a faithful engine a point.
        why = skipped.get(convention, f"skipped: {convention} was not asked")
        skipped[convention] = (f"{why}; the convention is {convention}'s, so no other oracle "
                               f"grades this check in its place")
        ran = {}
    batch = as_batch(program, points) if points is not None else {}
    quantities: list[Quantity] = []
    if ran:
        out = program.nodes[program.output]
        second = directions is not None
        # numpy evaluates a first-order value exactly; a second-order one (a first derivative)
        # it only estimates, so there the analytic oracles judge it when they ran
        exact = {k: r for k, r in ran.items() if not (second and k == "fd")}
        kinks = np.array([bool(OPS[n.op].kinks) if n.op in OPS else False
                          for n in program.nodes])
        if exact:
            values = {("numpy" if k == "fd" else k): _wide(r.value) for k, r in exact.items()}
            quantities.append(_judge_value(f"d{program.output_name}/d(direction)" if second
                                           else program.output_name,
                                           None if second else out.size, values, tolerance))
        else:  # the first derivatives are finite differences' own estimates, judged as theirs
            quantities.append(_judge_estimate(f"d{program.output_name}/d(direction)", ran["fd"],
                                              tolerance, kinks))
        reached = set(program.inputs) if second else reached_inputs(program)
        for name in dict.fromkeys(requires_grad):
            quantities.append(_judge_grad(program, name, name in reached, ran, tolerance, kinks,
                                          second))
        if convention is not None:
            for q in quantities:
                _by_convention(q, convention, tolerance)
    return Agreement(program, batch, quantities, skipped, convention, directions)


def _wide(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float64).reshape(len(a), -1)


def _judge_value(name: str, size: int | None, values: dict[str, np.ndarray],
                 tolerance: Tolerances) -> Quantity:
    first = next(iter(values.values()))
    finite = np.all([np.isfinite(v) for v in values.values()], axis=0)
    agreed = np.all([tolerance.analytic.agree(first, v) for v in values.values()], axis=0)
    reason = np.where(agreed, _AGREED, np.where(finite, _ILL, _EDGE)).astype(np.int8)
    source = next(k for k in (*ANALYTIC, "numpy") if k in values)
    return Quantity("value", name, size, True, values, values[source], tolerance.analytic,
                    reason == _AGREED, reason, np.zeros(first.shape, bool))


def _judge_estimate(name: str, fd: OracleResult, tolerance: Tolerances, kinks: np.ndarray
                    ) -> Quantity:
    """Second order, finite differences alone: the first derivative along each row's direction
    is their estimate, not graded where a stencil of the row crosses a kink, pole or domain
    edge, as a first-order gradient of theirs is not (the central difference across relu's kink
    gives the mean of its two slopes, which is no one's convention)."""
    assert fd.crossing is not None
    estimate = _wide(fd.value)
    # every input's crossing holds the same mark per row: the node nearest any stencil of it
    crossing = np.asarray(next(iter(fd.crossing.values()))).reshape(len(estimate), -1)[:, :1]
    reason = np.zeros(estimate.shape, np.int8)
    crossed, at_kink = _crossings(crossing, kinks)
    reason[at_kink] = _KINK
    reason[crossed & ~at_kink] = _EDGE
    reason[(reason == _AGREED) & ~np.isfinite(estimate)] = _EDGE
    return Quantity("value", name, None, True, {"fd": estimate}, estimate, tolerance.fd,
                    reason == _AGREED, reason, np.zeros(estimate.shape, bool), crossing)


def _crossings(crossing: np.ndarray, kinks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where a finite-difference stencil crosses a node's kink, pole or domain edge (`crossing`
    holds that node, -1 for none), and where the node crossed is a kink."""
    crossed = crossing >= 0
    return crossed, kinks[np.maximum(crossing, 0)] & crossed


def _judge_grad(program: Program, name: str, reached: bool, ran: Mapping[str, OracleResult],
                tolerance: Tolerances, kinks: np.ndarray, second: bool = False) -> Quantity:
    estimates = {k: _wide(r.grads[name]) for k, r in ran.items()}
    analytic = [estimates[k] for k in ANALYTIC if k in estimates]
    fd = ran.get("fd")
    every = list(estimates.values())
    shape = every[0].shape
    reason = np.zeros(shape, np.int8)
    finite = np.all([np.isfinite(v) for v in every], axis=0)
    # Non-finite answers are an agreement only if every oracle gives the same one and an analytic
    # oracle is among them (finite differences alone cannot tell a pole from noise).
    settled = np.all([same(every[0], v) for v in every], axis=0) & bool(analytic)
    reason[~finite & ~settled] = _EDGE
    if len(analytic) >= 2:
        reason[finite & ~tolerance.analytic.agree(*analytic[:2])] = _CONVENTION
    crossing = None
    if fd is not None:
        assert fd.central is not None and fd.crossing is not None
        estimate, central = estimates["fd"], _wide(fd.central[name])
        crossing = fd.crossing[name].reshape(shape)
        unstable = ~tolerance.fd.agree(central, estimate)
        if analytic:
            suspect = ~tolerance.fd.agree(estimate, analytic[0])
        else:
            suspect = (crossing >= 0) | unstable
        suspect &= finite & (reason == _AGREED)
        crossed, at_kink = _crossings(crossing, kinks)
        reason[suspect & at_kink] = _KINK
        reason[suspect & crossed & ~at_kink] = _EDGE
        reason[suspect & ~crossed & unstable] = _ILL
        # finite differences disagree with the analytic oracles, which agree: a kink or a jump
        reason[suspect & ~crossed & ~unstable] = _KINK
    source = next(k for k in _ORDER if k in estimates)
    tol = tolerance.fd if source == "fd" else tolerance.analytic
    out = program.output_name
    label = f"d{out}/d{name}" if program.nodes[program.output].size is None else \
        f"d(sum of {out})/d{name}"
    if second:
        label = f"d2{out}/d(direction) d{name}"
    return Quantity(name, label, program.inputs[name], reached, estimates, estimates[source], tol,
                    reason == _AGREED, reason, np.zeros(shape, bool), crossing)


def _by_convention(q: Quantity, convention: str, tolerance: Tolerances) -> None:
    """Grade the values where the oracles differ against `convention`'s own answer."""
    chosen = q.estimates[convention]
    q.by_convention = q.reason != _AGREED
    q.expected = np.where(q.by_convention, chosen, q.expected)
    q.graded = np.ones(q.graded.shape, bool)
    q.tolerance = tolerance.analytic


# --- grading ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mismatch:
    """A graded value the engine got wrong (or did not give)."""

    point: int
    point_text: str  # "x=1.5, v=[1.0, 2.0]"
    label: str  # "dz/dx" or "dz/dv[1]" or "z" (the value)
    expected: float | None  # None: torch leaves this .grad None
    found: float | None
    oracles: dict[str, float]
    abs_error: float | None
    rel_error: float | None
    convention: str | None = None

    def __str__(self) -> str:
        if self.expected is None:
            expected = "None (the output does not depend on it, so torch leaves .grad None)"
        else:
            source = f"{self.convention}'s convention; " if self.convention else ""
            expected = f"{number_text(self.expected)} ({source}{_each(self.oracles)})"
        text = (f"{self.label} at {self.point_text}: expected {expected}, found "
                f"{number_text(self.found)}")
        if self.abs_error is not None:
            text += f"; abs error {self.abs_error:.3g}, rel error {self.rel_error:.3g}"
        return text


@dataclass
class PointVerdict:
    """The outcome at one point: passed, failed, ungraded (the oracles disagree) or skipped."""

    status: str
    #: why the point was skipped
    reason: str = ""
    mismatches: list[Mismatch] = field(default_factory=list)
    disagreements: list[Disagreement] = field(default_factory=list)
    error: str | None = None

    @property
    def message(self) -> str:
        """What a failed point got wrong (its error, or its first wrong value), or why it was
        skipped. Written when read: a failing engine fails thousands of points in a grading
        (random programs, wide vectors), and reports show few of them."""
        if self.status == "failed":
            return self.error or str(self.mismatches[0])
        return self.reason


@dataclass
class Grading:
    """Per-point verdicts, one short student message, and notes for the exercise's author."""

    verdicts: list[PointVerdict]
    message: str
    author_notes: list[str]
    mismatches: list[Mismatch]
    disagreements: list[Disagreement]
    #: the protocol piece whose use failed the first failing point, when the engine lacks it
    blocked_by: str = ""
    #: no gradient at any point could be graded: such a check proves nothing, and scores 0
    nothing_graded: bool = False
    #: every wrong value is within single precision's rounding of the right one
    float32: bool = False

    @property
    def passed(self) -> bool:
        """No graded point failed (points the oracles could not judge never fail)."""
        return not any(v.status == "failed" for v in self.verdicts)

    @property
    def unreadable(self) -> bool:
        """Every failed point is a value the protocol does not allow (a numpy array where a
        list of floats goes): a matter of types, which a hint on the maths does not speak to."""
        failed = [v.error for v in self.verdicts if v.status == "failed"]
        return bool(failed) and all(error is not None and _unreadable(error) for error in failed)


    def count(self, status: str) -> int:
        return sum(v.status == status for v in self.verdicts)


def grade(program: Program, points: Any, requires_grad: Sequence[str],
          results: Mapping[str, OracleResult | Skipped], found: Sequence[Any],
          tolerance: Tolerances = Tolerances(), convention: str | None = None,
          directions: Sequence[str] | None = None,
          agreed: Callable[..., Agreement] | None = None) -> Grading:
    """Grade an engine's answers at a batch of points against the oracles' results there.

    `found[i]` is the engine's reply at point i, as plain JSON data:
    `{"value": v, "grads": {name: g | None}, "error": {"type", "message", "phase"} | None}`.
    With `directions`, point i is a point and a direction, as :func:`agree` reads them.
    `agreed`: what judges the oracles' agreement, in place of :func:`agree` (an answer key's
    `Key.agreement`, which remembers it).
    """
    agreement = (agreed or agree)(program, results, requires_grad, points, tolerance,
                                  convention, directions)
    n = agreement.n
    if len(found) != n:
        raise ValueError(f"{len(found)} answers for {n} points")
    if not agreement.quantities:
        reasons = "; ".join(agreement.skipped.values()) or "skipped: no oracle was asked"
        return Grading([PointVerdict("skipped", reasons) for _ in range(n)], reasons,
                       [reasons], [], [])
    answers = _Answers(agreement.quantities, found, n)
    failed = np.zeros(n, bool)
    mismatches: list[Mismatch] = []
    for q in agreement.quantities:
        bad = _wrong(q, answers)
        if bad.any():  # (most often not: the search for where is then left out)
            failed |= bad.any(axis=1)
            mismatches += _mismatches(agreement, q, answers, bad)
    graded = agreement.graded_points()
    broken = np.zeros(n, bool)
    broken[list(answers.errors)] = True
    failed |= broken & graded
    disagreements = agreement.disagreements()
    verdicts = _verdicts(n, failed, graded, mismatches, disagreements, answers.errors)
    first = next((i for i, v in enumerate(verdicts) if v.status == "failed"), None)
    use = describe(program, answers.records.get(first)) if first is not None else None
    judged = agreement.judged()
    nothing = n > 0 and not judged.any()
    dropped = [d for d in disagreements if d.graded_by is None]
    message = (_nothing_graded(agreement, dropped) if nothing and first is None
               else _student_message(agreement, verdicts, mismatches, use))
    single = bool(mismatches) and not answers.errors and all(
        single_precision(m.found, m.expected) for m in mismatches)
    if single:
        message = f"{FLOAT32}\n{message}"
    return Grading(verdicts, message, _author_notes(agreement, disagreements, answers.errors,
                                                    graded),
                   mismatches, disagreements, use.piece if use and use.missing else "",
                   nothing and first is None, single)


#: what an engine that stores or computes in single precision is told, instead of blaming an
#: operation whose backward passes exactly torch's value
FLOAT32 = ("your engine seems to compute in float32: every wrong value is within single "
           "precision's rounding of torch's; the protocol asks for float64 (Python floats)")


def single_precision(found: float | None, expected: float | None) -> bool:
    """`found` is a float32 (it survives the round trip) within float32's rounding of
    `expected`, a float64 that is not one."""
    if found is None or expected is None or not (math.isfinite(found)
                                                 and math.isfinite(expected)):
        return False
    as32 = float(np.float32(found))
    return (as32 == found and found != expected and float(np.float32(expected)) != expected
            and abs(found - expected) <= 1e-6 * abs(expected))


class _Answers:
    """An engine's replies as arrays (n, w) per quantity, NaN-filled where nothing came back."""

    def __init__(self, quantities: list[Quantity], found: Sequence[Any], n: int) -> None:
        # Read into plain lists (cheap per point), then make each quantity's array once.
        rows: dict[str, list[list[float] | None]] = {q.name: [None] * n for q in quantities}
        self.errors: dict[int, str] = {}
        self.records: dict[int, Mapping[str, Any]] = {}  # the engine's error records, by point
        for i, reply in enumerate(found):
            try:
                self._read(quantities, i, reply, rows)
            except _ProtocolError as exc:
                self.errors[i] = f"ProtocolError: {exc}"
        for i in self.errors:
            for column in rows.values():
                column[i] = None
        self.present = {name: np.array([r is not None for r in column], bool)
                        for name, column in rows.items()}
        self.values = {q.name: np.array([r if r is not None else [math.nan] * q.expected.shape[1]
                                         for r in rows[q.name]], np.float64).reshape(
                                             q.expected.shape) for q in quantities}

    def _read(self, quantities: list[Quantity], i: int, reply: Any,
              rows: dict[str, list[list[float] | None]]) -> None:
        if type(reply) is not dict:
            raise _ProtocolError("the engine's reply is not a mapping")
        error = reply.get("error")
        if error:
            self.errors[i] = _error_text(error)
            self.records[i] = error
            return
        grads = reply.get("grads") or {}
        if type(grads) is not dict:
            raise _ProtocolError("grads is not a mapping")
        for q in quantities:
            raw = reply.get("value") if q.name == "value" else grads.get(q.name)
            if raw is not None:
                rows[q.name][i] = _numbers(raw, q.size, q.label)


class _ProtocolError(ValueError):
    pass


def _numbers(raw: Any, size: int | None, label: str) -> list[float]:
    """Exact-type numbers only: a float subclass from an engine is never trusted."""
    if size is None:
        return [_number(raw, label)]
    if type(raw) is not list or len(raw) != size:
        raise _ProtocolError(f"{label} should be a list of {size} numbers")
    if all(type(x) is float for x in raw):  # as nearly every reply has it: one pass, no calls
        return raw
    return [_number(x, label) for x in raw]


def _number(raw: Any, label: str) -> float:
    if type(raw) in (int, float):
        return float(raw)
    if type(raw) is str and raw.lower() in ("nan", "inf", "-inf", "infinity", "-infinity"):
        return float(raw)
    raise _ProtocolError(f"{label} should be a number, not {type(raw).__name__}")


def _did(text: str) -> str:
    """What the engine did at a point, from its `_error_text`: raised it, or, for the worker's
    ProtocolError, gave what the protocol does not allow (the engine raised nothing)."""
    if _unreadable(text):
        return f"{GAVE_UNREADABLE} {text.removeprefix(UNREADABLE + ' ')}"
    return f"raised {text}"


def _unreadable(text: str) -> bool:
    """Whether an `_error_text` is the worker's ProtocolError: a value the engine gave, not an
    error it raised."""
    return text.startswith(UNREADABLE + " ")


def _error_text(error: Any) -> str:
    if type(error) is not dict:
        return f"error: {str(error)[:200]}"
    phase = f" in {error['phase']}" if error.get("phase") else ""
    return f"{error.get('type', 'Error')}{phase}: {str(error.get('message', ''))[:300]}"


#: values of a quantity up to which `_wrong` first compares them one by one
FEW = 32


def _wrong(q: Quantity, answers: _Answers) -> np.ndarray:
    """(n, w) bool: graded values the engine got wrong, at points where it answered."""
    answered = np.ones(q.expected.shape[0], bool)
    answered[list(answers.errors)] = False
    present = answers.present[q.name]
    wrong = np.zeros(q.expected.shape, bool)
    if not q.reached:  # expected None: any number is wrong (reported once per point)
        wrong[:, 0] = present & answered
        return wrong
    found = answers.values[q.name]
    if found.size <= FEW and not answers.errors and present.all() and all(map(
            q.tolerance.close_number, found.ravel().tolist(), q.expected.ravel().tolist())):
        return wrong  # every value close (as most often): told without arrays, a tenth the cost
    close = q.tolerance.close(found, q.expected)
    wrong = q.graded & ~(close & present[:, None]) & answered[:, None]
    if not wrong.any():
        return wrong
    # a missing gradient (None) is one mistake, not one per element
    first = np.cumsum(wrong, axis=1) == 1
    return np.where(present[:, None], wrong, wrong & first)


def _mismatches(agreement: Agreement, q: Quantity, answers: _Answers, bad: np.ndarray
                ) -> list[Mismatch]:
    """A Mismatch for each value of `q` that `bad` marks, point by point: the numbers read out of
    the arrays together, as a wide vector that is all wrong has thousands."""
    points, elements = np.nonzero(bad)
    found = answers.values[q.name][points, elements]
    present = answers.present[q.name][points]
    expected = q.expected[points, elements]
    with np.errstate(all="ignore"):
        abs_error = np.abs(found - expected)
        rel_error = np.where(expected != 0, abs_error / np.abs(expected), math.inf)
    known = present & q.reached
    estimates = {k: v[points, elements].tolist() for k, v in q.estimates.items()}
    convention = q.by_convention[points, elements].tolist()
    return [Mismatch(i, agreement.point_text(i), q.element_label(e), want if q.reached else None,
                     got if here else None, {k: v[m] for k, v in estimates.items()},
                     a if both else None, r if both else None,
                     agreement.convention if convention[m] else None)
            for m, (i, e, got, here, want, both, a, r) in enumerate(zip(
                points.tolist(), elements.tolist(), found.tolist(), present.tolist(),
                expected.tolist(), known.tolist(), abs_error.tolist(), rel_error.tolist()))]


def _verdicts(n: int, failed: np.ndarray, graded: np.ndarray, mismatches: list[Mismatch],
              disagreements: list[Disagreement], errors: dict[int, str]) -> list[PointVerdict]:
    status = np.where(failed, "failed", np.where(graded, "passed", "ungraded")).tolist()
    verdicts = [PointVerdict(s) for s in status]
    for m in mismatches:
        verdicts[m.point].mismatches.append(m)
    for d in disagreements:
        verdicts[d.point].disagreements.append(d)
    for i, text in errors.items():
        verdicts[i].error = text
    return verdicts


def _student_message(agreement: Agreement, verdicts: list[PointVerdict],
                     mismatches: list[Mismatch], use: Use | None = None) -> str:
    """The first wrong value or error and how many more, or that all graded points match;
    counts are of distinct points."""
    failed = [i for i, v in enumerate(verdicts) if v.status == "failed"]
    if not failed:
        return _all_match(agreement)
    first = verdicts[failed[0]]
    if use is not None and first.error:
        text = f"{use.sentence}\nfirst at {agreement.point_text(failed[0])}"
    elif first.error:
        text = f"at {agreement.point_text(failed[0])}, the engine {_did(first.error)}"
    else:
        text = str(first.mismatches[0])
    wrong = agreement.distinct_values((m.point, m.label) for m in mismatches)
    others = [f"{n} more wrong value{'s' * (n > 1)}" for n in [wrong - (not first.error)]
              if n > 0]
    for gave, did in ((False, "the engine raised"), (True, f"it {GAVE_UNREADABLE}")):
        alike = agreement.distinct(i for i in failed if verdicts[i].error is not None
                                   and _unreadable(verdicts[i].error) == gave)
        n = alike - (bool(first.error) and _unreadable(first.error) == gave)
        others += [f"{n} more point{'s' * (n > 1)} where {did}"] if n > 0 else []
    if others:
        text += ". " + ", ".join(others)
    return text + (f"; {agreement.distinct(failed)} of {agreement.distinct(range(len(verdicts)))}"
                   " points failed")


def _all_match(agreement: Agreement) -> str:
    """What a check says when every graded point matches (counted where a gradient is
    graded), and what was left out: the same at every grading (`Agreement.settle`)."""
    if "all match" not in agreement._memo:
        graded = agreement.distinct(np.flatnonzero(agreement.judged()))
        dropped = [d for d in agreement.disagreements() if d.graded_by is None]
        text = (f"all {graded} graded points match the oracles" if graded != 1
                else "the 1 graded point matches the oracles")
        agreement._memo["all match"] = text + (f"; {_not_graded(agreement, dropped)}"
                                               if dropped else "")
    return agreement._memo["all match"]


#: how the message of a check that grades nothing starts
NOTHING_GRADED = ("no gradient of this check could be graded, so it scores 0 (a fault of the "
                  "exercise, not of the submission): ")


def _fixed(array: np.ndarray) -> np.ndarray:
    """`array`, made read-only: an agreement's (`Agreement.settle`) is shared by gradings."""
    array.flags.writeable = False
    return array


def _grades_nothing(agreement: Agreement) -> bool:
    """Whether the oracles agree on no gradient at any point: the check then grades nothing,
    whatever the engine answers."""
    return agreement.n > 0 and not agreement.judged().any()


def nothing_graded(agreement: Agreement) -> str:
    """Why a check whose oracles gave `agreement` grades nothing, as its message says it to
    every submission, or '' when it grades something: known before any engine runs."""
    if not agreement.quantities or not _grades_nothing(agreement):
        return ""
    return _nothing_graded(agreement, [d for d in agreement.disagreements()
                                       if d.graded_by is None])


def _nothing_graded(agreement: Agreement, dropped: Sequence[Disagreement]) -> str:
    return NOTHING_GRADED + (_not_graded(agreement, dropped) or "no value was compared")


def _not_graded(agreement: Agreement, dropped: Sequence[Disagreement]) -> str:
    """Which values were left out because the oracles disagree there, and why."""
    if not dropped:
        return ""
    points = agreement.distinct(d.point for d in dropped)
    values = agreement.distinct_values((d.point, d.label) for d in dropped)
    reasons = ", ".join(dict.fromkeys(d.reason for d in dropped))
    first = dropped[0]
    return (f"not graded: {values} value{'s' * (values != 1)} at {points} "
            f"point{'s' * (points != 1)} where the oracles disagree ({reasons}), first "
            f"{first.describe(agreement.point_text(first.point))}")


def _author_notes(agreement: Agreement, disagreements: list[Disagreement],
                  errors: dict[int, str], graded: np.ndarray) -> list[str]:
    notes = [f"{name} {reason}" for name, reason in agreement.skipped.items()]
    groups: dict[tuple[str, str | None], list[Disagreement]] = {}
    for d in disagreements:
        groups.setdefault((d.reason, d.graded_by), []).append(d)
    for (reason, graded_by), items in groups.items():
        points = agreement.distinct(d.point for d in items)
        head = (f"graded against {graded_by}'s convention" if graded_by
                else "not graded (the oracles disagree)")
        notes.append(f"{head} at {points} point{'s' * (points != 1)}, {reason}: first "
                     + items[0].describe(agreement.point_text(items[0].point)))
    for i, text in errors.items():
        if not graded[i]:
            notes.append(f"the engine {_did(text)} at {agreement.point_text(i)}, which is not "
                         "graded")
    if len(graded) and not graded.any():
        notes.append("no point was graded: choose points where the oracles agree, or set a "
                     "convention")
    return notes


# --- formatting ---------------------------------------------------------------------------------


def format_point(program: Program, batch: Mapping[str, np.ndarray], i: int) -> str:
    """`x=1.5, v=[1.0, 2.0]`, a long 1-D value by its first elements only."""
    if not batch:
        return f"point {i}"
    return point_text({name: batch[name][i] for name in program.inputs})


def point_text(point: Mapping[str, Any]) -> str:
    """A point's inputs as a message shows them: `x=1.5, v=[1.0, 2.0]`."""
    return ", ".join(f"{name}={number_text(value)}" for name, value in point.items())


def _each(oracles: Mapping[str, float]) -> str:
    """`torch 0.5, jax 0.5`."""
    return ", ".join(f"{ORACLE_LABELS.get(k, k)} {number_text(v)}" for k, v in oracles.items())


def _apart(oracles: Mapping[str, float]) -> str:
    """` (apart by 5.55e-17: ...)` for oracles that disagree although their numbers read the
    same: only a tolerance tighter than rounding (which `validate` refuses) tells them apart."""
    values = list(oracles.values())
    if len(set(values)) > 1 and len({number_text(v) for v in values}) == 1 and all(
            math.isfinite(v) for v in values):
        return (f" (apart by {number_text(max(values) - min(values))}: the exercise's "
                "tolerance is tighter than rounding; `gradcheck validate` says which part)")
    return ""
