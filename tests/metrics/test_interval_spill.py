"""Closed intervals kept in a temporary file answer every read as keeping them in memory does."""

from __future__ import annotations

from speclab.metrics.aggregator import Aggregator
from speclab.metrics.interval_spill import SpilledIntervalStore

from .test_retention import traffic


def _pair(retain: int | None) -> tuple[Aggregator, Aggregator]:
    variants, classes = ["base", "k3"], ["qa", "tool", "code"]
    memory = Aggregator(variants, classes, retain_intervals=retain)
    spilled = Aggregator(variants, classes, retain_intervals=retain, store=SpilledIntervalStore(recent=3))
    for now, batch in traffic(11, 60, 12, variants, classes, late_every=7):
        for agg in (memory, spilled):
            agg.add_records(batch)
            agg.tick(now)
    return memory, spilled


def test_windows_intervals_and_late_records_read_the_same() -> None:
    memory, spilled = _pair(None)
    assert spilled.late_records == memory.late_records > 0
    for agg in (memory, spilled):
        agg.finish(61.0)
    assert spilled.stored_intervals == memory.stored_intervals == memory.last_closed_interval + 1
    for lo, hi in [(0, 0), (5, 5), (3, 40), (0, memory.last_closed_interval), (58, 70)]:
        assert spilled.window_by_epoch(lo, hi) == memory.window_by_epoch(lo, hi)
    def dump(agg: Aggregator) -> list[tuple[int, float, float, str, str]]:
        return [(i, s, e, tag, h.encoded) for i, s, e, tag, h in agg.iter_closed_intervals(since=9)]
    assert dump(spilled) == dump(memory)
    assert spilled.snapshot(61.0, finished=True) == memory.snapshot(61.0, finished=True)


def test_retention_drops_the_same_intervals() -> None:
    memory, spilled = _pair(20)
    assert (spilled.first_retained_interval, spilled.stored_intervals) == (
        memory.first_retained_interval, memory.stored_intervals)
    first = memory.first_retained_interval
    assert first > 0
    assert spilled.window(first, first + 5) == memory.window(first, first + 5)
