"""Repeats, their spread, and when a difference is a win rather than noise.

A measure over repeats is its median with the range it came from. One arm beats another only
when the two ranges do not overlap *and* the medians differ by more than the tie tolerance
(1% by default, vLLM's tuner's tolerance); anything less is a tie. With one repeat the spread is
unmeasured, so only the tolerance separates them and the verdict says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Verdict = Literal["win", "tie", "loss", "unmeasured"]


@dataclass(frozen=True, slots=True)
class Spread:
    """A measure across repeats: median, min, max and how many repeats had it."""

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Spread | None:
        got = [float(v) for v in values if v is not None]
        if not got:
            return None
        return cls(statistics.median(got), min(got), max(got), len(got))

    @property
    def relative(self) -> float | None:
        """Half the range over the median: the repeats' noise as a fraction."""
        return (self.high - self.low) / 2 / abs(self.median) if self.median else None

    def as_dict(self) -> dict[str, Any]:
        return {"median": round(self.median, 6), "min": round(self.low, 6), "max": round(self.high, 6), "n": self.n,
                "relative_spread": None if self.relative is None else round(self.relative, 6)}


@dataclass(frozen=True, slots=True)
class Comparison:
    """``arm`` against ``other`` on one measure: the verdict for ``arm`` and the ratio of medians."""

    verdict: Verdict
    ratio: float | None  # arm / other, oriented so > 1 means arm is better
    arm: Spread | None
    other: Spread | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "ratio": None if self.ratio is None else round(self.ratio, 6),
                "arm": None if self.arm is None else self.arm.as_dict(),
                "baseline": None if self.other is None else self.other.as_dict(), "reason": self.reason}


def compare(arm: Spread | None, other: Spread | None, *, higher_is_better: bool, tolerance: float) -> Comparison:
    """Whether ``arm`` beats ``other`` beyond the repeats' noise and ``tolerance``."""
    if arm is None or other is None or arm.median <= 0 or other.median <= 0:
        return Comparison("unmeasured", None, arm, other, "not measured in both cells")
    ratio = arm.median / other.median if higher_is_better else other.median / arm.median
    overlap = arm.low <= other.high and other.low <= arm.high
    if abs(ratio - 1.0) <= tolerance:
        return Comparison("tie", ratio, arm, other, f"medians within {100 * tolerance:g}%")
    if overlap and min(arm.n, other.n) > 1:
        return Comparison("tie", ratio, arm, other, "within the repeats' spread (their ranges overlap)")
    verdict: Verdict = "win" if ratio > 1.0 else "loss"
    why = f"{100 * (ratio - 1):+.1f}%"
    why += ", outside the repeats' spread" if min(arm.n, other.n) > 1 else ", one repeat: spread unmeasured"
    return Comparison(verdict, ratio, arm, other, why)
