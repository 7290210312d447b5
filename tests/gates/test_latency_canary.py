from __future__ import annotations

import pytest

from speclab.gates.canary import evaluate_canary
from speclab.gates.latency import (
    LatencyInput,
    LatencyPoint,
    StressSummary,
    evaluate_latency_curve,
    evaluate_stress,
)
from speclab.model.gates import AcceptanceFloors, CanaryGate, LatencyGate, StressGate
from speclab.model.names import PERCENTILE_POINTS
from speclab.model.records import RequestRecord, SpecCounts
from speclab.model.snapshot import AcceptanceStats, ClassStats, Percentiles, VariantStats


def pct(p50: int, p99: int, count: int = 10) -> Percentiles:
    values = tuple(p50 if p <= 50 else p99 for p in PERCENTILE_POINTS)
    return Percentiles(count=count, mean=float(p50), values=values)


def test_latency_curve_pass_fail_and_crossover() -> None:
    settings = LatencyGate(concurrency=[1, 4], max_p99_ratio=1.1)
    curve: dict[str, dict[int, LatencyInput]] = {
        "baseline": {1: pct(100_000, 120_000), 4: LatencyPoint(110_000, 130_000)},
        "k2": {1: pct(70_000, 90_000), 4: LatencyPoint(100_000, 140_000)},
    }
    result = evaluate_latency_curve(settings, "baseline", curve)
    assert result.passed, result.details
    assert result.metrics["ratios"]["k2"][1]["p99_ratio"] == 0.75
    assert "k2: faster than baseline (p50) at every level measured" in result.details
    curve["k4"] = {1: pct(90_000, 100_000), 4: LatencyPoint(150_000, 200_000)}
    result = evaluate_latency_curve(settings, "baseline", curve)
    assert not result.passed and result.exit_code == 14
    assert any(d.startswith("FAIL k4 concurrency 4: p50 150.0 ms vs 110.0 ms (×1.36), p99 200.0 ms") for d in result.details)
    assert result.metrics["crossover"]["k4"] == 4


def test_latency_curve_missing_level_fails() -> None:
    curve = {"baseline": {1: pct(1000, 2000)}, "k2": {1: pct(900, 1900), 2: pct(1, 1)}}
    result = evaluate_latency_curve(LatencyGate(concurrency=[1, 2]), "baseline", curve)
    assert "FAIL k2 concurrency 2: no latency measured for baseline" in result.details
    empty = {"baseline": {1: Percentiles()}, "k2": {1: pct(900, 1900)}}
    assert not evaluate_latency_curve(LatencyGate(concurrency=[1]), "baseline", empty).passed


def acc(steps: int, drafted: int, accepted: int) -> AcceptanceStats:
    return AcceptanceStats(requests=10, steps=steps, drafted=drafted, accepted=accepted)


def test_stress_ratios_errors_and_acceptance_floor() -> None:
    settings = StressGate(concurrency=32, max_p99_ratio=1.5, min_throughput_ratio=0.8)
    floors = AcceptanceFloors(min_acceptance_length=1.2, class_min_acceptance_length={"tool_call": 2.0})
    summaries = {
        "baseline": StressSummary(p99_e2e_us=1_000_000, throughput=5000.0, requests=100),
        "k2": StressSummary(p99_e2e_us=1_300_000, throughput=4500.0, requests=100,
                            acceptance={"tool_call": acc(100, 200, 150), "factual_qa": acc(100, 200, 40)}),
    }
    result = evaluate_stress(settings, floors, "baseline", summaries)
    assert result.passed, result.details
    assert result.metrics["ratios"]["k2"] == {"p99_ratio": 1.3, "throughput_ratio": 0.9}
    summaries["k4"] = StressSummary(p99_e2e_us=2_000_000, throughput=3000.0, requests=95, errors=5,
                                    acceptance={"tool_call": acc(100, 400, 80)})
    result = evaluate_stress(settings, floors, "baseline", summaries)
    assert not result.passed and result.exit_code == 15
    fails = [d for d in result.details if d.startswith("FAIL k4")]
    assert any("p99 ratio above the limit" in d for d in fails)
    assert any("throughput ratio below the floor" in d for d in fails)
    assert any("5/100 requests failed" in d for d in fails)
    assert any("k4 tool_call: acceptance length 1.80, rejection rate 80.0%: below the floor 2.00 under load" in d for d in fails)


def test_a_speculative_variant_without_acceptance_data_fails_its_floor_saying_so() -> None:
    settings = StressGate(concurrency=8)
    floors = AcceptanceFloors(class_min_acceptance_length={"tool_call": 1.5})
    summaries = {
        "baseline": StressSummary(p99_e2e_us=1_000_000, throughput=5000.0, requests=100),
        "k2": StressSummary(p99_e2e_us=900_000, throughput=5200.0, requests=100,
                            acceptance={"tool_call": AcceptanceStats(), "factual_qa": AcceptanceStats()}),
    }
    result = evaluate_stress(settings, floors, "baseline", summaries)
    assert not result.passed
    fails = [d for d in result.details if d.startswith("FAIL k2")]
    assert fails == ["FAIL k2 tool_call: no acceptance data (no verify steps reported for a speculative variant): "
                     "cannot meet the floor 1.50 under load"]
    assert any("k2 factual_qa: no acceptance data" in d and not d.startswith("FAIL") for d in result.details), \
        "without a floor it is said, not failed"


def test_stress_summary_from_snapshot_stats() -> None:
    stats = VariantStats("k2", {
        "all": ClassStats(requests=40, output_tokens=8000, window_s=4.0, latency={"e2e_corrected": pct(5, 900)},
                          errors={"timeout": 2}),
        "tool_call": ClassStats(requests=40, acceptance=acc(10, 30, 20)),
    })
    summary = StressSummary.from_variant_stats(stats)
    assert (summary.p99_e2e_us, summary.throughput, summary.errors) == (900.0, 2000.0, 2)
    assert summary.acceptance["tool_call"].acceptance_length == 3.0


def canary_record(variant: str, cls: str, done: float, drafted: int, accepted: int, error: str | None = None) -> RequestRecord:
    return RequestRecord(
        request_id=f"{variant}-{done}", variant=variant, prompt_class=cls, intended=done - 0.5, done=done,
        spec=SpecCounts(steps=drafted // 4, drafted=drafted, accepted=accepted), error_kind=error,
    )


def steady(variant: str, cls: str, seconds: int, accepted: int) -> list[RequestRecord]:
    return [canary_record(variant, cls, t + 0.5, 40, accepted) for t in range(seconds)]


def test_canary_rejection_ceiling_spike_and_errors() -> None:
    settings = CanaryGate(max_rejection_rate_pct=60.0, max_spike_points=25.0, min_interval_drafted=20)
    floors = AcceptanceFloors()
    baseline = [canary_record("baseline", "qa", t + 0.5, 0, 0) for t in range(10)]
    clean = [*baseline, *steady("k2", "qa", 10, 24), *steady("k2", "json", 10, 32)]
    result = evaluate_canary(settings, floors, "baseline", clean)
    assert result.passed, result.details
    assert result.metrics["rejection_pct"]["k2"]["qa"] == 40.0

    spiky = [*baseline, *steady("k2", "qa", 9, 24), canary_record("k2", "qa", 9.5, 40, 2),
             canary_record("k2", "qa", 9.7, 2, 0)]
    result = evaluate_canary(settings, floors, "baseline", spiky)
    assert not result.passed and result.exit_code == 16
    assert any(d.startswith("FAIL k2 qa: worst interval 9 at") and d.endswith("rejection spike") for d in result.details)

    high = [*baseline, *steady("k2", "qa", 10, 8)]
    assert any("above the 60.0% ceiling" in d for d in evaluate_canary(settings, floors, "baseline", high).details)

    failing = [*baseline, *steady("k2", "qa", 10, 24), canary_record("k2", "qa", 3.0, 0, 0, error="http_5xx")]
    result = evaluate_canary(settings, floors, "baseline", failing)
    assert "FAIL k2: 1/11 canary requests failed (9.1%), above 1.0%" in result.details


def test_canary_ignores_sparse_intervals() -> None:
    settings = CanaryGate(max_spike_points=10.0, min_interval_drafted=20)
    records = [*steady("k2", "qa", 5, 30), canary_record("k2", "qa", 7.5, 5, 0)]
    result = evaluate_canary(settings, AcceptanceFloors(), "baseline", records)
    assert result.passed, result.details


def test_canary_judges_the_all_row_against_each_intervals_class_mix() -> None:
    """An interval that held only the hardest class is no spike; one worse than its mix predicts is."""
    settings = CanaryGate(max_rejection_rate_pct=95.0, max_spike_points=25.0, min_interval_drafted=20)
    easy, hard = steady("k2", "qa", 8, 36), steady("k2", "prose", 8, 2)
    mixed = [*easy, *hard]
    only_hard = [canary_record("k2", "prose", 8.5, 40, 2), canary_record("k2", "prose", 8.6, 40, 2)]
    result = evaluate_canary(settings, AcceptanceFloors(), "baseline", [*mixed, *only_hard])
    assert result.passed, result.details
    assert result.metrics["spike_points"]["k2"]["all"] == pytest.approx(0.0, abs=1e-9)

    collapsed = [canary_record("k2", "qa", 8.5, 40, 0), canary_record("k2", "qa", 8.6, 40, 0)]
    result = evaluate_canary(settings, AcceptanceFloors(), "baseline", [*mixed, *collapsed])
    assert any(d.startswith("FAIL k2 all: worst interval 8 at 100.0% rejection") and "class mix" in d
               for d in result.details), result.details
