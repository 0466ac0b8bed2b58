"""The exercise format: pydantic models that are the one source of truth, and the loader.

An exercise is one hand-written `*.exercise.yaml` file. The models below define every key (unknown
keys are refused); the JSON Schema that editors use is generated from them
(`python -m gradcheck.bank.schema --write-schema`). Loading a file checks, in order: the YAML
(:mod:`gradcheck.bank.yaml_reader`), the models, then what no schema can say: the program parses, every
name a check uses exists, every point gives every input. Each problem is reported as
`file:line: field.path: message`; a bank with one broken file still loads the others.
"""

from __future__ import annotations

import dataclasses
import hashlib
import keyword
import math
import os
import random
import re
from pathlib import Path
from typing import Annotated, Any, Iterable, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    PrivateAttr,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from gradcheck.bank import yaml_reader
from gradcheck.bank.problems import Problem, show
from gradcheck.bank.sampling import Sampling
from gradcheck.bank.tolerances import Tolerance as Closeness
from gradcheck.bank.tolerances import Tolerances
from gradcheck.program.language import MAX_VECTOR, Program, parse, remember
from gradcheck.program.ops import OPS, Interval
from gradcheck.program.session import ACTIONS, EXPECT_KINDS, GRAD_FIELDS, WARNINGS

SUFFIX = ".exercise.yaml"
SCHEMA_PATH = Path(__file__).parent / "schema" / "exercise.schema.json"
SCHEMA_COMMENT = "# yaml-language-server: $schema="
ID_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_]*$"
_NAME = "[A-Za-z][A-Za-z0-9_]*"
EXPECT_PATTERN = (rf"^(({'|'.join(EXPECT_KINDS)})\.{_NAME}|grad\.{_NAME}\.({'|'.join(GRAD_FIELDS)})"
                  rf"|{WARNINGS})$")
TARGET_PATTERN = rf"^{_NAME}(\.grad)?$"

#: A file or folder, or several.
PathArg = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]
Oracle = Literal["fd", "torch", "jax"]
ORACLES: tuple[str, ...] = get_args(Oracle)
Visibility = Literal["visible", "hidden", "after_due_date", "after_published"]


# --- field types --------------------------------------------------------------------------------


def _pattern(pattern: str, what: str) -> Any:
    """A string type checked against `pattern`, with a message that says what to write."""

    def check(text: str) -> str:
        if keyword.iskeyword(text):  # `lambda` is letters, and still no name in a program
            raise PydanticCustomError("pattern", f"{text!r} is a Python keyword; choose "
                                                 "another name")
        if not re.match(pattern, text):
            raise PydanticCustomError("pattern", f"{text!r} is not {what}")
        return text

    return Annotated[str, AfterValidator(check), WithJsonSchema({"type": "string",
                                                                 "pattern": pattern})]


Name = _pattern(NAME_PATTERN, "a usable name; use letters, digits and _, starting with a letter")
ExerciseId = _pattern(ID_PATTERN, "a usable id; use lowercase letters, digits and -, starting "
                                  "with a letter or a digit")
Expect = _pattern(EXPECT_PATTERN, f"something to compare; write KIND.NAME with KIND one of "
                                  f"{', '.join(EXPECT_KINDS)} (for example grad.x), "
                                  f"grad.NAME.FIELD with FIELD one of {', '.join(GRAD_FIELDS)}, "
                                  f"or {WARNINGS}")
Target = _pattern(TARGET_PATTERN, "a variable, or a variable's gradient (x or x.grad)")
Finite = Annotated[float, Field(allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


def _quarters(points: float) -> float:
    if abs(points * 4 - round(points * 4)) > 1e-9:
        raise PydanticCustomError("quarters", f"{points} is finer than a quarter of a point; "
                                              "give a multiple of 0.25 (shares are quarters, so "
                                              "that every sum of them is exact)")
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
                              {"limit": MAX_VECTOR, "got": show(value)})


#: A scalar (float) or a 1-D value (list of floats).
Value = Annotated[float | list[float], PlainValidator(_number_or_numbers), WithJsonSchema(
    {"anyOf": [{"type": "number"},
               {"type": "array", "items": {"type": "number"}, "minItems": 1}]})]
#: Input name -> a float (scalar input) or a list of floats (1-D input).
Point = dict[Name, Value]


def value_size(value: float | list[float]) -> int | None:
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


class Draw(_Model):
    """A value drawn at random, like `torch.randn(3)` in a course's script: from a normal or a
    uniform distribution, reproducibly from the grading seed (a run's seed draws the same
    values every time, and another seed other values)."""

    normal: Annotated[list[Finite], Field(min_length=2, max_length=2)] | None = None
    """[mean, standard deviation]."""
    uniform: Annotated[list[Finite], Field(min_length=2, max_length=2)] | None = None
    """[low, high]."""
    size: int | None = Field(None, ge=1, le=MAX_VECTOR)
    """The length of a 1-D input; default: a scalar."""

    @model_validator(mode="after")
    def _one_distribution(self) -> Draw:
        if (self.normal is None) == (self.uniform is None):
            raise ValueError("give exactly one distribution: normal: [mean, std] or "
                             "uniform: [low, high]")
        if self.normal is not None and not self.normal[1] > 0:
            raise ValueError(f"the standard deviation ({self.normal[1]:g}) must be positive")
        if self.uniform is not None and not self.uniform[0] < self.uniform[1]:
            raise ValueError(f"low ({self.uniform[0]:g}) must be below high "
                             f"({self.uniform[1]:g})")
        return self

    def draw(self, seed: int, name: str) -> float | list[float]:
        """The value at `seed` (the exercise's grading seed) for the input `name`."""
        rng = random.Random(f"{seed}:{name}")  # a str seed is hashed the same on every platform
        if self.normal is not None:
            one = lambda: rng.gauss(self.normal[0], self.normal[1])  # noqa: E731
        else:
            one = lambda: rng.uniform(self.uniform[0], self.uniform[1])  # noqa: E731
        return one() if self.size is None else [one() for _ in range(self.size)]


def _value_or_draw(value: Any) -> float | list[float] | Draw:
    """A value, or a distribution to draw one from: one message for either mistake."""
    if isinstance(value, Draw):
        return value
    if not isinstance(value, dict):
        return _number_or_numbers(value)
    try:
        return Draw.model_validate(value)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise PydanticCustomError("draw", "{where}{message}", {
            "where": f"{where}: " if where else "", "message": first["msg"].removeprefix(
                "Value error, ")}) from None


#: A value, or the distribution it is drawn from (`{normal: [0, 1], size: 3}`).
InputValue = Annotated[float | list[float] | Draw, PlainValidator(_value_or_draw),
                       WithJsonSchema({"anyOf": [
                           {"type": "number"},
                           {"type": "array", "items": {"type": "number"}, "minItems": 1},
                           Draw.model_json_schema()]})]


class Input(_Model):
    """One leaf of the program: a scalar or a 1-D tensor."""

    value: InputValue
    """A number (a scalar input) or a list of numbers (a 1-D input), or a distribution to draw
    it from with the grading seed ({normal: [0, 1]}); the default point."""
    requires_grad: bool = True
    """Whether the leaf is made with `requires_grad=True` (its gradient is checked)."""
    domain: Domain | None = None
    """Where `sampled` draws this input from; without one it keeps its `value`."""

    @property
    def size(self) -> int | None:
        """None for a scalar, else the length of the 1-D value."""
        return self.value.size if isinstance(self.value, Draw) else value_size(self.value)

    def value_at(self, seed: int, name: str) -> float | list[float]:
        """The value, drawn at `seed` if it is a distribution."""
        return self.value.draw(seed, name) if isinstance(self.value, Draw) else self.value


#: The loosest tolerance an exercise may set. A wrong derivative is usually off by a factor (a
#: missing 2, a sign, e^x for e^-x): 10% or more. At most 1e-3 keeps a margin of a hundred
#: below that; 1e9 would pass anything.
MAX_TOLERANCE = 1e-3


def _tight(value: float) -> float:
    if value > MAX_TOLERANCE:
        raise PydanticCustomError(
            "loose", f"{value:g} is loose enough to pass a wrong derivative; at most "
                     f"{MAX_TOLERANCE:g} (a wrong slope is usually off by 10% or more)")
    return value


class Tol(_Model):
    """A tolerance: |a - b| <= atol + rtol * |b|."""

    atol: Annotated[NonNegative, AfterValidator(_tight)]
    """Absolute part, at most 1e-3."""
    rtol: Annotated[NonNegative, AfterValidator(_tight)]
    """Relative part, at most 1e-3."""


class Tolerance(_Model):
    """How close gradients must be; both parts of a pair are given together."""

    analytic: Tol = Tol(atol=1e-12, rtol=1e-9)
    """Against an analytic oracle (torch, jax)."""
    fd: Tol = Tol(atol=1e-6, rtol=1e-5)
    """Against finite differences."""

    def pair(self) -> Tolerances:
        """The same tolerances as the comparison uses them."""
        return Tolerances(Closeness(self.analytic.atol, self.analytic.rtol),
                          Closeness(self.fd.atol, self.fd.rtol))


class _Check(_Model):
    weight: Positive = 1.0
    """Share of the exercise's points, relative to the other checks' weights."""
    hint: str = ""
    """Shown when this check fails, instead of the exercise's hint: what this check tests."""


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


class HessianCheck(_OracleCheck):
    """Second derivatives against the oracles, by double backward: every row of the Hessian
    (or, with `vector`, the Hessian-vector product) at the inputs' values, at the listed points
    and at `count` points drawn from the domains. An answer key holds the oracles' rows."""

    points: list[Point] = []
    """More points, each giving every input."""
    count: int = Field(0, ge=0, le=200)
    """How many points to draw from the inputs' domains (a fixed seed per run)."""
    margin: NonNegative = 0.05
    """Minimum distance of a drawn value from its domain's edges and `avoid` points."""
    vector: Point | None = None
    """A vector v, giving each input that requires grad: grade H v instead of the Hessian."""


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

    no_grad: bool | Literal["nested", "after_error"] = False
    """Run it inside `with no_grad():` (true); `nested`: inside one, after a `with no_grad():`
    nested in it has exited (recording stays off); `after_error`: recording, after a
    `with no_grad():` block was left by an exception (recording is back on)."""


class Backward(_Model):
    """`of.backward(gradient=..., retain_graph=..., create_graph=...)`."""

    of: Target | None = None
    """What to call backward on: a variable, or `x.grad` for a gradient made with create_graph;
    default: the output."""
    gradient: Value | None = None
    """The `gradient` argument (for a non-scalar); default: none given."""
    retain_graph: bool | None = None
    """Keep the graph for another backward pass; default: not given (torch's default is
    create_graph's value)."""
    create_graph: bool = False
    """Build the gradients' own graph, so that they can be differentiated again."""


class Grad(_Model):
    """`names = grad(of, wrt, create_graph=..., retain_graph=..., allow_unused=...)`: the module's
    `grad()`, like `torch.autograd.grad`; each gradient is bound to a new name."""

    of: Target | Annotated[list[Target], Field(min_length=1)] | None = None
    """What to differentiate: a variable, or `x.grad`, or a list of them (`outputs` as a tuple:
    their gradients add up); default: the output."""
    grad_outputs: Annotated[list[Value], Field(min_length=1)] | None = None
    """The seed of each output, in the order of `of` (`grad_outputs`, as a tuple when `of` is a
    list); default: none given."""
    wrt: list[Name] = Field(min_length=1)
    """The inputs (or variables) to differentiate with respect to."""
    names: list[Name] = Field(min_length=1)
    """A new name for each gradient, in the order of `wrt`."""
    create_graph: bool = False
    """Give the gradients a history, so that they can be differentiated again."""
    retain_graph: bool | None = None
    """Keep the graph; default: not given (torch's default is create_graph's value)."""
    allow_unused: bool = False
    """An input the output does not depend on gives None instead of raising."""

    @model_validator(mode="after")
    def _one_name_each(self) -> Grad:
        if len(self.names) != len(self.wrt):
            raise ValueError(f"give one name per input of wrt: {len(self.wrt)} inputs, "
                             f"{len(self.names)} names")
        outputs = len(self.of) if isinstance(self.of, list) else 1
        if self.grad_outputs is not None and len(self.grad_outputs) != outputs:
            raise ValueError(f"give one grad_outputs value per output of `of`: {outputs} "
                             f"output{'s' * (outputs != 1)}, {len(self.grad_outputs)} values")
        return self


class Detach(_Model):
    """`name = of.detach()`."""

    name: Name
    """The new variable."""
    of: Name
    """The variable to detach."""


class Sgd(_Model):
    """Under `no_grad()`: `p = p - p.grad * lr` for each parameter, then `p.requires_grad_()`."""

    lr: Finite
    """The learning rate."""
    params: list[Name] = Field(min_length=1)
    """The inputs to update."""


class Compute(_Model):
    """`name = expr`: an expression of the program language over the session's variables and
    their gradients, computed by the engine (for example `x - g / h`, a Newton step from two
    gradients, or `(w.grad * w.grad).sum()`)."""

    name: Name
    """The new variable."""
    expr: str = Field(min_length=1)
    """The expression, such as `(g * g).sum()`; `x.grad` reads x's gradient."""


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
    grad: Grad | SkipJsonSchema[None] = None
    """Gradients by the module's grad(), bound to new names."""
    compute: Compute | SkipJsonSchema[None] = None
    """A new variable computed from the session's variables."""
    expect: list[Expect] = []
    """After the step, compare grad.NAME, value.NAME, requires_grad.NAME, is_leaf.NAME,
    grad_fn.NAME, has_grad_fn.NAME, grad.NAME.requires_grad / is_leaf / has_grad_fn (of a
    gradient), or warnings (the categories of the warnings the step issued); whether the step
    raised is always compared."""

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


#: An operation of the table (gradcheck/program/ops.py), by name.
OpName = Literal[tuple(OPS)]  # type: ignore[valid-type]


class RandomProgramsCheck(_Check):
    """Gradients of whole programs hypothesis draws from the table of operations, different with
    each grading seed (gradcheck/bank/random_programs.py); a failure shows the smallest program
    found. The exercise's own program and inputs play no part in it."""

    ops: list[OpName] = Field(default_factory=lambda: list(OPS), min_length=1)
    """The operations the programs are drawn from (default: all of them)."""
    count: int = Field(30, ge=1, le=1000)
    """How many programs."""
    max_operations: int = Field(6, ge=1, le=20)
    """Operations per program at most."""
    oracles: list[Oracle] = Field(["fd", "torch"], min_length=1)
    """Which oracles the submission is compared with when grading live (default fd and torch:
    jax would be imported and compiled in the grader for programs drawn there). Grading with an
    answer key compares with finite differences and the reference engine, whose answers on the
    programs drawn at the key's seed the key holds."""


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
    hessian: HessianCheck | None = None
    """Second derivatives (the Hessian, or a Hessian-vector product)."""
    random_programs: RandomProgramsCheck | None = None
    """Random programs, drawn anew with each grading seed."""

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
    points: Annotated[Positive, AfterValidator(_quarters)]
    """What the exercise is worth, a multiple of 0.25; split across its checks by weight, in
    quarters."""
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
    convention: Literal["torch"] | None = None
    """At kinks, grade torch's derivative; by default points where oracles disagree are not.
    Only torch: the protocol asks an engine to behave as torch does, so a check graded by jax's
    convention would fail every faithful engine (and the reference, so `validate` refuses it).
    torch then grades every gradient and hessian check, whatever its `oracles` or `--oracles`."""
    timeout: float = Field(10.0, gt=0, le=600)
    """Seconds the whole exercise may take in the worker."""

    _file: str = PrivateAttr("")
    _source: yaml_reader.Source | None = PrivateAttr(None)
    _program: Program | None = PrivateAttr(None)
    _digest: str = PrivateAttr("")
    _bank_file: str = PrivateAttr("")

    @property
    def path(self) -> Path | None:
        """The file it was loaded from."""
        return Path(self._file) if self._file else None

    @property
    def bank_file(self) -> str:
        """The file as a student can find it: its path in the bank's folder (a bundled bank's
        folder lies inside the installed package, so an absolute path would help no one)."""
        return self._bank_file or (Path(self._file).name if self._file else self.id)

    def where(self, field_path: str | tuple[str | int, ...]) -> str:
        """`02-backward/chain-rule-z.exercise.yaml:44`: the file in the bank and a field's line."""
        line = self.line_of(field_path)
        return f"{self.bank_file}:{line}" if line else self.bank_file

    @property
    def digest(self) -> str:
        """sha256 of the file's bytes (of the canonical YAML for an exercise built in code)."""
        private = self.__pydantic_private__  # (`program`)
        if not private["_digest"]:
            private["_digest"] = hashlib.sha256(dump_exercise(self).encode()).hexdigest()
        return private["_digest"]

    @property
    def program(self) -> Program:
        """The parsed program."""
        # read from the dict itself: through `self._program` every read would be a call of
        # pydantic's __getattr__, and the grader reads this a few thousand times a grading
        private = self.__pydantic_private__
        if private["_program"] is None:
            private["_program"] = parse_program(self)
        return private["_program"]

    @property
    def sizes(self) -> dict[str, int | None]:
        """Input name -> None (scalar) or length."""
        return {name: spec.size for name, spec in self.inputs.items()}

    @property
    def values(self) -> Point:
        """The inputs' values as a point (drawn values at seed 0)."""
        return self.values_at(0)

    def values_at(self, seed: int) -> Point:
        """The inputs' values as a point, a drawn value drawn at `seed` (the exercise's grading
        seed, `gradcheck.grading.plan.sample_seed`)."""
        return {name: spec.value_at(seed, name) for name, spec in self.inputs.items()}

    @property
    def grad_names(self) -> list[str]:
        """Inputs that require grad, whose gradients are checked."""
        return [name for name, spec in self.inputs.items() if spec.requires_grad]

    def check_points(self, check: str, seed: int = 0) -> list[Point]:
        """The points a gradient check is graded at: the inputs' values, then the listed points
        (`gradients`); each case's point (`answers`); `count` points drawn from the domains,
        reproducibly from `seed`, the other inputs at their values (`sampled`)."""
        base = self.values_at(seed)
        if check == "gradients":
            return [base] + [{**base, **p} for p in self.checks.gradients.points]
        if check == "answers":
            return [{**base, **(case.at or {})} for case in self.checks.answers.cases]
        if check == "hessian":
            hessian = self.checks.hessian
            drawn = self.sampling(seed, "hessian").draw() if hessian.count else []
            return [base] + [{**base, **p} for p in hessian.points] + drawn
        return self.sampling(seed).draw()

    def sampling(self, seed: int = 0, check: str = "sampled") -> Sampling:
        """How a check's sampled points (`sampled`, or `hessian`'s `count`) are drawn at
        `seed`, without drawing them."""
        domains = {n: i.domain.interval() for n, i in self.inputs.items() if i.domain}
        options = getattr(self.checks, check)
        count = options.count
        return Sampling({n: self.sizes[n] for n in domains}, domains, options.margin, count,
                        seed, self.values_at(seed))

    def line_of(self, field_path: str | tuple[str | int, ...]) -> int:
        """The line of a field (or of its nearest written parent); 0 if not loaded from a file."""
        source = self.__pydantic_private__["_source"]  # (`program`)
        return source.line_of(field_path) if source else 0

    def problem(self, field_path: str | tuple[str | int, ...], message: str) -> Problem:
        """A problem located at a field of this exercise."""
        steps = yaml_reader.parse_path(field_path) if isinstance(field_path, str) else field_path
        return Problem(self._file, self.line_of(steps), yaml_reader.format_path(steps), message)


def parse_program(exercise: Exercise) -> Program:
    program = parse(exercise.program_text, exercise.sizes)
    if exercise.output is not None and exercise.output in program.names:
        program = dataclasses.replace(program, output_name=exercise.output)
    return remember(program)  # the grader's requests for it then need no second parse


def dump_exercise(exercise: Exercise, schema_line: str = "") -> str:
    """YAML text of an exercise (defaults left out) that loads back to an equal exercise."""
    data = exercise.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    return (schema_line + "\n" if schema_line else "") + yaml_reader.dump(data)
