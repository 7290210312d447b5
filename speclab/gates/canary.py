"""The canary slice (exit 16): rejection rate per class, its per-interval spikes, and complaints.

A mean rejection rate can look healthy while single intervals spike — the signal that a draft
version or a routing change went wrong for one class. Requests belong to the interval in which
they finished (docs/file-formats.md); rates are ratios of sums. Intervals with too few drafted tokens
are not judged for spikes, since a handful of drafts makes any rate look extreme. The row of all
classes compares each interval with what its own class mix predicts (each class at its mean rate),
so an interval that happened to hold mostly the hardest class is not called a spike.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from speclab.model.acceptance import rejection_rate
from speclab.model.gates import AcceptanceFloors, CanaryGate
from speclab.model.names import INTERVAL_S
from speclab.model.records import RequestRecord
from speclab.model.snapshot import ALL_CLASSES, AcceptanceStats

from .latency import acceptance_floor_failures
from .result import StageResult
from .stages import CANARY


@dataclass(slots=True)
class RejectionSeries:
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    requests: int = 0
    per_interval: dict[int, tuple[int, int]] = field(default_factory=dict)  # interval -> (drafted, accepted)

    @property
    def rejection_pct(self) -> float | None:
        rate = rejection_rate(self.accepted, self.drafted)
        return None if rate is None else 100.0 * rate

    def interval_rejection_pct(self, min_drafted: int) -> dict[int, float]:
        return {i: 100.0 * (1.0 - a / d) for i, (d, a) in sorted(self.per_interval.items()) if d >= min_drafted}

    def interval_excess_points(self, min_drafted: int, expected_pct: dict[int, float] | None = None) -> dict[int, float]:
        """Points by which each judged interval exceeds its expectation: the row's mean, or ``expected_pct``."""
        mean = self.rejection_pct or 0.0
        return {i: pct - (expected_pct or {}).get(i, mean)
                for i, pct in self.interval_rejection_pct(min_drafted).items()}

    def acceptance(self) -> AcceptanceStats:
        return AcceptanceStats(requests=self.requests, steps=self.steps, drafted=self.drafted, accepted=self.accepted)


class CanaryTally:
    """The canary gate's input, summed as records stream past: per variant, class and ``"all"`` the
    speculative sums and their per-interval (drafted, accepted), and per variant (errors, attempted)."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.series: dict[str, dict[str, RejectionSeries]] = {}
        self.errors: dict[str, tuple[int, int]] = {}

    def add(self, records: Iterable[RequestRecord]) -> None:
        for record in records:
            if record.warmup:
                continue
            failed, attempted = self.errors.get(record.variant, (0, 0))
            self.errors[record.variant] = (failed + (not record.ok), attempted + 1)
            if not record.ok or record.done is None or record.spec.drafted == 0:
                continue
            interval = math.floor(record.done / self.interval_s)
            per_class = self.series.setdefault(record.variant, {})
            for key in (record.prompt_class, ALL_CLASSES):
                row = per_class.setdefault(key, RejectionSeries())
                row.steps += record.spec.steps
                row.drafted += record.spec.drafted
                row.accepted += record.spec.accepted
                row.requests += 1
                d, a = row.per_interval.get(interval, (0, 0))
                row.per_interval[interval] = (d + record.spec.drafted, a + record.spec.accepted)


def rejection_series(
    records: Iterable[RequestRecord], interval_s: float = INTERVAL_S
) -> tuple[dict[str, dict[str, RejectionSeries]], dict[str, tuple[int, int]]]:
    """(variant -> class and ``"all"`` -> series, variant -> (errors, attempted))."""
    tally = CanaryTally(interval_s)
    tally.add(records)
    return tally.series, tally.errors


def class_mix_expectation(per_class: dict[str, RejectionSeries]) -> dict[int, float]:
    """Per interval, the rejection (%) its drafted tokens would show if every class ran at its own mean."""
    expected: dict[int, tuple[float, int]] = {}
    for prompt_class, row in per_class.items():
        if prompt_class == ALL_CLASSES or row.rejection_pct is None:
            continue
        for i, (d, _) in row.per_interval.items():
            rejected, drafted = expected.get(i, (0.0, 0))
            expected[i] = (rejected + d * row.rejection_pct, drafted + d)
    return {i: rejected / drafted for i, (rejected, drafted) in expected.items() if drafted}


def evaluate_canary(
    settings: CanaryGate,
    floors: AcceptanceFloors,
    baseline: str,
    records: CanaryTally | Iterable[RequestRecord],
    interval_s: float = INTERVAL_S,
) -> StageResult:
    """Rejection-rate ceiling and spike limit per class of every speculative variant, error rate of all
    (over the records, or the ``CanaryTally`` they streamed into)."""
    if isinstance(records, CanaryTally):
        series, errors = records.series, records.errors
    else:
        series, errors = rejection_series(records, interval_s)
    failures: list[str] = []
    details: list[str] = []
    spikes: dict[str, dict[str, float]] = {}
    for variant, (failed, attempted) in sorted(errors.items()):
        pct = 100.0 * failed / attempted if attempted else 0.0
        line = f"{variant}: {failed}/{attempted} canary requests failed ({pct:.1f}%)"
        (failures if pct > settings.max_error_rate_pct else details).append(
            line + (f", above {settings.max_error_rate_pct}%" if pct > settings.max_error_rate_pct else "")
        )
    for variant in sorted(v for v in errors if v != baseline):
        per_class = series.get(variant, {})
        if not per_class:
            failures.append(f"{variant}: no speculative counts in the canary (no drafts reported)")
            continue
        for prompt_class, row in sorted(per_class.items(), key=lambda kv: (kv[0] == ALL_CLASSES, kv[0])):
            rate = row.rejection_pct
            if rate is None:
                continue
            by_interval = row.interval_rejection_pct(settings.min_interval_drafted)
            excess = row.interval_excess_points(
                settings.min_interval_drafted, class_mix_expectation(per_class) if prompt_class == ALL_CLASSES else None)
            label = f"{variant} {prompt_class}"
            line = f"{label}: rejection rate {rate:.1f}% over {row.drafted} drafted tokens"
            if rate > settings.max_rejection_rate_pct:
                failures.append(f"{line}: above the {settings.max_rejection_rate_pct}% ceiling")
            else:
                details.append(line)
            if by_interval:
                worst = max(excess, key=excess.__getitem__)
                spike = excess[worst]
                spikes.setdefault(variant, {})[prompt_class] = spike
                against = "what its class mix predicts" if prompt_class == ALL_CLASSES else "the mean"
                spike_line = (
                    f"{label}: worst interval {worst} at {by_interval[worst]:.1f}% rejection, "
                    f"{spike:+.1f} points over {against} (limit {settings.max_spike_points}, "
                    f"{len(by_interval)} intervals judged)"
                )
                if spike > settings.max_spike_points:
                    failures.append(f"{spike_line}: rejection spike")
                else:
                    details.append(spike_line)
        acceptance = {c: r.acceptance() for c, r in per_class.items() if c != ALL_CLASSES}
        floor_failures, floor_details = acceptance_floor_failures(variant, acceptance, floors)
        failures.extend(floor_failures)
        details.extend(floor_details)
    metrics = {
        "rejection_pct": {v: {c: r.rejection_pct for c, r in per.items()} for v, per in series.items()},
        "spike_points": spikes,
    }
    summary = (
        f"canary: {len(failures)} problems" if failures
        else "canary: rejection rate and its spikes within limits for every class"
    )
    return StageResult.of(CANARY, failures, summary, details, metrics)
