"""Structured output regressed on its own: failure rates per variant and class, and the fallback.

``structured_failure_rate`` = responses that fail their schema / regex ÷ responses that had one
(DESIGN.md). A request that errored produced no response, so it is counted apart, not as a schema
failure. In production a failed speculative response is retried on the non-speculative path; the
``FallbackLedger`` records each such retry and whether it succeeded, so the report can say how
many answers speculation broke and how many the fallback saved.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from speclab.model.gates import StructuredGate
from speclab.model.records import RequestRecord
from speclab.model.snapshot import ALL_CLASSES

from .result import STRUCTURED, StageResult


@dataclass(slots=True)
class StructuredCounts:
    total: int = 0  # responses that had a schema
    failed: int = 0
    errors: int = 0  # requests with a schema that got no response
    failed_ids: list[str] = field(default_factory=list)

    @property
    def failure_rate_pct(self) -> float | None:
        return 100.0 * self.failed / self.total if self.total else None


def structured_counts(records: Iterable[RequestRecord]) -> dict[str, dict[str, StructuredCounts]]:
    """variant -> class (and ``"all"``) -> counts, over records that carried a schema."""
    out: dict[str, dict[str, StructuredCounts]] = {}
    for record in records:
        if record.warmup:
            continue
        had_schema = record.schema_valid is not None or bool(record.prompt.get("schema") or record.prompt.get("has_schema"))
        if not had_schema:
            continue
        per_class = out.setdefault(record.variant, {})
        for key in (record.prompt_class, ALL_CLASSES):
            row = per_class.setdefault(key, StructuredCounts())
            if not record.ok:
                row.errors += 1
                continue
            row.total += 1
            if record.schema_valid is False:
                row.failed += 1
                if key != ALL_CLASSES:
                    row.failed_ids.append(record.request_id)
    return out


@dataclass(frozen=True, slots=True)
class Fallback:
    request_id: str
    variant: str
    prompt_class: str
    retry_request_id: str | None
    succeeded: bool
    reason: str


@dataclass(slots=True)
class FallbackLedger:
    """Which speculative responses broke their schema and what the baseline retry gave."""

    baseline: str
    entries: list[Fallback] = field(default_factory=list)

    def needs_fallback(self, record: RequestRecord) -> bool:
        return record.variant != self.baseline and record.ok and record.schema_valid is False

    def add(self, original: RequestRecord, retry: RequestRecord | None) -> Fallback:
        if retry is None:
            succeeded, reason = False, "no retry was made"
        elif not retry.ok:
            succeeded, reason = False, f"retry failed ({retry.error_kind}: {retry.error_message})"
        elif retry.schema_valid is False:
            succeeded, reason = False, "the baseline's answer also failed its schema"
        else:
            succeeded, reason = True, "the baseline's answer is valid"
        entry = Fallback(
            request_id=original.request_id, variant=original.variant, prompt_class=original.prompt_class,
            retry_request_id=None if retry is None else retry.request_id, succeeded=succeeded, reason=reason,
        )
        self.entries.append(entry)
        return entry

    def summary(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for entry in self.entries:
            row = out.setdefault(entry.variant, {"fell_back": 0, "fallback_ok": 0})
            row["fell_back"] += 1
            row["fallback_ok"] += int(entry.succeeded)
        return out


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}%"


def evaluate_structured(
    settings: StructuredGate,
    baseline: str,
    records: Iterable[RequestRecord],
    fallbacks: FallbackLedger | None = None,
) -> StageResult:
    """Speculative failure rate per class within the absolute ceiling and the baseline delta (exit 13).

    The rates are those before fallback: the fallback hides a broken answer from the user, not
    from the gate. The baseline's own rate is reported, and gates only as the reference.
    """
    counts = structured_counts(records)
    failures: list[str] = []
    details: list[str] = []
    if baseline not in counts:
        failures.append(f"no structured-output responses from the baseline {baseline!r}")
    base = counts.get(baseline, {})
    for variant in sorted(counts, key=lambda v: (v != baseline, v)):
        for prompt_class, row in sorted(counts[variant].items(), key=lambda kv: (kv[0] == ALL_CLASSES, kv[0])):
            rate = row.failure_rate_pct
            line = f"{variant} {prompt_class}: {row.failed}/{row.total} failed = {_pct(rate)}"
            if row.errors:
                line += f" ({row.errors} requests errored, not counted)"
            problems: list[str] = []
            if variant != baseline and rate is not None:
                base_rate = base.get(prompt_class, StructuredCounts()).failure_rate_pct
                if base_rate is not None:
                    line += f" (baseline {_pct(base_rate)}, delta {rate - base_rate:+.2f} points)"
                    if rate - base_rate > settings.max_delta_points + 1e-9:
                        problems.append(f"{line}: more than +{settings.max_delta_points} points over baseline")
                if rate > settings.max_failure_rate_pct + 1e-9:
                    problems.append(f"{line}: above the {settings.max_failure_rate_pct}% ceiling")
            if variant != baseline and row.total == 0 and row.errors:
                problems.append(f"{line}: no successful structured responses")
            if problems:
                failures.extend(dict.fromkeys(problems))
                if row.failed_ids:
                    details.append(f"  {variant} {prompt_class} failed: {', '.join(row.failed_ids[:10])}")
            else:
                details.append(line)
    metrics: dict[str, Any] = {
        "failure_rate_pct": {v: {c: r.failure_rate_pct for c, r in per.items()} for v, per in counts.items()},
    }
    if fallbacks is not None:
        metrics["fallbacks"] = fallbacks.summary()
        for variant, tally in sorted(fallbacks.summary().items()):
            details.append(
                f"{variant}: {tally['fell_back']} fell back to the baseline, {tally['fallback_ok']} of them recovered"
            )
        details.extend(
            f"  fallback {e.variant} {e.request_id}: {e.reason}" for e in fallbacks.entries if not e.succeeded
        )
    summary = (
        f"structured output: {len(failures)} class gates failed" if failures
        else "structured output: every speculative variant within the ceiling and the baseline delta"
    )
    return StageResult.of(STRUCTURED, failures, summary, details, metrics)
