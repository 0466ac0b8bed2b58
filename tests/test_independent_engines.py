"""Engines written apart from the reference, from the protocol page and torch alone, each by hands
that read neither the grader nor the reference engine (tests/engines/independent): a micrograd
style of closures over a list of values, and a package of one operation class per torch name
ordered by Kahn's algorithm. Each matches torch wherever its author compared it, so every point
either loses would be the grader's unfairness, not the engine's difference from torch; and
micrograd's own order (tests/engines/odd_set_depth_first.py), which sums a node's gradient in
the order of a set, differs from torch in the last bits only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gradcheck.bank.bundled import bank_dir
from gradcheck.bank.loader import load_bank
from gradcheck.grading import answer_key
from gradcheck.grading.grader import grade

ENGINES = Path(__file__).parent / "engines"
SUBMISSIONS = {"closures": ENGINES / "independent" / "closures.py",
               "tape": ENGINES / "independent" / "tape",
               "micrograd's order": ENGINES / "odd_set_depth_first.py"}


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    path = tmp_path_factory.mktemp("independent") / "key.json"
    answer_key.build(load_bank(bank_dir()), 3, path)
    return path


def lost(report) -> list[tuple[str, str, str]]:
    return [(r.exercise_id, r.check, r.message) for r in report.results if r.status != "passed"]


@pytest.mark.slow
@pytest.mark.parametrize("engine", sorted(SUBMISSIONS))
def test_an_engine_that_matches_torch_gets_every_point_of_the_bundled_bank(engine, key):
    """Live at one seed, and from an answer key at another: the whole bank, every check."""
    live = grade(SUBMISSIONS[engine], seed=1)
    assert live.max_score == 303 and lost(live) == []
    keyed = grade(SUBMISSIONS[engine], key=key)
    assert keyed.seed == 3 and lost(keyed) == [] and keyed.score == keyed.max_score
