"""Tolerances: how close a found value must be to an expected one, in the grader and in the
exercise format (`tolerance: {analytic: .., fd: ..}`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    """`|found - expected| <= atol + rtol * |expected|`; both parts are needed near zero."""

    atol: float
    rtol: float

    def close(self, found: np.ndarray, expected: np.ndarray) -> np.ndarray:
        """Elementwise: `found` is within tolerance of `expected`; non-finite values must be equal
        (NaN to NaN, infinities of the same sign)."""
        found, expected = np.asarray(found, np.float64), np.asarray(expected, np.float64)
        with np.errstate(all="ignore"):
            near = np.abs(found - expected) <= self.atol + self.rtol * np.abs(expected)
        return np.where(np.isfinite(found) & np.isfinite(expected), near, same(found, expected))

    def close_number(self, found: float, expected: float) -> bool:
        """`close` of two numbers, without arrays: the localisation compares a deep chain's
        12,000 nodes one by one, and an array each costs a hundred times the arithmetic."""
        found, expected = float(found), float(expected)
        if math.isfinite(found) and math.isfinite(expected):
            return abs(found - expected) <= self.atol + self.rtol * abs(expected)
        return found == expected or math.isnan(found) and math.isnan(expected)

    def agree(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Symmetric closeness, for two oracles (neither is the reference)."""
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        with np.errstate(all="ignore"):
            near = np.abs(a - b) <= self.atol + self.rtol * np.maximum(np.abs(a), np.abs(b))
        return np.where(np.isfinite(a) & np.isfinite(b), near, same(a, b))


def same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact equality in which NaN equals NaN (and an infinity only the same infinity)."""
    return (np.isnan(a) & np.isnan(b)) | (a == b)


@dataclass(frozen=True)
class Tolerances:
    """One tolerance between analytic answers, a looser one against finite differences."""

    analytic: Tolerance = Tolerance(atol=1e-12, rtol=1e-9)
    fd: Tolerance = Tolerance(atol=1e-6, rtol=1e-5)
