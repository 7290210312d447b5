"""Closed intervals kept in a temporary file, so a long headless run's memory does not grow with it.

``speclab run`` keeps every closed interval for the report's timeline, for A/B windows that reach
back before a relaunch and for records that arrive after their interval closed. In memory that
is ~1–2 KB per histogram per interval, tens of megabytes an hour at a few hundred requests per
second. Here each closed interval is pickled once into an anonymous temporary file (deleted when
the store goes) and read back when asked for; only the newest few stay in memory as well, which is
all the recorder and late records touch. The file offsets are kept in flat arrays: 24 bytes per
interval. The answers are the same as ``IntervalStore``'s, read for read.
"""

from __future__ import annotations

import pickle
import tempfile
import weakref
from array import array
from collections.abc import Iterator

from speclab.model.records import RequestRecord

from .cells import Cell, HistogramPool
from .hdr import EncodedHistogram
from .hlog import make_tag
from .interval_store import ClosedInterval, Key, add_to

RECENT = 8  # newest closed intervals also kept in memory (the recorder reads each once, just after it closes)


class SpilledIntervalStore:
    def __init__(self, recent: int = RECENT) -> None:
        self._file = tempfile.TemporaryFile(prefix="speclab-intervals-")  # noqa: SIM115 - closed by close() or collection
        self._closer = weakref.finalize(self, self._file.close)
        self._first = 0  # index of the oldest interval still stored
        self._offsets = array("q")
        self._lengths = array("q")
        self._closed_at = array("d")
        self._recent: dict[int, ClosedInterval] = {}
        self._keep = max(1, recent)
        self.dropped_below = 0

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def _next(self) -> int:
        return self._first + len(self._offsets)

    def add(self, index: int, start_s: float, end_s: float, closed_at: float, measured: dict[Key, Cell]) -> None:
        if self._offsets and index != self._next:
            raise ValueError(f"interval {index} closed out of order (expected {self._next})")
        if not self._offsets:
            self._first = index
        closed = ClosedInterval.of(index, start_s, end_s, closed_at, measured)
        offset, length = self._write(closed)
        self._offsets.append(offset)
        self._lengths.append(length)
        self._closed_at.append(closed_at)
        self._recent[index] = closed
        for old in [i for i in self._recent if i <= index - self._keep]:
            del self._recent[old]

    def _write(self, closed: ClosedInterval) -> tuple[int, int]:
        blob = pickle.dumps(closed, protocol=pickle.HIGHEST_PROTOCOL)
        offset = self._file.seek(0, 2)
        self._file.write(blob)
        return offset, len(blob)

    def get(self, index: int) -> ClosedInterval | None:
        if not self._first <= index < self._next:
            return None
        cached = self._recent.get(index)
        if cached is not None:
            return cached
        at = index - self._first
        self._file.seek(self._offsets[at])
        closed: ClosedInterval = pickle.loads(self._file.read(self._lengths[at]))
        return closed

    def between(self, lo: int, hi: int) -> list[ClosedInterval]:
        out = []
        for index in range(max(lo, self._first), min(hi, self._next - 1) + 1):
            closed = self.get(index)
            if closed is not None:
                out.append(closed)
        return out

    def drop_closed_before(self, horizon: float) -> None:
        drop = 0
        while drop < len(self._closed_at) and self._closed_at[drop] <= horizon:
            drop += 1
        if drop:
            self._first += drop
            self.dropped_below = self._first
            for name in ("_offsets", "_lengths", "_closed_at"):
                del getattr(self, name)[:drop]
            for old in [i for i in self._recent if i < self._first]:
                del self._recent[old]

    def add_late(self, index: int, key: Key, record: RequestRecord, pool: HistogramPool) -> None:
        """As ``IntervalStore.add_late``; the changed interval is written again (the old copy stays unread)."""
        closed = self.get(index) if index >= self.dropped_below else None
        if closed is None:
            return
        add_to(closed, key, record, pool)
        at = index - self._first
        self._offsets[at], self._lengths[at] = self._write(closed)

    def iter_closed(self, since: int) -> Iterator[tuple[int, float, float, str, EncodedHistogram]]:
        for index in range(max(since + 1, self._first), self._next):
            closed = self.get(index)
            assert closed is not None
            for (variant, epoch, prompt_class), stored in closed.cells.items():
                for metric, encoded in stored.hists.items():
                    yield closed.index, closed.start_s, closed.end_s, make_tag(metric, prompt_class, variant, epoch), encoded

    def close(self) -> None:
        """Delete the file now (it is deleted anyway when the store is collected)."""
        self._closer()
