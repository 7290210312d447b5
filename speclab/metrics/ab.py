"""A/B windows merged from the aggregator's closed intervals (docs/measurements.md, "Config epochs").

For each non-baseline variant: the *current* window is its current epoch over the whole closed
intervals that lie inside that epoch (and inside one baseline epoch), with the baseline over
exactly those intervals; the *previous* window is the epoch before it over as many whole intervals,
ending with the last one before its transition began, again beside the baseline over the same
intervals. Whole intervals keep both sides on the same span, and the transition (restart downtime,
its failed requests) lies outside both windows by construction.

Windows grow by one interval per close: the current one takes the interval just closed (its live
cells), the previous one reaches one interval further back (decoding that interval's stored
cells), so the cost per close is constant however long the epochs run. Only the latency metrics the
A/B view shows are merged (a histogram is 188 KB); counts are kept whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from speclab.model.latency_metrics import Shown, shown_in
from speclab.model.names import CountSource
from speclab.model.snapshot import ALL_CLASSES, ABView, ABWindow, ClassStats, VariantStats

from .cells import Cell, Counts, HistogramPool, class_stats, percentiles_by_metric
from .epochs import EpochBook
from .hdr import EncodedHistogram, LatencyHistogram

AB_METRICS: frozenset[str] = frozenset(m.value for m in shown_in(Shown.AB))

Key = tuple[str, int, str]  # (variant, epoch, class)
CellParts = tuple[Counts, Mapping[str, LatencyHistogram | EncodedHistogram]]
# index -> (start_s, end_s, cells of that closed interval), None when it is no longer kept
StoredLookup = Callable[[int], tuple[float, float, Mapping[Key, CellParts]] | None]


@dataclass(slots=True)
class _Window:
    variant: str
    epoch: int
    baseline: str
    baseline_epoch: int
    anchor: int | None = None  # previous windows end at this interval; current windows have none
    lo: int | None = None
    hi: int | None = None
    seconds: float = 0.0
    start_s: float = 0.0
    end_s: float = 0.0
    own: dict[str, Cell] = field(default_factory=dict)
    base: dict[str, Cell] = field(default_factory=dict)
    stopped: bool = False
    note: str = ""

    @property
    def n(self) -> int:
        return 0 if self.lo is None or self.hi is None else self.hi - self.lo + 1

    def take(self, index: int, start_s: float, end_s: float, cells: Mapping[Key, CellParts],
             pool: HistogramPool) -> None:
        """Add one closed interval (either end of the window) for both sides."""
        for key, (counts, hists) in cells.items():
            self.add(key, counts, hists, pool)
        if self.lo is None or self.hi is None:
            self.lo = self.hi = index
            self.start_s, self.end_s = start_s, end_s
        elif index > self.hi:
            self.hi, self.end_s = index, end_s
        else:
            self.lo, self.start_s = index, start_s
        self.seconds += end_s - start_s

    def add(self, key: Key, counts: Counts, hists: Mapping[str, LatencyHistogram | EncodedHistogram],
            pool: HistogramPool) -> bool:
        """Merge one cell into the side it belongs to; False when it is neither side's."""
        variant, epoch, prompt_class = key
        if variant == self.variant and epoch == self.epoch:
            side = self.own
        elif variant == self.baseline and epoch == self.baseline_epoch:
            side = self.base
        else:
            return False
        side.setdefault(prompt_class, Cell()).merge(counts, _decoded(hists), pool, AB_METRICS)
        return True

    def release(self, pool: HistogramPool) -> None:
        for cell in [*self.own.values(), *self.base.values()]:
            cell.release(pool)
        self.own.clear()
        self.base.clear()


def _decoded(hists: Mapping[str, LatencyHistogram | EncodedHistogram]) -> dict[str, LatencyHistogram]:
    out: dict[str, LatencyHistogram] = {}
    for metric, hist in hists.items():
        if metric in AB_METRICS and hist.count:
            out[metric] = hist.decode() if isinstance(hist, EncodedHistogram) else hist
    return out


class ABTracker:
    """Keeps the A/B windows of every non-baseline variant up to date as intervals close."""

    def __init__(self, book: EpochBook, pool: HistogramPool, interval_s: float) -> None:
        self._book = book
        self._pool = pool
        self._interval_s = interval_s
        self._current: dict[str, _Window] = {}
        self._previous: dict[str, _Window] = {}
        self._views: dict[str, ABView] = {}
        self._dirty: set[str] = set()

    def touch(self) -> None:
        """Epoch boundaries changed (an event): every view is rebuilt on the next read."""
        self._views.clear()

    def on_close(self, variants: Iterable[str], baseline: str, index: int, start_s: float, end_s: float,
                 live: Mapping[Key, CellParts], stored: StoredLookup) -> None:
        for variant in variants:
            if variant == baseline:
                continue
            self._grow_current(variant, baseline, index, start_s, end_s, live)
            self._grow_previous(variant, baseline, stored)

    def add_late(self, index: int, key: Key, counts: Counts, hists: Mapping[str, LatencyHistogram]) -> None:
        """A record that finished in interval ``index`` but arrived after it closed (a stall is given up
        on long after its last chunk): counted in every window that already took that interval."""
        for windows in (self._current, self._previous):
            for variant, window in windows.items():
                inside = window.lo is not None and window.hi is not None and window.lo <= index <= window.hi
                if inside and window.add(key, counts, hists, self._pool):
                    self._views.pop(variant, None)

    def _grow_current(self, variant: str, baseline: str, index: int, start_s: float, end_s: float,
                      live: Mapping[Key, CellParts]) -> None:
        book = self._book
        epoch, base_epoch = book.current(variant), book.current(baseline)
        window = self._current.get(variant)
        if window is None or (window.epoch, window.baseline, window.baseline_epoch) != (epoch, baseline, base_epoch):
            if window is not None:
                window.release(self._pool)
            window = self._current[variant] = _Window(variant, epoch, baseline, base_epoch)
            self._views.pop(variant, None)
        mine, theirs = book.info(variant, epoch), book.info(baseline, base_epoch)
        if end_s <= start_s:
            return  # the empty interval a run can end on
        if mine is not None and theirs is not None and mine.covers(start_s, end_s) and theirs.covers(start_s, end_s):
            window.take(index, start_s, end_s, live, self._pool)
            self._views.pop(variant, None)

    def _grow_previous(self, variant: str, baseline: str, stored: StoredLookup) -> None:
        book = self._book
        ended = book.info(variant, book.current(variant) - 1)
        if ended is None or ended.end_s is None:
            return
        anchor = int((ended.end_s + 1e-6) // self._interval_s) - 1  # the last whole interval before it ended
        base = book.covering(baseline, anchor * self._interval_s, (anchor + 1) * self._interval_s)
        base_epoch = base.epoch if base is not None else 0
        window = self._previous.get(variant)
        current = self._current.get(variant)
        target = current.n if current is not None else 0
        key = (ended.epoch, baseline, base_epoch, anchor)
        if window is not None and ((window.epoch, window.baseline, window.baseline_epoch, window.anchor) != key
                                   or window.n > target):
            window.release(self._pool)
            window = None
        if window is None:
            window = self._previous[variant] = _Window(variant, ended.epoch, baseline, base_epoch, anchor=anchor)
            self._views.pop(variant, None)
        while window.n < target and not window.stopped:
            index = anchor if window.lo is None else window.lo - 1
            got = stored(index) if index >= 0 else None
            if got is None:
                window.stopped = True
                window.note = ("older intervals are no longer kept" if index >= 0
                               else f"{ended.label} ran for fewer intervals than the current epoch")
                break
            start_s, end_s, cells = got
            if not ended.covers(start_s, end_s):
                window.stopped, window.note = True, f"{ended.label} ran for fewer whole intervals than the current epoch"
                break
            if base is None or not base.covers(start_s, end_s):
                window.stopped, window.note = True, "the baseline changed config within the window"
                break
            window.take(index, start_s, end_s, cells, self._pool)
            self._views.pop(variant, None)

    # ---- views ---------------------------------------------------------------------------------
    def views(self, variants: Sequence[str], baseline: str, classes: Sequence[str],
              timing: Callable[[str], str]) -> dict[str, ABView]:
        out: dict[str, ABView] = {}
        for variant in variants:
            if variant == baseline:
                continue
            view = self._views.get(variant)
            relaunching = self._book.in_transition(variant)
            if view is None or view.relaunching != relaunching:
                view = self._views[variant] = self._view(variant, baseline, classes, timing, relaunching)
            out[variant] = view
        return out

    def _view(self, variant: str, baseline: str, classes: Sequence[str], timing: Callable[[str], str],
              relaunching: bool) -> ABView:
        current = self._current.get(variant)
        if current is None or current.baseline != baseline:
            current = _Window(variant, self._book.current(variant), baseline, self._book.current(baseline))
        previous = self._previous.get(variant)
        if previous is not None and (previous.epoch != current.epoch - 1 or previous.baseline != baseline):
            previous = None
        return ABView(
            variant=variant, baseline=baseline, current=self._side(current, classes, timing),
            previous=self._side(previous, classes, timing) if previous is not None else None,
            relaunching=relaunching,
        )

    def _side(self, window: _Window, classes: Sequence[str], timing: Callable[[str], str]) -> ABWindow:
        book = self._book
        own = book.label(window.variant, window.epoch)
        base = book.label(window.baseline, window.baseline_epoch) if window.baseline_epoch else window.baseline
        return ABWindow(
            epoch=window.epoch, label=own, baseline_epoch=window.baseline_epoch, baseline_label=base,
            first_interval=window.lo, last_interval=window.hi, start_s=window.start_s, end_s=window.end_s,
            own=_stats(window.variant, window.epoch, own, window.own, classes, window.seconds, timing),
            baseline=_stats(window.baseline, window.baseline_epoch, base, window.base, classes, window.seconds, timing),
            note=window.note,
        )


def _stats(variant: str, epoch: int, label: str, cells: Mapping[str, Cell], classes: Sequence[str],
           window_s: float, timing: Callable[[str], str]) -> VariantStats:
    rows: dict[str, ClassStats] = {}
    total = Counts()
    for prompt_class in classes:
        cell = cells.get(prompt_class)
        counts = cell.counts if cell is not None else Counts()
        total.merge(counts)
        latency = percentiles_by_metric([cell.hists]) if cell is not None else {}
        rows[prompt_class] = class_stats(counts, latency, window_s, CountSource.NONE.value)
    latency_all = percentiles_by_metric(c.hists for c in cells.values())
    rows[ALL_CLASSES] = class_stats(total, latency_all, window_s, timing(variant))
    return VariantStats(variant, rows, epoch=epoch, label=label)
