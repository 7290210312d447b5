"""One plain progress line per second from the snapshot stream (no colours when not a terminal)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from speclab.model.names import INTERVAL_S, Metric
from speclab.model.snapshot import Snapshot, VariantStats

if TYPE_CHECKING:
    from speclab.metrics.aggregator import Aggregator


def _ms(us: int | None) -> str:
    return "–" if us is None else f"{us / 1000:.0f}"


def client_saturation(snap: Snapshot) -> tuple[int, int]:
    """(intervals in which the client's own sends were late, intervals of the run): what the exit
    judge weighs and the lab's summary quotes (late sends, not the intervals they echo into)."""
    return len(snap.saturated_sends or snap.saturated_intervals), max(snap.interval + 1, 1)


def progress_line(snap: Snapshot, *, whole_run: bool = False) -> str:
    """E.g. ``t=12s baseline 8.0 req/s p99 e2e 412ms err 0 | k4 8.0 req/s p99 390ms AL 2.71 rej 31% | client ok``."""
    parts = [f"t={snap.t:5.1f}s"]
    for name, vstats in snap.cumulative.items():
        total = vstats.total
        if whole_run:  # the run's rate, not its last (perhaps cut short) interval's
            rps = total.requests_per_s
        else:
            last = snap.intervals[-1].variants.get(name) if snap.intervals else snap.last_interval.get(name)
            rps = last.total.requests_per_s if last is not None else 0.0
        e2e = total.latency.get(Metric.E2E_CORRECTED.value)
        shown = vstats.label or name
        piece = f"{shown} {rps:.1f} req/s done {total.requests} p99 {_ms(e2e.p99 if e2e else None)}ms"
        al = total.acceptance.acceptance_length
        if al is not None:
            rej = total.acceptance.rejection_rate or 0.0
            piece += f" AL {al:.2f} rej {100 * rej:.0f}%"
        if total.error_count:
            piece += f" err {total.error_count}"
        if any(t.variant == name and t.end_s is None for t in snap.transitions):
            piece += " RELAUNCHING"
        parts.append(piece)
    # A line a second: the latest interval's client; a run's summary (``whole_run``): its worst interval's,
    # as the report has it (the last interval of a run cut short by q can hold nothing).
    health = snap.run_health if whole_run else snap.health
    if health.saturated and whole_run:  # how much of the run, as the judge counts it
        saturated, intervals = client_saturation(snap)
        parts.append(f"client saturated in {saturated} of {intervals} intervals (worst: {health.reason})")
    elif health.saturated:
        parts.append(f"CLIENT SATURATED ({health.reason})")
    else:
        worst = "worst interval: " if whole_run else ""
        parts.append(f"client {worst}lag p99 {health.schedule_lag_p99_ms:.1f}ms cpu {health.cpu_percent:.0f}%")
    if snap.paused:
        parts.append("PAUSED")
    return " | ".join(parts)


def interval_row(index: int, stats: dict[str, VariantStats], saturated: bool) -> dict[str, Any]:
    """One closed 1 s interval for the report's timeline (``t`` = its end on the run clock)."""
    variants: dict[str, Any] = {}
    for name, vstats in stats.items():
        total = vstats.total
        e2e = total.latency.get(Metric.E2E_CORRECTED.value)
        p99 = e2e.p99 if e2e is not None else None
        variants[name] = {
            "epoch": vstats.epoch,
            "requests": total.requests,
            "output_tokens": total.output_tokens,
            "errors": total.error_count,
            "acceptance_length": total.acceptance.acceptance_length,
            "rejection_rate": total.acceptance.rejection_rate,
            "e2e_p99_ms": None if p99 is None else round(p99 / 1000, 3),
        }
    return {"interval": index, "t": (index + 1) * INTERVAL_S, "client_saturated": saturated, "variants": variants}


def timeline_rows(aggregator: Aggregator, saturated: Iterable[int]) -> list[dict[str, Any]]:
    """The report's per-interval rows from the aggregator's stored intervals (warm-up excluded, late
    records included), so a live run and its replay give the same rows."""
    flagged = set(saturated)
    first = aggregator.first_retained_interval
    return [interval_row(index, aggregator.window(index, index), index in flagged)
            for index in range(first, aggregator.last_closed_interval + 1)]
