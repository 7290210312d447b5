"""The acceptance definitions of docs/measurements.md, written once: every layer computes them through here.

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


def steps_drafting_position(
    steps: int, drafted: int, k: int, histogram: Sequence[int], per_step_drafted: Sequence[int] = ()
) -> tuple[list[int], bool]:
    """Per draft position i, the verify steps that drafted it, and whether that is exact.

    A step drafting d tokens drafts positions 0..d-1. Exact from the per-step drafted counts
    (vLLM's ``detailed`` mode), or when every step drafted all k. Otherwise some steps drafted
    fewer (the step's token budget, a short n-gram match) and the sums cannot say which: the
    shortfall is taken from the deepest positions first, never below the steps that accepted
    there (an accepted draft was drafted), which is an estimate.
    """
    if per_step_drafted:
        width = max(k, max(per_step_drafted))
        return [sum(1 for d in per_step_drafted if d > i) for i in range(width)], True
    k = k or max(len(histogram) - 1, 0)
    if not steps or not k:
        return [], True
    positions = [steps] * k
    short = steps * k - drafted
    if short <= 0:
        return positions, True
    floor = [steps, *steps_accepting_position(histogram)[1:k]]
    floor += [0] * (k - len(floor))
    for i in range(k - 1, -1, -1):
        take = min(short, positions[i] - floor[i])
        positions[i] -= take
        short -= take
    return positions, False

def per_k_counts(per_step_drafted: Sequence[int], per_step_accepted: Sequence[int]) -> list[list[int]]:
    """``[[k, steps, accepted], ...]`` (k ascending) from per-step counts: acceptance per k used."""
    table: dict[int, list[int]] = {}
    for drafted, accepted in zip(per_step_drafted, per_step_accepted, strict=False):
        row = table.setdefault(int(drafted), [0, 0])
        row[0] += 1
        row[1] += int(accepted)
    return [[k, steps, accepted] for k, (steps, accepted) in sorted(table.items())]


def add_per_k(target: dict[int, list[int]], rows: Sequence[Sequence[int]]) -> None:
    """``target[k] += [steps, accepted]`` for each ``[k, steps, accepted]`` row."""
    for k, steps, accepted in rows:
        row = target.setdefault(int(k), [0, 0])
        row[0] += int(steps)
        row[1] += int(accepted)
