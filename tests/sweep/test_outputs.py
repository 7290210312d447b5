"""sweep.json against its schema, sweep.md as a release-note section, the plots, and --resume."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from speclab.model.errors import InputError
from speclab.model.lab import load_lab
from speclab.session.sweep import prepare_directory
from speclab.sweep import DraftRules, failed_cell, load_sweep, make_grid, reduce_sweep, remaining
from speclab.sweep.output import write_sweep
from speclab.sweep.plots import PLOT_NAMES
from speclab.sweep.result import SCHEMA_FILE, scale_label

from . import synth

LAB = load_lab("default")
META = {"lab": "default", "scenario": "mixed", "engine": "sim", "simulated": True, "time_scale": 4.0,
        "pair": {"target_model": "meta-llama/Llama-3.1-8B-Instruct", "draft_model": "meta-llama/Llama-3.2-1B-Instruct"},
        "versions": {"engine": "speclab.sim", "vllm_interface": "0.33.0"}, "complete": True}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path], object]:
    grid = make_grid([0, 2, 4], rules=DraftRules("draft_model"), concurrency=[1, 8, 16, 32, 64], repeats=2,
                     slo="ttft_p99=200ms,tpot_p99=40ms")
    cells = synth.model_cells(grid)
    cells[-1] = failed_cell(cells[-1].plan, "server k4 exited with status 1")
    result = reduce_sweep(grid, cells, lab=LAB)
    out = tmp_path_factory.mktemp("sweep")
    return out, write_sweep(out, result, META), result


def test_sweep_json_matches_its_schema(written: tuple[Path, list[Path], object]) -> None:
    out, _, _ = written
    doc = json.loads((out / "sweep.json").read_text())
    jsonschema.validate(doc, json.loads(SCHEMA_FILE.read_text()))
    assert doc["schema"] == "speclab.sweep/1"
    assert list(doc)[list(doc).index("cells"):][:4] == ["cells", "crossover", "schedule", "speculative_config"]
    assert doc["crossover"]["all"]["k4"] == {"tpot": 16, "throughput": 16}
    assert doc["schedule"] == [[1, 7, 4], [8, 31, 2], [32, 64, 0]]
    assert doc["speculative_config"]["num_speculative_tokens_per_batch_size"] == doc["schedule"]
    assert len(doc["cells"]) == 3 * 5 * 2 and doc["cells"][-1]["status"] == "failed"
    cell = doc["cells"][0]
    assert cell["classes"]["all"]["goodput"]["slo"] == {"ttft_p99": 200.0, "tpot_p99": 40.0}
    assert cell["server"]["running_batch"] == 1 and cell["source"]["variant"] == "k0"


def test_broken_documents_fail_the_schema() -> None:
    schema = json.loads(SCHEMA_FILE.read_text())
    good = {"schema": "speclab.sweep/1", "cells": [], "crossover": {"all": {"k2": {"tpot": 8, "throughput": None}}},
            "schedule": [[1, 8, 2], [9, 64, 0]], "speculative_config": None}
    jsonschema.validate(good, schema)
    for bad in ({**good, "schedule": [[0, 8, 2]]}, {**good, "crossover": {"all": {"k2": {"tpot": 8}}}},
                {**good, "speculative_config": {"method": "ngram", "num_speculative_tokens": 0}},
                {**good, "schema": "speclab.sweep/2"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_sweep_md_is_the_release_note_section(written: tuple[Path, list[Path], object]) -> None:
    out, _, _ = written
    md = (out / "sweep.md").read_text()
    assert md.startswith("# Draft-length and batch sweep: default × mixed (SIMULATED")
    for words in ("## Grid", "k: 0, 2, 4", "load ladder (closed loop, concurrency): 1, 8, 16, 32, 64",
                  "SLOs: ttft_p99=200ms,tpot_p99=40ms", "## Crossovers per class", "| all | k4 | concurrency 16 |",
                  "## Recommended k schedule", "| 8–31 | 2 |", "--speculative-config '{\"method\":\"draft_model\"",
                  "## Pareto front", "## Confirmation pass", "Not run yet", "Pair: draft_model=meta-llama/Llama-3.2-1B-Instruct",
                  "time scale 4: figures in modelled time", "1 failed", "![speedup_vs_load](speedup_vs_load.png)",
                  "## Speed-up over k = 0 (all classes)", "| arm | 1 (1) | 8 (8) | 16 (16) | 32 (32) | 64 (64) |"):
        assert words in md, words
    table = md.split("## Speed-up over k = 0 (all classes)")[1].split("##")[0]
    k4 = next(line for line in table.splitlines() if line.startswith("| k4 |"))
    tpot = [float(c.split(" / ")[0]) for c in k4.strip("|").split("|")[1:]]
    assert tpot[0] > 1.0 > tpot[-1] and tpot == sorted(tpot, reverse=True)  # the modelled shape: largest at low load


def test_a_time_scale_per_load_level_is_labelled_with_each_levels_scale() -> None:
    assert scale_label({"time_scale": 1.0, "time_scale_by_load": {"1": 1.0, "8": 1.0}}) == ""
    assert scale_label({"time_scale": 4.0}) == "time scale 4"
    assert scale_label({"time_scale": 3.0, "time_scale_by_load": {"1": 1.0, "8": 1.0, "32": 3.0}}) == \
        "time scale 1-3 by load level (1: 1, 8: 1, 32: 3)"


def test_plots_are_written_non_empty_and_deterministic(written: tuple[Path, list[Path], object], tmp_path: Path) -> None:
    out, paths, result = written
    for name in PLOT_NAMES:
        png, svg = out / f"{name}.png", out / f"{name}.svg"
        assert png in paths and svg in paths
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
        text = svg.read_text()
        assert text.lstrip().startswith("<?xml") and "<svg" in text and text.count("<path") > 20
    again = write_sweep(tmp_path, result, META)  # type: ignore[arg-type]
    for first in paths:
        if first.suffix in (".png", ".svg"):
            assert (tmp_path / first.name).read_bytes() == first.read_bytes(), first.name
    assert len(again) == len(paths)


def test_resume_reads_back_the_cells_and_skips_finished_ones(written: tuple[Path, list[Path], object]) -> None:
    out, _, result = written
    _, grid, cells = load_sweep(out)
    assert grid.as_dict() == result.grid.as_dict()  # type: ignore[attr-defined]
    assert [c.plan.id for c in cells] == [c.plan.id for c in result.cells]  # type: ignore[attr-defined]
    again = reduce_sweep(grid, cells, lab=LAB)
    assert again.crossover == result.crossover and again.recommendation.schedule == result.recommendation.schedule  # type: ignore[attr-defined]
    todo = remaining(grid.cells(), cells)
    assert [p.id for p in todo] == [cells[-1].plan.id]  # only the failed cell runs again


def test_resume_refuses_what_is_not_a_sweep(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no sweep to resume"):
        load_sweep(tmp_path)
    (tmp_path / "sweep.json").write_text('{"schema": "speclab.report/1"}')
    with pytest.raises(InputError, match=r"expected 'speclab\.sweep/1'"):
        load_sweep(tmp_path)
    (tmp_path / "sweep.json").write_text("{not json")
    with pytest.raises(InputError, match="not readable as JSON"):
        load_sweep(tmp_path)


def test_a_sweep_report_directory_that_cannot_be_written_is_refused_before_any_cell(tmp_path: Path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    with pytest.raises(InputError, match=r"^--report .*afile: .*afile exists and is not a directory$"):
        prepare_directory(blocker, resume=False, force=False)
