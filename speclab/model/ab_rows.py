"""The rows of an A/B comparison and how a change between two sides is stated.

Shared by the app's A/B tab and the report, so both say the same thing: a change in a rate (a
fraction such as the rejection rate) is a difference in percentage points, a change in a time or a
throughput is relative, in percent, and a change in a count of errors is a difference.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .names import Metric
from .snapshot import ClassStats

Kind = Literal["count", "throughput", "ratio", "rate", "time"]


@dataclass(frozen=True, slots=True)
class ABRow:
    key: str
    label: str
    kind: Kind
    value: Callable[[ClassStats], float | None]


def _latency(metric: Metric, point: float | None) -> Callable[[ClassStats], float | None]:
    def get(stats: ClassStats) -> float | None:
        p = stats.latency.get(metric.value)
        if p is None or not p.count:
            return None
        value = p.mean if point is None else p.at(point)
        return None if value is None else float(value)

    return get


def ab_rows(corrected: bool) -> tuple[ABRow, ...]:
    e2e = Metric.E2E_CORRECTED if corrected else Metric.E2E
    ttft = Metric.TTFT_CORRECTED if corrected else Metric.TTFT
    view = "corrected" if corrected else "uncorrected"
    return (
        ABRow("requests", "requests", "count", lambda s: float(s.requests)),
        ABRow("rps", "requests/s", "throughput", lambda s: s.requests_per_s if s.window_s else None),
        ABRow("tps", "output tokens/s", "throughput", lambda s: s.output_tokens_per_s if s.window_s else None),
        ABRow("len", "acceptance length", "ratio", lambda s: s.acceptance.acceptance_length),
        ABRow("rej", "rejection rate", "rate", lambda s: s.acceptance.rejection_rate),
        ABRow("json", "JSON failure rate", "rate", lambda s: s.structured_failure_rate),
        ABRow("e2e_mean", f"e2e mean ({view})", "time", _latency(e2e, None)),
        ABRow("e2e_p50", f"e2e p50 ({view})", "time", _latency(e2e, 50.0)),
        ABRow("e2e_p99", f"e2e p99 ({view})", "time", _latency(e2e, 99.0)),
        ABRow("ttft_p99", f"TTFT p99 ({view})", "time", _latency(ttft, 99.0)),
        ABRow("tpot_p50", "TPOT p50", "time", _latency(Metric.TPOT, 50.0)),
        ABRow("errors", "errors", "count", lambda s: float(s.error_count)),
    )


def change_text(kind: Kind, new: float | None, old: float | None, none: str = "—") -> str:
    """``+0.7 pts`` for rates, ``-12.5%`` for times, throughputs and ratios, ``+3`` for counts."""
    if new is None or old is None:
        return none
    if kind == "rate":
        return f"{(new - old) * 100:+.1f} pts"
    if kind == "count":
        return f"{new - old:+.0f}"
    if old == 0:
        return none
    return f"{(new - old) / old * 100:+.1f}%"
