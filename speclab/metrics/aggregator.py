"""Turns RequestRecords, ServerSamples and Events into immutable Snapshots, a few times a second.

Time is cut into 1 s intervals on the run clock; a record belongs to the interval in which it
finished. An interval closes ``close_delay_s`` after its end (records shipped from worker processes
arrive a little late), is summarised once into the ``last_interval`` view and then kept only in
encoded form, so any window of intervals merges losslessly on demand. The cumulative view (since
the end of warm-up) is kept live, with its percentiles cached per (variant, class) until new
records arrive. Warm-up records are measured — they show in ``last_interval`` — but stored apart
and excluded from cumulative views, windows and the intervals handed to the recorder.

The cumulative rates of a variant are over its measured traffic, taken from the records: from the
earliest intended time of a non-warm-up request to ``now`` (to the variant's last finish in the
finished snapshot). The run clock's zero is not that start: worker start-up, warm-up by request
count and, with ``--sequential``, the other variants' phases all come before it.

An all-day session bounds memory with ``retain_intervals``: a closed interval's encoded histograms
are dropped once it has been closed for ``retain_intervals`` intervals of run time. Nothing else
changes: the cumulative view never reads stored intervals (it is kept live, late records included),
so it stays exactly what keeping everything gives; ``window`` and ``iter_closed_intervals`` refuse,
with a ValueError, to answer for dropped intervals rather than quietly answer for fewer. Timing the
drop from when an interval closed (not from its index) means a consumer that reads after every
tick, like the recorder, sees each interval even when one tick closes many.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from speclab.model.names import PROM_QUEUE_TIME, CountSource
from speclab.model.records import Event, RequestRecord, ServerSample
from speclab.model.snapshot import ALL_CLASSES, ClassStats, ClientHealth, Percentiles, Snapshot, VariantStats

from .cells import Cell, Counts, HistogramPool, class_stats, finish_time, percentiles_by_metric
from .hdr import EncodedHistogram
from .hlog import make_tag

Key = tuple[str, str]  # (variant, class)


@dataclass(slots=True)
class _StoredCell:
    counts: Counts
    hists: dict[str, EncodedHistogram]


@dataclass(slots=True)
class _OpenInterval:
    index: int
    measured: dict[Key, Cell] = field(default_factory=dict)
    warmup: dict[Key, Cell] = field(default_factory=dict)


@dataclass(slots=True)
class _ClosedInterval:
    index: int
    start_s: float
    end_s: float
    closed_at: float  # run time when it closed; retention counts from here
    cells: dict[Key, _StoredCell] = field(default_factory=dict)


class Aggregator:
    """``warmup_s`` is kept for callers only: warm-up is decided per request (``RequestRecord.warmup``).

    ``retain_intervals``: None keeps every closed interval (recording, replay and reports rely on
    that); N keeps each for N × ``interval_s`` of run time after it closes, i.e. the newest N or so.
    """

    def __init__(
        self,
        variants: Sequence[str],
        classes: Sequence[str],
        *,
        interval_s: float = 1.0,
        simulated: bool = True,
        warmup_s: float = 0.0,
        close_delay_s: float = 0.5,
        retain_intervals: int | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        if retain_intervals is not None and retain_intervals < 1:
            raise ValueError("retain_intervals must be at least 1, or None to keep every interval")
        self.variants: list[str] = list(variants)
        self.classes: list[str] = list(classes)
        self.interval_s = interval_s
        self.simulated = simulated
        self.warmup_s = warmup_s
        self.close_delay_s = close_delay_s
        self.retain_intervals = retain_intervals
        self._pool = HistogramPool()
        self._open: dict[int, _OpenInterval] = {}
        self._closed: list[_ClosedInterval] = []
        self._next_close = 0  # index of the oldest interval not yet closed
        self._dropped_below = 0  # closed intervals with a smaller index were dropped by retention
        self._cumulative: dict[Key, Cell] = {}
        self._measured_span: dict[str, tuple[float, float]] = {}  # variant -> (first intended, last finish)
        self._dirty: set[Key] = set()
        self._pct_cache: dict[Key, dict[str, Percentiles]] = {}
        self._all_cache: dict[str, dict[str, Percentiles]] = {}
        self._last: dict[str, VariantStats] = {}
        self._servers: dict[str, ServerSample] = {}
        self._server_timing: set[str] = set()
        self._events: list[Event] = []
        self._health = ClientHealth()
        self._saturated: set[int] = set()
        self._now = 0.0
        self.late_records = 0

    # ---- inputs -------------------------------------------------------------------------------
    def interval_of(self, t: float) -> int:
        return max(0, math.floor(t / self.interval_s))

    def add_records(self, records: Iterable[RequestRecord]) -> None:
        for record in records:
            self._know(record.variant, record.prompt_class)
            key = (record.variant, record.prompt_class)
            finished_at = finish_time(record)
            index = self.interval_of(finished_at)
            if not record.warmup:
                self._cumulative.setdefault(key, Cell()).add_record(record, self._pool)
                self._dirty.add(key)
                first, last = self._measured_span.get(record.variant, (record.intended, finished_at))
                self._measured_span[record.variant] = (min(first, record.intended), max(last, finished_at))
            if index < self._next_close:
                self._add_late(index, key, record)
                continue
            interval = self._open.get(index)
            if interval is None:
                interval = self._open[index] = _OpenInterval(index)
            cells = interval.warmup if record.warmup else interval.measured
            cells.setdefault(key, Cell()).add_record(record, self._pool)

    def add_server_sample(self, sample: ServerSample) -> None:
        self._know(sample.variant, None)
        self._servers[sample.variant] = sample
        queue = sample.histograms.get(PROM_QUEUE_TIME)
        if sample.up and queue and queue.get("count"):
            self._server_timing.add(sample.variant)

    def add_event(self, event: Event) -> None:
        self._events.append(event)

    def set_health(self, health: ClientHealth, interval: int | None = None) -> None:
        """Latest client health; a saturated client marks ``interval`` (the interval the worker's
        report covers, ``WorkerHealth.interval``), else the interval of the last tick. The recorder
        keeps the report's interval, so pass it for live and replay to flag the same intervals."""
        self._health = health
        if health.saturated:
            self.mark_saturated(self.interval_of(self._now) if interval is None else interval)

    def mark_saturated(self, interval_index: int) -> None:
        self._saturated.add(interval_index)

    # ---- time ---------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        """Close every interval that ended at least ``close_delay_s`` before ``now``."""
        self._now = max(self._now, now)
        limit = math.floor((now - self.close_delay_s) / self.interval_s)  # intervals < limit are closable
        while self._next_close < limit:
            self._close(self._next_close, (self._next_close + 1) * self.interval_s)
        self._drop_expired()

    def finish(self, now: float) -> None:
        """Close everything up to ``now``, the last interval possibly shorter than the others."""
        self._now = max(self._now, now)
        last = max([self.interval_of(now), *self._open]) if self._open else self.interval_of(now)
        while self._next_close <= last:
            index = self._next_close
            self._close(index, max(min((index + 1) * self.interval_s, now), index * self.interval_s))
        self._drop_expired()

    def _close(self, index: int, end_s: float) -> None:
        interval = self._open.pop(index, _OpenInterval(index))
        start_s = index * self.interval_s
        window = end_s - start_s
        closed = _ClosedInterval(index, start_s, end_s, self._now)
        for key, cell in interval.measured.items():
            closed.cells[key] = _StoredCell(
                cell.counts.copy(), {m: EncodedHistogram.of(h) for m, h in cell.hists.items()}
            )
        self._last = self._stats([*interval.measured.items(), *interval.warmup.items()], window)
        for cell in [*interval.measured.values(), *interval.warmup.values()]:
            cell.release(self._pool)
        self._closed.append(closed)
        self._next_close = index + 1

    def _drop_expired(self) -> None:
        if self.retain_intervals is None:
            return
        horizon = self._now - self.retain_intervals * self.interval_s
        drop = 0
        while drop < len(self._closed) and self._closed[drop].closed_at <= horizon:
            drop += 1
        if drop:
            self._dropped_below = self._closed[drop - 1].index + 1
            del self._closed[:drop]

    def _add_late(self, index: int, key: Key, record: RequestRecord) -> None:
        self.late_records += 1
        if record.warmup:
            return
        offset = index - self._closed[0].index if self._closed else -1
        if offset < 0:
            return  # dropped by retention: the cumulative view already has it
        closed = self._closed[offset]
        stored = closed.cells.setdefault(key, _StoredCell(Counts(), {}))
        cell = Cell(stored.counts, {m: e.decode() for m, e in stored.hists.items()})
        cell.add_record(record, self._pool)
        stored.hists = {m: EncodedHistogram.of(h) for m, h in cell.hists.items()}

    # ---- outputs ------------------------------------------------------------------------------
    def snapshot(self, now: float, *, paused: bool = False, finished: bool = False) -> Snapshot:
        if finished:
            self.finish(now)
        else:
            self.tick(now)
        events, self._events = tuple(self._events), []
        return Snapshot(
            t=now,
            interval=self._next_close - 1,
            cumulative=self._cumulative_stats(now, finished),
            last_interval=dict(self._last),
            servers=dict(self._servers),
            health=self._health,
            events=events,
            saturated_intervals=tuple(sorted(self._saturated)),
            paused=paused,
            finished=finished,
            simulated=self.simulated,
        )

    def window(self, start_interval: int, end_interval: int) -> dict[str, VariantStats]:
        """Stats over closed intervals ``start_interval..end_interval`` (inclusive), warm-up excluded.

        Raises ValueError when the range reaches intervals already dropped by ``retain_intervals``.
        """
        if start_interval < self._dropped_below:
            raise ValueError(
                f"window({start_interval}, {end_interval}): intervals before {self._dropped_below} are no "
                f"longer kept (retain_intervals={self.retain_intervals}); the cumulative view still counts them"
            )
        chosen = [c for c in self._closed if start_interval <= c.index <= end_interval]
        merged: dict[Key, Cell] = {}
        for closed in chosen:
            for key, stored in closed.cells.items():
                cell = merged.setdefault(key, Cell())
                cell.counts.merge(stored.counts)
                for metric, encoded in stored.hists.items():
                    if metric not in cell.hists:
                        cell.hists[metric] = self._pool.get()
                    cell.hists[metric].merge(encoded.decode())
        window_s = (chosen[-1].end_s - chosen[0].start_s) if chosen else 0.0
        stats = self._stats(list(merged.items()), window_s)
        for cell in merged.values():
            cell.release(self._pool)
        return stats

    def iter_closed_intervals(
        self, since: int = -1
    ) -> Iterator[tuple[int, float, float, str, EncodedHistogram]]:
        """Closed intervals with index > ``since``, one item per (metric, class, variant) histogram.

        Raises ValueError (before yielding anything) when some of those were already dropped by
        ``retain_intervals``: the caller read too rarely, and a silent gap would corrupt a recording.
        """
        if since + 1 < self._dropped_below:
            raise ValueError(
                f"intervals {since + 1}..{self._dropped_below - 1} were dropped (retain_intervals="
                f"{self.retain_intervals}) before being read; read at least every {self.retain_intervals} intervals"
            )
        return self._iter_closed(since)

    def _iter_closed(self, since: int) -> Iterator[tuple[int, float, float, str, EncodedHistogram]]:
        for closed in self._closed:
            if closed.index <= since:
                continue
            for (variant, prompt_class), stored in closed.cells.items():
                for metric, encoded in stored.hists.items():
                    yield closed.index, closed.start_s, closed.end_s, make_tag(metric, prompt_class, variant), encoded

    @property
    def last_closed_interval(self) -> int:
        return self._next_close - 1

    @property
    def first_retained_interval(self) -> int:
        """The oldest interval index ``window`` and ``iter_closed_intervals`` still answer for."""
        return self._dropped_below

    @property
    def stored_intervals(self) -> int:
        """How many closed intervals are stored (encoded); bounded when ``retain_intervals`` is set."""
        return len(self._closed)

    @classmethod
    def from_records(
        cls,
        records: Iterable[RequestRecord],
        variants: Sequence[str],
        classes: Sequence[str],
        *,
        end_t: float,
        interval_s: float = 1.0,
        simulated: bool = True,
        warmup_s: float = 0.0,
    ) -> Aggregator:
        """Rebuild the state of a finished run from its records (replay): identical to live."""
        agg = cls(variants, classes, interval_s=interval_s, simulated=simulated, warmup_s=warmup_s)
        agg.add_records(records)
        agg.finish(end_t)
        return agg

    # ---- stats building -----------------------------------------------------------------------
    def _know(self, variant: str, prompt_class: str | None) -> None:
        if variant not in self.variants:
            self.variants.append(variant)
        if prompt_class is not None and prompt_class not in self.classes:
            self.classes.append(prompt_class)

    def _fallback(self, variant: str) -> str:
        return CountSource.SERVER.value if variant in self._server_timing else CountSource.NONE.value

    def _stats(self, cells: list[tuple[Key, Cell]], window_s: float) -> dict[str, VariantStats]:
        out: dict[str, VariantStats] = {}
        for variant in self.variants:
            mine = [(k[1], c) for k, c in cells if k[0] == variant]
            rows: dict[str, ClassStats] = {}
            total = Counts()
            for prompt_class in self.classes:
                group = [c for name, c in mine if name == prompt_class]
                counts = Counts()
                for cell in group:
                    counts.merge(cell.counts)
                total.merge(counts)
                latency = percentiles_by_metric(c.hists for c in group)
                rows[prompt_class] = class_stats(counts, latency, window_s, CountSource.NONE.value)
            latency_all = percentiles_by_metric(c.hists for _, c in mine)
            rows[ALL_CLASSES] = class_stats(total, latency_all, window_s, self._fallback(variant))
            out[variant] = VariantStats(variant, rows)
        return out

    def _measured_window(self, variant: str, now: float, finished: bool) -> float:
        span = self._measured_span.get(variant)
        if span is None:
            return 0.0
        first, last = span
        return max(0.0, (last if finished else max(now, last)) - first)

    def _cumulative_stats(self, now: float, finished: bool) -> dict[str, VariantStats]:
        for key in self._dirty:
            self._pct_cache[key] = percentiles_by_metric([self._cumulative[key].hists])
            self._all_cache.pop(key[0], None)
        self._dirty.clear()
        out: dict[str, VariantStats] = {}
        for variant in self.variants:
            window_s = self._measured_window(variant, now, finished)
            rows: dict[str, ClassStats] = {}
            total = Counts()
            for prompt_class in self.classes:
                key = (variant, prompt_class)
                live = self._cumulative.get(key)
                counts = live.counts if live is not None else Counts()
                total.merge(counts)
                rows[prompt_class] = class_stats(
                    counts, self._pct_cache.get(key, {}), window_s, CountSource.NONE.value
                )
            latency_all = self._all_cache.get(variant)
            if latency_all is None:
                groups = [c.hists for k, c in self._cumulative.items() if k[0] == variant]
                latency_all = self._all_cache[variant] = percentiles_by_metric(groups)
            rows[ALL_CLASSES] = class_stats(total, latency_all, window_s, self._fallback(variant))
            out[variant] = VariantStats(variant, rows)
        return out

