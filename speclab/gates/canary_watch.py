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

from speclab.metrics.cells import finish_time
from speclab.metrics.groups import group_stats
from speclab.model.names import INTERVAL_S, Metric
from speclab.model.records import Event, RequestRecord

from .spikes import link

SAMPLE_CHARS = 120
MAX_SAMPLES = 10


@dataclass
class CanaryWatch:
    failures: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    spikes: list[dict[str, Any]] = field(default_factory=list)
    structured_samples: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)


def _by_interval(records: Iterable[RequestRecord], interval_s: float) -> dict[int, list[RequestRecord]]:
    out: dict[int, list[RequestRecord]] = {}
    for r in records:
        if not r.warmup:
            out.setdefault(math.floor(finish_time(r) / interval_s), []).append(r)
    return out


def _class_means(records: Iterable[RequestRecord]) -> dict[str, float]:
    sums: dict[str, tuple[int, int]] = {}
    for r in records:
        d, a = sums.get(r.prompt_class, (0, 0))
        sums[r.prompt_class] = (d + r.spec.drafted, a + r.spec.accepted)
    return {c: 1.0 - a / d for c, (d, a) in sums.items() if d}


def _expected_rejection(rows: Iterable[RequestRecord], class_means: dict[str, float]) -> float | None:
    """The interval's rejection rate if each of its classes ran at its own mean (its class mix)."""
    drafted = sum(r.spec.drafted for r in rows if r.prompt_class in class_means)
    return sum(r.spec.drafted * class_means[r.prompt_class] for r in rows
               if r.prompt_class in class_means) / drafted if drafted else None


def _p99_ms(records: Sequence[RequestRecord]) -> float | None:
    e2e = group_stats(records).latency.get(Metric.E2E_CORRECTED.value)
    return None if e2e is None or e2e.p99 is None else e2e.p99 / 1000.0


def watch_canary(records: Sequence[RequestRecord], baseline: str, events: Sequence[Event], *,
                 max_structured_pct: float, max_p99_ratio: float, max_spike_points: float, min_interval_drafted: int,
                 interval_s: float = INTERVAL_S) -> CanaryWatch:
    out = CanaryWatch()
    speculative = sorted({r.variant for r in records if r.variant != baseline and r.backend is not None})
    plain = [r for r in records if r.variant == baseline and not r.warmup]
    plain_by = _by_interval(plain, interval_s)
    for variant in speculative:
        mine = [r for r in records if r.variant == variant and not r.warmup]
        stats = group_stats(mine)
        class_means = _class_means(mine)
        structured = stats.structured_failure_rate
        if structured is not None:
            line = (f"{variant}: structured-output failures {100 * structured:.1f}% "
                    f"({stats.structured_failed}/{stats.structured_total}) through the gateway")
            if 100 * structured > max_structured_pct:
                out.failures.append(f"{line}: above {max_structured_pct:g}%")
            else:
                out.details.append(line)
        p99, p99_plain = _p99_ms(mine), _p99_ms(plain)
        if p99 is not None and p99_plain:
            ratio = p99 / p99_plain
            line = f"{variant}: e2e p99 {p99:.0f} ms against the plain pool's {p99_plain:.0f} ms (x{ratio:.2f})"
            (out.failures if ratio > max_p99_ratio else out.details).append(
                line + (f": above x{max_p99_ratio:g}" if ratio > max_p99_ratio else ""))
            out.metrics.setdefault("p99_ratio", {})[variant] = round(ratio, 4)
        for index, rows in sorted(_by_interval(mine, interval_s).items()):
            t = index * interval_s
            acc = group_stats(rows).acceptance
            expected = _expected_rejection(rows, class_means)
            if expected is not None and acc.drafted >= min_interval_drafted and acc.rejection_rate is not None:
                points = 100 * (acc.rejection_rate - expected)
                if points > max_spike_points:
                    out.spikes.append({**link(t, f"{variant} rejection spike ({100 * acc.rejection_rate:.0f}%, "
                                                 f"{points:+.0f} points over what its class mix predicts)", events),
                                       "interval": index})
            failed = [r for r in rows if r.schema_valid is False]
            if failed:
                out.spikes.append({**link(t, f"{variant} structured-output failures ({len(failed)} in the "
                                             "interval)", events), "interval": index})
                for r in failed[: max(0, MAX_SAMPLES - len(out.structured_samples))]:
                    text = r.output_text if len(r.output_text) <= SAMPLE_CHARS else r.output_text[:SAMPLE_CHARS] + "…"
                    out.structured_samples.append({"request_id": r.request_id, "backend": r.backend,
                                                   "class": r.prompt_class, "t": round(finish_time(r), 3),
                                                   "output": text})
            mine_p99, plain_p99 = _p99_ms(rows), _p99_ms(plain_by.get(index, []))
            if mine_p99 is not None and plain_p99 and mine_p99 > max_p99_ratio * plain_p99:
                out.spikes.append({**link(t, f"{variant} p99 spike ({mine_p99:.0f} ms against the plain pool's "
                                             f"{plain_p99:.0f} ms)", events), "interval": index})
    out.details += [f"spike: {s['text']}" for s in out.spikes]
    out.metrics["spikes"] = out.spikes
    out.metrics["structured_samples"] = out.structured_samples
    return out
