"""The cumulative view: every measured record since the end of warm-up, per (variant, epoch, class).

Kept live (late records included) rather than merged from stored intervals, with percentiles
cached per cell until new records arrive. Only this view counts the Prometheus buckets of its
per-class histograms (``Percentiles.buckets``): counters and histograms since the start are what
speclab's exporter serves. Rates are over each epoch's measured traffic, taken from
its records: from the earliest intended time of a non-warm-up request to ``now`` (to its last
finish once the epoch ended or the run finished). The run clock's zero is not that start: worker
start-up, warm-up by request count and, with ``--sequential``, the other variants' phases all come
before it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from speclab.model.names import CountSource
from speclab.model.records import RequestRecord
from speclab.model.snapshot import ALL_CLASSES, ClassStats, Percentiles, VariantStats

from .cells import Cell, Counts, HistogramPool, class_stats, percentiles_by_metric

Key = tuple[str, int, str]  # (variant, epoch, class)
EpochKey = tuple[str, int]


class CumulativeView:
    def __init__(self, pool: HistogramPool) -> None:
        self._pool = pool
        self._cells: dict[Key, Cell] = {}
        self._span: dict[EpochKey, tuple[float, float]] = {}  # -> (first intended, last finish)
        self._dirty: set[Key] = set()
        self._pct_cache: dict[Key, dict[str, Percentiles]] = {}
        self._all_cache: dict[EpochKey, dict[str, Percentiles]] = {}

    def add(self, key: Key, record: RequestRecord, finished_at: float) -> None:
        self._cells.setdefault(key, Cell()).add_record(record, self._pool)
        self._dirty.add(key)
        span_key = (key[0], key[1])
        first, last = self._span.get(span_key, (record.intended, finished_at))
        self._span[span_key] = (min(first, record.intended), max(last, finished_at))

    def _window(self, key: EpochKey, now: float, ended: bool) -> float:
        span = self._span.get(key)
        if span is None:
            return 0.0
        first, last = span
        return max(0.0, (last if ended else max(now, last)) - first)

    def stats(
        self,
        keys: Sequence[EpochKey],
        classes: Sequence[str],
        now: float,
        finished: bool,
        ended: Callable[[EpochKey], bool],
        server: Callable[[EpochKey], dict[str, Percentiles]],
        build: Callable[[EpochKey, dict[str, ClassStats]], VariantStats],
    ) -> dict[EpochKey, VariantStats]:
        """``VariantStats`` for each key; ``ended(key)`` says whether that epoch is over."""
        for key in self._dirty:
            self._pct_cache[key] = percentiles_by_metric([self._cells[key].hists], buckets=True)
            self._all_cache.pop((key[0], key[1]), None)
        self._dirty.clear()
        out: dict[EpochKey, VariantStats] = {}
        for epoch_key in keys:
            variant, epoch = epoch_key
            window_s = self._window(epoch_key, now, finished or ended(epoch_key))
            rows: dict[str, ClassStats] = {}
            total = Counts()
            for prompt_class in classes:
                key = (variant, epoch, prompt_class)
                live = self._cells.get(key)
                counts = live.counts if live is not None else Counts()
                total.merge(counts)
                rows[prompt_class] = class_stats(counts, self._pct_cache.get(key, {}), window_s, CountSource.NONE.value)
            latency_all = self._all_cache.get(epoch_key)
            if latency_all is None:
                groups = [c.hists for k, c in self._cells.items() if (k[0], k[1]) == epoch_key]
                latency_all = self._all_cache[epoch_key] = percentiles_by_metric(groups)
            fallback = CountSource.NONE.value
            if total.requests and not total.timed_exact:  # no per-request timing: the server histograms
                measured = server(epoch_key)
                if measured:
                    latency_all, fallback = {**latency_all, **measured}, CountSource.SERVER.value
            rows[ALL_CLASSES] = class_stats(total, latency_all, window_s, fallback)
            out[epoch_key] = build(epoch_key, rows)
        return out
