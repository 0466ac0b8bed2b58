"""How an exercise's points are shared among its checks.

The rule, chosen for being easy to explain to a student:

- An exercise's points are split across its checks in proportion to their weights (equal by
  default). That split is the partial credit: an engine that gets the gradients right but the
  graph wrong keeps the gradient checks' share.
- Within one check it is all or nothing. A check that passes at 19 of 20 sampled points has a
  wrong derivative somewhere, and crediting 95% of it would pay for a bug the check exists to
  catch (a derivative wrong on one side of a kink would still collect half).
- Points are counted in quarters. Shares are rounded by the largest-remainder rule, earlier
  checks winning ties, so the shares of an exercise always add up to exactly its points
  (1 point over three checks: 0.5, 0.25, 0.25). A quarter is a binary fraction: every share,
  and every sum of shares however a reader adds them up (Gradescope adds its tests' scores in
  floating point), is exact as printed; hundredths were not (0.67 + 0.67 + 0.66 is not 2.0 in
  floating point, and the bank's shares added up to 260.99999999999955).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import TYPE_CHECKING

from gradcheck.program.memo import Memo

if TYPE_CHECKING:
    from gradcheck.bank.models import Exercise

#: Points are counted in units of a quarter.
UNITS_PER_POINT = 4


def check_points(exercise: Exercise) -> dict[str, float]:
    """The checks present in `exercise`, in the format's order, each with its maximum score.
    Remembered for the exercise object (a batch's job slot works them out once for every
    grading it forks, `gradcheck.grading.grader.warm`)."""
    shares = _SHARES.get(exercise)
    if shares is None:
        checks = exercise.checks
        shares = _SHARES.keep(split_points(exercise.points, {
            name: getattr(checks, name).weight for name in checks.present()}), exercise)
    return dict(shares)


#: `check_points` of each exercise object
_SHARES: Memo[dict[str, float]] = Memo(512)


def split_points(points: float, weights: Mapping[str, float]) -> dict[str, float]:
    """Each check's share of `points`, by weight, in quarters that add up exactly to `points`.

    `weights` maps check names (in the exercise's order) to non-negative weights, not all zero.
    """
    if not weights:
        raise ValueError("an exercise needs at least one check to share its points")
    if any(not math.isfinite(w) or w < 0 for w in weights.values()):
        raise ValueError(f"check weights must be finite and non-negative, got {dict(weights)}")
    units = _units(points)
    exact = {name: Fraction(w) for name, w in weights.items()}
    total_weight = sum(exact.values())
    if total_weight == 0:
        raise ValueError("at least one check must have a positive weight")
    quotas = {name: units * w / total_weight for name, w in exact.items()}
    shares = {name: math.floor(q) for name, q in quotas.items()}
    left = units - sum(shares.values())
    # sorted() is stable, so among equal remainders the earlier check gets the extra quarter.
    for name in sorted(shares, key=lambda n: shares[n] - quotas[n])[:left]:
        shares[name] += 1
    return {name: n / UNITS_PER_POINT for name, n in shares.items()}


def total(scores: Iterable[float]) -> float:
    """The sum of scores made of quarters (or of hundredths, as older results hold them), free
    of floating-point residue (0.1 + 0.2 is 0.3)."""
    return round(math.fsum(scores), 2)


def _units(points: float) -> int:
    """`points` as a whole number of quarters; finer points cannot be shared exactly."""
    if not math.isfinite(points) or points < 0:
        raise ValueError(f"points must be a finite number >= 0, got {points!r}")
    units = round(points * UNITS_PER_POINT)
    if not math.isclose(units, points * UNITS_PER_POINT, rel_tol=0, abs_tol=1e-6):
        raise ValueError(f"points must be a whole number of quarters, got {points!r}")
    return units
