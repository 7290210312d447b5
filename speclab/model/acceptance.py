"""The acceptance definitions of DESIGN.md, written once: every layer computes them through here.

``histogram[j]`` counts verify steps that accepted exactly ``j`` drafts (the bonus token excluded).
"""

from __future__ import annotations

from collections.abc import Sequence


def acceptance_length(steps: int, accepted: int) -> float | None:
    """1 + accepted / steps: tokens per verify step, bonus token included."""
    return 1.0 + accepted / steps if steps else None


def acceptance_rate(accepted: int, drafted: int) -> float | None:
    return accepted / drafted if drafted else None


def rejection_rate(accepted: int, drafted: int) -> float | None:
    return 1.0 - accepted / drafted if drafted else None


def add_histogram(target: list[int], other: Sequence[int]) -> None:
    """Element-wise ``target += other``, growing ``target`` to the longer length."""
    if len(other) > len(target):
        target.extend([0] * (len(other) - len(target)))
    for j, n in enumerate(other):
        target[j] += n


def steps_accepting_position(histogram: Sequence[int]) -> list[int]:
    """Per draft position i, the steps whose drafts 0..i were all accepted (vLLM's per_pos counter):
    a step that accepted exactly j drafts accepted every position below j."""
    return [sum(histogram[i + 1 :]) for i in range(len(histogram) - 1)]
