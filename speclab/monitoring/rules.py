"""Prometheus recording and alerting rules over vLLM 0.33's spec-decode and latency series.

Recorded names follow Prometheus's ``level:metric:operations`` convention: ``model_instance:``
keeps ``job``, ``instance`` and ``model_name`` (one server), ``model:`` sums a model across its
servers. The windows derive from the scrape interval (``Windows``) so a rate always spans at least
four scrapes. Counter rates are per modelled second (× ``speclab_sim_time_scale`` on a time-scaled
simulator, ``promql.per_modelled_second``), so the alerts' volume guard means the same on either.
Alerts read recorded series, so ``vllm-spec-decode.rules.yml`` must be loaded with
``vllm-spec-decode-alerts.rules.yml``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from . import promql
from .promql import BY_MODEL, PHASES, QUANTILES, format_duration, per_modelled_second

RECORDING_FILE: Final = "vllm-spec-decode.rules.yml"
ALERTS_FILE: Final = "vllm-spec-decode-alerts.rules.yml"

SPIKE_POINTS: Final = 0.15
"""Rejection rate over the spike window this far above its baseline-window rate is a spike."""
MIN_DRAFT_TOKENS_PER_S: Final = 1.0
"""Below this drafting volume a server's rates are too noisy to alert on."""
LOW_ACCEPTANCE_LENGTH: Final = 1.5
"""Under half an accepted draft token per verify step, speculation rarely pays for its draft passes."""


@dataclass(frozen=True)
class Windows:
    """Rule windows from the scrape interval: ``rate`` spans ≥ 4 scrapes (Grafana's rate-interval
    rule), the spike window ≥ 5 rates, the baseline ≥ 12 spike windows."""

    scrape_s: int
    rate_s: int
    spike_s: int
    baseline_s: int
    spike_for_s: int
    low_for_s: int

    @classmethod
    def for_scrape_interval(cls, scrape_s: int) -> Windows:
        rate = max(60, 4 * scrape_s)
        spike = max(300, 5 * rate)
        return cls(scrape_s=scrape_s, rate_s=rate, spike_s=spike, baseline_s=max(3600, 12 * spike),
                   spike_for_s=max(120, 2 * rate), low_for_s=max(900, 3 * spike))

    @property
    def rate(self) -> str:
        return format_duration(self.rate_s)

    @property
    def spike(self) -> str:
        return format_duration(self.spike_s)

    @property
    def baseline(self) -> str:
        return format_duration(self.baseline_s)


@dataclass(frozen=True)
class RecordedNames:
    """The recorded series the alerts and tests refer to, named after their windows."""

    w: Windows

    def instance(self, metric: str, op: str, window: str) -> str:
        return f"model_instance:{metric}:{op}{window}"

    @property
    def draft_tokens_spike(self) -> str:
        return self.instance("vllm_spec_decode_draft_tokens", "rate", self.w.spike)

    @property
    def rejection_spike(self) -> str:
        return self.instance("vllm_spec_decode_rejection_rate", "ratio_rate", self.w.spike)

    @property
    def rejection_baseline(self) -> str:
        return self.instance("vllm_spec_decode_rejection_rate", "ratio_rate", self.w.baseline)

    @property
    def acceptance_length_spike(self) -> str:
        return self.instance("vllm_spec_decode_acceptance_length", "mean_rate", self.w.spike)


def _rec(record: str, expr: str) -> dict[str, str]:
    return {"record": record, "expr": expr}


def spec_decode_group(w: Windows) -> dict[str, Any]:
    rules: list[dict[str, str]] = []
    for window in (w.rate, w.spike, w.baseline):
        inst = f"model_instance:vllm_spec_decode_{{}}:{{}}{window}"
        rules += [
            _rec(inst.format("draft_tokens", "rate"), per_modelled_second(promql.rate_sum(promql.DRAFT_TOKENS, window))),
            _rec(inst.format("accepted_tokens", "rate"), per_modelled_second(promql.rate_sum(promql.ACCEPTED, window))),
            _rec(inst.format("drafts", "rate"), per_modelled_second(promql.rate_sum(promql.DRAFTS, window))),
            _rec(inst.format("acceptance_rate", "ratio_rate"), promql.acceptance_rate(window)),
            _rec(inst.format("rejection_rate", "ratio_rate"), promql.rejection_rate(window)),
            _rec(inst.format("acceptance_length", "mean_rate"), promql.acceptance_length(window)),
        ]
    r = w.rate
    rules += [
        _rec(f"model_instance_position:vllm_spec_decode_position_acceptance_rate:ratio_rate{r}",
             promql.position_acceptance(r)),
        _rec(f"model_instance:vllm_spec_decode_drafts_per_request:ratio_rate{r}", promql.drafts_per_request(r)),
        _rec("model_instance:vllm_spec_decode_num_speculative_tokens:count", promql.num_speculative_tokens()),
        _rec(f"model:vllm_spec_decode_acceptance_rate:ratio_rate{r}", promql.acceptance_rate(r, by=BY_MODEL)),
        _rec(f"model:vllm_spec_decode_rejection_rate:ratio_rate{r}", promql.rejection_rate(r, by=BY_MODEL)),
        _rec(f"model:vllm_spec_decode_acceptance_length:mean_rate{r}", promql.acceptance_length(r, by=BY_MODEL)),
    ]
    return {"name": "vllm-spec-decode", "rules": rules}


def latency_group(w: Windows) -> dict[str, Any]:
    rules: list[dict[str, Any]] = []
    window = w.spike
    for phase in PHASES:
        metric = phase.metric.replace(":", "_")
        for q in QUANTILES:
            rules.append({"record": f"model_instance_quantile:{metric}:histogram_quantile_rate{window}",
                          "expr": promql.quantile(phase, q, window), "labels": {"quantile": str(q)}})
        rules.append(_rec(f"model_instance:{metric}:mean_rate{window}", promql.mean(phase, window)))
    return {"name": "vllm-latency", "rules": rules}


def alerts_group(w: Windows) -> dict[str, Any]:
    n = RecordedNames(w)
    spike = {
        "alert": "VllmSpecDecodeRejectionSpike",
        "expr": (f"{n.rejection_spike} - {n.rejection_baseline} > {SPIKE_POINTS}\n"
                 f"and {n.draft_tokens_spike} >= {MIN_DRAFT_TOKENS_PER_S}"),
        "for": format_duration(w.spike_for_s),
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "Draft rejection spike on {{ $labels.model_name }} at {{ $labels.instance }}",
            "description": (f"Rejection rate over {w.spike} exceeds its {w.baseline} rate by "
                            "{{ $value | humanizePercentage }} (percentage points). Look for a draft version, "
                            "route or config change at that time (the dashboard's annotations)."),
        },
    }
    low = {
        "alert": "VllmSpecDecodeAcceptanceLengthLow",
        "expr": (f"{n.acceptance_length_spike} < {LOW_ACCEPTANCE_LENGTH}\n"
                 f"and {n.draft_tokens_spike} >= {MIN_DRAFT_TOKENS_PER_S}"),
        "for": format_duration(w.low_for_s),
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "Speculation barely pays on {{ $labels.model_name }} at {{ $labels.instance }}",
            "description": (f"Mean acceptance length over {w.spike} is {{{{ $value | printf \"%.2f\" }}}} tokens per "
                            f"verify step (bonus token included), under {LOW_ACCEPTANCE_LENGTH}: the draft passes "
                            "likely cost more than they save."),
        },
    }
    return {"name": "vllm-spec-decode-alerts", "rules": [spike, low]}


def recording_file(w: Windows) -> dict[str, Any]:
    return {"groups": [spec_decode_group(w), latency_group(w)]}


def alerts_file(w: Windows) -> dict[str, Any]:
    return {"groups": [alerts_group(w)]}


def alert_conditions(w: Windows) -> dict[str, tuple[str, ...]]:
    """Per alert, the recorded series its expression compares: each must hold data on a live server
    even while the alert (rightly) stays silent."""
    n = RecordedNames(w)
    return {
        "VllmSpecDecodeRejectionSpike": (n.rejection_spike, n.rejection_baseline, n.draft_tokens_spike),
        "VllmSpecDecodeAcceptanceLengthLow": (n.acceptance_length_spike, n.draft_tokens_spike),
    }
