"""Closed intervals, kept encoded, dropped after a retention horizon: what windows merge from.

Each closed interval holds one encoded histogram per metric and cell (variant, epoch, class), so
any window of intervals merges losslessly on demand. With retention, an interval is dropped once it
has been closed for long enough (timed from its closing, not its index, so a reader that reads
after every tick sees each one even when a tick closes many); asking for a dropped one is an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from speclab.model.records import RequestRecord

from .cells import Cell, Counts, HistogramPool
from .hdr import EncodedHistogram
from .hlog import make_tag

Key = tuple[str, int, str]  # (variant, epoch, class)


@dataclass(slots=True)
class StoredCell:
    counts: Counts
    hists: dict[str, EncodedHistogram]


@dataclass(slots=True)
class ClosedInterval:
    index: int
    start_s: float
    end_s: float
    closed_at: float  # run time when it closed; retention counts from here
    cells: dict[Key, StoredCell] = field(default_factory=dict)

    @classmethod
    def of(cls, index: int, start_s: float, end_s: float, closed_at: float, measured: dict[Key, Cell]) -> ClosedInterval:
        """The interval's cells, their histograms encoded."""
        closed = cls(index, start_s, end_s, closed_at)
        for key, cell in measured.items():
            closed.cells[key] = StoredCell(cell.counts.copy(), {m: EncodedHistogram.of(h) for m, h in cell.hists.items()})
        return closed


class ClosedStore(Protocol):
    """Where the aggregator keeps closed intervals: in memory (``IntervalStore``) or in a file
    (``interval_spill.SpilledIntervalStore``); both answer every read the same."""

    dropped_below: int

    def __len__(self) -> int: ...
    def add(self, index: int, start_s: float, end_s: float, closed_at: float, measured: dict[Key, Cell]) -> None: ...
    def get(self, index: int) -> ClosedInterval | None: ...
    def between(self, lo: int, hi: int) -> list[ClosedInterval]: ...
    def drop_closed_before(self, horizon: float) -> None: ...
    def add_late(self, index: int, key: Key, record: RequestRecord, pool: HistogramPool) -> None: ...
    def iter_closed(self, since: int) -> Iterator[tuple[int, float, float, str, EncodedHistogram]]: ...


class IntervalStore:
    """Every retained closed interval in memory (the all-day lab bounds them with retention)."""

    def __init__(self) -> None:
        self.closed: list[ClosedInterval] = []
        self.dropped_below = 0  # closed intervals with a smaller index were dropped by retention

    def __len__(self) -> int:
        return len(self.closed)

    def between(self, lo: int, hi: int) -> list[ClosedInterval]:
        """The stored intervals with ``lo <= index <= hi``, oldest first."""
        return [c for c in self.closed if lo <= c.index <= hi]

    def add(self, index: int, start_s: float, end_s: float, closed_at: float, measured: dict[Key, Cell]) -> None:
        self.closed.append(ClosedInterval.of(index, start_s, end_s, closed_at, measured))

    def get(self, index: int) -> ClosedInterval | None:
        offset = index - self.closed[0].index if self.closed else -1
        return self.closed[offset] if 0 <= offset < len(self.closed) else None

    def drop_closed_before(self, horizon: float) -> None:
        drop = 0
        while drop < len(self.closed) and self.closed[drop].closed_at <= horizon:
            drop += 1
        if drop:
            self.dropped_below = self.closed[drop - 1].index + 1
            del self.closed[:drop]

    def add_late(self, index: int, key: Key, record: RequestRecord, pool: HistogramPool) -> None:
        """A record that arrived after its interval closed; none where retention dropped it (the
        cumulative view has it already)."""
        closed = self.get(index) if index >= self.dropped_below else None
        if closed is None:
            return
        add_to(closed, key, record, pool)

    def iter_closed(self, since: int) -> Iterator[tuple[int, float, float, str, EncodedHistogram]]:
        for closed in self.closed:
            if closed.index <= since:
                continue
            for (variant, epoch, prompt_class), stored in closed.cells.items():
                for metric, encoded in stored.hists.items():
                    yield closed.index, closed.start_s, closed.end_s, make_tag(metric, prompt_class, variant, epoch), encoded


def add_to(closed: ClosedInterval, key: Key, record: RequestRecord, pool: HistogramPool) -> None:
    stored = closed.cells.setdefault(key, StoredCell(Counts(), {}))
    cell = Cell(stored.counts, {m: e.decode() for m, e in stored.hists.items()})
    cell.add_record(record, pool)
    stored.hists = {m: EncodedHistogram.of(h) for m, h in cell.hists.items()}
