"""What a grading asks, the same live and when an answer key is built: the seed of each
exercise's sampled points, the requests of the checks, the modules jax compiles
the checks in, the arguments of a random-program search, and the error for a grading that
cannot run at all.
"""

from __future__ import annotations

import argparse
import hashlib
from typing import Any, Callable, Sequence, TypeVar

from gradcheck.bank.models import ORACLES, Exercise
from gradcheck.bank.problems import Problem
from gradcheck.engine.wire import Sealed
from gradcheck.oracles import second_order
from gradcheck.program.memo import Memo

JAX_CHUNK = 12
#: the checks that compare an engine's gradients with the oracles' at points
GRADIENT_CHECKS = ("gradients", "sampled", "answers")
#: the checks an exercise's `convention` decides at kinks
CONVENTION_CHECKS = (*GRADIENT_CHECKS, "hessian")
T = TypeVar("T")


class GraderError(Exception):
    """The grader itself cannot run (a missing submission, an unreadable bank)."""


def oracle_list(text: str) -> list[str]:
    """`--oracles fd,torch`, as the commands that grade read it."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(names) - set(ORACLES))
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: choose among {', '.join(ORACLES)}, separated by commas")
    return names


def jax_modules(checks: Sequence[tuple[int, T]]) -> list[list[T]]:
    """The checks, each given with its exercise's number in the bank, that jax compiles as one
    module: those of JAX_CHUNK exercises at a time. Live grading and `key build` both group them
    so, which keeps a key's results equal to live ones to the bit."""
    modules: dict[int, list[T]] = {}
    for number, check in checks:
        modules.setdefault(number // JAX_CHUNK, []).append(check)
    return [modules[first] for first in sorted(modules)]


def wanted_oracles(exercise: Exercise, name: str, chosen: Sequence[str] | None) -> list[str]:
    """The oracles the check `name` is graded against in a run that asks for `chosen` (None:
    every one the check names). The oracle of the exercise's `convention` is always among those
    of a check it decides (CONVENTION_CHECKS): at a kink, no other oracle may stand in for it,
    or a faithful engine would lose the point to another convention."""
    wanted = asked_oracles(exercise, name, chosen)
    if name in CONVENTION_CHECKS and exercise.convention and exercise.convention not in wanted:
        wanted.append(exercise.convention)
    return wanted


def oracle_problems(exercise: Exercise) -> list[Problem]:
    """A hessian check none of whose oracles can give the program's second derivatives
    (`second_order.unfit`) grades nothing, live or from an answer key, where it is stored as
    live grading meets it: skipped, 0 points. `validate` and `key build` both report it."""
    if exercise.checks.hessian is None:
        return []
    program = exercise.program
    reasons = [second_order.unfit(program, oracle)
               for oracle in wanted_oracles(exercise, "hessian", None)]
    if not all(reasons):
        return []
    fit = [oracle for oracle in ORACLES if not second_order.unfit(program, oracle)]
    why = "; ".join(str(reason).removeprefix("skipped: ") for reason in reasons)
    return [exercise.problem(("checks", "hessian", "oracles"), (
        f"{why}, and no other oracle is listed, so this check grades nothing, live or with an "
        f"answer key (it is skipped and scores 0); add {' and '.join(fit)} to `oracles`, or "
        "leave `oracles` out"))]


def asked_oracles(exercise: Exercise, name: str, chosen: Sequence[str] | None) -> list[str]:
    """The oracles the check `name` names (every one, by default) that `chosen` (`--oracles`,
    None: all) keeps, before the convention adds its own (`wanted_oracles`)."""
    return [o for o in getattr(getattr(exercise.checks, name), "oracles", ORACLES)
            if chosen is None or o in chosen]


def convention_note(exercises: Sequence[Exercise], chosen: Sequence[str] | None) -> str:
    """What `grade` and `validate` say once when a check's `oracles`, or `--oracles` (`chosen`),
    leave out torch, the oracle of `convention: torch` (the only convention), which grades such
    checks all the same (`wanted_oracles`); or ''. Else an author who wrote `oracles: [jax]`
    would believe jax alone grades the check."""
    joined = [exercise.id for exercise in exercises if exercise.convention and any(
        exercise.convention not in asked_oracles(exercise, name, chosen)
        for name in exercise.checks.present() if name in CONVENTION_CHECKS)]
    if not joined:
        return ""
    shown = ", ".join(joined[:3]) + (f" and {len(joined) - 3} more" if len(joined) > 3 else "")
    if chosen and "torch" not in chosen:
        return (f"--oracles {','.join(chosen)}: torch grades the gradient and hessian checks of "
                f"{shown} too, as their `convention: torch` grades kinks by torch's derivative")
    return (f"torch grades the gradient and hessian checks of {shown} too, although their "
            "`oracles` leave it out, as their `convention: torch` grades kinks by torch's "
            "derivative")


def sample_seed(seed: int, exercise_id: str) -> int:
    """The seed of one exercise's sampled points in a run: each exercise draws its own points,
    and the same run seed always gives the same ones (what an answer key relies on)."""
    digest = hashlib.sha256(f"{seed}:{exercise_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def gradients_request(exercise: Exercise, points: list[dict[str, Any]]) -> Sealed:
    """The request of a gradient check at `points` (the determinism probe's too)."""
    return built(("gradients", exercise, points), lambda: _gradients(exercise, points))


def probe_request(exercise: Exercise, points: list[dict[str, Any]]) -> Sealed:
    """The determinism probe of a gradient check at `points`: the same backward at the first
    point, twice more (`Grader._nondeterminism`)."""
    return built(("probe", exercise, points),
                  lambda: _gradients(exercise, [points[0], points[0]]))


def _gradients(exercise: Exercise, points: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": "gradients", "program": exercise.program.spec(), "points": points,
            "requires_grad": exercise.grad_names}


def probed_check(exercise: Exercise) -> str | None:
    """The gradient check that carries the exercise's determinism probe: the first graded. One
    probe a program: another at another point of the same program would find little the first
    did not, and on a deep graph the probe costs twice what its check does."""
    return next((name for name in exercise.checks.present() if name in GRADIENT_CHECKS), None)


def hessian_request(exercise: Exercise, points: list[dict[str, Any]]) -> Sealed:
    """The request of a `hessian` check at `points`."""
    return built(("hessian", exercise, points), lambda: {
        "kind": "hessian", "program": exercise.program.spec(), "points": points,
        "requires_grad": exercise.grad_names, "vector": exercise.checks.hessian.vector})


def torch_request(exercise: Exercise, name: str, seed: int = 0) -> Sealed:
    """The request of a `graph` or `behaviour` check: asked of torch here and of the engine;
    `seed` (the exercise's, `sample_seed`) draws any input given as a distribution."""
    def build() -> dict[str, Any]:
        check = getattr(exercise.checks, name)
        request = {"kind": name, "program": exercise.program.spec(),
                   "point": exercise.values_at(seed), "requires_grad": exercise.grad_names}
        if name == "graph":
            return {**request, "names": list(check.names)}
        return {**request, "steps": [step.model_dump(exclude_none=True, exclude_defaults=False)
                                     for step in check.steps]}

    return built((name, exercise, seed), build)


def check_requests(exercise: Exercise, name: str, points: list[dict[str, Any]] | None,
                   seed: int) -> tuple[Sealed, ...]:
    """The requests the check `name` of `exercise` sends first, whatever the engine answers: a
    gradient check's at `points` (with the determinism probe after it, if it carries the
    probe), a hessian check's at `points`, a graph or behaviour check's at the exercise's
    sample `seed`; none for another check."""
    if name in GRADIENT_CHECKS:
        assert points is not None
        probing = (probe_request(exercise, points),) if name == probed_check(exercise) else ()
        return (gradients_request(exercise, points), *probing)
    if name == "hessian":
        assert points is not None
        return (hessian_request(exercise, points),)
    if name in ("graph", "behaviour"):
        return (torch_request(exercise, name, seed),)
    return ()


#: the requests built so far, by what each was built from: the same exercise and points give
#: the same request object, so that a grading's plan and its checks share one, and its frame
#: (`gradcheck.engine.sandbox.frame`) is made once, in a batch's job slot once for every
#: grading it forks (`gradcheck.grading.grader.warm`)
_BUILT: Memo[Sealed] = Memo(1024)


def built(sources: tuple[Any, ...], build: Callable[[], dict[str, Any]]) -> Sealed:
    """The request `build` makes from `sources` (`Memo`'s), sealed, and the same object for
    the same sources."""
    return _BUILT.get(*sources) or _BUILT.keep(Sealed(build()), *sources)


def search_options(exercise: Exercise, seed: int) -> dict[str, Any]:
    """The arguments of a `random_programs` check's search (`fuzzing.search`) in a run of
    `seed`, but the engine and the oracles: the same live, keyed, and when a key is built."""
    check = exercise.checks.random_programs
    return {"at_seed": sample_seed(seed, exercise.id), "examples": check.count,
            "ops": check.ops, "max_operations": check.max_operations, "max_steps": 0,
            "tolerance": exercise.tolerance.pair()}
