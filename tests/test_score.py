"""How an exercise's points are shared among its checks (gradcheck/score.py)."""

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradcheck.bank.loader import from_data
from gradcheck.grading.score import check_points, split_points, total


def test_equal_weights_give_the_leftover_quarter_to_the_first_checks():
    assert split_points(1, {"a": 1, "b": 1, "c": 1}) == {"a": 0.5, "b": 0.25, "c": 0.25}
    assert split_points(2, {"a": 1, "b": 1, "c": 1}) == {"a": 0.75, "b": 0.75, "c": 0.5}


def test_weights_share_points_in_proportion():
    # 5 points at weights 2:1:1 is 5 * 2/4, 5 * 1/4, 5 * 1/4.
    assert split_points(5, {"gradients": 2, "graph": 1, "behaviour": 1}) == {
        "gradients": 2.5, "graph": 1.25, "behaviour": 1.25}


def test_a_zero_weight_check_is_worth_nothing():
    assert split_points(3, {"graph": 0, "sampled": 1}) == {"graph": 0.0, "sampled": 3.0}


@given(units=st.integers(0, 100_000),
       weights=st.lists(st.floats(0.01, 100), min_size=1, max_size=8))
def test_shares_add_up_exactly_and_stay_within_a_quarter_of_fair(units, weights):
    points = units / 4
    named = {f"check{i}": w for i, w in enumerate(weights)}
    shares = split_points(points, named)
    assert list(shares) == list(named)  # the exercise's order is kept
    assert total(shares.values()) == points
    assert sum(shares.values()) == points  # plain float addition: quarters are exact
    assert sum(round(s * 4) for s in shares.values()) == units
    weight_sum = sum(map(Fraction, weights))
    for name, share in shares.items():
        fair = Fraction(units) * Fraction(named[name]) / weight_sum
        assert abs(Fraction(round(share * 4)) - fair) < 1


def test_total_has_no_floating_point_residue():
    assert 0.1 + 0.2 != 0.3
    assert total([0.1, 0.2]) == 0.3
    assert total([0.34, 0.33, 0.33] * 7) == 7.0


@pytest.mark.parametrize("points, weights, complaint", [
    (0.125, {"a": 1}, "whole number of quarters"),
    (-1, {"a": 1}, "finite number >= 0"),
    (float("nan"), {"a": 1}, "finite number >= 0"),
    (1, {}, "at least one check"),
    (1, {"a": 0, "b": 0}, "positive weight"),
    (1, {"a": -1, "b": 2}, "non-negative"),
])
def test_points_that_cannot_be_shared_are_refused(points, weights, complaint):
    with pytest.raises(ValueError, match=complaint):
        split_points(points, weights)


def test_check_points_lists_the_present_checks_in_format_order_with_their_weights():
    exercise = from_data({
        "id": "square", "title": "A square", "topic": "01-forward", "points": 4,
        "inputs": {"x": {"value": 3.0, "domain": {"low": -2, "high": 2}}},
        "program": "y = x * x\n",
        # written out of order: the format's order (gradients, sampled, ..., behaviour) rules
        "checks": {"behaviour": {"steps": [{"backward": {}, "expect": ["grad.x"]}]},
                   "graph": {"names": ["y"]}, "gradients": {"weight": 2}},
    })
    assert check_points(exercise) == {"gradients": 2.0, "graph": 1.0, "behaviour": 1.0}


def test_the_bundled_bank_s_shares_add_up_exactly_in_plain_floating_point():
    from gradcheck.bank.bundled import bank_dir
    from gradcheck.bank.loader import load_bank
    from gradcheck.grading.score import check_points

    bank = load_bank(bank_dir())
    added = 0.0
    for exercise in bank.exercises:
        for share in check_points(exercise).values():
            added += share  # as Gradescope adds its tests' max_score
    assert added == sum(e.points for e in bank.exercises)
