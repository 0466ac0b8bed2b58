"""A `sampled` check's draw as plain data: the grader's process or its helper (gradcheck.grading.helper_process)
draws the same points from it (`gradcheck.bank.domains.spread`: spread over the domains, from the
seed). The drawing module is imported only when the points are drawn, so that a grader with an
answer key never imports it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gradcheck.program.ops import Interval

Point = dict[str, Any]


@dataclass(frozen=True)
class Sampling:
    """`count` points drawn from `domains` with `margin`, reproducibly from `seed`."""

    sizes: dict[str, int | None]  # of the inputs drawn
    domains: dict[str, Interval]
    margin: float
    count: int
    seed: int
    base: Point  # every input's value: the inputs not drawn keep theirs

    def draw(self) -> list[Point]:
        from gradcheck.bank import domains

        drawn = domains.spread(self.sizes, self.domains, self.margin, self.count, self.seed)
        return [{**self.base, **p} for p in drawn]
