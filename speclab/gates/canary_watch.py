"""The canary through a gateway, per interval: rejection spikes, structured-output failures and p99
against the plain pool, each spike linked to the nearest change before it.

Records carry the backend that answered them (their ``variant`` here), so the speculative pool's
intervals are compared with the baseline's over the same intervals. A structured-output failure
keeps a shortened sample of what came back, so the report shows what broke, not only a count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from speclab.metrics.cells import METRIC_VALUES, Counts, class_stats, finish_time
from speclab.metrics.hdr import EncodedHistogram, LatencyHistogram, merged_percentiles
from speclab.model.names import INTERVAL_S, CountSource, Metric
from speclab.model.records import Event, RequestRecord

from .spikes import link

SAMPLE_CHARS = 120
MAX_SAMPLES = 10
_E2E = METRIC_VALUES[Metric.E2E_CORRECTED]


@dataclass
class CanaryWatch:
    failures: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    spikes: list[dict[str, Any]] = field(default_factory=list)
    structured_samples: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class _Slice:
    """One variant's requests over some span: counts, an e2e (corrected) histogram, drafted per class."""

    counts: Counts = field(default_factory=Counts)
    e2e: EncodedHistogram | None = None
    class_sums: dict[str, tuple[int, int]] = field(default_factory=dict)  # class -> (drafted, accepted)
    schema_failed: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)  # the first MAX_SAMPLES schema failures

    def add(self, r: RequestRecord, hist: LatencyHistogram) -> None:
        self.counts.add_record(r)
        d, a = self.class_sums.get(r.prompt_class, (0, 0))
        self.class_sums[r.prompt_class] = (d + r.spec.drafted, a + r.spec.accepted)
        seconds = _E2E(r) if r.ok else None
        if seconds is not None:
            hist.record_s(seconds)
        if r.schema_valid is False:
            self.schema_failed += 1
            if len(self.samples) < MAX_SAMPLES:
                text = r.output_text if len(r.output_text) <= SAMPLE_CHARS else r.output_text[:SAMPLE_CHARS] + "…"
                self.samples.append({"request_id": r.request_id, "backend": r.backend, "class": r.prompt_class,
                                     "t": round(finish_time(r), 3), "output": text})

    def p99_ms(self) -> float | None:
        if self.e2e is None:
            return None
        p99 = merged_percentiles([self.e2e.decode()]).p99
        return None if p99 is None else p99 / 1000.0

    def class_means(self) -> dict[str, float]:
        return {c: 1.0 - a / d for c, (d, a) in self.class_sums.items() if d}

    def expected_rejection(self, class_means: dict[str, float]) -> float | None:
        """The rejection rate if each class ran at its own mean (its class mix)."""
        drafted = sum(d for c, (d, _) in self.class_sums.items() if c in class_means)
        return sum(d * class_means[c] for c, (d, _) in self.class_sums.items()
                   if c in class_means) / drafted if drafted else None


class CanaryWatchTally:
    """The watch's input, summed as records stream past: per backend its whole run and each of its
    intervals as a ``_Slice`` (histograms kept encoded), so nothing per request is kept."""

    def __init__(self, baseline: str, interval_s: float = INTERVAL_S) -> None:
        self.baseline = baseline
        self.interval_s = interval_s
        self.routed: set[str] = set()  # variants that a record reached through a backend
        self.whole: dict[str, _Slice] = {}
        self.intervals: dict[str, dict[int, _Slice]] = {}

    def add(self, records: Iterable[RequestRecord]) -> None:
        groups: dict[tuple[str, int], list[RequestRecord]] = {}
        for r in records:
            if r.variant != self.baseline and r.backend is not None:
                self.routed.add(r.variant)
            if not r.warmup:
                groups.setdefault((r.variant, math.floor(finish_time(r) / self.interval_s)), []).append(r)
        for (variant, index), rows in groups.items():
            whole = self.whole.setdefault(variant, _Slice())
            part = self.intervals.setdefault(variant, {}).setdefault(index, _Slice())
            whole_hist = whole.e2e.decode() if whole.e2e is not None else LatencyHistogram()
            part_hist = part.e2e.decode() if part.e2e is not None else LatencyHistogram()
            for r in rows:
                whole.add(r, whole_hist)
                part.add(r, part_hist)
            whole.e2e = EncodedHistogram.of(whole_hist) if whole_hist.count else None
            part.e2e = EncodedHistogram.of(part_hist) if part_hist.count else None


def watch_canary(records: CanaryWatchTally | Sequence[RequestRecord], baseline: str, events: Sequence[Event], *,
                 max_structured_pct: float, max_p99_ratio: float, max_spike_points: float, min_interval_drafted: int,
                 interval_s: float = INTERVAL_S) -> CanaryWatch:
    """Over the records, or the ``CanaryWatchTally`` they streamed into (made with the same baseline)."""
    if isinstance(records, CanaryWatchTally):
        tally = records
    else:
        tally = CanaryWatchTally(baseline, interval_s)
        tally.add(records)
    out = CanaryWatch()
    plain = tally.whole.get(baseline, _Slice())
    plain_by = tally.intervals.get(baseline, {})
    for variant in sorted(tally.routed):
        mine = tally.whole.get(variant, _Slice())
        stats = class_stats(mine.counts, {}, 0.0, CountSource.NONE.value)
        class_means = mine.class_means()
        structured = stats.structured_failure_rate
        if structured is not None:
            line = (f"{variant}: structured-output failures {100 * structured:.1f}% "
                    f"({stats.structured_failed}/{stats.structured_total}) through the gateway")
            if 100 * structured > max_structured_pct:
                out.failures.append(f"{line}: above {max_structured_pct:g}%")
            else:
                out.details.append(line)
        p99, p99_plain = mine.p99_ms(), plain.p99_ms()
        if p99 is not None and p99_plain:
            ratio = p99 / p99_plain
            line = f"{variant}: e2e p99 {p99:.0f} ms against the plain pool's {p99_plain:.0f} ms (x{ratio:.2f})"
            (out.failures if ratio > max_p99_ratio else out.details).append(
                line + (f": above x{max_p99_ratio:g}" if ratio > max_p99_ratio else ""))
            out.metrics.setdefault("p99_ratio", {})[variant] = round(ratio, 4)
        for index, part in sorted(tally.intervals.get(variant, {}).items()):
            t = index * tally.interval_s
            acc = part.counts.acceptance()
            expected = part.expected_rejection(class_means)
            if expected is not None and acc.drafted >= min_interval_drafted and acc.rejection_rate is not None:
                points = 100 * (acc.rejection_rate - expected)
                if points > max_spike_points:
                    out.spikes.append({**link(t, f"{variant} rejection spike ({100 * acc.rejection_rate:.0f}%, "
                                                 f"{points:+.0f} points over what its class mix predicts)", events),
                                       "interval": index})
            if part.schema_failed:
                out.spikes.append({**link(t, f"{variant} structured-output failures ({part.schema_failed} in the "
                                             "interval)", events), "interval": index})
                out.structured_samples.extend(part.samples[: max(0, MAX_SAMPLES - len(out.structured_samples))])
            plain_part = plain_by.get(index)
            mine_p99, plain_p99 = part.p99_ms(), plain_part.p99_ms() if plain_part is not None else None
            if mine_p99 is not None and plain_p99 and mine_p99 > max_p99_ratio * plain_p99:
                out.spikes.append({**link(t, f"{variant} p99 spike ({mine_p99:.0f} ms against the plain pool's "
                                             f"{plain_p99:.0f} ms)", events), "interval": index})
    out.details += [f"spike: {s['text']}" for s in out.spikes]
    out.metrics["spikes"] = out.spikes
    out.metrics["structured_samples"] = out.structured_samples
    return out
