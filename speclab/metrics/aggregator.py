"""Turns RequestRecords, ServerSamples and Events into immutable Snapshots, a few times a second.

Time is cut into 1 s intervals on the run clock; a record belongs to the interval in which it
finished. An interval closes ``close_delay_s`` after its end (records shipped from worker processes
arrive a little late), is summarised once into the ``last_interval`` view and then kept only in
encoded form, so any window of intervals merges losslessly on demand. The cumulative view (since
the end of warm-up, ``cumulative.py``) is kept live. Warm-up records are measured — they show in
``last_interval`` — but stored apart and excluded from cumulative views, windows and the intervals
handed to the recorder.

An all-day session bounds memory with ``retain_intervals``: a closed interval's encoded histograms
are dropped once it has been closed for ``retain_intervals`` intervals of run time. Nothing else
changes: the cumulative view never reads stored intervals (it is kept live, late records included),
so it stays exactly what keeping everything gives; ``window`` and ``iter_closed_intervals`` refuse,
with a ValueError, to answer for dropped intervals rather than quietly answer for fewer. Timing the
drop from when an interval closed (not from its index) means a consumer that reads after every
tick, like the recorder, sees each interval even when one tick closes many.

Everything is kept per (variant, config epoch, class) and never summed across epochs: the epoch
book (``epochs.py``) places each record in its epoch or in a transition, from the boundary events
fed through ``add_event``. Snapshots carry every epoch (``epochs``), each variant's current one
(``cumulative``), the transitions, and the A/B windows (``ab.py``) merged from closed intervals.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from speclab.model.names import CountSource
from speclab.model.records import Event, RequestRecord, ServerSample
from speclab.model.snapshot import (
    ALL_CLASSES,
    Accounting,
    ClassStats,
    ClientHealth,
    EpochStats,
    IntervalStats,
    Snapshot,
    VariantStats,
)

from .ab import ABTracker, CellParts
from .cells import Cell, Counts, HistogramPool, class_stats, finish_time, percentiles_by_metric
from .cumulative import CumulativeView
from .epochs import EpochBook
from .hdr import EncodedHistogram
from .interval_store import ClosedStore, IntervalStore
from .saturation import SaturationBook
from .server_timing import ServerTiming

Key = tuple[str, int, str]  # (variant, epoch, class)
EpochKey = tuple[str, int]  # (variant, epoch)
# Where each send interval's requests finished is kept this long: a worker's saturation report
# for an interval arrives about a second after it, so older sends are never marked.
SEND_HORIZON_INTERVALS = 120


@dataclass(slots=True)
class _OpenInterval:
    index: int
    measured: dict[Key, Cell] = field(default_factory=dict)
    warmup: dict[Key, Cell] = field(default_factory=dict)


class Aggregator:
    """``warmup_s`` is kept for callers only: warm-up is decided per request (``RequestRecord.warmup``).

    ``retain_intervals``: None keeps every closed interval (recording, replay and reports rely on
    that); N keeps each for N × ``interval_s`` of run time after it closes, i.e. the newest N or so.
    ``store`` is where closed intervals are kept: in memory by default, or a ``SpilledIntervalStore``
    (a temporary file) for a long run that keeps every one.
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
        baseline: str | None = None,
        store: ClosedStore | None = None,
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
        self._store: ClosedStore = store if store is not None else IntervalStore()
        self._next_close = 0  # index of the oldest interval not yet closed
        self._cumulative = CumulativeView(self._pool)
        self.book = EpochBook()
        self._baseline = baseline
        self._ab = ABTracker(self.book, self._pool, interval_s)
        self._last: dict[str, VariantStats] = {}
        self._servers: dict[str, ServerSample] = {}
        self._server_timing = ServerTiming()
        self._events: list[Event] = []
        self._closed_since: list[IntervalStats] = []
        self._recorded: dict[EpochKey, int] = {}  # every record, by the epoch it was sent to
        self._warmup: dict[EpochKey, int] = {}
        self._planned: dict[EpochKey, int] | None = None  # closed since the last snapshot
        self._snapshots = 0
        self._saturation = SaturationBook()
        self._now = 0.0
        self.late_records = 0

    # ---- inputs -------------------------------------------------------------------------------
    def interval_of(self, t: float) -> int:
        return max(0, math.floor(t / self.interval_s))

    @property
    def baseline(self) -> str:
        """The variant A/B compares against: as set, else one named "baseline", else the first."""
        if self._baseline:
            return self._baseline
        return "baseline" if "baseline" in self.variants else (self.variants[0] if self.variants else "")

    def launch(self, variant: str, settings: dict[str, Any], *, baseline: bool = False) -> None:
        """A variant's launched settings (its epoch 1); ``baseline`` marks the A/B reference."""
        self._know(variant, None)
        self.book.launch(variant, settings)
        if baseline:
            self._baseline = variant
        self._ab.touch()

    def add_records(self, records: Iterable[RequestRecord]) -> None:
        for record in records:
            self._know(record.variant, record.prompt_class)
            sent_to = (record.variant, record.epoch)
            self._recorded[sent_to] = self._recorded.get(sent_to, 0) + 1
            if record.warmup:
                self._warmup[sent_to] = self._warmup.get(sent_to, 0) + 1
            epoch = self.book.place(record)
            if epoch is None:
                continue  # a transition's: counted there, in no epoch
            key = (record.variant, epoch, record.prompt_class)
            finished_at = finish_time(record)
            index = self.interval_of(finished_at)
            self._note_send(record, index)
            if not record.warmup:
                self._cumulative.add(key, record, finished_at)
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
        if sample.up:  # counted in the epoch the server ran (during a transition, the ending one)
            self._server_timing.add((sample.variant, self.book.current(sample.variant)), sample.histograms)

    def add_event(self, event: Event) -> None:
        self._events.append(event)
        if self.book.on_event(event):
            self._ab.touch()

    def set_planned(self, planned: dict[EpochKey, int]) -> None:
        """Requests begun per (variant, epoch), as the traffic workers counted them: with it each
        epoch's accounting says how many were lost (begun, never recorded)."""
        self._planned = dict(planned)

    def accounting(self, variant: str, epoch: int, total: ClassStats) -> Accounting:
        key = (variant, epoch)
        moved = sum(t.requests for t in self.book.transitions() if t.variant == variant and t.from_epoch == epoch)
        planned = None if self._planned is None else self._planned.get(key, 0)
        return Accounting(planned, total.requests, total.error_count, self._warmup.get(key, 0), moved,
                          self._recorded.get(key, 0))

    def set_health(self, health: ClientHealth, interval: int | None = None, *, mark: bool = True) -> None:
        """Latest client health; a saturated client marks ``interval`` (the interval the worker's
        report covers, ``WorkerHealth.interval``), else the interval of the last tick. The recorder
        keeps the report's interval, so pass it for live and replay to flag the same intervals."""
        self._saturation.set_health(health)
        if health.saturated and mark:
            self.mark_saturated(self.interval_of(self._now) if interval is None else interval)

    def mark_saturated(self, interval_index: int) -> None:
        """The client was saturated during ``interval_index``: its own numbers are the client's, and so
        are those of every request sent in it, which count in the intervals where they finished."""
        self._saturation.mark(interval_index)

    def _note_send(self, record: RequestRecord, finished_in: int) -> None:
        sent_in = self.interval_of(record.sent if record.sent is not None else record.intended)
        self._saturation.note_send(sent_in, finished_in)

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
        self._store.add(index, start_s, end_s, self._now, interval.measured)
        self._last = self._newest(self._stats([*interval.measured.items(), *interval.warmup.items()], window))
        warmup: dict[str, int] = {}
        for (variant, _epoch, _cls), cell in interval.warmup.items():
            warmup[variant] = warmup.get(variant, 0) + cell.counts.requests + sum(cell.counts.errors.values())
        measured = self._newest(self._stats(list(interval.measured.items()), window))
        self._closed_since.append(IntervalStats(index, start_s, end_s, measured, warmup))
        if self.retain_intervals is not None and len(self._closed_since) > self.retain_intervals:
            del self._closed_since[0]  # nobody took snapshots for that long: retention's horizon
        self._next_close = index + 1
        live: dict[Key, CellParts] = {key: (cell.counts, cell.hists) for key, cell in interval.measured.items()}
        self._ab.on_close(self.variants, self.baseline, index, start_s, end_s, live, self._stored)
        for cell in [*interval.measured.values(), *interval.warmup.values()]:
            cell.release(self._pool)

    def _stored(self, index: int) -> tuple[float, float, dict[Key, CellParts]] | None:
        """A closed interval's encoded cells for the A/B windows; None once dropped."""
        closed = self._store.get(index)
        if closed is None:
            return None
        return closed.start_s, closed.end_s, {k: (c.counts, c.hists) for k, c in closed.cells.items()}

    def _drop_expired(self) -> None:
        keep = min(self.retain_intervals or SEND_HORIZON_INTERVALS, SEND_HORIZON_INTERVALS)
        self._saturation.forget_sends_before(self.interval_of(self._now - keep * self.interval_s))
        if self.retain_intervals is None:
            return
        self._store.drop_closed_before(self._now - self.retain_intervals * self.interval_s)

    def _add_late(self, index: int, key: Key, record: RequestRecord) -> None:
        self.late_records += 1
        if not record.warmup:
            self._store.add_late(index, key, record, self._pool)
            cell = Cell()
            cell.add_record(record, self._pool)
            self._ab.add_late(index, key, cell.counts, cell.hists)
            cell.release(self._pool)

    # ---- outputs ------------------------------------------------------------------------------
    def snapshot(self, now: float, *, paused: bool = False, finished: bool = False) -> Snapshot:
        if finished:
            self.finish(now)
        else:
            self.tick(now)
        events, self._events = tuple(self._events), []
        intervals, self._closed_since = tuple(self._closed_since), []
        self._snapshots += 1
        by_epoch = self._cumulative.stats(self._epoch_keys(), self.classes, now, finished, self._ended,
                                          self._server_timing.latency, self._variant_stats)
        epochs = {
            variant: tuple(
                EpochStats(info, stats, self.accounting(variant, info.epoch, stats.total))
                for info in self.book.epochs(variant) for stats in (by_epoch[(variant, info.epoch)],)
            )
            for variant in self.variants
        }
        return Snapshot(
            t=now,
            interval=self._next_close - 1,
            cumulative={v: by_epoch[(v, self.book.current(v))] for v in self.variants},
            last_interval=dict(self._last),
            servers=dict(self._servers),
            health=self._saturation.health,
            run_health=self._saturation.run_health,
            events=events,
            saturated_intervals=tuple(sorted(self._saturation.saturated)),
            saturated_sends=tuple(sorted(self._saturation.saturated_sends)),
            paused=paused,
            finished=finished,
            simulated=self.simulated,
            epochs=epochs,
            transitions=self.book.transitions(),
            ab=self._ab.views(self.variants, self.baseline, self.classes, self._fallback),
            intervals=intervals,
            rebuilt=self._snapshots == 1,
        )

    def window(self, start_interval: int, end_interval: int) -> dict[str, VariantStats]:
        """Per variant, its newest epoch with requests in closed intervals ``start_interval..end_interval``
        (inclusive), warm-up excluded; ``window_by_epoch`` has every epoch.

        Raises ValueError when the range reaches intervals already dropped by ``retain_intervals``.
        """
        return self._newest(self.window_by_epoch(start_interval, end_interval))

    def window_by_epoch(self, start_interval: int, end_interval: int) -> dict[EpochKey, VariantStats]:
        """Stats per (variant, epoch) over closed intervals ``start_interval..end_interval`` (inclusive)."""
        if start_interval < self._store.dropped_below:
            raise ValueError(
                f"window({start_interval}, {end_interval}): intervals before {self._store.dropped_below} are no "
                f"longer kept (retain_intervals={self.retain_intervals}); the cumulative view still counts them"
            )
        chosen = self._store.between(start_interval, end_interval)
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
        if since + 1 < self._store.dropped_below:
            raise ValueError(
                f"intervals {since + 1}..{self._store.dropped_below - 1} were dropped (retain_intervals="
                f"{self.retain_intervals}) before being read; read at least every {self.retain_intervals} intervals"
            )
        return self._store.iter_closed(since)

    @property
    def last_closed_interval(self) -> int:
        return self._next_close - 1

    @property
    def first_retained_interval(self) -> int:
        """The oldest interval index ``window`` and ``iter_closed_intervals`` still answer for."""
        return self._store.dropped_below

    @property
    def stored_intervals(self) -> int:
        """How many closed intervals are stored (encoded); bounded when ``retain_intervals`` is set."""
        return len(self._store)

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
        events: Iterable[Event] = (),
    ) -> Aggregator:
        """Rebuild the state of a finished run from its records (and its boundary events): identical to live."""
        agg = cls(variants, classes, interval_s=interval_s, simulated=simulated, warmup_s=warmup_s)
        for event in events:
            agg.add_event(event)
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
        """Windows and intervals have no server histograms of their own: per-request timing or none."""
        return CountSource.NONE.value

    def _epoch_keys(self, extra: Iterable[EpochKey] = ()) -> list[EpochKey]:
        """Every (variant, epoch) the book knows, plus ``extra``, in variant then epoch order."""
        keys = {(v, info.epoch) for v in self.variants for info in self.book.epochs(v)} | set(extra)
        order = {v: i for i, v in enumerate(self.variants)}
        return sorted(keys, key=lambda k: (order.get(k[0], len(order)), k[1]))

    def _variant_stats(self, key: EpochKey, rows: dict[str, ClassStats]) -> VariantStats:
        return VariantStats(key[0], rows, epoch=key[1], label=self.book.label(*key))

    def _stats(self, cells: list[tuple[Key, Cell]], window_s: float) -> dict[EpochKey, VariantStats]:
        out: dict[EpochKey, VariantStats] = {}
        for epoch_key in self._epoch_keys((k[0], k[1]) for k, _ in cells):
            mine = [(k[2], c) for k, c in cells if (k[0], k[1]) == epoch_key]
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
            rows[ALL_CLASSES] = class_stats(total, latency_all, window_s, self._fallback(epoch_key[0]))
            out[epoch_key] = self._variant_stats(epoch_key, rows)
        return out

    def _newest(self, by_epoch: dict[EpochKey, VariantStats]) -> dict[str, VariantStats]:
        """Per variant, its newest epoch that had requests here, else its current epoch (empty)."""
        out: dict[str, VariantStats] = {}
        for (variant, epoch), stats in by_epoch.items():
            seen = out.get(variant)
            if not _idle(stats):
                if seen is None or _idle(seen) or epoch > seen.epoch:
                    out[variant] = stats
            elif seen is None or (_idle(seen) and epoch == self.book.current(variant)):
                out[variant] = stats
        return out

    def _ended(self, key: EpochKey) -> bool:
        info = self.book.info(*key)
        return info is not None and info.end_s is not None


def _idle(stats: VariantStats) -> bool:
    return stats.total.requests == 0 and not stats.total.errors
