"""Cells built from real per-epoch reports, not hand-made blocks.

The config-epochs work (``variants.<name>.epochs[]`` in report.json) had not landed on main when
this was written, so the files under ``data/epochs_run/`` are the real output of that branch at
commit 2681118 (``speclab run mixed --lab default --engine sim --concurrency N --seed 3``; N = 2
for 30 s; N = 4 for 30 s with ``--change 10:k4:num_speculative_tokens=3``), trimmed to the keys a
sweep reads: report.json without its A/B, events and timeline; server samples without histograms;
request records with their timing fields only (gzipped). The N = 4 run is a measured failure mode
too: during k4's relaunch the closed loop spun on connect errors and the client was saturated,
which the sweep must carry as a note, not hide.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from speclab.model.lab import load_lab
from speclab.model.records import RequestRecord, ServerSample
from speclab.sweep import (
    CellConfig,
    CellPlan,
    LoadLevel,
    cell_from_report,
    make_grid,
    parse_slo,
    reduce_sweep,
    rules_for_lab,
)
from speclab.sweep.output import write_sweep
from speclab.sweep.result import SCHEMA_FILE, sweep_document

DATA = Path(__file__).with_name("data") / "epochs_run"
LAB = load_lab("default")
SLO = parse_slo("ttft_p99=500ms,tpot_p99=10ms")


HAS_EPOCH = "epoch" in {f.name for f in fields(RequestRecord)}


def _run(name: str) -> tuple[dict[str, Any], list[ServerSample], list[dict[str, Any]]]:
    report = json.loads((DATA / name / "report.json").read_text())
    lines = (DATA / name / "server_samples.jsonl").read_text().splitlines()
    samples = [ServerSample.from_dict(json.loads(line)) for line in lines]
    with gzip.open(DATA / name / "requests.jsonl.gz", "rt") as f:
        raw = [json.loads(line) for line in f]
    return report, samples, raw


def _records(raw: list[dict[str, Any]], variant: str, epoch: int) -> list[RequestRecord]:
    """The run's records as a driver hands them over. Where RequestRecord has no ``epoch`` yet (main
    before config epochs), keep the epoch's own lines here, as the field will once it exists: a
    request sent just before the workers switch to the relaunched server carries the old epoch."""
    if not HAS_EPOCH:
        raw = [r for r in raw if r["variant"] != variant or r["epoch"] == epoch]
    return [RequestRecord.from_dict(r) for r in raw]


def _cells() -> list[Any]:
    cells = []
    for name in ("c2", "c4"):
        report, samples, raw = _run(name)
        load = LoadLevel("concurrency", float(report["arrival"]["concurrency"]))
        for variant, v in report["variants"].items():
            for block in v["epochs"]:
                k = int(block["settings"].get("num_speculative_tokens") or 0)
                plan = CellPlan(CellConfig(k), load, 1)
                records = _records(raw, variant, block["epoch"])
                cells.append(cell_from_report(plan, report, variant=variant, epoch=block["epoch"], slo=SLO,
                                              samples=samples, records=records, source={"recording": f"cells/{name}"}))
    return cells


@pytest.fixture(scope="module")
def cells() -> list[Any]:
    return _cells()


def test_cells_carry_the_reports_own_figures(cells: list[Any]) -> None:
    report, _, _ = _run("c4")
    by = {(c.source["variant"], c.source["epoch"], c.load.value): c for c in cells}
    assert set(by) == {("baseline", 1, 2), ("k2", 1, 2), ("k4", 1, 2), ("baseline", 1, 4), ("k2", 1, 4),
                       ("k4", 1, 4), ("k4", 2, 4)}
    relaunched = by[("k4", 2, 4)]
    assert relaunched.config.k == 3 and relaunched.source["label"] == "k4·2 (k=3)"
    block = report["variants"]["k4"]["epochs"][1]["classes"]
    for name, own in block.items():
        mine = relaunched.classes[name]
        assert mine["throughput"] == own["throughput"] and mine["latency"] == own["latency"]
        assert mine["acceptance"]["acceptance_length_distribution"] == own["acceptance"]["acceptance_length_distribution"]
        assert relaunched.value(name, "acceptance_length") == own["acceptance"]["acceptance_length_mean"]
    assert len(relaunched.classes["all"]["acceptance"]["acceptance_length_distribution"]) == 4  # k=3: 0..3 accepted


def test_server_block_is_the_measured_running_batch(cells: list[Any]) -> None:
    for cell in cells:
        server = cell.server
        assert server is not None and server.samples > 0
        assert server.running_mean is not None and 0 < server.running_mean <= cell.load.value + 1e-9
        assert 1 <= server.running_batch <= cell.load.value
        assert server.kv_usage_mean is not None and 0 <= server.kv_usage_mean <= 1


def test_goodput_counts_only_the_epochs_own_requests(cells: list[Any]) -> None:
    report, _, _ = _run("c4")
    by = {(c.source["variant"], c.source["epoch"], c.load.value): c for c in cells}
    first, second = by[("k4", 1, 4)], by[("k4", 2, 4)]
    blocks = {e["epoch"]: e for e in report["variants"]["k4"]["epochs"]}
    for cell, epoch in ((first, 1), (second, 2)):
        good = cell.classes["all"]["goodput"]
        measured = blocks[epoch]["classes"]["all"]["requests"]
        # the epoch's completed requests, none of the ~1,500 connect errors of the transition between them
        assert good["source"] == "requests"
        assert good["requests"] == measured + sum(blocks[epoch]["classes"]["all"]["errors"].values())
        assert 0 < good["good"] <= good["requests"]
    assert report["transitions"][0]["errors"] > 1000


def test_reductions_and_files_from_real_cells(cells: list[Any], tmp_path: Path) -> None:
    grid = make_grid([0, 2, 3, 4], rules=rules_for_lab(LAB), concurrency=[2, 4], slo=SLO, min_requests=5)
    result = reduce_sweep(grid, cells, lab=LAB)
    # at 2 and 4 in flight speculation is far from its crossover on the simulator's step model
    assert result.crossover["all"]["k2"] == {"tpot": None, "throughput": None}
    assert result.crossover["all"]["k4"]["tpot"] is None
    none = [r for r in result.no_crossover() if r["class"] == "all" and r["arm"] == "k2" and r["measure"] == "tpot"]
    assert none and 1.0 < none[0]["break_even"] < none[0]["acceptance_length"]
    assert result.recommendation.schedule[0][0] == 1 and result.recommendation.schedule[-1][1] == 64
    assert result.speculative_config is not None and result.speculative_config["method"] == "draft_model"
    assert any("could not keep up" in n for n in result.notes)  # the c4 run's saturated client
    doc = sweep_document(result, {"lab": "default", "scenario": "mixed", "simulated": True, "complete": True})
    jsonschema.validate(json.loads(json.dumps(doc)), json.loads(SCHEMA_FILE.read_text()))
    paths = write_sweep(tmp_path, result, {"lab": "default", "scenario": "mixed", "simulated": True}, plots=False)
    assert (tmp_path / "sweep.md").read_text().count("| all |") >= 3 and len(paths) == 2


def test_measured_break_even_agrees_with_the_step_model(cells: list[Any]) -> None:
    """τ × TPOT_k / TPOT₀ from the cells is the step-time ratio the simulator's step model prices
    (sim/breakeven.py; the sweep computes it from the cells so that it holds on vLLM too)."""
    from speclab.sim.breakeven import break_even
    from speclab.sim.hardware import gpu_profile
    from speclab.sim.shapes import MODEL_SHAPES
    from speclab.sim.timing import StepTimeModel

    model = StepTimeModel(gpu_profile("H100"), MODEL_SHAPES["sim-8b"], MODEL_SHAPES["sim-1b"])
    grid = make_grid([0, 2, 3, 4], rules=rules_for_lab(LAB), concurrency=[2, 4], slo=SLO, min_requests=5)
    result = reduce_sweep(grid, cells, lab=LAB)
    checked = 0
    for arm, rows in result.break_even["all"].items():
        k = int(arm[1:])
        for row in rows:
            cell = next(c for c in cells if c.config.k == k and c.load.value == row["load"])
            batch = cell.server.running_batch
            modelled = break_even(model, batch, 300, k)
            assert row["tpot"] == pytest.approx(modelled, rel=0.08), (arm, row, batch, modelled)
            checked += 1
    assert checked == 5
