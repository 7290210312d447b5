"""Accumulators for one (variant, class) over some span of time, and how they become ``ClassStats``.

A ``Cell`` holds the additive counts of a set of requests (requests, errors by kind, tokens,
speculative sums, structured-output checks) plus one latency histogram per ``Metric``. Everything
in it merges losslessly, so intervals, windows, the cumulative view and the "all classes" row are
all sums of cells. Rates are computed only when a ``ClassStats`` is built: ratios of sums.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from speclab.model.acceptance import add_histogram, add_per_k, steps_drafting_position
from speclab.model.latency_metrics import BY_METRIC
from speclab.model.names import CountSource, Metric
from speclab.model.records import RequestRecord
from speclab.model.snapshot import AcceptanceStats, ClassStats, Percentiles

from . import split as split_sums
from .hdr import LatencyHistogram, merged_percentiles

# Seconds for each latency metric of one successful record (None: not measured for it).
METRIC_VALUES: dict[Metric, Callable[[RequestRecord], float | None]] = {m: BY_METRIC[m].value for m in Metric}


def finish_time(record: RequestRecord) -> float:
    """When a request finished: ``done``, or for a failure the last moment anything happened."""
    for t in (record.done, record.last_token, record.first_token, record.sent):
        if t is not None:
            return t
    return record.intended


@dataclass(slots=True)
class Counts:
    """Additive per-request counts; every field merges by addition."""

    requests: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    output_tokens: int = 0
    spec_requests: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    accept_histogram: list[int] = field(default_factory=list)
    position_drafts: list[int] = field(default_factory=list)  # [i] = steps that drafted position i
    positions_estimated: int = 0  # requests whose position_drafts had to be inferred from sums
    per_k: dict[int, list[int]] = field(default_factory=dict)  # k used -> [steps, accepted]
    spec_exact: int = 0
    spec_estimated: int = 0
    structured_total: int = 0
    structured_failed: int = 0
    timed_exact: int = 0
    split: split_sums.Sums = field(default_factory=dict)

    def add_record(self, record: RequestRecord) -> None:
        if not record.ok:
            kind = record.error_kind or "cancelled"
            self.errors[kind] = self.errors.get(kind, 0) + 1
            return
        self.requests += 1
        self.output_tokens += record.output_tokens
        split_sums.add_record(self.split, record)
        spec = record.spec
        if spec.steps or spec.source != CountSource.NONE.value:
            self.spec_requests += 1
            self.steps += spec.steps
            self.drafted += spec.drafted
            self.accepted += spec.accepted
            add_histogram(self.accept_histogram, spec.histogram)
            if spec.drafted_per_position:  # the server's per-step counts, summed by the client
                positions, exact = list(spec.drafted_per_position), True
            else:
                positions, exact = steps_drafting_position(spec.steps, spec.drafted, spec.num_spec_tokens, spec.histogram)
            add_histogram(self.position_drafts, positions)
            self.positions_estimated += 0 if exact else 1
            add_per_k(self.per_k, spec.per_k)
            if spec.source == CountSource.EXACT.value:
                self.spec_exact += 1
            else:
                self.spec_estimated += 1
        if record.schema_valid is not None:
            self.structured_total += 1
            self.structured_failed += 0 if record.schema_valid else 1
        if record.server_queue_ms is not None or record.server_decode_ms is not None:
            self.timed_exact += 1

    def merge(self, other: Counts) -> None:
        self.requests += other.requests
        for kind, n in other.errors.items():
            self.errors[kind] = self.errors.get(kind, 0) + n
        self.output_tokens += other.output_tokens
        self.spec_requests += other.spec_requests
        self.steps += other.steps
        self.drafted += other.drafted
        self.accepted += other.accepted
        add_histogram(self.accept_histogram, other.accept_histogram)
        add_histogram(self.position_drafts, other.position_drafts)
        self.positions_estimated += other.positions_estimated
        add_per_k(self.per_k, [(k, *row) for k, row in other.per_k.items()])
        self.spec_exact += other.spec_exact
        self.spec_estimated += other.spec_estimated
        self.structured_total += other.structured_total
        self.structured_failed += other.structured_failed
        self.timed_exact += other.timed_exact
        split_sums.merge(self.split, other.split)

    def copy(self) -> Counts:
        out = Counts()
        out.merge(self)
        return out

    @property
    def empty(self) -> bool:
        return self.requests == 0 and not self.errors

    def acceptance(self) -> AcceptanceStats:
        if self.spec_estimated:
            source = CountSource.ESTIMATED.value
        elif self.spec_exact:
            source = CountSource.EXACT.value
        else:
            source = CountSource.NONE.value
        if not self.spec_requests:
            position_source = CountSource.NONE.value
        elif self.positions_estimated or source == CountSource.ESTIMATED.value:
            position_source = CountSource.ESTIMATED.value
        else:
            position_source = CountSource.EXACT.value
        return AcceptanceStats(
            requests=self.spec_requests,
            steps=self.steps,
            drafted=self.drafted,
            accepted=self.accepted,
            histogram=tuple(self.accept_histogram),
            source=source,
            position_drafts=tuple(self.position_drafts),
            position_source=position_source,
            per_k=tuple((k, steps, accepted) for k, (steps, accepted) in sorted(self.per_k.items())),
        )


class HistogramPool:
    """Reuses cleared histograms: each one holds a 188 KB counts array."""

    def __init__(self, limit: int = 256) -> None:
        self._free: list[LatencyHistogram] = []
        self._limit = limit

    def get(self) -> LatencyHistogram:
        return self._free.pop() if self._free else LatencyHistogram()

    def put(self, hist: LatencyHistogram) -> None:
        if len(self._free) < self._limit:
            hist.clear()
            self._free.append(hist)


@dataclass(slots=True)
class Cell:
    """Counts and live latency histograms for one (variant, class)."""

    counts: Counts = field(default_factory=Counts)
    hists: dict[str, LatencyHistogram] = field(default_factory=dict)

    def add_record(self, record: RequestRecord, pool: HistogramPool) -> None:
        self.counts.add_record(record)
        if not record.ok:
            return
        for metric, value_of in METRIC_VALUES.items():
            seconds = value_of(record)
            if seconds is None:
                continue
            hist = self.hists.get(metric.value)
            if hist is None:
                hist = self.hists[metric.value] = pool.get()
            hist.record_s(seconds)

    def merge(self, other: Counts, hists: dict[str, LatencyHistogram], pool: HistogramPool,
              metrics: Iterable[str] | None = None) -> None:
        """Add another cell's counts and histograms (only ``metrics``, when given)."""
        self.counts.merge(other)
        for metric, hist in hists.items():
            if (metrics is not None and metric not in metrics) or not hist.count:
                continue
            mine = self.hists.get(metric)
            if mine is None:
                mine = self.hists[metric] = pool.get()
            mine.merge(hist)

    def release(self, pool: HistogramPool) -> None:
        for hist in self.hists.values():
            pool.put(hist)
        self.hists.clear()


def percentiles_by_metric(hist_groups: Iterable[dict[str, LatencyHistogram]], *,
                          buckets: bool = False) -> dict[str, Percentiles]:
    """Per metric, the percentiles of the count-wise sum over several cells' histograms (with
    ``buckets``, their Prometheus bucket counts too)."""
    groups = list(hist_groups)
    out: dict[str, Percentiles] = {}
    for metric in Metric:
        hists = [group[metric.value] for group in groups if metric.value in group]
        if hists:
            out[metric.value] = merged_percentiles(hists, buckets=buckets)
    return out


def class_stats(counts: Counts, latency: dict[str, Percentiles], window_s: float, timing_fallback: str) -> ClassStats:
    if counts.timed_exact and counts.timed_exact >= counts.requests:
        timing = CountSource.EXACT.value
    elif counts.timed_exact:
        timing = CountSource.MIXED.value
    else:
        timing = timing_fallback
    e2e = latency.get(Metric.E2E_CORRECTED.value)
    mid, tail = split_sums.split_at(counts.split, e2e.p50 if e2e else None, e2e.p99 if e2e else None)
    return ClassStats(
        requests=counts.requests,
        errors=dict(counts.errors),
        output_tokens=counts.output_tokens,
        latency=latency,
        acceptance=counts.acceptance(),
        structured_total=counts.structured_total,
        structured_failed=counts.structured_failed,
        timing_source=timing,
        window_s=window_s,
        split_p50=mid,
        split_tail=tail,
    )
