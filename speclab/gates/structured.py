"""Structured output regressed on its own: failure rates per variant and class, and the fallback.

``structured_failure_rate`` = responses that fail their constraint ÷ responses that had one
(docs/measurements.md), judged by validity and length rather than status codes: an answer that breaks its
schema fails; an answer cut at ``max_tokens`` (``finish_reason`` "length") fails where the baseline
finished the same request, valid JSON or not and HTTP 200 or not (vLLM issue #55313's runaway
whitespace), and is not held against the variant where the baseline was cut too. A request that
errored produced no response, so it is counted apart. In production a failed speculative
response is retried on the non-speculative path; the ``FallbackLedger`` records each such retry,
and a variant whose rate passes the ceiling gets the fallback named: route that class to the
baseline.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from speclab.model.gates import StructuredGate
from speclab.model.records import RequestRecord
from speclab.model.snapshot import ALL_CLASSES

from .result import StageResult
from .stages import STRUCTURED

EXAMPLES: Final = 3  # failure examples kept per variant and class
INVALID: Final = "invalid"
CUT_SHORT: Final = "cut at max_tokens where the baseline finished"


@dataclass(slots=True)
class StructuredCounts:
    total: int = 0  # responses that had a schema
    failed: int = 0
    errors: int = 0  # requests with a schema that got no response
    truncated_like_baseline: int = 0  # cut at max_tokens where the baseline was cut too: not failures
    failed_ids: list[str] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    @property
    def failure_rate_pct(self) -> float | None:
        return 100.0 * self.failed / self.total if self.total else None


def shorten(text: str, head: int = 48, tail: int = 16) -> str:
    """An answer as a report line shows it: its start and end, whitespace runs made visible."""
    shown = text if len(text) <= head + tail + 1 else f"{text[:head]}…{text[-tail:]}"
    return repr(shown) + (f" ({len(text)} chars)" if len(text) > head + tail + 1 else "")


def _request_key(record: RequestRecord) -> str:
    """The same request across variants: the plan's index, else the id without the variant suffix."""
    index = record.prompt.get("index")
    if index is not None:
        return f"{record.prompt_class}#{index}"
    suffix = f"-{record.variant}"
    return record.request_id[: -len(suffix)] if record.request_id.endswith(suffix) else record.request_id


def _verdict(record: RequestRecord, baseline: RequestRecord | None) -> str | None:
    """Why an answer fails its constraint (None: it does not); ``baseline`` is the same request there."""
    if record.finish_reason == "length":
        if baseline is not None and baseline.ok and baseline.finish_reason not in (None, "length"):
            ws = len(record.output_text) - len(record.output_text.rstrip())
            return CUT_SHORT + (f" (trailing whitespace: {ws} chars)" if ws >= 8 else "")
        if baseline is not None or record.schema_valid is not False:
            return ""
    return INVALID if record.schema_valid is False else None


def structured_counts(records: Iterable[RequestRecord],
                      baseline: str | None = None) -> dict[str, dict[str, StructuredCounts]]:
    """variant -> class (and ``"all"``) -> counts, over records that carried a schema.

    With ``baseline`` named, an answer cut at max_tokens is judged against the baseline's answer to
    the same request (a failure where it finished); the baseline's own cut answers are not failures.
    """
    kept = [r for r in records if not r.warmup and (
        r.schema_valid is not None or bool(r.prompt.get("schema") or r.prompt.get("has_schema")))]
    reference = {_request_key(r): r for r in kept if r.variant == baseline and r.ok}
    out: dict[str, dict[str, StructuredCounts]] = {}
    for record in kept:
        per_class = out.setdefault(record.variant, {})
        if not record.ok:
            verdict = None
        elif record.variant == baseline:
            verdict = "" if record.finish_reason == "length" else _verdict(record, None)
        else:
            verdict = _verdict(record, reference.get(_request_key(record)) if baseline is not None else None)
        for key in (record.prompt_class, ALL_CLASSES):
            row = per_class.setdefault(key, StructuredCounts())
            if not record.ok:
                row.errors += 1
                continue
            row.total += 1
            if verdict == "":
                row.truncated_like_baseline += 1
            elif verdict is not None:
                row.failed += 1
                reason = verdict.split(" (")[0]
                row.reasons[reason] = row.reasons.get(reason, 0) + 1
                if key != ALL_CLASSES:
                    row.failed_ids.append(record.request_id)
                if len(row.examples) < EXAMPLES:
                    row.examples.append(f"{record.request_id}: {verdict}: {shorten(record.output_text)}")
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
        """A speculative answer that breaks its schema or is cut at max_tokens (the baseline may finish it)."""
        return record.variant != self.baseline and record.ok and (
            record.schema_valid is False or record.finish_reason == "length")

    def add(self, original: RequestRecord, retry: RequestRecord | None) -> Fallback:
        if retry is None:
            succeeded, reason = False, "no retry was made"
        elif not retry.ok:
            succeeded, reason = False, f"retry failed ({retry.error_kind}: {retry.error_message})"
        elif retry.schema_valid is False:
            succeeded, reason = False, "the baseline's answer also failed its schema"
        elif retry.finish_reason == "length":
            succeeded, reason = False, "the baseline's answer was also cut at max_tokens"
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
    counts = structured_counts(records, baseline)
    failures: list[str] = []
    details: list[str] = []
    routes: list[dict[str, Any]] = []
    if baseline not in counts:
        failures.append(f"no structured-output responses from the baseline {baseline!r}")
    base = counts.get(baseline, {})
    for variant in sorted(counts, key=lambda v: (v != baseline, v)):
        for prompt_class, row in sorted(counts[variant].items(), key=lambda kv: (kv[0] == ALL_CLASSES, kv[0])):
            rate = row.failure_rate_pct
            line = f"{variant} {prompt_class}: {row.failed}/{row.total} failed = {_pct(rate)}"
            if row.errors:
                line += f" ({row.errors} requests errored, not counted)"
            if row.truncated_like_baseline:
                line += f" ({row.truncated_like_baseline} cut at max_tokens as the baseline's were, not failures)"
            problems: list[str] = []
            if variant != baseline and rate is not None:
                base_rate = base.get(prompt_class, StructuredCounts()).failure_rate_pct
                if base_rate is not None:
                    line += f" (baseline {_pct(base_rate)}, delta {rate - base_rate:+.2f} points)"
                    if rate - base_rate > settings.max_delta_points + 1e-9:
                        problems.append(f"{line}: more than +{settings.max_delta_points} points over baseline")
                if rate > settings.max_failure_rate_pct + 1e-9:
                    problems.append(f"{line}: above the {settings.max_failure_rate_pct}% ceiling")
                    if prompt_class != ALL_CLASSES:
                        routes.append({"variant": variant, "class": prompt_class, "route_to": baseline,
                                       "failure_rate_pct": rate, "ceiling_pct": settings.max_failure_rate_pct})
            if variant != baseline and row.total == 0 and row.errors:
                problems.append(f"{line}: no successful structured responses")
            if problems:
                failures.extend(dict.fromkeys(problems))
            else:
                details.append(line)
            if row.failed and prompt_class != ALL_CLASSES:
                why = ", ".join(f"{n} {reason}" for reason, n in sorted(row.reasons.items()))
                details.append(f"  {variant} {prompt_class} failures: {why}; first {len(row.examples)}:")
                details.extend(f"    {example}" for example in row.examples)
    details.extend(f"fallback: route {r['class']} from {r['variant']} to the baseline {r['route_to']!r} "
                   f"({_pct(r['failure_rate_pct'])} > the {r['ceiling_pct']}% ceiling)" for r in routes)
    metrics: dict[str, Any] = {
        "failure_rate_pct": {v: {c: r.failure_rate_pct for c, r in per.items()} for v, per in counts.items()},
        "failure_reasons": {v: {c: dict(r.reasons) for c, r in per.items() if r.reasons} for v, per in counts.items()},
        "examples": {v: {c: list(r.examples) for c, r in per.items() if r.examples and c != ALL_CLASSES}
                     for v, per in counts.items()},
        "fallback_routes": routes,
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
