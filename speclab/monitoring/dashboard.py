"""The Grafana dashboard: vLLM's spec-decode and latency-split panels, config-change annotations.

Panels query vLLM's raw series through the builders in ``promql`` (the same formulas the recording
rules record), with ``$__rate_interval`` and the dashboard's job / instance / model variables, so
the dashboard works whether or not the kit's rules are loaded. Rows are data: a later row (speclab's
own exporter series) is one more ``Row`` appended to ``rows()``.

Annotations mark what can move acceptance: a restart (vLLM's counters reset), a change of draft
length k (the number of per-position series changed) and a change of cache config
(``vllm:cache_config_info`` took a new label set).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from speclab.model import names

from . import promql
from .promql import BY_MODEL, PHASES, QUANTILES
from .rules import Windows

UID: Final = "speclab-vllm-spec-decode"
DATASOURCE: Final = {"type": "prometheus", "uid": "${datasource}"}
RATE: Final = "$__rate_interval"
SELECTOR: Final = 'job=~"$job",instance=~"$instance",model_name=~"$model_name"'
INSTANCE_SELECTOR: Final = 'job=~"$job",instance=~"$instance"'
SERVER_LEGEND: Final = "{{model_name}} @ {{instance}}"
GRID_W: Final = 24
PANEL_W: Final = 8
PANEL_H: Final = 8


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str = SERVER_LEGEND


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    targets: tuple[Target, ...]
    unit: str = "none"
    min: float | None = 0
    max: float | None = None
    custom: dict[str, Any] = field(default_factory=dict)
    overrides: tuple[dict[str, Any], ...] = ()
    width: int = PANEL_W


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


def spec_decode_row(w: Windows) -> Row:
    s = SELECTOR
    dashed = {"matcher": {"id": "byRegexp", "options": ".*baseline.*"},
              "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}}]}
    return Row("Speculative decoding (vLLM)", (
        Panel("Rejection rate", "1 − Σaccepted / Σdrafted draft tokens per server, with the "
              f"{w.baseline} rate the spike alert compares it to (dashed).",
              (Target(promql.rejection_rate(RATE, s)),
               Target(promql.rejection_rate(w.baseline, s), f"{SERVER_LEGEND} baseline {w.baseline}")),
              unit="percentunit", max=1, overrides=(dashed,)),
        Panel("Acceptance rate", "Σaccepted / Σdrafted draft tokens per server.",
              (Target(promql.acceptance_rate(RATE, s)),), unit="percentunit", max=1),
        Panel("Mean acceptance length", "Tokens per verify step, bonus token included: 1 + Σaccepted / Σdrafts.",
              (Target(promql.acceptance_length(RATE, s)),), min=1),
        Panel("Acceptance by draft position", "Share of drafts whose positions 0..i were all accepted.",
              (Target(promql.position_acceptance(RATE, s), f"{SERVER_LEGEND} pos {{{{position}}}}"),),
              unit="percentunit", max=1),
        Panel("Verifications per request", "Verify steps (vLLM's drafts) per finished request.",
              (Target(promql.drafts_per_request(RATE, s)),)),
        Panel("Draft tokens", "Drafted and accepted draft tokens per second (per modelled second on a "
              "speclab simulator run under a time scale: rate × speclab_sim_time_scale).",
              (Target(promql.per_modelled_second(promql.rate_sum(promql.DRAFT_TOKENS, RATE, s)),
                      f"{SERVER_LEGEND} drafted"),
               Target(promql.per_modelled_second(promql.rate_sum(promql.ACCEPTED, RATE, s)),
                      f"{SERVER_LEGEND} accepted")), unit="short"),
        Panel("Draft length k", "num_speculative_tokens, from the per-position series vLLM creates.",
              (Target(promql.num_speculative_tokens(s)),), custom={"lineInterpolation": "stepAfter"}, width=12),
        Panel("Rejection rate per model", "The same ratio summed over every server of a model.",
              (Target(promql.rejection_rate(RATE, s, by=BY_MODEL), "{{model_name}} ({{job}})"),),
              unit="percentunit", max=1, width=12),
    ))


def latency_row() -> Row:
    s = SELECTOR
    split = Panel("Where a request's time goes (mean)", "Mean queue, prefill and decode time per finished "
                  "request, stacked: together they make vLLM's e2e latency less tokenization and detokenization.",
                  tuple(Target(promql.mean(p, RATE, s), f"{SERVER_LEGEND} {p.key}") for p in PHASES
                        if p.key in ("queue", "prefill", "decode")),
                  unit="s", custom={"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 40}, width=24)
    per_phase = tuple(
        Panel(p.title, f"{p.meaning}; p50, p90 and p99 from vLLM's histogram buckets.",
              tuple(Target(promql.quantile(p, q, RATE, s), f"{SERVER_LEGEND} p{round(q * 100)}") for q in QUANTILES),
              unit="s")
        for p in PHASES)
    return Row("Latency split (vLLM)", (split, *per_phase))


def rows(w: Windows) -> list[Row]:
    return [spec_decode_row(w), latency_row()]


def annotation_list(w: Windows) -> list[dict[str, Any]]:
    def prom(name: str, expr: str, color: str, title: str, text: str) -> dict[str, Any]:
        return {"datasource": DATASOURCE, "enable": True, "expr": expr, "iconColor": color, "name": name,
                "step": w.rate, "titleFormat": title, "textFormat": text, "tagKeys": "job,instance",
                "useValueForTime": False}

    return [
        {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True,
         "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"},
        prom("vLLM restart", promql.restarts(w.rate, SELECTOR), "red", "vLLM restarted", SERVER_LEGEND),
        prom("Draft length change", promql.draft_length_changed(w.rate, SELECTOR), "orange",
             "Draft length k changed", SERVER_LEGEND),
        prom("Cache config change", promql.cache_config_changed(w.rate, INSTANCE_SELECTOR), "purple",
             "vLLM cache config changed", "{{instance}}"),
    ]


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    definition = f"label_values({query}, {name})"
    return {"name": name, "label": label, "type": "query", "datasource": DATASOURCE, "definition": definition,
            "query": {"qryType": 1, "query": definition, "refId": f"PrometheusVariableQueryEditor-{name}"},
            "refresh": 2, "multi": True, "includeAll": True, "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "sort": 1}


def templating() -> list[dict[str, Any]]:
    base = names.PROM_RUNNING
    return [
        {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
         "current": {}, "refresh": 1},
        _variable("job", "job", base),
        _variable("instance", "instance", f'{base}{{job=~"$job"}}'),
        _variable("model_name", "model", f'{base}{{job=~"$job",instance=~"$instance"}}'),
    ]


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit, "custom": {"lineWidth": 1, "fillOpacity": 0, **panel.custom}}
    if panel.min is not None:
        defaults["min"] = panel.min
    if panel.max is not None:
        defaults["max"] = panel.max
    return {
        "id": panel_id, "type": "timeseries", "title": panel.title, "description": panel.description,
        "datasource": DATASOURCE, "gridPos": {"h": PANEL_H, "w": panel.width, "x": x, "y": y},
        "targets": [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": t.expr,
                     "legendFormat": t.legend, "range": True} for i, t in enumerate(panel.targets)],
        "fieldConfig": {"defaults": defaults, "overrides": list(panel.overrides)},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
    }


def layout(all_rows: list[Row]) -> list[dict[str, Any]]:
    """Grafana's flat panel list: a row header, then its panels left to right on a 24-column grid."""
    out: list[dict[str, Any]] = []
    y, panel_id = 0, 1
    for row in all_rows:
        out.append({"id": panel_id, "type": "row", "title": row.title, "collapsed": False, "panels": [],
                    "gridPos": {"h": 1, "w": GRID_W, "x": 0, "y": y}})
        panel_id, y, x = panel_id + 1, y + 1, 0
        for panel in row.panels:
            if x + panel.width > GRID_W:
                x, y = 0, y + PANEL_H
            out.append(_panel_json(panel, panel_id, x, y))
            panel_id, x = panel_id + 1, x + panel.width
        y += PANEL_H
    return out


def dashboard(w: Windows, extra_rows: list[Row] | None = None, extra_annotations: list[dict[str, Any]] | None = None,
              extra_variables: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "uid": UID, "title": "vLLM speculative decoding (speclab)",
        "description": "Acceptance, rejection spikes, verifications per request and the latency split of vLLM "
                       "0.33 servers, from their own /metrics; annotations mark restarts and config changes.",
        "tags": ["vllm", "speculative-decoding", "speclab"], "timezone": "browser", "editable": True,
        "graphTooltip": 1, "schemaVersion": 39, "version": 1, "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"}, "links": [],
        "annotations": {"list": [*annotation_list(w), *(extra_annotations or [])]},
        "templating": {"list": [*templating(), *(extra_variables or [])]},
        "panels": layout([*rows(w), *(extra_rows or [])]),
    }
