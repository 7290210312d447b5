"""Queue, prefill and decode time from a server's ``/metrics`` histograms, where responses carry no
per-request timing (vLLM without ``--enable-per-request-metrics``).

The scraper turns each scrape into per-bucket deltas; these are summed per (variant, config epoch)
and read as percentiles the way Prometheus's ``histogram_quantile`` does: linear inside the bucket
holding the rank, so every value is an estimate at bucket resolution. They are server-wide (no
prompt class, warm-up included), so they appear only in a variant's ``all`` row, labelled
``server_metrics``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from speclab.model.names import (
    PERCENTILE_POINTS,
    PROM_DECODE_TIME,
    PROM_PREFILL_TIME,
    PROM_QUEUE_TIME,
    Metric,
)
from speclab.model.snapshot import Percentiles

HISTOGRAM_METRICS: dict[str, str] = {
    PROM_QUEUE_TIME: Metric.SERVER_QUEUE.value,
    PROM_PREFILL_TIME: Metric.SERVER_PREFILL.value,
    PROM_DECODE_TIME: Metric.SERVER_DECODE.value,
}


class ServerHistogram:
    """Summed bucket deltas of one ``/metrics`` histogram (seconds)."""

    def __init__(self) -> None:
        self.buckets: dict[float, float] = {}  # upper bound -> count in that bucket
        self.count = 0.0
        self.sum = 0.0

    def add(self, delta: Mapping[str, Any]) -> None:
        for le, n in delta.get("buckets") or ():
            self.buckets[float(le)] = self.buckets.get(float(le), 0.0) + float(n)
        self.count += float(delta.get("count") or 0.0)
        self.sum += float(delta.get("sum") or 0.0)

    def percentiles(self) -> Percentiles:
        total = sum(self.buckets.values())
        if total <= 0:
            return Percentiles()
        edges = sorted(self.buckets)
        values = tuple(round(self._quantile(q / 100.0, edges, total) * 1e6) for q in PERCENTILE_POINTS)
        mean = self.sum / self.count * 1e6 if self.count else 0.0
        return Percentiles(count=round(total), mean=mean, values=values)

    def _quantile(self, q: float, edges: list[float], total: float) -> float:
        rank, below, lower = q * total, 0.0, 0.0
        last_finite = max((e for e in edges if math.isfinite(e) and self.buckets[e] > 0), default=0.0)
        for upper in edges:
            n = self.buckets[upper]
            if n > 0 and below + n >= rank:
                if not math.isfinite(upper):
                    return last_finite or lower  # above the top bucket: its bound is all we know
                return lower + (upper - lower) * max(0.0, rank - below) / n
            below += n
            if math.isfinite(upper):
                lower = upper
        return last_finite


class ServerTiming:
    """Per (variant, epoch), the server's queue/prefill/decode histograms summed from samples."""

    def __init__(self) -> None:
        self._hists: dict[tuple[str, int], dict[str, ServerHistogram]] = {}

    def add(self, key: tuple[str, int], histograms: Mapping[str, Mapping[str, Any]]) -> None:
        for prom, metric in HISTOGRAM_METRICS.items():
            delta = histograms.get(prom)
            if delta and delta.get("count"):
                self._hists.setdefault(key, {}).setdefault(metric, ServerHistogram()).add(delta)

    def latency(self, key: tuple[str, int]) -> dict[str, Percentiles]:
        return {m: h.percentiles() for m, h in self._hists.get(key, {}).items() if h.count > 0}
