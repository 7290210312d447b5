"""The dashboard's per-second panels under a simulator time scale, evaluated by promtool on synthetic series.

Two speclab processes serve the same modelled traffic: ``slow`` ran its simulators at time scale 4
(its counters grow a quarter as fast per wall second, ``speclab_time_scale`` 4), ``fast`` at 1.
Every query of the speclab row that takes a ``rate()`` must give both the same values, per modelled
second; the requests panel must read the modelled 2 requests per second on both. Likewise the vLLM
row's draft-token rates: a simulator at time scale 4 (``speclab_sim_time_scale``) and a real server
(no such series) drafting the same tokens per modelled second must read the same.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any, Final

import yaml

from speclab.monitoring.kit import DASHBOARD_FILE, Kit

from .tools import PROMTOOL, as_grafana_sends, needs_promtool

pytestmark = needs_promtool

SCRAPE_S: Final = 15
STEPS: Final = 40  # ten minutes of scrapes
SLOW, FAST = "slow:9464", "fast:9464"
SCALES: Final = {SLOW: 4.0, FAST: 1.0}
KEY: Final = 'job="speclab",variant="k2",epoch="1",class="qa"'
# Modelled events per second of each counter the row reads ({kind} only on the errors).
COUNTERS: Final = {"requests_total": 2.0, "output_tokens_total": 48.0, "spec_decode_draft_tokens_total": 6.0,
                   "spec_decode_accepted_tokens_total": 4.0, "spec_decode_verify_steps_total": 3.0,
                   "structured_output_requests_total": 1.0, "structured_output_failures_total": 0.25,
                   "request_errors_total": 0.5}
# Cumulative observations per modelled second by bucket of each histogram the row reads.
LATENCY_BUCKETS: Final = (("0.05", 0.5), ("0.1", 1.0), ("0.5", 1.75), ("+Inf", 2.0))
HISTOGRAMS: Final = {"request_e2e_corrected_seconds": LATENCY_BUCKETS, "request_tpot_seconds": LATENCY_BUCKETS,
                     "spec_decode_acceptance_length": (("1.0", 0.5), ("2.0", 1.5), ("3.0", 3.0), ("+Inf", 3.0))}


def _row_queries() -> list[tuple[str, str]]:
    board = json.loads(Kit.build().files[DASHBOARD_FILE])
    return [(f"{p['title']} [{t['refId']}]", as_grafana_sends(t["expr"])) for p in board["panels"]
            if p["type"] != "row" for t in p["targets"] if re.search(r"rate\(speclab_\w+_(total|bucket)\{", t["expr"])]


def _counter(per_s: float, scale: float) -> str:
    return f"0+{per_s * SCRAPE_S / scale!r}x{STEPS}"


def _input_series() -> list[dict[str, str]]:
    out = []
    for instance, scale in SCALES.items():
        labels = f'{KEY},instance="{instance}"'
        out.append({"series": f'speclab_time_scale{{job="speclab",instance="{instance}"}}',
                    "values": f"{scale!r}x{STEPS}"})
        for name, per_s in COUNTERS.items():
            kind = ',kind="timeout"' if name == "request_errors_total" else ""
            out.append({"series": f"speclab_{name}{{{labels}{kind}}}", "values": _counter(per_s, scale)})
        for name, buckets in HISTOGRAMS.items():
            for le, per_s in buckets:
                out.append({"series": f'speclab_{name}_bucket{{{labels},le="{le}"}}',
                            "values": _counter(per_s, scale)})
    return out


def _only(expr: str, instance: str) -> str:
    """The query's series of one speclab process, its instance label made common."""
    return f'label_replace(({expr}) and on (instance) speclab_time_scale{{instance="{instance}"}}, "instance", "x", "", "")'


def _check(expr: str, labels: list[str]) -> dict[str, Any]:
    return {"expr": expr, "eval_time": f"{STEPS * SCRAPE_S}s", "exp_samples": [{"labels": lab, "value": 1} for lab in labels]}


def _promtool(tmp_path: Path, checks: list[dict[str, Any]],
             series: list[dict[str, str]] | None = None) -> tuple[int, str]:
    (tmp_path / "none.rules.yml").write_text("groups: []\n")
    test = {"rule_files": ["none.rules.yml"], "evaluation_interval": "1m",
            "tests": [{"interval": f"{SCRAPE_S}s", "input_series": _input_series() if series is None else series,
                       "promql_expr_test": checks}]}
    (tmp_path / "row.test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    assert PROMTOOL is not None
    proc = subprocess.run([PROMTOOL, "test", "rules", "row.test.yml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_the_test_feeds_every_series_the_rows_rates_read() -> None:
    queries = _row_queries()
    assert len(queries) >= 9
    fed = {f"speclab_{n}" for n in COUNTERS} | {f"speclab_{n}_bucket" for n in HISTOGRAMS}
    read = {m for _, expr in queries for m in re.findall(r"speclab_[a-z_]+(?=\{)", expr)}
    assert read <= fed | {"speclab_time_scale"}, read - fed


def test_every_rate_query_reads_per_modelled_second_whatever_the_time_scale(tmp_path: Path) -> None:
    checks = []
    for _, expr in _row_queries():
        slow, fast = _only(expr, SLOW), _only(expr, FAST)
        checks.append(_check(f"count(abs({slow} - {fast}) < 1e-9) == bool count({fast})", ["{}"]))
    code, out = _promtool(tmp_path, checks)
    assert code == 0, out


def test_the_requests_panel_shows_the_modelled_rate(tmp_path: Path) -> None:
    (expr,) = [e for n, e in _row_queries() if n == "Requests and errors [A]"]
    assert "speclab_time_scale" in expr
    labels = [f'{{instance="{i}",variant="k2",epoch="1"}}' for i in sorted(SCALES)]
    code, out = _promtool(tmp_path, [_check(f"abs(({expr}) - {COUNTERS['requests_total']}) < bool 1e-9", labels)])
    assert code == 0, out



def test_the_vllm_draft_token_rates_read_per_modelled_second_on_a_scaled_simulator(tmp_path: Path) -> None:
    board = json.loads(Kit.build().files[DASHBOARD_FILE])
    targets = [as_grafana_sends(t["expr"]) for p in board["panels"] if p.get("title") == "Draft tokens"
               for t in p["targets"]]
    assert len(targets) == 2
    servers = {"sim:8000": 4.0, "real:8000": None}  # the same 6 drafted and 4 accepted tokens per modelled second
    series = []
    for instance, scale in servers.items():
        own = f'job="vllm",instance="{instance}",model_name="m",engine="0"'
        for name, per_s in (("vllm:spec_decode_num_draft_tokens_total", 6.0),
                            ("vllm:spec_decode_num_accepted_tokens_total", 4.0)):
            series.append({"series": f"{name}{{{own}}}", "values": _counter(per_s, scale or 1.0)})
        if scale is not None:
            series.append({"series": f'speclab_sim_time_scale{{job="vllm",instance="{instance}"}}',
                           "values": f"{scale!r}x{STEPS}"})
    labels = [f'{{job="vllm",instance="{i}",model_name="m"}}' for i in sorted(servers)]
    checks = [_check(f"abs(({expr}) - {per_s}) < bool 1e-9", labels)
              for expr, per_s in zip(targets, (6.0, 4.0), strict=True)]
    code, out = _promtool(tmp_path, checks, series)
    assert code == 0, out
