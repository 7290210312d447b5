"""What the metrics layer costs: one-pass percentiles against the library's, and a full snapshot.

Run: .venv/bin/python bench/bench_percentiles.py [--variants 4 --classes 5 --rate 200]

Reports median wall times over repeats (this host's CPUs are shared, so medians, not means):
- percentiles at all PERCENTILE_POINTS of one histogram: hdrh ``get_value_at_percentile`` per point,
  hdrh ``get_percentile_to_value_dict``, and speclab's one-pass ``LatencyHistogram.percentiles``;
- ``Aggregator.snapshot`` at 4 Hz with every cumulative cell changed since the previous snapshot
  (the worst case: traffic in every variant × class), and with nothing changed;
- closing one interval (summary + encoding of every cell), and merging a 10-interval window;
- with ``--memory-seconds S``: what the aggregator keeps (tracemalloc, after garbage collection)
  over S simulated seconds at ``--memory-rate`` records/s, keeping every interval and with
  ``retain_intervals=--retain`` (the live pump's tick every 0.25 s, no snapshots).

``--retain N`` also runs the snapshot benchmark with ``Aggregator(retain_intervals=N)``.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable

from speclab.metrics.aggregator import Aggregator
from speclab.metrics.hdr import LatencyHistogram
from speclab.model.names import PERCENTILE_POINTS
from speclab.model.records import RequestRecord, SpecCounts


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def make_record(rng: random.Random, n: int, variant: str, cls: str, done: float) -> RequestRecord:
    sent = done - rng.uniform(0.2, 2.0)
    intended = sent - rng.expovariate(500)
    first = sent + rng.lognormvariate(-3, 0.7)
    tokens = rng.randrange(16, 256)
    hist = [rng.randrange(8), rng.randrange(8), rng.randrange(8), rng.randrange(8)]
    return RequestRecord(
        request_id=f"r{n}",
        variant=variant,
        prompt_class=cls,
        intended=intended,
        sent=sent,
        first_token=first,
        last_token=done - 0.001,
        done=done,
        output_tokens=tokens,
        server_queue_ms=rng.expovariate(1 / 3.0),
        server_prefill_ms=rng.uniform(10, 60),
        server_decode_ms=(done - first) * 1000 * 0.9,
        spec=SpecCounts(
            steps=sum(hist),
            drafted=3 * sum(hist),
            accepted=sum(j * c for j, c in enumerate(hist)),
            histogram=hist,
            num_spec_tokens=3,
            source="exact",
        ),
        schema_valid=rng.random() < 0.97 if cls == "tool" else None,
    )


def bench_single(rng: random.Random, repeats: int) -> None:
    h = LatencyHistogram()
    for _ in range(20_000):
        h.record_us(rng.lognormvariate(11, 1.2))
    raw = h.raw
    per_call = median_ms(lambda: [raw.get_value_at_percentile(p) for p in PERCENTILE_POINTS], max(3, repeats // 10))
    as_dict = median_ms(lambda: raw.get_percentile_to_value_dict(list(PERCENTILE_POINTS)), max(3, repeats // 10))
    one_pass = median_ms(h.percentiles, repeats * 10)
    assert list(h.percentiles().values) == [raw.get_value_at_percentile(p) for p in PERCENTILE_POINTS]
    print(f"one histogram, 20000 values, {len(PERCENTILE_POINTS)} points:")
    print(f"  hdrh get_value_at_percentile x{len(PERCENTILE_POINTS)}  {per_call:8.3f} ms")
    print(f"  hdrh get_percentile_to_value_dict  {as_dict:8.3f} ms")
    print(f"  speclab one-pass percentiles()     {one_pass:8.3f} ms   (values identical)")
    print(f"  encode {median_ms(h.encode, repeats):.3f} ms, decode {median_ms(lambda: LatencyHistogram.decode(h.encode()), repeats):.3f} ms"
          f" (incl. encode), encoded size {len(h.encode())} B")


def bench_snapshot(rng: random.Random, variants: int, classes: int, rate: float, seconds: int, repeats: int,
                   retain: int | None = None) -> None:
    names_v = [f"v{i}" for i in range(variants)]
    names_c = ["tool", *[f"c{i}" for i in range(classes - 1)]]
    agg = Aggregator(names_v, names_c, retain_intervals=retain)
    n = 0
    quarter = 0.25
    dirty_times: list[float] = []
    clean_times: list[float] = []
    close_times: list[float] = []
    per_quarter = max(variants * classes, int(rate * quarter))
    for step in range(1, int(seconds / quarter) + 1):
        now = step * quarter
        batch = []
        for i in range(per_quarter):
            batch.append(make_record(rng, n, names_v[i % variants], names_c[(i // variants) % classes], now - rng.uniform(0, quarter)))
            n += 1
        agg.add_records(batch)
        closes = agg.last_closed_interval
        start = time.perf_counter()
        agg.tick(now)
        tick_ms = (time.perf_counter() - start) * 1000.0
        if agg.last_closed_interval != closes:
            close_times.append(tick_ms)
        start = time.perf_counter()
        snap = agg.snapshot(now)
        dirty_times.append((time.perf_counter() - start) * 1000.0)
        start = time.perf_counter()
        agg.snapshot(now)
        clean_times.append((time.perf_counter() - start) * 1000.0)
    cells = variants * (classes + 1) * len(snap.cumulative[names_v[0]].total.latency)
    last = agg.last_closed_interval
    first = max(agg.first_retained_interval, last - 9)
    window = median_ms(lambda: agg.window(first, last), max(3, repeats // 10))
    print(f"aggregator: {variants} variants x {classes} classes (+ all) x 9 metrics = {cells} percentile rows,"
          f" {per_quarter * 4} records/s, {seconds} s, retain_intervals={retain} ({agg.stored_intervals} stored)")
    print(f"  snapshot, every cell changed     median {statistics.median(dirty_times):7.3f} ms  max {max(dirty_times):7.3f} ms")
    print(f"  snapshot, nothing changed        median {statistics.median(clean_times):7.3f} ms")
    print(f"  tick closing one interval        median {statistics.median(close_times):7.3f} ms")
    print(f"  window of {last - first + 1} closed intervals    median {window:7.3f} ms")
    busy = 4 * statistics.median(dirty_times) + statistics.median(close_times)
    print(f"  => about {busy / 10:.1f}% of one core at 4 Hz snapshots")


def bench_memory(rng: random.Random, variants: int, classes: int, rate: float, seconds: int,
                 retain: int | None) -> tuple[float, int]:
    """MiB allocated while simulating ``seconds`` that the aggregator still holds, and intervals stored."""
    names_v = [f"v{i}" for i in range(variants)]
    names_c = ["tool", *[f"c{i}" for i in range(classes - 1)]]
    gc.collect()
    tracemalloc.start()
    try:
        agg = Aggregator(names_v, names_c, retain_intervals=retain)
        per_quarter = max(1, round(rate / 4))
        n = 0
        for step in range(1, seconds * 4 + 1):
            now = step * 0.25
            batch = []
            for _ in range(per_quarter):
                batch.append(make_record(rng, n, rng.choice(names_v), rng.choice(names_c), now - rng.uniform(0, 0.25)))
                n += 1
            agg.add_records(batch)
            agg.tick(now)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return held / 2**20, agg.stored_intervals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=4)
    parser.add_argument("--classes", type=int, default=5)
    parser.add_argument("--rate", type=float, default=200.0, help="records per second over all variants")
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--retain", type=int, default=None, help="Aggregator retain_intervals (default: keep all)")
    parser.add_argument("--memory-seconds", type=int, default=0, help="also measure memory over this many seconds")
    parser.add_argument("--memory-rate", type=float, default=20.0, help="records per second for --memory-seconds")
    args = parser.parse_args()
    rng = random.Random(7)
    bench_single(rng, args.repeats)
    bench_snapshot(rng, args.variants, args.classes, args.rate, args.seconds, args.repeats, args.retain)
    if args.memory_seconds:
        print(f"memory: {args.variants} variants x {args.classes} classes, {args.memory_rate:g} records/s,"
              f" {args.memory_seconds} s simulated")
        for retain in (None, args.retain if args.retain is not None else 3600):
            mib, stored = bench_memory(random.Random(11), args.variants, args.classes, args.memory_rate,
                                       args.memory_seconds, retain)
            print(f"  retain_intervals={retain!s:<5}  {mib:8.1f} MiB held, {stored} intervals stored")


if __name__ == "__main__":
    main()
