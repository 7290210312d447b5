"""`speclab sweep --metrics-port`: one endpoint for the whole sweep, each cell an epoch of its own.

A two-cell sweep (k=0 and k=2 at concurrency 2, real simulators per cell) holds its final figures;
its exposition must count every cell's requests under the cell's number as in sweep.json, name the
last cell in ``speclab_config_info`` (its id and load), step ``speclab_variant_epoch`` per cell, say
and say the sweep finished. Ctrl-C ends the hold, exit 0.
"""

from __future__ import annotations

import json
import re
import signal
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .test_sweep_run import CELL, _popen, _setup

Samples = list[tuple[str, dict[str, str], float]]


def _scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return [(s.name, dict(s.labels), s.value) for f in text_string_to_metric_families(text) for s in f.samples]


@pytest.mark.timeout(240)
def test_every_cell_is_an_epoch_of_one_endpoint_and_its_counts_equal_sweep_json(workdir: Path) -> None:
    lab, scenario = _setup(workdir)
    out_dir = workdir / "sweep"
    proc = _popen(["sweep", str(lab), str(scenario), "--report", str(out_dir), "--k", "0,2", "--concurrency", "2",
                   "--no-confirm", "--metrics-port", "0", "--metrics-hold", "120", *CELL], workdir)
    seen: list[str] = []
    url = ""
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the hold's first line is the event: every cell is written by then
            seen.append(line)
            if m := re.match(r"metrics: (http://127\.0\.0\.1:\d+/metrics) ", line):
                url = m.group(1)
            if line.startswith("metrics: serving the final figures"):
                break
        assert url, "".join(seen)
        samples = _scrape(url)
        proc.send_signal(signal.SIGINT)  # ends the hold
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, "".join(seen) + rest
    cells = json.loads((out_dir / "sweep.json").read_text())["cells"]
    assert [c["id"] for c in cells] == ["k0_c2_r1", "k2_c2_r1"]
    for number, cell in enumerate(cells, start=1):
        variant = cell["id"].split("_")[0]
        counted = sum(v for name, labels, v in samples if name == "speclab_requests_total"
                      and labels["variant"] == variant and labels["epoch"] == str(number))
        assert counted == cell["classes"]["all"]["requests"] > 0, (variant, number)
    info = [labels for name, labels, _ in samples if name == "speclab_config_info"]
    assert [(i["variant"], i["epoch"], i["cell"], i["load"], i["k"]) for i in info] == [
        ("k2", "2", "k2_c2_r1", "concurrency=2", "2")]
    assert info[0]["draft_model"] == "meta-llama/Llama-3.2-1B-Instruct" and info[0]["lab"] == "swp"
    assert {labels["variant"]: v for name, labels, v in samples if name == "speclab_variant_epoch"} == {
        "k0": 1.0, "k2": 2.0}
    assert [v for name, _, v in samples if name == "speclab_run_finished"] == [1.0]
