"""promtool unit tests of the kit's rules on synthetic series (``promtool test rules``).

The recording test feeds three servers (one with two data-parallel engines, one a speclab simulator
at time scale 4, whose counters grow a quarter as fast per wall second) and checks every
spec-decode ratio, per position, per server and per model, each counter rate (per modelled second:
×4 on the simulator), and each latency quantile and mean, against values computed from the
synthetic rates. The alert test runs four servers for a baseline
window and five spike windows (85 minutes at the default windows): one whose rejection rate jumps
(the spike alert must fire, with the rise in its description, but neither before nor while pending),
one whose rate swings inside a band (it must not), one with too little drafting to judge, and one
whose acceptance length sits low from the start. Ratios are compared within 1e-9, since promtool compares
floats bit for bit.
"""

from __future__ import annotations

from typing import Any, Final

from speclab.model import names

from .promql import PHASES, QUANTILES, SIM_TIME_SCALE, Phase, format_duration
from .rules import ALERTS_FILE, LOW_ACCEPTANCE_LENGTH, RECORDING_FILE, SPIKE_POINTS, RecordedNames, Windows
from .synthetic import JOB, MODEL, Segment, Server, SpecRates, Totals, counter_values, input_series, totals

RECORDING_TEST_FILE: Final = "vllm-spec-decode.test.yml"
ALERTS_TEST_FILE: Final = "vllm-spec-decode-alerts.test.yml"
GROUP_ORDER: Final = ["vllm-spec-decode", "vllm-latency", "vllm-spec-decode-alerts"]
TOLERANCE: Final = 1e-9
EVALUATION_S: Final = 60

_STEADY = SpecRates(drafted=5.0, accepted=3.0, drafts=1.8, per_pos=(1.5, 1.0, 0.5), finished=0.4)
_SPIKE = SpecRates(drafted=5.0, accepted=0.5, drafts=1.8, per_pos=(0.4, 0.1, 0.0), finished=0.4)
_BAND_LOW = SpecRates(drafted=5.0, accepted=3.25, drafts=1.8, per_pos=(1.5, 1.0, 0.75), finished=0.4)
_BAND_HIGH = SpecRates(drafted=5.0, accepted=2.75, drafts=1.8, per_pos=(1.5, 1.0, 0.25), finished=0.4)
_POOR = SpecRates(drafted=6.0, accepted=0.4, drafts=2.0, per_pos=(0.3, 0.1, 0.0), finished=0.4)
_QUIET_STEADY = SpecRates(drafted=0.5, accepted=0.3, drafts=0.2, per_pos=(0.2, 0.1, 0.0), finished=0.05)
_QUIET_SPIKE = SpecRates(drafted=0.5, accepted=0.05, drafts=0.2, per_pos=(0.05, 0.0, 0.0), finished=0.05)

# Observations per second of each latency histogram, by bucket index (vLLM's default buckets).
_LATENCY_SPREAD: Final = {1: 0.2, 2: 0.12, 3: 0.06, 5: 0.02}
SIM_INSTANCE: Final = "10.0.0.3:8000"
SIM_SCALE: Final = 4.0  # the simulator's time scale: its wall rates are a quarter of its modelled ones


def _evaluation(w: Windows) -> str:
    """Prometheus's default rule evaluation interval, 1m (or the scrape interval, if longer)."""
    return format_duration(max(EVALUATION_S, w.scrape_s))


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _close(expr: str, expected: float, labels: str, eval_s: int) -> dict[str, Any]:
    """promtool's comparison is exact; ask PromQL whether the value is within TOLERANCE instead."""
    return {"expr": f"abs({expr} - {expected!r}) < bool {TOLERANCE}", "eval_time": format_duration(eval_s),
            "exp_samples": [{"labels": labels, "value": 1}]}


def _spec_checks(w: Windows, servers: list[Server], eval_s: int,
                 scales: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """``scales``: the time scale of each simulator instance (its counter rates are reported × S)."""
    checks: list[dict[str, Any]] = []
    by_instance: dict[str, list[Server]] = {}
    for s in servers:
        by_instance.setdefault(s.instance, []).append(s)
    for instance, group in by_instance.items():
        sel = group[0].selector()
        labels = _labels(job=JOB, instance=instance, model_name=MODEL)
        scale = (scales or {}).get(instance, 1.0)
        for window_s in (w.rate_s, w.spike_s, w.baseline_s):
            t = totals(group, eval_s, window_s)
            win = format_duration(window_s)
            name = f"model_instance:vllm_spec_decode_{{}}:{{}}{win}{{{{{sel}}}}}"
            checks += [
                _close(name.format("draft_tokens", "rate"), scale * t.drafted / window_s, labels, eval_s),
                _close(name.format("accepted_tokens", "rate"), scale * t.accepted / window_s, labels, eval_s),
                _close(name.format("drafts", "rate"), scale * t.drafts / window_s, labels, eval_s),
                _close(name.format("acceptance_rate", "ratio_rate"), t.acceptance_rate, labels, eval_s),
                _close(name.format("rejection_rate", "ratio_rate"), t.rejection_rate, labels, eval_s),
                _close(name.format("acceptance_length", "mean_rate"), t.acceptance_length, labels, eval_s),
            ]
        t = totals(group, eval_s, w.rate_s)
        for pos, accepted in enumerate(t.per_pos):
            checks.append(_close(
                f'model_instance_position:vllm_spec_decode_position_acceptance_rate:ratio_rate{w.rate}'
                f'{{{sel},position="{pos}"}}', accepted / t.drafts,
                _labels(job=JOB, instance=instance, model_name=MODEL, position=str(pos)), eval_s))
        checks.append(_close(f"model_instance:vllm_spec_decode_drafts_per_request:ratio_rate{w.rate}{{{sel}}}",
                             t.drafts / t.finished, labels, eval_s))
        checks.append(_close(f"model_instance:vllm_spec_decode_num_speculative_tokens:count{{{sel}}}",
                             float(len(t.per_pos)), labels, eval_s))
    fleet: Totals = totals(servers, eval_s, w.rate_s)
    model_labels = _labels(job=JOB, model_name=MODEL)
    msel = f'{{job="{JOB}",model_name="{MODEL}"}}'
    checks += [
        _close(f"model:vllm_spec_decode_acceptance_rate:ratio_rate{w.rate}{msel}", fleet.acceptance_rate,
               model_labels, eval_s),
        _close(f"model:vllm_spec_decode_rejection_rate:ratio_rate{w.rate}{msel}", fleet.rejection_rate,
               model_labels, eval_s),
        _close(f"model:vllm_spec_decode_acceptance_length:mean_rate{w.rate}{msel}", fleet.acceptance_length,
               model_labels, eval_s),
    ]
    return checks


def _buckets(phase: Phase) -> tuple[float, ...]:
    if phase.metric == names.PROM_TTFT:
        return names.BUCKETS_TTFT
    if phase.metric == names.PROM_TPOT:
        return names.BUCKETS_ITL
    return names.BUCKETS_REQUEST_LATENCY


def bucket_quantile(q: float, bounds: tuple[float, ...], rates: dict[int, float]) -> float:
    """Prometheus's histogram_quantile: linear interpolation inside the bucket holding rank q·total."""
    total = sum(rates.values())
    rank, below = q * total, 0.0
    for i, upper in enumerate(bounds):
        count = rates.get(i, 0.0)
        if below + count >= rank and count > 0:
            lower = bounds[i - 1] if i else 0.0
            return lower + (upper - lower) * (rank - below) / count
        below += count
    raise ValueError("rank beyond the last finite bucket")


def _latency_series(phase: Phase, scrape_s: int, seconds: int) -> tuple[list[dict[str, str]], float]:
    """Cumulative bucket counters for one server, and the mean its observations imply (bucket midpoints)."""
    bounds = _buckets(phase)
    labels = f'job="{JOB}",instance="10.0.0.1:8000",model_name="{MODEL}",engine="0"'
    out, cumulative = [], 0.0
    for i, upper in enumerate(bounds):
        cumulative += _LATENCY_SPREAD.get(i, 0.0)
        out.append({"series": f'{phase.metric}_bucket{{{labels},le="{upper!r}"}}',
                    "values": counter_values(scrape_s, [(cumulative, seconds)])})
    out.append({"series": f'{phase.metric}_bucket{{{labels},le="+Inf"}}',
                "values": counter_values(scrape_s, [(cumulative, seconds)])})
    out.append({"series": f"{phase.metric}_count{{{labels}}}", "values": counter_values(scrape_s, [(cumulative, seconds)])})
    value_rate = sum(rate * ((bounds[i - 1] if i else 0.0) + bounds[i]) / 2 for i, rate in _LATENCY_SPREAD.items())
    out.append({"series": f"{phase.metric}_sum{{{labels}}}", "values": counter_values(scrape_s, [(value_rate, seconds)])})
    return out, value_rate / cumulative


def recording_test(w: Windows) -> dict[str, Any]:
    seconds = w.baseline_s + w.spike_s
    servers = [
        Server("10.0.0.1:8000", "0", (Segment(SpecRates(3.0, 1.8, 1.0, (0.9, 0.6, 0.3), 0.2), seconds),)),
        Server("10.0.0.1:8000", "1", (Segment(SpecRates(2.0, 1.2, 0.8, (0.6, 0.4, 0.2), 0.2), seconds),)),
        Server("10.0.0.2:8000", "0", (Segment(SpecRates(5.0, 1.0, 2.0, (0.6, 0.3, 0.1), 0.4), seconds),)),
        Server(SIM_INSTANCE, "0", (Segment(SpecRates(1.0, 0.5, 0.25, (0.25, 0.125, 0.125), 0.125), seconds),)),
    ]
    series = [s for server in servers for s in input_series(server, w.scrape_s)]
    series.append({"series": f'{SIM_TIME_SCALE}{_labels(job=JOB, instance=SIM_INSTANCE)}',
                   "values": f"{SIM_SCALE!r}x{seconds // w.scrape_s}"})
    checks = _spec_checks(w, servers, seconds, {SIM_INSTANCE: SIM_SCALE})
    labels = _labels(job=JOB, instance="10.0.0.1:8000", model_name=MODEL)
    for phase in PHASES:
        hist, mean = _latency_series(phase, w.scrape_s, seconds)
        series += hist
        metric = phase.metric.replace(":", "_")
        sel = '{instance="10.0.0.1:8000"}'
        for q in QUANTILES:
            expected = bucket_quantile(q, _buckets(phase), _LATENCY_SPREAD)
            checks.append(_close(
                f'model_instance_quantile:{metric}:histogram_quantile_rate{w.spike}{{instance="10.0.0.1:8000",'
                f'quantile="{q}"}}', expected,
                _labels(job=JOB, instance="10.0.0.1:8000", model_name=MODEL, quantile=str(q)), seconds))
        checks.append(_close(f"model_instance:{metric}:mean_rate{w.spike}{sel}", mean, labels, seconds))
    return {"rule_files": [RECORDING_FILE], "evaluation_interval": _evaluation(w),
            "group_eval_order": GROUP_ORDER[:2],
            "tests": [{"name": "spec-decode ratios and the latency split from synthetic counters",
                       "interval": format_duration(w.scrape_s), "input_series": series,
                       "promql_expr_test": checks}]}


def _alert(name: str, instance: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {"exp_labels": {"severity": "warning", "job": JOB, "instance": instance, "model_name": MODEL},
            "exp_annotations": annotations}


def alerts_test(w: Windows) -> dict[str, Any]:
    """Steady for a full baseline window and one spike window, then the spike, then four spike windows."""
    spike_at = w.baseline_s + w.spike_s
    after = 4 * w.spike_s
    band_s = 2 * w.spike_s  # long enough for a swing to outlast the alert's `for`
    band = tuple(Segment(_BAND_LOW if i % 2 else _BAND_HIGH, min(band_s, spike_at + after - start))
                 for i, start in enumerate(range(0, spike_at + after, band_s)))
    servers = {
        "spiky": Server("spiky:8000", "0", (Segment(_STEADY, spike_at), Segment(_SPIKE, after))),
        "band": Server("band:8000", "0", band),
        "quiet": Server("quiet:8000", "0", (Segment(_QUIET_STEADY, spike_at), Segment(_QUIET_SPIKE, after))),
        "poor": Server("poor:8000", "0", (Segment(_POOR, spike_at + after),)),
    }
    series = [s for server in servers.values() for s in input_series(server, w.scrape_s)]
    fired_at = spike_at + 2 * w.spike_s
    rise = (totals([servers["spiky"]], fired_at, w.spike_s).rejection_rate
            - totals([servers["spiky"]], fired_at, w.baseline_s).rejection_rate)
    poor_length = totals([servers["poor"]], fired_at, w.spike_s).acceptance_length
    spike_text = {
        "summary": f"Draft rejection spike on {MODEL} at spiky:8000",
        "description": (f"Rejection rate over {w.spike} exceeds its {w.baseline} rate by "
                        f"{_humanize_percentage(rise)} (percentage points). Look for a draft version, route or "
                        "config change at that time (the dashboard's annotations)."),
    }
    low_text = {
        "summary": f"Speculation barely pays on {MODEL} at poor:8000",
        "description": (f"Mean acceptance length over {w.spike} is {poor_length:.2f} tokens per verify step "
                        f"(bonus token included), under {LOW_ACCEPTANCE_LENGTH}: the draft passes likely cost "
                        "more than they save."),
    }
    quiet_rise = (totals([servers["quiet"]], fired_at, w.spike_s).rejection_rate
                  - totals([servers["quiet"]], fired_at, w.baseline_s).rejection_rate)
    if min(rise, quiet_rise) <= SPIKE_POINTS:
        raise RuntimeError("the synthetic spikes must rise above the alert's threshold")
    silent = [spike_at, spike_at + w.spike_s // 5, spike_at + 3 * w.spike_s // 5]  # before, rising, pending
    cases: list[dict[str, Any]] = [{"eval_time": format_duration(t), "alertname": "VllmSpecDecodeRejectionSpike", "exp_alerts": []}
             for t in silent]
    cases += [
        {"eval_time": format_duration(fired_at), "alertname": "VllmSpecDecodeRejectionSpike",
         "exp_alerts": [_alert("VllmSpecDecodeRejectionSpike", "spiky:8000", spike_text)]},
        {"eval_time": format_duration(fired_at), "alertname": "VllmSpecDecodeAcceptanceLengthLow",
         "exp_alerts": [_alert("VllmSpecDecodeAcceptanceLengthLow", "poor:8000", low_text)]},
    ]
    n = RecordedNames(w)
    guard = [_close(f'{n.rejection_spike}{{instance="quiet:8000"}} - {n.rejection_baseline}{{instance="quiet:8000"}}',
                    quiet_rise, _labels(job=JOB, instance="quiet:8000", model_name=MODEL), fired_at)]
    return {"rule_files": [RECORDING_FILE, ALERTS_FILE], "evaluation_interval": _evaluation(w),
            "group_eval_order": GROUP_ORDER,
            "tests": [{"name": "a rejection spike fires; a steady band, a quiet server and the time before do not",
                       "interval": format_duration(w.scrape_s), "input_series": series,
                       "alert_rule_test": cases, "promql_expr_test": guard}]}


def _humanize_percentage(value: float) -> str:
    """Go's ``humanizePercentage`` template function: ``%.4g%%`` of value × 100."""
    return f"{value * 100:.4g}%"


def files(w: Windows) -> dict[str, dict[str, Any]]:
    return {RECORDING_TEST_FILE: recording_test(w), ALERTS_TEST_FILE: alerts_test(w)}

