"""The acceptance definitions of docs/measurements.md, on a hand-checked example."""

from __future__ import annotations

from speclab.model.acceptance import (
    acceptance_length,
    acceptance_rate,
    add_histogram,
    rejection_rate,
    steps_accepting_position,
)


def test_definitions_on_a_hand_checked_example() -> None:
    # k = 3; 10 verify steps accepting exactly 0, 1, 2, 3 drafts: 1, 2, 3, 4 times.
    histogram = [1, 2, 3, 4]
    steps, drafted = 10, 30
    accepted = sum(j * n for j, n in enumerate(histogram))  # 20
    assert acceptance_length(steps, accepted) == 3.0
    assert acceptance_rate(accepted, drafted) == 20 / 30
    assert rejection_rate(accepted, drafted) == 1 - 20 / 30
    assert steps_accepting_position(histogram) == [9, 7, 4]
    assert acceptance_length(0, 0) is None and acceptance_rate(0, 0) is None and rejection_rate(0, 0) is None


def test_histograms_add_element_wise_and_grow() -> None:
    target = [1, 2]
    add_histogram(target, [1, 1, 5])
    assert target == [2, 3, 5]
