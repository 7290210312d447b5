"""The summary of any set of records (a tenant in one phase of a drill, one backend's share of it).

Built from the same cells as every report (HDR histograms in µs, rates as ratios of sums), so a
tenant's p99 or rejection rate means exactly what a variant's does in report.json.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from speclab.model.names import CountSource, Metric
from speclab.model.records import RequestRecord
from speclab.model.snapshot import ClassStats

from .cells import Cell, HistogramPool, class_stats, percentiles_by_metric


def group_stats(records: Iterable[RequestRecord], window_s: float = 0.0) -> ClassStats:
    pool = HistogramPool(limit=16)
    cell = Cell()
    for record in records:
        cell.add_record(record, pool)
    return class_stats(cell.counts, percentiles_by_metric([cell.hists]), window_s, CountSource.NONE.value)


def _ms(us: float | None) -> float | None:
    return None if us is None else round(us / 1000.0, 3)


def _rate(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def group_summary(records: Iterable[RequestRecord], window_s: float = 0.0) -> dict[str, Any]:
    """The figures a drill compares before and after: counts, errors, corrected latency, acceptance."""
    stats = group_stats(records, window_s)
    e2e = stats.latency.get(Metric.E2E_CORRECTED.value)
    ttft = stats.latency.get(Metric.TTFT_CORRECTED.value)
    tpot = stats.latency.get(Metric.TPOT.value)
    acc = stats.acceptance
    return {
        "requests": stats.requests,
        "errors": stats.error_count,
        "error_kinds": dict(sorted(stats.errors.items())),
        "e2e_p50_ms": _ms(e2e.p50) if e2e else None,
        "e2e_p99_ms": _ms(e2e.p99) if e2e else None,
        "ttft_p50_ms": _ms(ttft.p50) if ttft else None,
        "ttft_p99_ms": _ms(ttft.p99) if ttft else None,
        "tpot_p50_ms": _ms(tpot.p50) if tpot else None,
        "acceptance_rate": _rate(acc.acceptance_rate),
        "rejection_rate": _rate(acc.rejection_rate),
        "acceptance_length": _rate(acc.acceptance_length),
        "drafted": acc.drafted,
        "acceptance_source": acc.source,
        "structured_total": stats.structured_total,
        "structured_failed": stats.structured_failed,
        "structured_failure_rate": _rate(stats.structured_failure_rate),
    }
