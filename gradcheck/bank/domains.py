"""hypothesis strategies for points that keep a set distance from kinks, poles and domain edges.

A domain is a :class:`gradcheck.program.ops.Interval` (open bounds `low`, `high`, and `avoid` points) plus a
`margin`: every drawn value lies more than `margin` inside the bounds and more than `margin` away
from each avoided point. Near a kink or a pole finite differences cannot judge and torch and jax
may both be right, so a property check that samples there only finds noise.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Mapping

import numpy as np
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis.configuration import set_hypothesis_home_dir, storage_directory
from hypothesis import strategies as st

from gradcheck.program.ops import Interval, Op, allowed


def scalars(interval: Interval, margin: float = 0.0) -> st.SearchStrategy[float]:
    """Floats in the allowed pieces of `interval` (open at every cut)."""
    return st.one_of([st.floats(lo, hi, exclude_min=True, exclude_max=True)
                      for lo, hi in allowed(interval, margin)])


def vectors(interval: Interval, size: int, margin: float = 0.0
            ) -> st.SearchStrategy[list[float]]:
    """Lists of `size` floats, each kept away from the cuts as :func:`scalars` is.

    hypothesis cannot draw thousands of floats in one example, so a long vector is spread by numpy
    from one drawn seed, uniformly over the allowed pieces.
    """
    if size <= LONG_VECTOR:
        return st.lists(scalars(interval, margin), min_size=size, max_size=size)
    pieces = allowed(interval, margin)
    return st.integers(0, 2**32 - 1).map(lambda s: _spread(pieces, size, s))


#: Vectors longer than this are spread from a seed rather than drawn element by element.
LONG_VECTOR = 64


def _spread(pieces: list[tuple[float, float]], size: int, at_seed: int) -> list[float]:
    rng = np.random.default_rng(at_seed)
    low = np.array([lo for lo, _ in pieces])
    width = np.array([hi - lo for lo, hi in pieces])
    which = rng.choice(len(pieces), size=size, p=width / width.sum())
    # (0, 1): both ends open, as the pieces are.
    unit = rng.uniform(np.nextafter(0.0, 1.0), 1.0, size)
    return (low[which] + unit * width[which]).tolist()


def points(inputs: Mapping[str, int | None], domains: Mapping[str, Interval],
           margin: float = 0.0) -> st.SearchStrategy[dict[str, Any]]:
    """Points for a program: input name -> float (scalar input) or list of floats (1-D)."""
    missing = [name for name in inputs if name not in domains]
    if missing:
        raise ValueError(f"no domain for input{'s' * (len(missing) > 1)} {', '.join(missing)}")
    return st.fixed_dictionaries({
        name: scalars(domains[name], margin) if size is None
        else vectors(domains[name], size, margin)
        for name, size in inputs.items()})


#: Sampled values keep at least this magnitude, unless the whole domain lies within it (an
#: exercise that asks for points near 0): at 1e-30, `x ** 2`'s slope is 0 whatever an engine
#: computes, so a point there tests nothing.
MAGNITUDE_FLOOR = 0.01
#: Significant digits a sampled value keeps, so that messages show it whole and short.
DIGITS = 6


def spread(sizes: Mapping[str, int | None], domains: Mapping[str, Interval], margin: float,
           count: int, at_seed: int) -> list[dict[str, Any]]:
    """`count` points spread over the domains, reproducibly from `at_seed`: each input's values
    are stratified (one in each of `count` equal slices of its allowed pieces, in a shuffled
    order, so that every part of a domain is visited), at least MAGNITUDE_FLOOR from 0, and
    rounded to DIGITS significant digits."""
    rng = np.random.default_rng(at_seed)
    drawn: list[dict[str, Any]] = [{} for _ in range(count)]
    for name, size in sizes.items():
        pieces = _floored(allowed(domains[name], margin))
        columns = [_stratified(pieces, count, rng) for _ in range(size or 1)]
        for i, point in enumerate(drawn):
            point[name] = columns[0][i] if size is None else [c[i] for c in columns]
    return drawn


def _floored(pieces: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The pieces without (-MAGNITUDE_FLOOR, MAGNITUDE_FLOOR), unless nothing would be left."""
    kept = []
    for lo, hi in pieces:
        if lo < -MAGNITUDE_FLOOR:
            kept.append((lo, min(hi, -MAGNITUDE_FLOOR)))
        if hi > MAGNITUDE_FLOOR:
            kept.append((max(lo, MAGNITUDE_FLOOR), hi))
    return [(lo, hi) for lo, hi in kept if lo < hi] or pieces


def _stratified(pieces: list[tuple[float, float]], count: int, rng: np.random.Generator
                ) -> list[float]:
    """One value in each of `count` equal slices of the pieces laid end to end, shuffled."""
    widths = np.array([hi - lo for lo, hi in pieces])
    starts = np.concatenate([[0.0], np.cumsum(widths)[:-1]])
    at = (np.arange(count) + rng.uniform(0.05, 0.95, count)) / count * widths.sum()
    values = []
    for t in rng.permutation(at):
        k = min(int(np.searchsorted(starts, t, side="right")) - 1, len(pieces) - 1)
        lo, hi = pieces[k]
        x = min(max(lo + (t - starts[k]), lo), hi)
        short = float(f"{x:.{DIGITS}g}")
        values.append(short if lo < short < hi else x)
    return values


def arguments(op: Op, margin: float = 0.0) -> st.SearchStrategy[tuple[float, ...]]:
    """Arguments of one operation from the table, each from its declared domain."""
    return st.tuples(*(scalars(domain, margin) for domain in op.domains))


def draw(strategy: st.SearchStrategy[Any], count: int, at_seed: int) -> list[Any]:
    """`count` examples of `strategy`, reproducibly from `at_seed`, outside any test.

    Runs hypothesis's generation phase only, with no example database, so that one run's failing
    example never replays in another.
    """
    examples: list[Any] = []

    @seed(at_seed)
    @settings(max_examples=count, database=None, derandomize=False, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(example: Any) -> None:
        examples.append(example)

    with cache_outside_cwd():
        collect()
    return examples[:count]


def cache_dir() -> Path:
    """Where hypothesis keeps what it caches while gradcheck draws points (the constants it
    reads from the source of loaded modules): the user's cache folder, not the current one."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "gradcheck" / "hypothesis"


@contextmanager
def cache_outside_cwd() -> Iterator[None]:
    """hypothesis writes its cache to `.hypothesis/` in the current folder, so grading a
    student's repository or a course folder would leave one there. While points are drawn, its
    home is gradcheck's cache folder instead, unless the user chose one (the
    HYPOTHESIS_STORAGE_DIRECTORY variable, or `set_hypothesis_home_dir`); then it is kept."""
    home = storage_directory(intent_to_write=False).home_directory
    if home != Path.cwd() / ".hypothesis":
        yield
        return
    set_hypothesis_home_dir(cache_dir())
    try:
        yield
    finally:
        set_hypothesis_home_dir(home)
