"""`speclab drill --metrics-port`: speclab's own series during a drill, per backend that answered.

A short scheduled drill holds its final figures; its exposition must count each backend's
requests per class exactly as the report's variant tables do, name each backend's configuration
in ``speclab_config_info`` (k=0 for the baseline, k=4 for the pool) and say the drill finished.
Ctrl-C ends the hold quietly: the drill's own exit code stands.
"""

from __future__ import annotations

import signal
import subprocess
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.monitoring.tools import free_port

from .conftest import run_drill, write_inputs
from .test_drill_live import SHORT

Samples = list[tuple[str, dict[str, str], float]]


def test_a_drill_serves_its_counts_per_backend_as_the_report_has_them(tmp_path: Path) -> None:
    lab, scenario = write_inputs(tmp_path)
    port = free_port()
    scraped: list[Samples] = []

    def scrape_then_stop(proc: subprocess.Popen[str], _: Path) -> None:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        scraped.append([(s.name, dict(s.labels), s.value) for f in text_string_to_metric_families(text)
                        for s in f.samples])
        proc.send_signal(signal.SIGINT)

    run = run_drill(str(lab), str(scenario), *SHORT, "--metrics-port", str(port), "--metrics-hold", "120",
                    report_dir=tmp_path / "report", interrupt_on="metrics: serving the final figures",
                    action=scrape_then_stop)
    assert run.code == 0 and scraped, run.output
    assert f"metrics: http://127.0.0.1:{port}/metrics" in run.output
    samples = scraped[0]
    served = {(labels["variant"], labels["class"]): v for name, labels, v in samples
              if name == "speclab_requests_total" and labels["epoch"] == "1"}
    report = {(variant, cls): block["requests"] for variant, v in run.report["variants"].items()
              for e in v["epochs"] for cls, block in e["classes"].items() if cls != "all"}
    assert served == report and served[("k4", "story")] > 0 and served[("baseline", "story")] > 0
    info = {labels["variant"]: labels for name, labels, _ in samples if name == "speclab_config_info"}
    assert (info["baseline"]["k"], info["k4"]["k"]) == ("0", "4")
    assert info["k4"]["draft_model"] == "meta-llama/Llama-3.2-1B-Instruct" and info["k4"]["lab"] == "drilllab"
    assert [v for name, _, v in samples if name == "speclab_run_finished"] == [1.0]
