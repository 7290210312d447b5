from __future__ import annotations

import gc
import random
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from speclab.metrics.aggregator import Aggregator
from speclab.model.records import RequestRecord, SpecCounts
from speclab.recording.reader import read_recording
from speclab.recording.writer import RecordingWriter

QUARTER = 0.25  # the live pump's snapshot period


def make_record(rng: random.Random, n: int, variant: str, cls: str, done: float, *, warmup: bool = False) -> RequestRecord:
    sent = done - rng.uniform(0.05, 1.5)
    r = RequestRecord(request_id=f"r{n}", variant=variant, prompt_class=cls, intended=sent - rng.expovariate(300), sent=sent)
    r.warmup = warmup
    r.first_token = sent + rng.lognormvariate(-3, 0.6)
    if rng.random() < 0.03:
        r.error_kind = rng.choice(["timeout", "http_5xx"])
        return r
    r.last_token = done - 0.001
    r.done = done
    r.output_tokens = rng.randrange(8, 200)
    hist = [rng.randrange(5) for _ in range(4)]
    r.spec = SpecCounts(steps=sum(hist), drafted=3 * sum(hist), accepted=sum(j * c for j, c in enumerate(hist)),
                        histogram=hist, num_spec_tokens=3, source="exact")
    if cls == "tool":
        r.schema_valid = rng.random() < 0.9
    return r


def traffic(seed: int, seconds: int, per_quarter: int, variants: list[str], classes: list[str],
            late_every: int = 0) -> Iterator[tuple[float, list[RequestRecord]]]:
    """Batches as the pump sees them: each quarter second, records that finished in it (a few
    warm-up ones first, and every ``late_every`` batches one that finished seconds ago)."""
    rng = random.Random(seed)
    n = 0
    for step in range(1, int(seconds / QUARTER) + 1):
        now = step * QUARTER
        batch = []
        for _ in range(per_quarter):
            variant, cls = rng.choice(variants), rng.choice(classes)
            batch.append(make_record(rng, n, variant, cls, now - rng.uniform(0, QUARTER), warmup=now < 3))
            n += 1
        if late_every and step % late_every == 0 and now > 10:
            batch.append(make_record(rng, n, rng.choice(variants), rng.choice(classes), now - rng.uniform(2, 9)))
            n += 1
        yield now, batch


def test_cumulative_with_retention_equals_keeping_everything() -> None:
    variants, classes = ["base", "k3"], ["qa", "tool", "code"]
    retain = 50
    everything = Aggregator(variants, classes)
    bounded = Aggregator(variants, classes, retain_intervals=retain)
    for now, batch in traffic(1, 800, 1, variants, classes, late_every=7):
        for agg in (everything, bounded):
            agg.add_records(batch)
            agg.tick(now)
        assert bounded.stored_intervals <= retain + 1
        if now % 200 == 0:
            assert bounded.snapshot(now).cumulative == everything.snapshot(now).cumulative
    assert everything.stored_intervals == everything.last_closed_interval + 1
    assert bounded.late_records == everything.late_records > 0
    end = 800.6
    final, final_all = bounded.snapshot(end, finished=True), everything.snapshot(end, finished=True)
    assert final.cumulative == final_all.cumulative
    assert final.cumulative["k3"].total.requests > 1200
    first, last = bounded.first_retained_interval, bounded.last_closed_interval
    assert last - first + 1 == bounded.stored_intervals
    assert bounded.window(first, last) == everything.window(first, last)
    assert bounded.window(last, last) == everything.window(last, last)


def pump_loop(agg: Aggregator, steps: Iterator[tuple[float, list[RequestRecord]]], writer: RecordingWriter) -> float:
    """What the live session's pump does each quarter second: tick, snapshot, write what closed."""
    now = 0.0
    for now, batch in steps:
        agg.add_records(batch)
        agg.tick(now)
        agg.snapshot(now)
        writer.write_closed_intervals(agg)
    return now


def test_recorder_after_each_tick_sees_every_interval(tmp_path: Path) -> None:
    variants, classes = ["base", "k3"], ["qa", "tool"]
    retain = 5
    agg = Aggregator(variants, classes, retain_intervals=retain)
    everything = Aggregator(variants, classes)
    writer = RecordingWriter(tmp_path / "rec", {"variants": variants, "classes": classes, "interval_s": 1.0})
    batches = list(traffic(2, 120, 2, variants, classes))
    for _, batch in batches:
        everything.add_records(batch)
    now = pump_loop(agg, iter(batches[:160]), writer)  # 40 s of steady traffic
    # the event loop stalls for 30 s: one tick closes far more intervals than are retained
    stalled = [(t, b) for t, b in batches[160:280]]
    agg.add_records([r for _, b in stalled for r in b])
    now = stalled[-1][0]
    before = agg.last_closed_interval
    agg.tick(now)
    agg.snapshot(now)
    assert agg.last_closed_interval - before > retain
    writer.write_closed_intervals(agg)
    now = pump_loop(agg, iter(batches[280:]), writer)
    agg.snapshot(now + 0.6, finished=True)
    writer.write_closed_intervals(agg)
    writer.close(end_s=now + 0.6)
    everything.finish(now + 0.6)
    assert agg.stored_intervals <= retain + 1 < agg.last_closed_interval
    recorded = {(i.index, i.tag, i.encoded) for i in read_recording(tmp_path / "rec").intervals}
    expected = {(index, tag, hist.encoded) for index, _, _, tag, hist in everything.iter_closed_intervals()}
    assert len(expected) > 100 * len(variants)
    assert recorded == expected


def test_reading_too_rarely_is_an_error_not_a_gap() -> None:
    agg = Aggregator(["k3"], ["qa"], retain_intervals=3)
    for now, batch in traffic(3, 12, 1, ["k3"], ["qa"]):
        agg.add_records(batch)
        agg.tick(now)
    assert agg.first_retained_interval > 0
    with pytest.raises(ValueError, match=r"intervals 0\.\.\d+ were dropped .* read at least every 3 intervals"):
        agg.iter_closed_intervals(since=-1)
    since = agg.first_retained_interval - 1
    indices = {item[0] for item in agg.iter_closed_intervals(since=since)}
    assert indices == set(range(agg.first_retained_interval, agg.last_closed_interval + 1))


def test_window_over_dropped_intervals_raises() -> None:
    agg = Aggregator(["k3"], ["qa"], retain_intervals=4)
    for now, batch in traffic(4, 20, 2, ["k3"], ["qa"]):
        agg.add_records(batch)
        agg.tick(now)
    first = agg.first_retained_interval
    assert first > 10
    with pytest.raises(ValueError, match=rf"window\(0, {first}\): intervals before {first} are no longer kept"):
        agg.window(0, first)
    with pytest.raises(ValueError, match="retain_intervals=4"):
        agg.window(first - 1, first - 1)
    assert agg.window(first, agg.last_closed_interval)["k3"].total.requests > 0


def test_late_record_for_a_dropped_interval_counts_in_cumulative_only() -> None:
    rng = random.Random(5)
    agg = Aggregator(["k3"], ["qa"], retain_intervals=2)
    agg.add_records([make_record(rng, 0, "k3", "qa", 30.5)])
    agg.tick(40.0)
    assert agg.first_retained_interval == 0  # closed just now: kept for 2 s from here
    agg.tick(42.0)
    assert agg.first_retained_interval == 39
    late = make_record(rng, 1, "k3", "qa", 2.5)
    agg.add_records([late])
    snap = agg.snapshot(42.0)
    assert agg.late_records == 1
    assert snap.cumulative["k3"].total.requests + sum(snap.cumulative["k3"].total.errors.values()) == 2


def test_retain_must_be_positive_and_none_keeps_all() -> None:
    with pytest.raises(ValueError, match="retain_intervals must be at least 1"):
        Aggregator(["k3"], ["qa"], retain_intervals=0)
    agg = Aggregator(["k3"], ["qa"])
    agg.tick(500.0)
    assert agg.stored_intervals == 499 and agg.first_retained_interval == 0


def growth_kib(retain: int | None, seconds: int, settle_s: int) -> float:
    """KiB the aggregator grew between ``settle_s`` and ``seconds`` of 20 records/s (garbage collected
    at both readings). Tracing starts at once and the first reading waits until the retention window
    and the histogram pool are made of traced blocks, so what is dropped after it is counted as freed."""
    variants, classes = ["k3"], ["qa", "tool"]
    agg = Aggregator(variants, classes, retain_intervals=retain)
    first = 0
    tracemalloc.start()
    try:
        for now, batch in traffic(6, seconds, 5, variants, classes):
            agg.add_records(batch)
            agg.tick(now)
            if now == settle_s:
                gc.collect()
                first = tracemalloc.get_traced_memory()[0]
        gc.collect()
        last = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    if retain is not None:
        assert agg.stored_intervals <= retain + 1
    return (last - first) / 1024


def test_memory_stays_bounded_over_simulated_time() -> None:
    kept_all = growth_kib(None, 420, 120)
    bounded = growth_kib(60, 420, 120)
    assert kept_all > 300  # keeping 5 min costs over 1 KiB per interval: the measurement sees growth
    assert bounded < 32, f"grew {bounded:.0f} KiB over 300 intervals with retention (without: {kept_all:.0f} KiB)"
