"""The kit's small pure pieces: durations, synthetic counters and their integration over windows."""

from __future__ import annotations

import pytest

from speclab.monitoring.promql import format_duration, parse_duration
from speclab.monitoring.synthetic import Segment, Server, SpecRates, counter_values, totals


@pytest.mark.parametrize(("text", "seconds"), [("15s", 15), ("1m", 60), ("4h", 14400), ("90s", 90)])
def test_durations_round_trip(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds
    assert parse_duration(format_duration(seconds)) == seconds
    assert format_duration(seconds) == text


@pytest.mark.parametrize("bad", ["", "0s", "1.5m", "1d", "15", "-1m"])
def test_bad_durations_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(bad)


def test_counter_values_are_continuous_across_segments() -> None:
    assert counter_values(15, [(5.0, 30), (1.0, 30)]) == "0+75x2 165+15x1"


def test_totals_integrate_only_the_window() -> None:
    a = SpecRates(drafted=5.0, accepted=3.0, drafts=2.0, per_pos=(2.0, 1.0), finished=0.5)
    b = SpecRates(drafted=5.0, accepted=1.0, drafts=2.0, per_pos=(1.0, 0.0), finished=0.5)
    server = Server("x:1", "0", (Segment(a, 60), Segment(b, 60)))
    t = totals([server], end_s=120, window_s=90)
    assert (t.drafted, t.accepted, t.per_pos) == (450.0, 30 * 3.0 + 60 * 1.0, (120.0, 30.0))
    assert t.acceptance_length == 1 + 150 / 180


def test_impossible_rates_are_refused() -> None:
    with pytest.raises(ValueError, match="add up"):
        SpecRates(drafted=5.0, accepted=3.0, drafts=2.0, per_pos=(1.0, 1.0), finished=0.5)
    with pytest.raises(ValueError, match="prefix"):
        SpecRates(drafted=5.0, accepted=3.0, drafts=2.0, per_pos=(1.0, 2.0), finished=0.5)
