"""A typed wrapper over the ``hdrhistogram`` package (module ``hdrh``) for latencies in µs.

The library is untyped and slow where snapshots need speed: ``get_value_at_percentile`` walks all
23,552 counters per call. This wrapper keeps the library's counts array as the storage (so
encode, decode, merge and ``.hlog`` files stay the library's) and adds a small summary kept up to
date on every record: the total per half-bucket block (23 blocks) and the sum of median-equivalent
values (the library's mean). All percentiles then come from one pass over 23 block totals plus a
cumulative sum inside the few blocks the requested points fall in, reproducing the library's own
rounding rules so values equal ``get_value_at_percentile`` for the same points. Several histograms
can be summed count-for-count in that pass (``merged_percentiles``), which is how "all classes"
rows and time windows are computed without building merged histograms.
"""

from __future__ import annotations

import sys
import weakref
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from itertools import accumulate
from typing import Any, Final

import numpy as np
from hdrh.histogram import HdrHistogram

from speclab.model.names import (
    HIST_HIGHEST_US,
    HIST_LOWEST_US,
    HIST_SIGNIFICANT_DIGITS,
    LATENCY_BUCKETS_S,
    PERCENTILE_POINTS,
)
from speclab.model.snapshot import Percentiles


def _new_raw() -> HdrHistogram:
    return HdrHistogram(HIST_LOWEST_US, HIST_HIGHEST_US, HIST_SIGNIFICANT_DIGITS)


class _Layout:
    """Index arithmetic of the fixed (1 µs, 1 h, 3 digits) layout, precomputed once."""

    def __init__(self, raw: HdrHistogram) -> None:
        self.counts_len: int = raw.counts_len
        self.unit_magnitude: int = raw.unit_magnitude
        self.half_mag: int = raw.sub_bucket_half_count_magnitude
        self.half: int = raw.sub_bucket_half_count
        self.mask: int = raw.sub_bucket_mask
        self.blocks: int = self.counts_len // self.half
        index = np.arange(self.counts_len, dtype=np.int64)
        bucket = (index >> self.half_mag) - 1
        sub = (index & (self.half - 1)) + self.half
        first = bucket < 0
        sub = np.where(first, sub - self.half, sub)
        bucket = np.where(first, 0, bucket)
        shift = bucket + self.unit_magnitude
        size = np.left_shift(np.int64(1), shift)
        self.lowest: list[int] = (sub << shift).tolist()
        lowest = sub << shift
        self.highest: list[int] = (lowest + size - 1).tolist()
        self.median: list[int] = (lowest + (size >> 1)).tolist()

    def index_of(self, value: int) -> int:
        bucket = (value | self.mask).bit_length() - self.unit_magnitude - (self.half_mag + 1)
        sub = value >> (bucket + self.unit_magnitude)
        return ((bucket + 1) << self.half_mag) + sub - self.half


LAYOUT: Final = _Layout(_new_raw())


class LatencyHistogram:
    """Latencies in microseconds, 1 µs to 1 h, 3 significant digits (values outside are clamped)."""

    __slots__ = ("_blocks", "_counts", "_median_sum", "_raw")

    def __init__(self, raw: HdrHistogram | None = None) -> None:
        self._raw = raw if raw is not None else _new_raw()
        if self._raw.counts_len != LAYOUT.counts_len:
            raise ValueError("histogram layout differs from 1 µs..1 h at 3 significant digits")
        # hdrh's histogram and its encoder (which owns the counts array) refer to each other: such a
        # cycle waits for the collector's next full pass, and between passes a busy aggregator had
        # hundreds of discarded counts arrays (188 KB each) waiting, which grew the process's RSS in
        # steps. Through a weak proxy the counts array goes with the last reference to the histogram.
        encoder = self._raw.encoder
        if not isinstance(encoder.histogram, weakref.ProxyType):
            encoder.histogram = weakref.proxy(self._raw)
        self._counts: np.ndarray = np.ctypeslib.as_array(self._raw.counts)
        if raw is None:
            self._blocks = [0] * LAYOUT.blocks
            self._median_sum = 0
        else:
            self._resummarise()

    def _resummarise(self) -> None:
        self._blocks = self._counts.reshape(LAYOUT.blocks, LAYOUT.half).sum(axis=1).astype(int).tolist()
        if not self._raw.total_count:
            self._median_sum = 0
            return
        low = LAYOUT.index_of(min(self._raw.min_value, HIST_HIGHEST_US)) if self._raw.min_value else 0
        high = LAYOUT.index_of(min(self._raw.max_value, HIST_HIGHEST_US)) + 1
        nonzero = (np.flatnonzero(self._counts[low:high]) + low).tolist()
        counts = self._counts[nonzero].tolist()
        self._median_sum = sum(c * LAYOUT.median[i] for c, i in zip(counts, nonzero, strict=True))

    @property
    def raw(self) -> HdrHistogram:
        """The underlying ``hdrh`` histogram, for code that must hand it to the library."""
        return self._raw

    def record_us(self, value_us: float, count: int = 1) -> None:
        """Record like ``HdrHistogram.record_value``, clamped into [0, 1 h]."""
        value = 0 if value_us <= 0 else min(round(value_us), HIST_HIGHEST_US)
        index = LAYOUT.index_of(value)
        raw = self._raw
        raw.counts[index] += count
        raw.total_count += count
        if value < raw.min_value:
            raw.min_value = value
        if value > raw.max_value:
            raw.max_value = value
        self._blocks[index >> LAYOUT.half_mag] += count
        self._median_sum += LAYOUT.median[index] * count

    def record_s(self, seconds: float, count: int = 1) -> None:
        self.record_us(seconds * 1_000_000.0, count)

    def merge(self, other: LatencyHistogram) -> None:
        if not other.count:
            return
        self._raw.add(other._raw)
        self._blocks = [a + b for a, b in zip(self._blocks, other._blocks, strict=True)]
        self._median_sum += other._median_sum

    def copy(self) -> LatencyHistogram:
        out = LatencyHistogram()
        out.merge(self)
        return out

    def clear(self) -> None:
        self._counts.fill(0)
        self._raw.total_count = 0
        self._raw.min_value = sys.maxsize
        self._raw.max_value = 0
        self._blocks = [0] * LAYOUT.blocks
        self._median_sum = 0

    @property
    def count(self) -> int:
        return int(self._raw.total_count)

    @property
    def max_us(self) -> int:
        return int(self._raw.get_max_value())

    @property
    def mean(self) -> float:
        return self._median_sum / self.count if self.count else 0.0

    def counts(self) -> np.ndarray:
        """A read-only view of the counts array (index layout as in ``hdrh``)."""
        view = self._counts.view()
        view.flags.writeable = False
        return view

    def encode(self) -> str:
        encoded: Any = self._raw.encode()
        return encoded.decode("ascii") if isinstance(encoded, bytes) else str(encoded)

    @classmethod
    def decode(cls, encoded: str | bytes) -> LatencyHistogram:
        return cls(HdrHistogram.decode(encoded))

    def value_at_percentile(self, percentile: float) -> int:
        """The library's own per-call lookup (slow); for cross-checks, not for snapshots."""
        return int(self._raw.get_value_at_percentile(percentile))

    def percentiles(self, points: Sequence[float] = PERCENTILE_POINTS) -> Percentiles:
        return merged_percentiles((self,), points)

    def __repr__(self) -> str:
        return f"LatencyHistogram(count={self.count}, max_us={self.max_us})"


BUCKET_BOUNDS_US: Final = tuple(round(b * 1_000_000) for b in LATENCY_BUCKETS_S)


def bucket_counts(items: Sequence[LatencyHistogram], bounds_us: Sequence[int] = BUCKET_BOUNDS_US) -> tuple[int, ...]:
    """Values at or below each bound in the count-wise sum of ``items`` (cumulative, as Prometheus
    buckets are): whole half-bucket blocks from the summary, then the counts inside one block."""
    out = []
    half, mag = LAYOUT.half, LAYOUT.half_mag
    for bound in bounds_us:
        index = LAYOUT.index_of(min(bound, HIST_HIGHEST_US))
        block = index >> mag
        start = block * half
        total = 0
        for h in items:
            total += sum(h._blocks[:block]) + int(h._counts[start:index + 1].sum())
        out.append(total)
    return tuple(out)


def merged_percentiles(
    hists: Iterable[LatencyHistogram], points: Sequence[float] = PERCENTILE_POINTS, *, buckets: bool = False
) -> Percentiles:
    """Percentiles of the count-wise sum of ``hists``, in one pass, without merging them (and, with
    ``buckets``, the counts at the Prometheus bucket bounds)."""
    items = [h for h in hists if h.count]
    if not items:
        return Percentiles(buckets=(0,) * len(BUCKET_BOUNDS_US) if buckets else ())
    total = sum(h.count for h in items)
    if len(items) == 1:
        blocks = items[0]._blocks
    else:
        blocks = [sum(column) for column in zip(*(h._blocks for h in items), strict=True)]
    cumulative_blocks = list(accumulate(blocks))
    last_block = len(blocks) - 1
    targets = [max(int((min(point, 100.0) * total / 100) + 0.5), 1) for point in points]
    target_blocks = [min(bisect_left(cumulative_blocks, t), last_block) for t in targets]
    first, last = min(target_blocks), max(target_blocks)
    half = LAYOUT.half
    start, stop = first * half, (last + 1) * half
    span = items[0]._counts[start:stop]
    for h in items[1:]:
        span = span + h._counts[start:stop]
    before = cumulative_blocks[first - 1] if first else 0
    running = np.cumsum(span)
    offsets = np.searchsorted(running, np.array([t - before for t in targets], dtype=np.uint64), side="left").tolist()
    values = []
    for point, offset in zip(points, offsets, strict=True):
        index = start + min(offset, stop - start - 1)
        values.append(LAYOUT.highest[index] if point else LAYOUT.lowest[index])
    mean = sum(h._median_sum for h in items) / total
    return Percentiles(count=total, mean=mean, values=tuple(values), buckets=bucket_counts(items) if buckets else ())


def merge_all(hists: Iterable[LatencyHistogram]) -> LatencyHistogram:
    out = LatencyHistogram()
    for h in hists:
        out.merge(h)
    return out


class EncodedHistogram:
    """A closed histogram kept in its compressed form (~1–2 KB instead of 188 KB), decoded on demand."""

    __slots__ = ("count", "encoded", "max_us")

    def __init__(self, encoded: str, count: int, max_us: int) -> None:
        self.encoded = encoded
        self.count = count
        self.max_us = max_us

    @classmethod
    def of(cls, hist: LatencyHistogram) -> EncodedHistogram:
        return cls(hist.encode(), hist.count, hist.max_us)

    def encode(self) -> str:
        return self.encoded

    def decode(self) -> LatencyHistogram:
        return LatencyHistogram.decode(self.encoded)
