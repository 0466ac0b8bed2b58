"""Bounded memos of what a stage works out again and again from the same objects: a program's
steps, a request built from an exercise and its points, a request's frame, an exercise's shares
of points.

Kept by identity, not by value: the objects are gradcheck's own (a bank's exercises, the
requests it builds), and comparing them by value would cost what the memo saves. Names and
numbers among the sources are compared by value. Each value is kept with its sources, so that
no other object takes their ids while it is remembered; past `size`, the oldest is forgotten.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

V = TypeVar("V")
_BY_VALUE = (str, int)


class Memo(Generic[V]):
    """Values (never None) remembered for tuples of sources."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._kept: dict[tuple[Any, ...], tuple[tuple[Any, ...], V]] = {}

    def get(self, *sources: Any) -> V | None:
        """What was kept for these very `sources`, or None. (Loops, not generators: a worker
        asks it at every point of every request.)"""
        kept = self._kept.get(_key(sources))
        if kept is None:
            return None
        for old, new in zip(kept[0], sources):
            if old is not new and type(old) not in _BY_VALUE:
                return None
        return kept[1]

    def keep(self, value: V, *sources: Any) -> V:
        """Remember `value` for `sources`, and return it."""
        if len(self._kept) >= self.size:
            del self._kept[next(iter(self._kept))]
        self._kept[_key(sources)] = (sources, value)
        return value


def _key(sources: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple([source if type(source) in _BY_VALUE else id(source) for source in sources])
