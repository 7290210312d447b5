"""What speclab's Prometheus exporter costs the process that aggregates.

1. The cumulative view's bucket counts: an aggregator over N records (3 variants × 4 classes, every
   latency metric) takes a snapshot after each batch of new records, with and without the bucket
   counts the exporter reads; per-snapshot time for both and their ratio.
2. One scrape: rendering the exposition of that final snapshot (prometheus_client's
   ``generate_latest`` over speclab's collector), its size and lines.

    .venv/bin/python bench/bench_exporter.py [--records 6000] [--batch 100] [--reps 20]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry, generate_latest

from speclab.metrics import cumulative
from speclab.metrics.aggregator import Aggregator
from speclab.metrics.exporter import SpeclabCollector
from speclab.model.records import RequestRecord, SpecCounts

VARIANTS = ("baseline", "k2", "k4")
CLASSES = ("qa", "tool", "long", "refusal")


def records(n: int, seed: int = 1) -> list[RequestRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        v = VARIANTS[i % 3]
        t = i * 0.01
        r = RequestRecord(request_id=f"r{i}", variant=v, prompt_class=CLASSES[i % 4], intended=t, sent=t + 0.001)
        e2e = rng.lognormvariate(-1.5, 0.8)
        r.first_token, r.last_token, r.done = t + e2e * 0.1, t + e2e, t + e2e
        r.output_tokens = 40
        r.server_queue_ms, r.server_prefill_ms, r.server_decode_ms = e2e * 50, e2e * 100, e2e * 800
        k = {"baseline": 0, "k2": 2, "k4": 4}[v]
        if k:
            r.spec = SpecCounts(steps=10, drafted=10 * k, accepted=6 * k, histogram=[2] + [0] * (k - 1) + [8],
                                num_spec_tokens=k, source="exact")
        out.append(r)
    return out


def per_snapshot_ms(recs: list[RequestRecord], batch: int, buckets: bool) -> float:
    agg = Aggregator(list(VARIANTS), list(CLASSES))
    original = cumulative.percentiles_by_metric

    def counted(groups: Any, buckets: bool = False) -> Any:
        return original(groups, buckets=buckets and with_buckets)

    with_buckets = buckets
    times = []
    with mock.patch.object(cumulative, "percentiles_by_metric", counted):
        for start in range(0, len(recs), batch):
            agg.add_records(recs[start:start + batch])
            t0 = time.perf_counter()
            agg.snapshot(recs[start].sent + 1.0)
            times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=6000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    recs = records(args.records)
    without = statistics.median(per_snapshot_ms(recs, args.batch, False) for _ in range(3))
    with_b = statistics.median(per_snapshot_ms(recs, args.batch, True) for _ in range(3))
    print(f"snapshot, median over {args.records // args.batch} snapshots of {args.batch} new records each: "
          f"{without:.2f} ms without bucket counts, {with_b:.2f} ms with (×{with_b / without:.2f})")
    agg = Aggregator(list(VARIANTS), list(CLASSES))
    agg.add_records(recs)
    collector = SpeclabCollector({"lab": "bench"})
    collector.update(agg.snapshot(recs[-1].done or 0.0, finished=True))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        body = generate_latest(registry)
        times.append(time.perf_counter() - t0)
    lines = body.count(b"\n")
    print(f"one scrape: {1000 * statistics.median(times):.2f} ms median (max {1000 * max(times):.2f} ms) to render "
          f"{len(body) / 1024:.0f} KiB, {lines} lines")


if __name__ == "__main__":
    main()
