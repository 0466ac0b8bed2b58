"""Sampled points are spread over the domain, clear of 0, and short (gradcheck.bank.domains.spread)."""

from gradcheck.bank.domains import MAGNITUDE_FLOOR, spread
from gradcheck.program.ops import Interval


def test_points_visit_every_part_of_the_domain_and_keep_clear_of_zero():
    drawn = [p["x"] for p in spread({"x": None}, {"x": Interval(-4.0, 4.0)}, 0.05, 20, 7)]
    assert all(abs(x) >= MAGNITUDE_FLOOR and -3.95 < x < 3.95 for x in drawn)
    # one value in each twentieth of the domain: nothing clusters near 0 or an edge
    assert sorted(int((x + 4.0) / 0.4) for x in drawn) == list(range(20))
    assert all(len(f"{x!r}".lstrip("-").replace(".", "")) <= 7 for x in drawn)  # 6 digits


def test_a_domain_near_zero_keeps_its_points_there_and_vectors_are_spread_too():
    near = [p["x"] for p in spread({"x": None}, {"x": Interval(-0.005, 0.005)}, 0.0, 5, 1)]
    assert all(abs(x) < 0.005 for x in near)
    [point] = spread({"v": 3}, {"v": Interval(0.05, 4.0)}, 0.05, 1, 3)
    assert len(point["v"]) == 3 and all(0.1 < x < 3.95 for x in point["v"])


def test_the_same_seed_gives_the_same_points():
    domains = {"x": Interval(-3.0, 3.0, (0.0,))}
    assert spread({"x": None}, domains, 0.1, 10, 5) == spread({"x": None}, domains, 0.1, 10, 5)
    assert spread({"x": None}, domains, 0.1, 10, 5) != spread({"x": None}, domains, 0.1, 10, 6)
