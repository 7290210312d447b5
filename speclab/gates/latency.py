"""The single-stream latency curve (exit 14) and the target-concurrency stress result (exit 15).

Both compare each speculative variant with the baseline measured on the same traffic, as ratios
of end-to-end percentiles, because speculation's promise is relative: faster when idle, and not
slower at peak. Inputs are per-variant summaries (``Percentiles`` from a snapshot or plain
numbers), so the same evaluation serves live runs, recordings and tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from speclab.model.gates import AcceptanceFloors, LatencyGate, StressGate
from speclab.model.names import Metric
from speclab.model.records import RequestRecord
from speclab.model.snapshot import ALL_CLASSES, AcceptanceStats, Percentiles, VariantStats

from .result import StageResult
from .stages import LATENCY_CURVE, STRESS


@dataclass(frozen=True, slots=True)
class LatencyPoint:
    """End-to-end latency at one load level, microseconds."""

    p50_us: float
    p99_us: float
    count: int = 0


LatencyInput = Union[LatencyPoint, Percentiles]


def as_point(value: LatencyInput) -> LatencyPoint | None:
    if isinstance(value, LatencyPoint):
        return value
    if value.count == 0 or value.p50 is None or value.p99 is None:
        return None
    return LatencyPoint(p50_us=float(value.p50), p99_us=float(value.p99), count=value.count)


@dataclass(slots=True)
class _Span:
    first_sent: float | None = None
    last_done: float | None = None
    output_tokens: int = 0


class BusySpans:
    """The stress gate's throughput input, summed as records stream past: per variant its output
    tokens over its own busy span (first send to last answer).

    The snapshot divides by the run's common window, which ends with the slowest variant, so
    every variant would show the same throughput for the same fixed set of requests.
    """

    def __init__(self) -> None:
        self._spans: dict[str, _Span] = {}

    def add(self, records: Iterable[RequestRecord]) -> None:
        for r in records:
            span = self._spans.setdefault(r.variant, _Span())
            if r.sent is not None:
                span.first_sent = r.sent if span.first_sent is None else min(span.first_sent, r.sent)
            if r.ok and r.done is not None:
                span.last_done = r.done if span.last_done is None else max(span.last_done, r.done)
            if r.ok:
                span.output_tokens += r.output_tokens

    def throughput(self, variant: str) -> float:
        """Output tokens per second over the variant's busy span (0 when it has none)."""
        span = self._spans.get(variant, _Span())
        if span.first_sent is None or span.last_done is None or span.last_done <= span.first_sent:
            return 0.0
        return span.output_tokens / (span.last_done - span.first_sent)


def _ms(us: float) -> str:
    return f"{us / 1000:.1f} ms"


def evaluate_latency_curve(
    settings: LatencyGate, baseline: str, curve: Mapping[str, Mapping[int, LatencyInput]]
) -> StageResult:
    """``curve``: variant -> concurrency level -> e2e latency. Every level in the settings is gated."""
    failures: list[str] = []
    details: list[str] = []
    ratios: dict[str, dict[int, dict[str, float]]] = {}
    base_curve = curve.get(baseline, {})
    for variant in sorted(v for v in curve if v != baseline):
        for level in settings.concurrency:
            label = f"{variant} concurrency {level}"
            base_raw, spec_raw = base_curve.get(level), curve[variant].get(level)
            base = as_point(base_raw) if base_raw is not None else None
            spec = as_point(spec_raw) if spec_raw is not None else None
            if base is None or spec is None or base.p99_us <= 0 or base.p50_us <= 0:
                missing = "baseline" if base is None or base.p99_us <= 0 else variant
                failures.append(f"{label}: no latency measured for {missing}")
                continue
            p50_ratio, p99_ratio = spec.p50_us / base.p50_us, spec.p99_us / base.p99_us
            ratios.setdefault(variant, {})[level] = {"p50_ratio": p50_ratio, "p99_ratio": p99_ratio}
            line = (
                f"{label}: p50 {_ms(spec.p50_us)} vs {_ms(base.p50_us)} (×{p50_ratio:.2f}), "
                f"p99 {_ms(spec.p99_us)} vs {_ms(base.p99_us)} (×{p99_ratio:.2f}, limit ×{settings.max_p99_ratio:.2f})"
            )
            problems = []
            if p99_ratio > settings.max_p99_ratio:
                problems.append(f"{line}: p99 ratio above the limit")
            if settings.max_p50_ratio is not None and p50_ratio > settings.max_p50_ratio:
                problems.append(f"{line}: p50 ratio above ×{settings.max_p50_ratio:.2f}")
            failures.extend(problems)
            if not problems:
                details.append(line)
    if len(curve) < 2:
        failures.append(f"latency curve: need the baseline and at least one speculative variant, got {sorted(curve)}")
    crossover: dict[str, int | None] = {
        v: next((lvl for lvl, r in sorted(levels.items()) if r["p50_ratio"] >= 1.0), None)
        for v, levels in ratios.items()
    }
    for variant, crossing in sorted(crossover.items()):
        details.append(
            f"{variant}: speculation stops paying off (p50) at concurrency {crossing}" if crossing is not None
            else f"{variant}: faster than baseline (p50) at every level measured"
        )
    summary = (
        f"latency curve: {len(failures)} levels over the limit" if failures
        else f"latency curve: p99 within ×{settings.max_p99_ratio:.2f} of baseline at concurrency {settings.concurrency}"
    )
    return StageResult.of(LATENCY_CURVE, failures, summary, details, {"ratios": ratios, "crossover": crossover})


@dataclass(frozen=True, slots=True)
class StressSummary:
    """One variant at the target concurrency: e2e p99, throughput, errors, acceptance per class."""

    p99_e2e_us: float
    throughput: float  # output tokens per second
    requests: int
    errors: int = 0
    acceptance: Mapping[str, AcceptanceStats] = field(default_factory=dict)

    @classmethod
    def from_variant_stats(cls, stats: VariantStats) -> StressSummary:
        total = stats.total
        latency = total.latency.get(Metric.E2E_CORRECTED.value) or total.latency.get(Metric.E2E.value)
        p99 = latency.p99 if latency is not None else None
        return cls(
            p99_e2e_us=float(p99 or 0.0),
            throughput=total.output_tokens_per_s,
            requests=total.requests,
            errors=total.error_count,
            acceptance={c: s.acceptance for c, s in stats.classes.items() if c != ALL_CLASSES},
        )


def acceptance_floor_failures(
    variant: str, acceptance: Mapping[str, AcceptanceStats], floors: AcceptanceFloors
) -> tuple[list[str], list[str]]:
    """(failures, details) for each class's mean acceptance length against its floor.

    ``variant`` is speculative (callers skip the baseline): a class with a floor but no acceptance
    counts fails it, since a floor nobody measured is not met.
    """
    failures: list[str] = []
    details: list[str] = []
    for prompt_class, stats in sorted(acceptance.items()):
        floor = floors.floor(prompt_class)
        length = stats.acceptance_length
        if length is None:
            line = f"{variant} {prompt_class}: no acceptance data (no verify steps reported for a speculative variant)"
            if floor is not None:
                failures.append(f"{line}: cannot meet the floor {floor:.2f}")
            else:
                details.append(line)
            continue
        rate = stats.acceptance_rate
        line = f"{variant} {prompt_class}: acceptance length {length:.2f}" + (
            f", rejection rate {100 * (1 - rate):.1f}%" if rate is not None else ""
        )
        if floor is not None and length < floor:
            failures.append(f"{line}: below the floor {floor:.2f}")
        else:
            details.append(line + (f" (floor {floor:.2f})" if floor is not None else ""))
    return failures, details


def evaluate_stress(
    settings: StressGate, floors: AcceptanceFloors, baseline: str, summaries: Mapping[str, StressSummary]
) -> StageResult:
    """At the target concurrency: p99 and throughput ratios, errors, acceptance floors under load."""
    failures: list[str] = []
    details: list[str] = []
    ratios: dict[str, dict[str, float]] = {}
    base = summaries.get(baseline)
    if base is None or base.p99_e2e_us <= 0 or base.throughput <= 0:
        failures.append(f"stress: no latency or throughput measured for the baseline {baseline!r}")
    for variant in sorted(summaries, key=lambda v: (v != baseline, v)):
        summary = summaries[variant]
        attempted = summary.requests + summary.errors
        error_pct = 100.0 * summary.errors / attempted if attempted else 0.0
        if not attempted:
            failures.append(f"{variant}: no requests completed under stress")
            continue
        if error_pct > settings.max_error_rate_pct:
            failures.append(
                f"{variant}: {summary.errors}/{attempted} requests failed under stress "
                f"({error_pct:.1f}% > {settings.max_error_rate_pct}%)"
            )
        if variant == baseline or base is None or base.p99_e2e_us <= 0 or base.throughput <= 0:
            details.append(f"{variant}: p99 {_ms(summary.p99_e2e_us)}, {summary.throughput:.0f} tok/s")
            continue
        p99_ratio = summary.p99_e2e_us / base.p99_e2e_us
        tput_ratio = summary.throughput / base.throughput
        ratios[variant] = {"p99_ratio": p99_ratio, "throughput_ratio": tput_ratio}
        line = (
            f"{variant} at concurrency {settings.concurrency}: p99 {_ms(summary.p99_e2e_us)} (×{p99_ratio:.2f}, "
            f"limit ×{settings.max_p99_ratio:.2f}), throughput {summary.throughput:.0f} tok/s "
            f"(×{tput_ratio:.2f}, floor ×{settings.min_throughput_ratio:.2f})"
        )
        problems = []
        if p99_ratio > settings.max_p99_ratio:
            problems.append(f"{line}: p99 ratio above the limit")
        if tput_ratio < settings.min_throughput_ratio:
            problems.append(f"{line}: throughput ratio below the floor")
        failures.extend(problems)
        if not problems:
            details.append(line)
        floor_failures, floor_details = acceptance_floor_failures(variant, summary.acceptance, floors)
        failures.extend(f"{line} under load" for line in floor_failures)
        details.extend(floor_details)
    summary_line = (
        f"concurrency stress: {len(failures)} problems at concurrency {settings.concurrency}" if failures
        else f"concurrency stress: speculation holds up at concurrency {settings.concurrency}"
    )
    metrics: dict[str, Any] = {"ratios": ratios, "concurrency": settings.concurrency}
    return StageResult.of(STRESS, failures, summary_line, details, metrics)
