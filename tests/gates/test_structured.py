from __future__ import annotations

from speclab.gates.structured import FallbackLedger, evaluate_structured, shorten, structured_counts
from speclab.model.gates import StructuredGate
from speclab.model.records import RequestRecord


def rec(variant: str, i: int, valid: bool | None, cls: str = "tool_call", error: str | None = None) -> RequestRecord:
    return RequestRecord(
        request_id=f"{variant}-{cls}-{i}", variant=variant, prompt_class=cls, intended=0.0, done=1.0,
        schema_valid=valid, error_kind=error,
    )


def arm(variant: str, n: int, failed: int, cls: str = "tool_call") -> list[RequestRecord]:
    return [rec(variant, i, i >= failed, cls) for i in range(n)]


def test_failure_rates_per_variant_and_class() -> None:
    records = [*arm("baseline", 100, 0), *arm("k2", 100, 3), rec("k2", 999, None, "factual_qa"),
               rec("k2", 1000, None, error="http_5xx")]
    counts = structured_counts(records)
    assert counts["k2"]["tool_call"].failure_rate_pct == 3.0
    assert counts["k2"]["tool_call"].errors == 0  # schema_valid None and an error: no schema known
    assert "factual_qa" not in counts["k2"]
    assert counts["k2"]["all"].total == 100
    assert counts["baseline"]["tool_call"].failure_rate_pct == 0.0


def test_gate_ceiling_and_delta() -> None:
    settings = StructuredGate(max_failure_rate_pct=1.0, max_delta_points=0.5)
    clean = evaluate_structured(settings, "baseline", [*arm("baseline", 200, 0), *arm("k2", 200, 1)])
    assert clean.passed, clean.details  # 0.5% and +0.5 points are inside both limits
    broken = evaluate_structured(settings, "baseline", [*arm("baseline", 200, 0), *arm("k2", 200, 4)])
    assert not broken.passed and broken.exit_code == 13
    assert "FAIL k2 tool_call: 4/200 failed = 2.00% (baseline 0.00%, delta +2.00 points): more than +0.5 points over baseline" in broken.details
    assert any(d.endswith("above the 1.0% ceiling") for d in broken.details)
    # a bad baseline does not excuse the variant beyond the ceiling, but the delta is relative to it
    relative = evaluate_structured(StructuredGate(max_failure_rate_pct=5.0), "baseline",
                                   [*arm("baseline", 100, 4), *arm("k2", 100, 4)])
    assert relative.passed


def test_fallback_bookkeeping() -> None:
    ledger = FallbackLedger(baseline="baseline")
    spec = arm("k2", 10, 2)
    failed = [r for r in spec if ledger.needs_fallback(r)]
    assert [r.request_id for r in failed] == ["k2-tool_call-0", "k2-tool_call-1"]
    assert not ledger.needs_fallback(rec("baseline", 0, False))
    ledger.add(failed[0], rec("baseline", 50, True))
    entry = ledger.add(failed[1], rec("baseline", 51, False))
    assert not entry.succeeded and "also failed" in entry.reason
    assert ledger.summary() == {"k2": {"fell_back": 2, "fallback_ok": 1}}
    result = evaluate_structured(StructuredGate(), "baseline", [*arm("baseline", 10, 0), *spec], ledger)
    assert "k2: 2 fell back to the baseline, 1 of them recovered" in result.details
    assert result.metrics["fallbacks"] == {"k2": {"fell_back": 2, "fallback_ok": 1}}
    assert not result.passed


def answer(variant: str, i: int, text: str, finish: str, valid: bool) -> RequestRecord:
    return RequestRecord(
        request_id=f"tool_call-{i}-{variant}", variant=variant, prompt_class="tool_call", intended=0.0, done=1.0,
        schema_valid=valid, finish_reason=finish, output_text=text, http_status=200,
        prompt={"index": i, "schema": {"type": "object"}},
    )


def test_cut_at_max_tokens_fails_only_where_the_baseline_finished() -> None:
    value = '{"name": "get_weather", "arguments": {"city": "Oslo"}}'
    runaway = value + " " * 400
    records = [
        answer("baseline", 0, value, "stop", True), answer("k4", 0, runaway, "length", True),  # runaway, HTTP 200
        answer("baseline", 1, '{"name": "get_we', "length", False), answer("k4", 1, '{"name": "ge', "length", False),
        answer("baseline", 2, value, "stop", True), answer("k4", 2, value, "stop", True),
    ]
    counts = structured_counts(records, "baseline")
    k4, base = counts["k4"]["tool_call"], counts["baseline"]["tool_call"]
    assert (k4.total, k4.failed, k4.truncated_like_baseline) == (3, 1, 1)
    assert (base.failed, base.truncated_like_baseline) == (0, 1)
    assert k4.reasons == {"cut at max_tokens where the baseline finished": 1}
    assert k4.examples == ["tool_call-0-k4: cut at max_tokens where the baseline finished (trailing whitespace: "
                           f"400 chars): {shorten(runaway)}"]
    assert shorten(runaway).endswith("' (454 chars)") and len(shorten(runaway)) < 90
    result = evaluate_structured(StructuredGate(), "baseline", records)
    assert not result.passed and result.exit_code == 13
    assert any("1 cut at max_tokens as the baseline's were" in d for d in result.details)


def test_failure_examples_per_class_and_variant_and_the_fallback_route() -> None:
    records = [answer("baseline", i, "{}", "stop", True) for i in range(20)]
    records += [answer("k4", i, '{"a": 1}}' if i < 5 else "{}", "stop", i >= 5) for i in range(20)]
    result = evaluate_structured(StructuredGate(max_failure_rate_pct=10.0, max_delta_points=50.0), "baseline", records)
    assert not result.passed
    examples = result.metrics["examples"]["k4"]["tool_call"]
    assert examples == [f"tool_call-{i}-k4: invalid: '{{\"a\": 1}}}}'" for i in range(3)]
    assert "  k4 tool_call failures: 5 invalid; first 3:" in result.details
    assert result.metrics["fallback_routes"] == [{"variant": "k4", "class": "tool_call", "route_to": "baseline",
                                                  "failure_rate_pct": 25.0, "ceiling_pct": 10.0}]
    assert "fallback: route tool_call from k4 to the baseline 'baseline' (25.00% > the 10.0% ceiling)" in result.details
    within = evaluate_structured(StructuredGate(max_failure_rate_pct=30.0, max_delta_points=50.0), "baseline", records)
    assert within.passed and within.metrics["fallback_routes"] == []
