"""A real Prometheus scraping a running `speclab run --metrics-port`: the dashboard's speclab row.

The run is the mixed scenario on its own simulators (baseline and k2, k2 relaunched with k=3 part
way), holding its final figures after it ends. Every query of the dashboard's speclab row (as
Grafana sends it), its relaunch annotation and its variable must return data; speclab's counters in
Prometheus must equal the run's report per variant, epoch and class; ``speclab_config_info`` must end
one label set and start the next at the relaunch; ``promtool check metrics`` must pass clean.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from speclab.monitoring.kit import DASHBOARD_FILE, write_kit

from .tools import (
    PROMTOOL,
    Prometheus,
    SpeclabRun,
    as_grafana_sends,
    free_port,
    has_data,
    http_get,
    needs_prometheus,
    needs_promtool,
    wait_for,
)

# A whole `speclab run` with its simulators: on a loaded two-core host, more than the default limit.
pytestmark = [needs_prometheus, pytest.mark.timeout(420)]

RUN = ["mixed", "--variants", "baseline,k2", "--duration", "16", "--rate", "3",
       "--change", "5:k2:num_speculative_tokens=3", "--metrics-hold", "600"]


@dataclass
class Live:
    prom: Prometheus
    run: SpeclabRun
    start: float
    board: dict[str, Any]


def _reads_speclab(expr: str) -> bool:
    """A query of speclab's own series (not the simulator's ``speclab_sim_time_scale`` beside vLLM's)."""
    return re.search(r"\bspeclab_(?!sim_)", expr) is not None


def _speclab_queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    panels = [(f"{p['title']} [{t['refId']}]", t["expr"]) for p in board["panels"] if p["type"] != "row"
              for t in p["targets"] if _reads_speclab(t["expr"])]
    notes = [(a["name"], a["expr"]) for a in board["annotations"]["list"] if _reads_speclab(a.get("expr", ""))]
    return panels + notes


def _missing(live: Live) -> list[str]:
    now = time.time()
    return [name for name, expr in _speclab_queries(live.board)
            if not has_data(live.prom.query_range(as_grafana_sends(expr), live.start, now))]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("speclab-exporter-live")
    write_kit(tmp / "kit")
    board = json.loads((tmp / "kit" / DASHBOARD_FILE).read_text())
    port = free_port()
    with ExitStack() as stack:
        start = time.time()
        prom = Prometheus(tmp, [], [], {"speclab": [f"127.0.0.1:{port}"]})
        stack.callback(prom.stop)
        run = SpeclabRun(RUN, port, tmp / "report", tmp / "run.log")
        stack.callback(run.stop)
        wait_for("speclab run finished and scraped",
                 lambda: prom.query('speclab_run_finished{job="speclab"} == 1') or None, 300, run.proc, run.log)
        # The final snapshot is served before the report is written: wait for the run's last line.
        wait_for("the run's report written", lambda: "metrics: serving the final figures" in run.log() or None,
                 60, run.proc, run.log)
        state = Live(prom, run, start, board)
        wait_for("every speclab panel and annotation with data", lambda: not _missing(state) or None, 60,
                 prom.proc, lambda: f"still without data: {_missing(state)}\n{run.log()}")
        yield state


def test_every_speclab_panel_and_the_relaunch_annotation_return_data(live: Live) -> None:
    queries = _speclab_queries(live.board)
    assert len(queries) >= 12 and "speclab relaunch" in {name for name, _ in queries}
    assert _missing(live) == []


def test_the_variant_variable_lists_the_runs_variants(live: Live) -> None:
    var = next(v for v in live.board["templating"]["list"] if v["name"] == "variant")
    metric = var["definition"].removeprefix("label_values(").rsplit(",", 1)[0]
    assert {s["metric"]["variant"] for s in live.prom.query(metric)} == {"baseline", "k2"}


def _report_counts(report: dict[str, Any], field: str) -> dict[tuple[str, str, str], float]:
    out = {}
    for variant, v in report["variants"].items():
        for e in v["epochs"]:
            for cls, block in e["classes"].items():
                if cls != "all":
                    value = block["requests"] if field == "requests" else block["acceptance"][field]
                    out[(variant, str(e["epoch"]), cls)] = float(value)
    return out


def _prometheus_counts(live: Live, metric: str) -> dict[tuple[str, str, str], float]:
    return {(s["metric"]["variant"], s["metric"]["epoch"], s["metric"]["class"]): float(s["value"][1])
            for s in live.prom.query(f'{metric}{{job="speclab"}}')}


def test_counts_in_prometheus_equal_the_report(live: Live) -> None:
    report = json.loads((live.run.report / "report.json").read_text())
    assert [len(v["epochs"]) for v in report["variants"].values()] == [1, 2]  # k2 relaunched with k=3
    requests = _prometheus_counts(live, "speclab_requests_total")
    assert requests == _report_counts(report, "requests") and sum(requests.values()) > 0
    assert _prometheus_counts(live, "speclab_spec_decode_draft_tokens_total") == _report_counts(report, "drafted")
    assert _prometheus_counts(live, "speclab_spec_decode_accepted_tokens_total") == _report_counts(report, "accepted")
    info = {s["metric"]["epoch"]: s["metric"] for s in live.prom.query_range(
        'speclab_config_info{job="speclab",variant="k2"}', live.start, time.time())}
    assert info["1"]["k"] == "2" and info["2"]["k"] == "3"  # the relaunch ended one series and began the next
    assert info["2"]["draft_model"] == report["pair"]["draft_model"]


@needs_promtool
def test_promtool_check_metrics_is_clean_on_the_exposition(live: Live) -> None:
    status, exposition = http_get(live.run.metrics_url)
    assert status == 200 and "speclab_request_e2e_corrected_seconds_bucket" in exposition
    assert PROMTOOL is not None
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=exposition, capture_output=True, text=True,
                          timeout=60, check=False)
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, "")
