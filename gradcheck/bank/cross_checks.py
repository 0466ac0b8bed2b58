"""What no schema can say about an exercise: its program parses, every name a check uses exists,
every point gives every input with its shape, a sampled input has room left to sample.
"""

from __future__ import annotations

from typing import Iterable

from gradcheck.bank import yaml_reader
from gradcheck.bank.models import (
    Compute,
    Draw,
    Exercise,
    HessianCheck,
    Point,
    SampledCheck,
    Step,
    parse_program,
    value_size,
)
from gradcheck.bank.problems import listing, suggest
from gradcheck.program.language import Program, ProgramError, free_names, parse_expression
from gradcheck.program.ops import allowed
from gradcheck.program.session import WARNINGS, parse_expect, target_name

_Issue = tuple[yaml_reader.Path, str, tuple[int, int] | None]


def cross_check(exercise: Exercise) -> tuple[Program | None, list[_Issue]]:
    """What the models cannot check alone: the program, names, points, scalar outputs."""
    issues: list[_Issue] = []
    try:
        program = parse_program(exercise)
    except ProgramError as exc:
        program = None
        issues += [(("program",), e.message, (e.line, e.column)) for e in (exc, *exc.more)]
    checks = exercise.checks
    numeric = [name for name in ("gradients", "sampled", "answers", "hessian")
               if getattr(checks, name)]
    if numeric and not exercise.grad_names:
        issues.append((("inputs",), f"no input requires grad, so {numeric[0]} has nothing to "
                                    "check; set requires_grad: true on one", None))
    if checks.gradients:
        for i, point in enumerate(checks.gradients.points):
            issues += _point_issues(exercise, point, ("checks", "gradients", "points", i))
    drawn = [name for name, spec in exercise.inputs.items() if isinstance(spec.value, Draw)]
    if checks.answers:
        for i, case in enumerate(checks.answers.cases):
            where = ("checks", "answers", "cases", i)
            unfixed = [name for name in drawn if name not in (case.at or {})]
            if unfixed:
                issues.append((where, f"a hand-derived answer needs fixed inputs, but "
                               f"{listing(unfixed)} {'is' if len(unfixed) == 1 else 'are'} "
                               "drawn at random; give them in `at`", None))
            if case.at is not None:
                issues += _point_issues(exercise, case.at, where + ("at",))
            issues += _grads_issues(exercise, case.grads, where + ("grads",))
    if checks.sampled:
        issues += _domain_issues(exercise, checks.sampled, ("checks", "sampled"))
    if checks.hessian:
        for i, point in enumerate(checks.hessian.points):
            issues += _point_issues(exercise, point, ("checks", "hessian", "points", i))
        if checks.hessian.vector is not None:
            where = ("checks", "hessian", "vector")
            vector = checks.hessian.vector
            issues += _grads_issues(exercise, vector, where)
            missing = [name for name in exercise.grad_names if name not in vector]
            if missing:
                issues.append((where, f"the vector gives every input that requires grad; add "
                                      f"{listing(missing)}", None))
        if checks.hessian.count:
            issues += _domain_issues(exercise, checks.hessian, ("checks", "hessian", "count"))
    if checks.random_programs and set(checks.random_programs.ops) <= CUTTING:
        issues.append((("checks", "random_programs", "ops"), f"{listing(CUTTING)} alone cannot "
                       "make a program to grade: it passes no gradient, so no output drawn "
                       "from it depends on an input; add an operation that does, such as add, "
                       "mul or exp", None))
    if program is not None:
        issues += _program_issues(exercise, program, numeric)
    return program, issues


#: Operations that pass no gradient: random programs drawn from these alone have none to grade.
CUTTING = frozenset({"detach"})


def _program_issues(exercise: Exercise, program: Program, numeric: list[str]) -> list[_Issue]:
    issues: list[_Issue] = []
    names = set(program.names)
    if exercise.output is not None and exercise.output not in names:
        issues.append((("output",), f"{exercise.output!r} is not a variable of the program; "
                                    f"name one of {listing(names)}", None))
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
        issues += _step_issues(exercise, exercise.checks.behaviour.steps, program)
        issues += _expects_nothing(exercise, exercise.checks.behaviour.steps)
    return issues


def _expects_nothing(exercise: Exercise, steps: list[Step]) -> list[_Issue]:
    """A behaviour check with no `expect` compares only whether each step raised, which every
    engine that runs at all passes: it would give its points unearned."""
    if any(step.expect for step in steps):
        return []
    first = next(iter(exercise.inputs))
    return [(("checks", "behaviour", "steps"), "no step has an `expect`, so this check compares "
             "only whether each step raised, which almost every engine passes; add `expect` to "
             f"the steps after which to compare (such as `expect: [grad.{first}]` after a "
             f"backward, or `expect: [requires_grad.{first}]`)", None)]


def _step_issues(exercise: Exercise, steps: list[Step], program: Program) -> list[_Issue]:
    """Names in behaviour steps, in order: a `detach` step defines a new name for later steps.
    A `compute` step's expression is parsed as the worker will parse it, over the sizes its
    operands will have."""
    issues: list[_Issue] = []
    known = set(program.names)
    sizes = {name: program.nodes[node].size for name, node in program.names.items()}
    gradients: set[str] = set()  # names bound by grad steps
    for i, step in enumerate(steps):
        here = ("checks", "behaviour", "steps", i)
        # each name a step reads: where, and (in an expression) at which line and column
        used: list[tuple[yaml_reader.Path, str, tuple[int, int] | None]] = []
        for action in ("backward", "grad"):
            of = getattr(getattr(step, action), "of", None)
            if isinstance(of, list):
                used += [((action, "of", j), target_name(one), None) for j, one in enumerate(of)]
            elif of:
                used.append(((action, "of"), target_name(of), None))
        used += [(("grad", "wrt", j), name, None)
                 for j, name in enumerate(step.grad.wrt if step.grad else [])]
        operands: dict[str, tuple[int, int]] = {}
        if step.compute:
            try:
                operands = free_names(step.compute.expr)
            except ProgramError:
                pass  # not an expression: parsing it below says where
            first: dict[str, tuple[int, int]] = {}  # `x` and `x.grad`: said once, at the first
            for name, at in sorted(operands.items(), key=lambda item: item[1]):
                first.setdefault(target_name(name), at)
            used += [(("compute", "expr"), name, at) for name, at in first.items()]
        for key in ("zero_grad", "retain_grad"):
            used += [((key, j), name, None) for j, name in enumerate(getattr(step, key) or [])]
        used += [(("requires_grad", name), name, None) for name in step.requires_grad or {}]
        if step.detach:
            used.append((("detach", "of"), step.detach.of, None))
        for j, name in enumerate(step.sgd.params if step.sgd else []):
            if name not in exercise.inputs:
                issues.append((here + ("sgd", "params", j), f"sgd updates inputs (leaves); "
                               f"{name!r} is not one of {listing(exercise.inputs)}", None))
        issues += [(here + path, _unknown(name, known), at)
                   for path, name, at in used if name not in known]
        if step.detach:
            known.add(step.detach.name)
            _sized_as(sizes, step.detach.name, step.detach.of)
        if step.grad:
            known.update(step.grad.names)
            gradients.update(step.grad.names)
            for name, wrt in zip(step.grad.names, step.grad.wrt):
                _sized_as(sizes, name, wrt)
        if step.compute:
            known.add(step.compute.name)
            issues += _expression_issues(step.compute, operands, sizes, here)
        for j, item in enumerate(step.expect):
            kind, name, _ = parse_expect(item)
            if item == WARNINGS:
                if _creates_graph(step):
                    issues.append((here + ("expect", j), "torch warns about create_graph=True "
                                   "only once in a process, so its warnings cannot be compared "
                                   "here; compare warnings in a step without create_graph", None))
            elif name not in known:
                issues.append((here + ("expect", j), _unknown(name, known), None))
            elif kind == "grad_fn" and name in gradients:
                issues.append((here + ("expect", j), f"{name} is a gradient, whose grad_fn "
                               "names are torch's internals; compare has_grad_fn."
                               f"{name} instead", None))
    return issues


def _sized_as(sizes: dict[str, int | None], name: str, like: str) -> None:
    """`name` now holds a value of `like`'s size (unknown while `like`'s is)."""
    sizes.pop(name, None)
    if like in sizes:
        sizes[name] = sizes[like]


def _expression_issues(compute: Compute, operands: Iterable[str], sizes: dict[str, int | None],
                       here: yaml_reader.Path) -> list[_Issue]:
    """A compute step's expression parsed over its operands' sizes (an `x.grad` has x's), as
    the worker parses it: anything outside the language is found here, not when grading. The
    new variable's size is recorded for later steps. An operand of unknown size (an unknown
    name, reported elsewhere, or an expression that failed) hides no other problem: it is
    taken for a number, then for a list, and what is wrong either way is reported."""
    unknown = [name for name in operands if target_name(name) not in sizes]
    known = {name: sizes[target_name(name)] for name in operands if name not in unknown}
    found: list[list[tuple[str, int, int]]] = []
    for size in (None, 2) if unknown else (None,):
        try:
            expression = parse_expression(compute.expr, {**known, **dict.fromkeys(unknown, size)})
        except ProgramError as exc:
            found.append([(e.message, e.line, e.column) for e in (exc, *exc.more)])
        else:
            found.append([])
            if not unknown:
                sizes[compute.name] = expression.nodes[expression.output].size
    # a problem is the unknown operand's doing unless every reading finds it, or stops at an
    # earlier problem (the parser reports the first problem of a statement)
    said = dict.fromkeys(issue for issues in found for issue in issues)
    return [(here + ("compute", "expr"), message, (line, column))
            for message, line, column in sorted(said, key=lambda issue: issue[1:])
            if all((message, line, column) in issues
                   or any(other[1:] < (line, column) for other in issues) for issues in found)]


def _creates_graph(step: Step) -> bool:
    return any(getattr(getattr(step, action), "create_graph", False)
               for action in ("backward", "grad"))


def _point_issues(exercise: Exercise, point: Point, where: yaml_reader.Path) -> list[_Issue]:
    missing = [name for name in exercise.inputs if name not in point]
    issues: list[_Issue] = []
    if missing:
        issues.append((where, f"a point gives every input; add {listing(missing)}", None))
    for name, value in point.items():
        if name not in exercise.inputs:
            issues.append((where + (name,), f"{name!r} is not an input; the inputs are "
                                            f"{listing(exercise.inputs)}", None))
        else:
            issues += _shape_issues(exercise, name, value, where + (name,))
    return issues


def _grads_issues(exercise: Exercise, grads: Point, where: yaml_reader.Path) -> list[_Issue]:
    issues: list[_Issue] = []
    for name, value in grads.items():
        if name not in exercise.grad_names:
            issues.append((where + (name,), f"{name!r} is not an input that requires grad; "
                                            f"those are {listing(exercise.grad_names)}", None))
        else:
            issues += _shape_issues(exercise, name, value, where + (name,))
    return issues


def _shape_issues(exercise: Exercise, name: str, value: float | list[float],
                  where: yaml_reader.Path) -> list[_Issue]:
    want, got = exercise.inputs[name].size, value_size(value)
    if want == got:
        return []
    return [(where, f"{name!r} is {_shape(want)} (as its value under inputs), but "
                    f"{_shape(got)} is given here; give {_shape(want)}", None)]


def _shape(size: int | None) -> str:
    return "a number" if size is None else f"a list of {size} number{'s' * (size != 1)}"


def _domain_issues(exercise: Exercise, sampled: SampledCheck | HessianCheck,
                   where: yaml_reader.Path) -> list[_Issue]:
    issues: list[_Issue] = []
    if not any(spec.domain for spec in exercise.inputs.values()):
        issues.append((where, "no input has a domain to sample from; give at least one input a "
                              "domain: {low: .., high: ..}", None))
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
    return (f"{name!r} is not defined{suggest(name, known)}; use an input or a variable of the "
            f"program: {listing(known)}")
