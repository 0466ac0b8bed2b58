"""The exercise format: pydantic models that are the one source of truth, and the loader.

An exercise is one hand-written `*.exercise.yaml` file. The models below define every key (unknown
keys are refused); the JSON Schema that editors use is generated from them
(`python -m gradcheck.exercise --write-schema`). Loading a file checks, in order: the YAML
(:mod:`gradcheck.yamlsrc`), the models, then what no schema can say: the program parses, every
name a check uses exists, every point gives every input. Each problem is reported as
`file:line: field.path: message`; a bank with one broken file still loads the others.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import json
import keyword
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Iterable, Literal, get_args

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, PlainValidator, PrivateAttr,
                      ValidationError, WithJsonSchema, model_validator)
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from gradcheck import compare, yamlsrc
from gradcheck.ops import Interval, allowed
from gradcheck.probe import ACTIONS, EXPECT_KINDS
from gradcheck.program import MAX_VECTOR, Program, ProgramError, parse, remember
from gradcheck.sampling import Sampling

SUFFIX = ".exercise.yaml"
SCHEMA_PATH = Path(__file__).parent / "schema" / "exercise.schema.json"
SCHEMA_COMMENT = "# yaml-language-server: $schema="
ID_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_]*$"
EXPECT_PATTERN = rf"^({'|'.join(EXPECT_KINDS)})\.[A-Za-z][A-Za-z0-9_]*$"

#: A file or folder, or several.
PathArg = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]
Oracle = Literal["fd", "torch", "jax"]
ORACLES: tuple[str, ...] = get_args(Oracle)
Visibility = Literal["visible", "hidden", "after_due_date", "after_published"]


# --- field types --------------------------------------------------------------------------------


def _pattern(pattern: str, what: str) -> Any:
    """A string type checked against `pattern`, with a message that says what to write."""

    def check(text: str) -> str:
        if not re.match(pattern, text) or keyword.iskeyword(text):
            raise PydanticCustomError("pattern", f"{text!r} is not {what}")
        return text

    return Annotated[str, AfterValidator(check), WithJsonSchema({"type": "string",
                                                                 "pattern": pattern})]


Name = _pattern(NAME_PATTERN, "a usable name; use letters, digits and _, starting with a letter")
ExerciseId = _pattern(ID_PATTERN, "a usable id; use lowercase letters, digits and -, starting "
                                  "with a letter or a digit")
Expect = _pattern(EXPECT_PATTERN, f"something to compare; write KIND.NAME with KIND one of "
                                  f"{', '.join(EXPECT_KINDS)} (for example grad.x)")
Finite = Annotated[float, Field(allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


def _hundredths(points: float) -> float:
    if abs(points * 100 - round(points * 100)) > 1e-6:
        raise PydanticCustomError("hundredths", f"{points} is finer than a hundredth of a point; "
                                                "round it to two decimals")
    return points


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _number_or_numbers(value: Any) -> float | list[float]:
    if _is_number(value):
        return float(value)
    if (isinstance(value, list) and 1 <= len(value) <= MAX_VECTOR
            and all(_is_number(v) for v in value)):
        return [float(v) for v in value]
    raise PydanticCustomError("number_or_numbers", "give a finite number or a list of 1 to "
                              "{limit} finite numbers, not {got}",
                              {"limit": MAX_VECTOR, "got": _show(value)})


#: A scalar (float) or a 1-D value (list of floats).
Value = Annotated[float | list[float], PlainValidator(_number_or_numbers), WithJsonSchema(
    {"anyOf": [{"type": "number"},
               {"type": "array", "items": {"type": "number"}, "minItems": 1}]})]
#: Input name -> a float (scalar input) or a list of floats (1-D input).
Point = dict[Name, Value]


def _size(value: float | list[float]) -> int | None:
    return len(value) if isinstance(value, list) else None


# --- the models ---------------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True,
                              validate_by_name=True, validate_by_alias=True)


class Domain(_Model):
    """Where sampled values of an input come from (each element, for a 1-D input)."""

    low: Finite
    """Lower end of the interval."""
    high: Finite
    """Upper end of the interval."""
    avoid: list[Finite] = []
    """Points to keep away from, such as kinks (0 for relu and abs) and poles."""

    def interval(self) -> Interval:
        """The domain as the table of operations writes one."""
        return Interval(self.low, self.high, tuple(self.avoid))

    @model_validator(mode="after")
    def _ordered(self) -> Domain:
        if not self.low < self.high:
            raise ValueError(f"low ({self.low:g}) must be below high ({self.high:g})")
        return self


class Input(_Model):
    """One leaf of the program: a scalar or a 1-D tensor."""

    value: Value
    """A number (a scalar input) or a list of numbers (a 1-D input); the default point."""
    requires_grad: bool = True
    """Whether the leaf is made with `requires_grad=True` (its gradient is checked)."""
    domain: Domain | None = None
    """Where `sampled` draws this input from; without one it keeps its `value`."""

    @property
    def size(self) -> int | None:
        """None for a scalar, else the length of the 1-D value."""
        return _size(self.value)


class Tol(_Model):
    """A tolerance: |a - b| <= atol + rtol * |b|."""

    atol: NonNegative
    """Absolute part."""
    rtol: NonNegative
    """Relative part."""


class Tolerance(_Model):
    """How close gradients must be; both parts of a pair are given together."""

    analytic: Tol = Tol(atol=1e-12, rtol=1e-9)
    """Against an analytic oracle (torch, jax)."""
    fd: Tol = Tol(atol=1e-6, rtol=1e-5)
    """Against finite differences."""

    def pair(self) -> compare.Tolerances:
        """The same tolerances as the comparison uses them."""
        return compare.Tolerances(compare.Tolerance(self.analytic.atol, self.analytic.rtol),
                                  compare.Tolerance(self.fd.atol, self.fd.rtol))


class _Check(_Model):
    weight: Positive = 1.0
    """Share of the exercise's points, relative to the other checks' weights."""


class _OracleCheck(_Check):
    oracles: list[Oracle] = Field(list(ORACLES), min_length=1)
    """Which oracles the submission is compared with: fd, torch, jax."""


class GradientsCheck(_OracleCheck):
    """Gradients at the inputs' values and at the listed points, against the oracles."""

    points: list[Point] = []
    """More points, each giving every input (a number, or a list for a 1-D input)."""


class SampledCheck(_OracleCheck):
    """Gradients at points drawn from the inputs' domains (a fixed seed per run)."""

    count: int = Field(20, ge=1, le=1000)
    """How many points."""
    margin: NonNegative = 0.05
    """Minimum distance of a drawn value from its domain's edges and `avoid` points."""


class Answer(_Model):
    """A hand-derived answer; `validate` checks it against the oracles."""

    at: Point | None = None
    """The point, giving every input; default: the inputs' values."""
    value: Finite | None = None
    """The output's value there."""
    grads: dict[Name, Value] = {}
    """The gradient of the output with respect to each named input."""

    @model_validator(mode="after")
    def _something(self) -> Answer:
        if self.value is None and not self.grads:
            raise ValueError("give the output's `value`, some `grads`, or both")
        return self


class AnswersCheck(_OracleCheck):
    """The submission's value and gradients at the answers' points (validate checks the answers
    themselves against the oracles)."""

    cases: list[Answer] = Field(min_length=1)
    """The answers, one per point."""


class GraphCheck(_Check):
    """The graph at the inputs' values, compared with torch."""

    names: list[Name] = Field(min_length=1)
    """Inputs and variables whose `grad_fn` name, `is_leaf` and `requires_grad` are compared."""


class Forward(_Model):
    """Run the program again on the current leaves, rebinding every variable."""

    no_grad: bool = False
    """Run it inside `with no_grad():`."""


class Backward(_Model):
    """`of.backward(gradient=..., retain_graph=...)`."""

    of: Name | None = None
    """What to call backward on; default: the output."""
    gradient: Value | None = None
    """The `gradient` argument (for a non-scalar); default: none given."""
    retain_graph: bool = False
    """Keep the graph for another backward pass."""


class Detach(_Model):
    """`name = of.detach()`."""

    name: Name
    """The new variable."""
    of: Name
    """The variable to detach."""


class Sgd(_Model):
    """Under `no_grad()`: `p = p - lr * p.grad` for each parameter, then `p.requires_grad_()`."""

    lr: Finite
    """The learning rate."""
    params: list[Name] = Field(min_length=1)
    """The inputs to update."""


class Step(_Model):
    """One step of a behaviour session: exactly one action, then what to compare."""

    model_config = ConfigDict(json_schema_extra={"oneOf": [{"required": [a]} for a in ACTIONS]})

    forward: Forward | None = None
    """Run the program again."""
    backward: Backward | None = None
    """Call backward."""
    zero_grad: Annotated[list[Name], Field(min_length=1)] | SkipJsonSchema[None] = None
    """Set the `.grad` of each to None."""
    retain_grad: Annotated[list[Name], Field(min_length=1)] | SkipJsonSchema[None] = None
    """Call `.retain_grad()` on each."""
    detach: Detach | SkipJsonSchema[None] = None
    """Make a detached copy."""
    requires_grad: Annotated[dict[Name, bool], Field(min_length=1)] | SkipJsonSchema[None] = None
    """Call `.requires_grad_(flag)` on each."""
    sgd: Sgd | SkipJsonSchema[None] = None
    """One step of gradient descent."""
    expect: list[Expect] = []
    """After the step, compare grad.NAME, value.NAME, requires_grad.NAME, is_leaf.NAME or
    grad_fn.NAME (whether the step raised is always compared)."""

    @model_validator(mode="before")
    @classmethod
    def _one_action(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        present = [key for key in ACTIONS if key in data]
        if len(present) != 1:
            found = f"this one has {' and '.join(present)}" if present else "this one has none"
            raise ValueError(f"a step has exactly one action ({', '.join(ACTIONS)}); {found}")
        action = present[0]
        if data[action] is None:
            if action not in ("forward", "backward"):
                raise ValueError(f"{action} needs a value; see the table of steps in "
                                 "docs/exercise-format.md")
            data = {**data, action: {}}  # `- backward:` means backward with no arguments
        return data

    @property
    def action(self) -> str:
        """The step's action key."""
        return next(key for key in ACTIONS if getattr(self, key) is not None)


class BehaviourCheck(_Check):
    """Steps run on the submission and on torch, compared after each step."""

    steps: list[Step] = Field(min_length=1)
    """The session, after the program has run once on fresh leaves."""


class Checks(_Model):
    """What is graded; each check present is one graded item."""

    gradients: GradientsCheck | None = None
    """Gradients at listed points."""
    sampled: SampledCheck | None = None
    """Gradients at sampled points."""
    answers: AnswersCheck | None = None
    """Hand-derived answers."""
    graph: GraphCheck | None = None
    """The graph's structure."""
    behaviour: BehaviourCheck | None = None
    """A session of backward passes and grad handling."""

    @model_validator(mode="after")
    def _some(self) -> Checks:
        if not self.present():
            raise ValueError(f"add at least one check: {', '.join(Checks.model_fields)}")
        return self

    def present(self) -> list[str]:
        """Names of the checks given, in the order of the format."""
        return [name for name in Checks.model_fields if getattr(self, name) is not None]


class Exercise(_Model):
    """One exercise of a gradcheck bank."""

    id: ExerciseId
    """Unique in the bank: lowercase letters, digits and -."""
    title: str = Field(min_length=1)
    """Shown to students."""
    topic: str = Field(min_length=1)
    """The course module, such as 02-backward."""
    points: Annotated[Positive, AfterValidator(_hundredths)]
    """What the exercise is worth, in hundredths at most; split across its checks by weight."""
    hint: str = ""
    """Shown to students when a check fails."""
    visibility: Visibility = "visible"
    """When students see the results: visible, hidden, after_due_date, after_published."""
    inputs: dict[Name, Input] = Field(min_length=1)
    """The program's leaves, by name."""
    program_text: str = Field(alias="program", min_length=1)
    """Assignments in the program language, one per line."""
    output: Name | None = None
    """The variable whose gradients are checked; default: the last one assigned."""
    checks: Checks
    """What is graded."""
    tolerance: Tolerance = Tolerance()
    """How close is close enough."""
    convention: Literal["torch", "jax"] | None = None
    """At kinks, whose derivative is graded; by default points where oracles disagree are not."""
    timeout: float = Field(10.0, gt=0, le=600)
    """Seconds the whole exercise may take in the worker."""

    _file: str = PrivateAttr("")
    _source: yamlsrc.Source | None = PrivateAttr(None)
    _program: Program | None = PrivateAttr(None)
    _digest: str = PrivateAttr("")

    @property
    def path(self) -> Path | None:
        """The file it was loaded from."""
        return Path(self._file) if self._file else None

    @property
    def digest(self) -> str:
        """sha256 of the file's bytes (of the canonical YAML for an exercise built in code)."""
        if not self._digest:
            self._digest = hashlib.sha256(dump_exercise(self).encode()).hexdigest()
        return self._digest

    @property
    def program(self) -> Program:
        """The parsed program."""
        if self._program is None:
            self._program = _parse(self)
        return self._program

    @property
    def sizes(self) -> dict[str, int | None]:
        """Input name -> None (scalar) or length."""
        return {name: spec.size for name, spec in self.inputs.items()}

    @property
    def values(self) -> Point:
        """The inputs' values as a point."""
        return {name: spec.value for name, spec in self.inputs.items()}

    @property
    def grad_names(self) -> list[str]:
        """Inputs that require grad, whose gradients are checked."""
        return [name for name, spec in self.inputs.items() if spec.requires_grad]

    def check_points(self, check: str, seed: int = 0) -> list[Point]:
        """The points a gradient check is graded at: the inputs' values, then the listed points
        (`gradients`); each case's point (`answers`); `count` points drawn from the domains,
        reproducibly from `seed`, the other inputs at their values (`sampled`)."""
        base = self.values
        if check == "gradients":
            return [base] + [{**base, **p} for p in self.checks.gradients.points]
        if check == "answers":
            return [{**base, **(case.at or {})} for case in self.checks.answers.cases]
        return self.sampling(seed).draw()

    def sampling(self, seed: int = 0) -> Sampling:
        """How the `sampled` check's points are drawn at `seed`, without drawing them."""
        domains = {n: i.domain.interval() for n, i in self.inputs.items() if i.domain}
        return Sampling({n: self.sizes[n] for n in domains}, domains, self.checks.sampled.margin,
                        self.checks.sampled.count, seed, self.values)

    def line_of(self, field_path: str | tuple[str | int, ...]) -> int:
        """The line of a field (or of its nearest written parent); 0 if not loaded from a file."""
        return self._source.line_of(field_path) if self._source else 0

    def problem(self, field_path: str | tuple[str | int, ...], message: str) -> Problem:
        """A problem located at a field of this exercise."""
        steps = yamlsrc.parse_path(field_path) if isinstance(field_path, str) else field_path
        return Problem(self._file, self.line_of(steps), yamlsrc.format_path(steps), message)


# --- problems -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an exercise, where it is and what to do about it."""

    file: str
    line: int  # 1-based; 0 when unknown
    field: str  # a field path such as checks.behaviour.steps[2].backward, or ""
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return ": ".join(part for part in (where, self.field, self.message) if part)


class ExerciseError(ValueError):
    """An exercise that cannot be used, with every problem found in it."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(map(str, problems)))
        self.problems = problems


# --- loading ------------------------------------------------------------------------------------


def load_exercise(path: str | os.PathLike[str]) -> Exercise:
    """Load and check one exercise file; raises :class:`ExerciseError` listing its problems."""
    file = str(path)
    try:
        raw = Path(path).read_bytes()
        source = yamlsrc.load(raw.decode("utf-8"))
    except OSError as exc:
        raise ExerciseError([Problem(file, 0, "", f"cannot read the file: "
                                                  f"{exc.strerror or exc}")]) from None
    except UnicodeDecodeError as exc:
        raise ExerciseError([Problem(file, 0, "", f"not UTF-8 text (byte {exc.start}); save "
                                                  "the file as UTF-8")]) from None
    except yamlsrc.YamlError as exc:
        raise ExerciseError([Problem(file, exc.line, "", exc.message)]) from None
    return _build(source.data, source, file, hashlib.sha256(raw).hexdigest())


def from_data(data: Any, file: str = "<data>") -> Exercise:
    """Check plain data (say, built by a script) and build the exercise; lines are unknown (0)."""
    return _build(data, None, file, "")


def _build(data: Any, source: yamlsrc.Source | None, file: str, digest: str) -> Exercise:
    def line(path: yamlsrc.Path) -> int:
        return source.line_of(path) if source else 0

    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {type(data).__name__}, not a mapping"
        raise ExerciseError([Problem(file, line(()), "", f"the file is {what}; an exercise is a "
                                                         "mapping of keys such as id, title, "
                                                         "inputs, program")])
    try:
        exercise = Exercise.model_validate(data)
    except ValidationError as exc:
        raise ExerciseError([Problem(file, line(path), yamlsrc.format_path(path), text)
                             for path, text in _explain(exc, data)]) from None
    exercise._file, exercise._source, exercise._digest = file, source, digest
    program, issues = _cross_check(exercise)
    if issues:
        raise ExerciseError([_locate(exercise, *issue) for issue in issues])
    exercise._program = program
    return exercise


def _locate(exercise: Exercise, path: yamlsrc.Path, message: str,
            at: tuple[int, int] | None) -> Problem:
    if at is None or exercise._source is None:
        return exercise.problem(path, message)
    line, column = exercise._source.text_position(path, *at)
    return Problem(exercise._file, line, yamlsrc.format_path(path), f"column {column}: {message}")


@dataclass
class Bank:
    """The exercises that loaded, and the files that did not (each with its problems)."""

    exercises: list[Exercise]
    broken: list[tuple[Path, ExerciseError]]


def exercise_files(paths: PathArg) -> list[Path]:
    """Files named on the command line, and `*.exercise.yaml` files under folders, in order."""
    found: list[Path] = []
    for path in path_list(paths):
        found.extend(sorted(path.rglob("*" + SUFFIX)) if path.is_dir() else [path])
    return list(dict.fromkeys(found))


def load_bank(paths: PathArg, strict: bool = False) -> Bank:
    """Load every exercise under `paths`. A broken file is set aside in `broken` (or, if
    `strict`, raised at once) and the others still load; ids must be unique in the bank."""
    bank = Bank([], [])
    for path in exercise_files(paths):
        try:
            bank.exercises.append(load_exercise(path))
        except ExerciseError as exc:
            if strict:
                raise
            bank.broken.append((path, exc))
    by_id: dict[str, list[Exercise]] = {}
    for exercise in bank.exercises:
        by_id.setdefault(exercise.id, []).append(exercise)
    for same in (group for group in by_id.values() if len(group) > 1):
        for exercise in same:
            others = ", ".join(f"{o._file}:{o.line_of('id')}" for o in same if o is not exercise)
            error = ExerciseError([exercise.problem("id", f"the id {exercise.id!r} is also used "
                                                          f"by {others}; give each its own id")])
            if strict:
                raise error
            bank.broken.append((Path(exercise._file), error))
    bank.exercises = [e for e in bank.exercises if len(by_id[e.id]) == 1]
    return bank


def path_list(paths: PathArg) -> list[Path]:
    """One path or many, as a list of paths."""
    if isinstance(paths, (str, os.PathLike)):
        return [Path(paths)]
    return [Path(p) for p in paths]


# --- checks across fields -----------------------------------------------------------------------

_Issue = tuple[yamlsrc.Path, str, tuple[int, int] | None]


def _parse(exercise: Exercise) -> Program:
    program = parse(exercise.program_text, exercise.sizes)
    if exercise.output is not None and exercise.output in program.names:
        program = dataclasses.replace(program, output_name=exercise.output)
    return remember(program)  # the grader's requests for it then need no second parse


def _cross_check(exercise: Exercise) -> tuple[Program | None, list[_Issue]]:
    """What the models cannot check alone: the program, names, points, scalar outputs."""
    issues: list[_Issue] = []
    try:
        program = _parse(exercise)
    except ProgramError as exc:
        program = None
        issues.append((("program",), exc.message, (exc.line, exc.column)))
    checks = exercise.checks
    numeric = [name for name in ("gradients", "sampled", "answers") if getattr(checks, name)]
    if numeric and not exercise.grad_names:
        issues.append((("inputs",), f"no input requires grad, so {numeric[0]} has nothing to "
                                    "check; set requires_grad: true on one", None))
    if checks.gradients:
        for i, point in enumerate(checks.gradients.points):
            issues += _point_issues(exercise, point, ("checks", "gradients", "points", i))
    if checks.answers:
        for i, case in enumerate(checks.answers.cases):
            where = ("checks", "answers", "cases", i)
            if case.at is not None:
                issues += _point_issues(exercise, case.at, where + ("at",))
            issues += _grads_issues(exercise, case.grads, where + ("grads",))
    if checks.sampled:
        issues += _domain_issues(exercise, checks.sampled)
    if program is not None:
        issues += _program_issues(exercise, program, numeric)
    return program, issues


def _program_issues(exercise: Exercise, program: Program, numeric: list[str]) -> list[_Issue]:
    issues: list[_Issue] = []
    names = set(program.names)
    if exercise.output is not None and exercise.output not in names:
        issues.append((("output",), f"{exercise.output!r} is not a variable of the program; "
                                    f"name one of {_listing(names)}", None))
        return issues
    size = program.nodes[program.output].size
    for check in numeric if size is not None else []:
        issues.append((("checks", check), f"gradients are taken of a scalar output, but "
                       f"{program.output_name!r} has length {size}; reduce it (`s = "
                       f"{program.output_name}.sum()`) and make that the output, or drop this "
                       "check (a behaviour check can still use a non-scalar output)", None))
    if exercise.checks.graph:
        for i, name in enumerate(exercise.checks.graph.names):
            if name not in names:
                issues.append((("checks", "graph", "names", i), _unknown(name, names), None))
    if exercise.checks.behaviour:
        issues += _step_issues(exercise, exercise.checks.behaviour.steps, names)
    return issues


def _step_issues(exercise: Exercise, steps: list[Step], names: set[str]) -> list[_Issue]:
    """Names in behaviour steps, in order: a `detach` step defines a new name for later steps."""
    issues: list[_Issue] = []
    known = set(names)
    for i, step in enumerate(steps):
        here = ("checks", "behaviour", "steps", i)
        used: list[tuple[yamlsrc.Path, str]] = []
        if step.backward and step.backward.of:
            used.append((("backward", "of"), step.backward.of))
        for key in ("zero_grad", "retain_grad"):
            used += [((key, j), name) for j, name in enumerate(getattr(step, key) or [])]
        used += [(("requires_grad", name), name) for name in step.requires_grad or {}]
        if step.detach:
            used.append((("detach", "of"), step.detach.of))
        for j, name in enumerate(step.sgd.params if step.sgd else []):
            if name not in exercise.inputs:
                issues.append((here + ("sgd", "params", j), f"sgd updates inputs (leaves); "
                               f"{name!r} is not one of {_listing(exercise.inputs)}", None))
        issues += [(here + path, _unknown(name, known), None)
                   for path, name in used if name not in known]
        if step.detach:
            known.add(step.detach.name)
        for j, item in enumerate(step.expect):
            name = item.split(".", 1)[1]
            if name not in known:
                issues.append((here + ("expect", j), _unknown(name, known), None))
    return issues


def _point_issues(exercise: Exercise, point: Point, where: yamlsrc.Path) -> list[_Issue]:
    missing = [name for name in exercise.inputs if name not in point]
    issues: list[_Issue] = []
    if missing:
        issues.append((where, f"a point gives every input; add {_listing(missing)}", None))
    for name, value in point.items():
        if name not in exercise.inputs:
            issues.append((where + (name,), f"{name!r} is not an input; the inputs are "
                                            f"{_listing(exercise.inputs)}", None))
        else:
            issues += _shape_issues(exercise, name, value, where + (name,))
    return issues


def _grads_issues(exercise: Exercise, grads: Point, where: yamlsrc.Path) -> list[_Issue]:
    issues: list[_Issue] = []
    for name, value in grads.items():
        if name not in exercise.grad_names:
            issues.append((where + (name,), f"{name!r} is not an input that requires grad; "
                                            f"those are {_listing(exercise.grad_names)}", None))
        else:
            issues += _shape_issues(exercise, name, value, where + (name,))
    return issues


def _shape_issues(exercise: Exercise, name: str, value: float | list[float],
                  where: yamlsrc.Path) -> list[_Issue]:
    want, got = exercise.inputs[name].size, _size(value)
    if want == got:
        return []
    shape = "a number" if want is None else f"a list of {want} numbers"
    return [(where, f"{name!r} is {shape} (as its value under inputs)", None)]


def _domain_issues(exercise: Exercise, sampled: SampledCheck) -> list[_Issue]:
    issues: list[_Issue] = []
    if not any(spec.domain for spec in exercise.inputs.values()):
        issues.append((("checks", "sampled"), "no input has a domain to sample from; give at "
                                              "least one input a domain: {low: .., high: ..}",
                       None))
    for name, spec in exercise.inputs.items():
        if spec.domain is not None:
            try:
                allowed(spec.domain.interval(), sampled.margin)
            except ValueError:
                issues.append((("inputs", name, "domain"), f"nothing is left to sample once a "
                               f"margin of {sampled.margin:g} is kept from the ends and the "
                               "avoided points; widen the domain or lower the margin", None))
    return issues


def _unknown(name: str, known: Iterable[str]) -> str:
    return (f"{name!r} is not defined{_suggest(name, known)}; use an input or a variable of the "
            f"program: {_listing(known)}")


def _listing(names: Iterable[str]) -> str:
    return ", ".join(sorted(names)) or "(none)"


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# --- pydantic's errors, said for someone editing YAML -------------------------------------------

_BOOL_WORDS = {"yes", "no", "on", "off", "y", "n"}


def _explain(exc: ValidationError, data: Any) -> list[tuple[yamlsrc.Path, str]]:
    seen: dict[tuple[yamlsrc.Path, str], None] = {}
    for error in exc.errors():
        if error["type"] == "none_required":  # the None branch of an optional field
            continue
        path = _data_path(error["loc"], data, error["type"] == "missing")
        seen.setdefault((path, _message(error, path)), None)
    return list(seen)


def _data_path(loc: tuple[Any, ...], data: Any, missing: bool) -> yamlsrc.Path:
    """The path of `loc` in the data, without the parts that name pydantic's internals."""
    path: list[str | int] = []
    for i, step in enumerate(loc):
        in_dict = isinstance(data, dict) and step in data
        in_list = isinstance(data, list) and isinstance(step, int) and 0 <= step < len(data)
        if in_dict or in_list:
            path.append(step)
            data = data[step]
        elif missing and i == len(loc) - 1:
            path.append(step)
    return tuple(path)


def _message(error: Any, path: yamlsrc.Path) -> str:
    kind, text, got = error["type"], error["msg"], error.get("input")
    if kind == "missing":
        return f"the key {path[-1]!r} is required here; add it"
    if kind == "extra_forbidden":
        allowed = _schema_keys(path[:-1])
        return (f"unknown key {path[-1]!r}{_suggest(str(path[-1]), allowed)}; the keys here "
                f"are {_listing(allowed)}")
    if kind == "model_type":
        return (f"write a mapping here, with keys among {_listing(_schema_keys(path))}; not "
                f"{_show(got)}")
    if kind == "bool_type" and isinstance(got, str) and got.lower() in _BOOL_WORDS:
        return f"{got!r} is text here, not a boolean; write true or false"
    if kind in ("value_error", "assertion_error"):
        return text.split(", ", 1)[1]
    if kind.endswith("_type") or kind in ("literal_error", "finite_number"):
        return f"{text}, not {_show(got)}"
    return text


# --- the JSON Schema ----------------------------------------------------------------------------


@functools.cache
def json_schema() -> dict[str, Any]:
    """The draft-07 JSON Schema of an exercise file, for editors (yaml-language-server)."""
    generated = Exercise.model_json_schema(ref_template="#/definitions/{model}")
    definitions = generated.pop("$defs", {})
    schema = {"$schema": "http://json-schema.org/draft-07/schema#",
              "$comment": "Generated from gradcheck/exercise.py by `python -m gradcheck.exercise "
                          "--write-schema`; do not edit.",
              **generated, "definitions": definitions}
    return _draft07(schema)


def _draft07(node: Any) -> Any:
    """Tidy pydantic's output for draft-07 readers: `$ref` stands alone there, and a mapping whose
    keys are checked by a pattern admits no other keys."""
    if isinstance(node, list):
        return [_draft07(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _draft07(value) for key, value in node.items()
            if not (key == "default" and value is None)}
    if "patternProperties" in node:
        node.setdefault("additionalProperties", False)
    if isinstance(node.get("properties"), dict):
        node["properties"] = {key: {k: v for k, v in value.items() if k != "title"}
                              for key, value in node["properties"].items()}
    if "$ref" in node and len(node) > 1:
        node = {"allOf": [{"$ref": node.pop("$ref")}], **node}
    return node


def _schema_keys(path: yamlsrc.Path) -> list[str]:
    """The keys the schema allows in the mapping at `path` of an exercise."""
    schema = json_schema()
    node: Any = schema
    for step in (*path, None):
        while True:  # resolve references and pick the object/array branch of a choice
            if "$ref" in node:
                node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
            elif "allOf" in node or "anyOf" in node:
                branches = node.get("allOf") or node["anyOf"]
                node = next((b for b in branches if "$ref" in b or "properties" in b
                             or "items" in b), branches[0])
            else:
                break
        if step is None:
            break
        if isinstance(step, int):
            node = node.get("items", {})
        else:
            node = node.get("properties", {}).get(step) or next(
                iter(node.get("patternProperties", {}).values()), {})
    return list(node.get("properties", {}))


def write_schema(path: Path = SCHEMA_PATH) -> Path:
    """Write the JSON Schema file (committed, and shipped with the package)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(json_schema(), indent=2) + "\n", encoding="utf-8")
    return path


def schema_comment(exercise_file: Path) -> str:
    """The first line of an exercise file at `exercise_file`: the schema, by a relative path."""
    relative = os.path.relpath(SCHEMA_PATH, Path(exercise_file).resolve().parent)
    return SCHEMA_COMMENT + Path(relative).as_posix()


def dump_exercise(exercise: Exercise, schema_line: str = "") -> str:
    """YAML text of an exercise (defaults left out) that loads back to an equal exercise."""
    data = exercise.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    return (schema_line + "\n" if schema_line else "") + yamlsrc.dump(data)


def main(argv: list[str] | None = None) -> int:
    """`python -m gradcheck.exercise --write-schema`."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["--write-schema"]:
        print("usage: python -m gradcheck.exercise --write-schema", file=sys.stderr)
        return 2
    print(f"wrote {write_schema()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
