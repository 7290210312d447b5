"""The kit against a real Prometheus scraping a real simulator: every panel, annotation and rule.

One Prometheus (1 s scrapes and rule evaluation, the kit's rule files loaded) scrapes a simulator
serving sim-8b with a k=2 draft; after a little traffic the simulator is relaunched on the same
port with k=3 and another memory utilization (a restart, a draft-length change and a cache-config
change at once), and gets a little more traffic. Then each dashboard query (as Grafana sends it,
a range query with the variables at "All"), each annotation, each recorded series and each alert's
inputs must return data; every rule must evaluate without error, and no alert fires on the steady
simulator. The dashboard's speclab row, its variable and its relaunch annotation read speclab's own
exporter: ``test_speclab_exporter_live`` checks those against a running ``speclab run``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from speclab.monitoring import rules
from speclab.monitoring.kit import DASHBOARD_FILE, write_kit

from .tools import Prometheus, Sim, as_grafana_sends, free_port, has_data, needs_prometheus, wait_for

pytestmark = needs_prometheus

MODEL = "sim-8b"


def _sim_args(k: int, memory: str) -> list[str]:
    spec = {"method": "draft_model", "model": "sim-1b", "num_speculative_tokens": k}
    return [MODEL, "--speculative-config", json.dumps(spec), "--gpu-memory-utilization", memory]


@dataclass
class Live:
    prom: Prometheus
    start: float
    dashboard: dict[str, Any]
    recording: list[dict[str, Any]]
    alerts: list[dict[str, Any]]
    marked_before_relaunch: list[str]


def _panel_targets(board: dict[str, Any]) -> list[tuple[str, str]]:
    """The vLLM rows' queries (the speclab row reads speclab's exporter, not scraped here)."""
    return [(f"{p['title']} [{t['refId']}]", t["expr"]) for p in board["panels"] if p["type"] != "row"
            for t in p["targets"] if "vllm:" in t["expr"]]


def _missing(live: Live, named: list[tuple[str, str]], *, ranged: bool) -> list[str]:
    now = time.time()
    missing = []
    for name, expr in named:
        result = (live.prom.query_range(as_grafana_sends(expr), live.start, now) if ranged
                  else live.prom.query(expr))
        if not has_data(result):
            missing.append(name)
    return missing


def _annotations(board: dict[str, Any]) -> list[tuple[str, str]]:
    return [(a["name"], a["expr"]) for a in board["annotations"]["list"] if "expr" in a and "vllm:" in a["expr"]]


def _recorded(live: Live) -> list[tuple[str, str]]:
    """Each recorded series, told apart by its rule's labels (the quantiles share one name)."""
    out = []
    for rule in live.recording:
        labels = ",".join(f'{k}="{v}"' for k, v in rule.get("labels", {}).items())
        expr = f"{rule['record']}{{{labels}}}" if labels else rule["record"]
        out.append((expr, expr))
    return out


def _everything(live: Live) -> list[str]:
    annotations = _annotations(live.dashboard)
    recorded = _recorded(live)
    return (_missing(live, _panel_targets(live.dashboard), ranged=True)
            + _missing(live, annotations, ranged=True) + _missing(live, recorded, ranged=False))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("prometheus-live")
    kit = tmp / "kit"
    write_kit(kit)
    port = free_port()
    with ExitStack() as stack:
        start = time.time()
        first = Sim(_sim_args(2, "0.9"), port, tmp / "sim-k2.log")
        stack.callback(first.stop)
        prom = Prometheus(tmp, [f"127.0.0.1:{port}"], sorted(kit.glob("*.rules.yml")))
        stack.callback(prom.stop)
        wait_for("first successful scrape", lambda: prom.query('up{job="vllm"} == 1') or None, 30,
                 prom.proc, prom.log)
        first.traffic(MODEL)
        wait_for("the first traffic scraped", lambda: prom.query("vllm:request_success_total > 0") or None, 30,
                 prom.proc, prom.log)
        board = json.loads((kit / DASHBOARD_FILE).read_text())
        quiet = [name for name, expr in _annotations(board) if has_data(prom.query(as_grafana_sends(expr)))]
        first.stop()
        second = Sim(_sim_args(3, "0.85"), port, tmp / "sim-k3.log")
        stack.callback(second.stop)
        wait_for("the relaunch scraped (k=3)",
                 lambda: prom.query("count(vllm:spec_decode_num_accepted_tokens_per_pos_total) == 3") or None, 30,
                 prom.proc, prom.log)
        second.traffic(MODEL)
        recording = [r for g in rules.recording_file(rules.Windows.for_scrape_interval(15))["groups"]
                     for r in g["rules"]]
        alerts = rules.alerts_file(rules.Windows.for_scrape_interval(15))["groups"][0]["rules"]
        state = Live(prom, start, board, recording, alerts, quiet)
        wait_for("every panel, annotation and recorded series with data", lambda: not _everything(state) or None,
                 30, prom.proc, lambda: f"still without data: {_everything(state)}\n{prom.log()}")
        yield state


def test_every_dashboard_panel_query_returns_data(live: Live) -> None:
    targets = _panel_targets(live.dashboard)
    assert len(targets) >= 15
    assert _missing(live, targets, ranged=True) == []


def test_every_annotation_marks_the_relaunch_and_nothing_before_it(live: Live) -> None:
    annotations = _annotations(live.dashboard)
    assert {name for name, _ in annotations} == {"vLLM restart", "Draft length change", "Cache config change"}
    assert live.marked_before_relaunch == []
    assert _missing(live, annotations, ranged=True) == []


def test_dashboard_variables_list_the_server(live: Live) -> None:
    for var in live.dashboard["templating"]["list"]:
        if var["type"] != "query" or "vllm:" not in var["definition"]:
            continue
        metric = as_grafana_sends(var["definition"].removeprefix("label_values(").rsplit(",", 1)[0])
        values = {s["metric"].get(var["name"]) for s in live.prom.query(metric)}
        assert values - {None}, var["name"]


def test_every_recording_rule_records_data_and_every_rule_evaluates(live: Live) -> None:
    assert _missing(live, _recorded(live), ranged=False) == []
    groups = live.prom.api("rules")["groups"]
    loaded = [r for g in groups for r in g["rules"]]
    assert len(loaded) == len(live.recording) + len(live.alerts)
    assert [(r["name"], r.get("lastError")) for r in loaded if r["health"] != "ok"] == []


def test_alert_inputs_have_data_and_no_alert_fires_on_a_steady_server(live: Live) -> None:
    conditions = rules.alert_conditions(rules.Windows.for_scrape_interval(15))
    assert set(conditions) == {a["alert"] for a in live.alerts}
    for alert in live.alerts:
        for series in conditions[alert["alert"]]:
            assert series in alert["expr"]
            assert has_data(live.prom.query(series)), (alert["alert"], series)
        live.prom.query(alert["expr"])  # evaluates (the API answers success) though rightly empty
    assert [a["labels"]["alertname"] for a in live.prom.api("alerts")["alerts"]] == []


def test_the_kit_under_test_is_the_one_users_get(live: Live, tmp_path: Path) -> None:
    write_kit(tmp_path / "kit")
    assert json.loads((tmp_path / "kit" / DASHBOARD_FILE).read_text()) == live.dashboard
