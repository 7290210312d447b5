"""The dashboard's row over speclab's own series (``--metrics-port``), and its relaunch annotation.

These series come from the load generator, not from the servers: per variant, config epoch and
prompt class, so the row shows what vLLM's series cannot — acceptance per class, the structured-
output failure rate, corrected latency, and which draft model and revision each epoch ran
(``speclab_config_info``). Grouped by ``instance`` (one speclab process), ``variant`` and ``epoch``,
never summed across epochs; the ``variant`` variable lists the variants speclab serves.

Under a simulator time scale S speclab's counters count modelled events, but ``rate()`` is per wall
second: a panel that plots a per-second rate multiplies it by ``speclab_time_scale`` (S, per
``instance``), so it reads per modelled second like the report. Ratios of two rates and quantiles
of the latency histograms (already in modelled seconds) need no factor; the load generator's health
is wall time, and says so.
"""

from __future__ import annotations

from typing import Any, Final

from .dashboard import DATASOURCE, Panel, Row, Target
from .rules import Windows

RATE: Final = "$__rate_interval"
TIME_SCALE: Final = "speclab_time_scale"
SELECTOR: Final = 'variant=~"$variant"'
BY: Final = "instance, variant, epoch"
LEGEND: Final = "{{variant}} e{{epoch}}"
CLASS_LEGEND: Final = "{{variant}} e{{epoch}} {{class}}"


def _rate(metric: str, by: str = BY) -> str:
    return f"sum by ({by}) (rate(speclab_{metric}{{{SELECTOR}}}[{RATE}]))"


def per_modelled_second(expr: str) -> str:
    """A per-wall-second rate of speclab's counters → per modelled second (× S of its speclab process)."""
    return f"({expr})\n* on (instance) group_left ()\nmax by (instance) ({TIME_SCALE})"


def _ratio(numerator: str, denominator: str) -> str:
    return f"({numerator})\n/\n({denominator} > 0)"


def _quantile(q: float, metric: str, by: str = BY) -> str:
    return f"histogram_quantile({q}, sum by ({by}, le) (rate(speclab_{metric}_bucket{{{SELECTOR}}}[{RATE}])))"


def speclab_row() -> Row:
    by_class = f"{BY}, class"
    return Row("speclab load generator (--metrics-port)", (
        Panel("Rejection rate per class", "1 − Σaccepted / Σdrafted draft tokens, per variant, epoch and class.",
              (Target("1 - " + _ratio(_rate("spec_decode_accepted_tokens_total", by_class),
                                      _rate("spec_decode_draft_tokens_total", by_class)), CLASS_LEGEND),),
              unit="percentunit", max=1),
        Panel("Mean acceptance length", "1 + Σaccepted / Σverify steps: tokens per verify step, bonus included.",
              (Target("1 + " + _ratio(_rate("spec_decode_accepted_tokens_total"),
                                      _rate("spec_decode_verify_steps_total")), LEGEND),), min=1),
        Panel("Acceptance length p50 / p90", "From the per-step acceptance-length histogram.",
              tuple(Target(_quantile(q, "spec_decode_acceptance_length"), f"{LEGEND} p{round(q * 100)}")
                    for q in (0.5, 0.9)), min=1),
        Panel("Verifications per request", "Verify steps per finished request.",
              (Target(_ratio(_rate("spec_decode_verify_steps_total"), _rate("requests_total")), LEGEND),)),
        Panel("End-to-end latency p50 / p99 (corrected)", "From each request's intended send time.",
              tuple(Target(_quantile(q, "request_e2e_corrected_seconds"), f"{LEGEND} p{round(q * 100)}")
                    for q in (0.5, 0.99)), unit="s"),
        Panel("Time per output token p50 / p99", "(last token − first token) / (tokens − 1).",
              tuple(Target(_quantile(q, "request_tpot_seconds"), f"{LEGEND} p{round(q * 100)}") for q in (0.5, 0.99)),
              unit="s"),
        Panel("Requests and errors", "Successful requests per modelled second, and errors per modelled second "
              "by kind (0 when none): rate × speclab_time_scale, so a simulator run S times slower than wall time "
              "reads as the report does.",
              (Target(per_modelled_second(_rate("requests_total")), f"{LEGEND} ok"),
               Target(per_modelled_second(f"{_rate('request_errors_total', f'{BY}, kind')}\nor\n"
                                          f"{_rate('requests_total')} * 0"),
                      f"{LEGEND} {{{{kind}}}} errors")), unit="reqps"),
        Panel("Structured-output failure rate", "Responses failing their schema ÷ responses that had one.",
              (Target(_ratio(_rate("structured_output_failures_total", by_class),
                             _rate("structured_output_requests_total", by_class)), CLASS_LEGEND),),
              unit="percentunit", max=1),
        Panel("Load generator health", "Schedule-lag p99, the client's own error on the way out (send delay "
              "p99) and back (read lateness p99.5), and whether it kept up: a saturated client's numbers describe "
              "the client. Wall time: the client's health is judged before any time scale's division.",
              (Target("speclab_client_schedule_lag_p99_seconds", "{{instance}} schedule lag p99 (wall)"),
               Target("speclab_client_send_delay_p99_seconds", "{{instance}} send delay p99 (wall)"),
               Target("speclab_client_read_lateness_seconds", "{{instance}} read lateness p99.5 (wall)"),
               Target("speclab_client_saturated", "{{instance}} saturated")), unit="s"),
    ))


def relaunch_annotation(w: Windows) -> dict[str, Any]:
    """A relaunch (new config epoch), named by its label, draft model, revision and k."""
    expr = (f"(changes(speclab_variant_epoch{{{SELECTOR}}}[{w.rate}]) > 0)\n* on (job, instance, variant) "
            "group_left (label, draft_model, draft_revision, k) speclab_config_info")
    return {"datasource": DATASOURCE, "enable": True, "expr": expr, "iconColor": "blue",
            "name": "speclab relaunch", "step": w.rate, "titleFormat": "speclab relaunched {{variant}}",
            "textFormat": "{{label}}: {{draft_model}}@{{draft_revision}} k={{k}}", "tagKeys": "instance,variant",
            "useValueForTime": False}


def variant_variable() -> dict[str, Any]:
    definition = "label_values(speclab_config_info, variant)"
    return {"name": "variant", "label": "speclab variant", "type": "query", "datasource": DATASOURCE,
            "definition": definition,
            "query": {"qryType": 1, "query": definition, "refId": "PrometheusVariableQueryEditor-variant"},
            "refresh": 2, "multi": True, "includeAll": True, "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "sort": 1}
