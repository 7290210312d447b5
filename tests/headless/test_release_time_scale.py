"""`speclab release-notes` under simulator time scales: each input's S in release.json, its figures
labelled modelled in release.md, different scales noted (not refused: ``--time-scale auto`` picks S
per command), and a ``time_scale`` that is no time scale refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from speclab.headless.release import write_release
from speclab.model.errors import InputError
from speclab.model.lab import load_lab
from speclab.sweep import DraftRules, make_grid, reduce_sweep
from speclab.sweep.output import write_sweep
from tests.sweep import synth

from .test_release_notes import ACCEPT, DATA, DRILL_BLOCK, _drill, _report


def _accept(directory: Path, scale: float | None) -> Path:
    doc = copy.deepcopy(ACCEPT)
    if scale is not None:
        doc["time_scale"] = scale
    return _report(directory, doc)


def _sweep(directory: Path, scale: float, by_load: dict[str, float] | None = None) -> Path:
    grid = make_grid([0, 2, 4], rules=DraftRules("draft_model"), concurrency=[1, 8, 16, 32, 64], repeats=2,
                     slo="ttft_p99=200ms,tpot_p99=40ms")
    result = reduce_sweep(grid, synth.model_cells(grid), lab=load_lab("default"))
    meta = {"lab": "default", "scenario": "mixed", "engine": "sim", "simulated": True, "time_scale": scale,
            "time_scale_by_load": by_load, "pair": ACCEPT["pair"], "versions": {"engine": "speclab.sim"},
            "complete": True}
    write_sweep(directory, result, meta, plots=False)
    return directory


def _note(tmp_path: Path, *dirs: Path) -> tuple[dict[str, Any], str]:
    doc, _ = write_release(list(dirs), tmp_path / "out")
    return doc, (tmp_path / "out" / "release.md").read_text()


def test_inputs_at_one_scale_carry_it_and_every_section_says_modelled(tmp_path: Path) -> None:
    doc, md = _note(tmp_path, _accept(tmp_path / "accept", 4.0), _sweep(tmp_path / "sweep", 4.0),
                    _drill(tmp_path / "drill", DRILL_BLOCK, time_scale=4.0))
    assert doc["time_scale"] == {"accept": 4.0, "sweep": 4.0, "drill": 4.0}
    assert doc["warnings"] == []
    assert doc["headline"]["time_scale"] == doc["schedule"]["time_scale"] == doc["drill"]["time_scale"] == 4.0
    assert doc["drill"]["rollback_s"] == 0.412  # the figures themselves are the reports' modelled ones
    assert "\n**Time scale** (accept 4, sweep 4, drill 4): the simulators ran their clock S times slower" in md
    assert "every time, rate and duration in this note is modelled time" in md
    assert "Time scale 4: latencies are modelled time." in md
    assert "| e2e p50 / p90 / p99 / p99.9 ms, modelled | baseline e2e p50 / p99 ms, modelled |" in md
    assert "Sweep at time scale 4: its latencies, rates and throughputs are modelled time." in md
    assert "Time scale 4: the drill's seconds and latencies are modelled time." in md
    assert "| rollback s, modelled (command → last request" in md and "| drain s, modelled (→ last" in md
    assert "| e2e p50 / p99 ms, modelled |" in md  # the drill's per-tenant phases
    assert "**Warning**" not in md


def test_different_scales_are_noted_not_refused(tmp_path: Path) -> None:
    accept, sweep = _accept(tmp_path / "accept", 1.0), _sweep(tmp_path / "sweep", 8.0)
    doc, md = _note(tmp_path, accept, sweep)
    assert doc["time_scale"] == {"accept": 1.0, "sweep": 8.0, "drill": None}
    assert doc["warnings"] == [f"inputs at different time scales: accept 1 ({accept}), sweep 8 ({sweep}); every "
                               "figure is modelled time, and each section of the note names its own scale"]
    assert "**Time scale** (accept 1, sweep 8):" in md
    assert f"**Warning**: inputs at different time scales: accept 1 ({accept}), sweep 8 ({sweep});" in md
    assert "| e2e p50 / p90 / p99 / p99.9 ms | baseline e2e p50 / p99 ms |" in md  # the accept ran at 1
    assert "Sweep at time scale 8:" in md


def test_a_sweep_scaled_by_load_level_names_its_range(tmp_path: Path) -> None:
    by_load = {"1": 1.0, "8": 1.0, "16": 2.0, "32": 4.0, "64": 8.0}
    sweep = _sweep(tmp_path / "sweep", 8.0, by_load)
    doc, md = _note(tmp_path, _accept(tmp_path / "accept", 8.0), sweep)
    assert doc["schedule"]["time_scale_by_load"] == by_load and doc["time_scale"]["sweep"] == 8.0
    assert "**Time scale** (accept 8, sweep 1-8 by load level):" in md
    assert "Sweep at time scale 1-8 by load level:" in md
    assert len(doc["warnings"]) == 1 and "sweep 1-8 by load level" in doc["warnings"][0]


def test_unscaled_inputs_say_nothing_of_a_scale(tmp_path: Path) -> None:
    doc, md = _note(tmp_path, DATA / "accept", _sweep(tmp_path / "sweep", 1.0))  # a report from before time scales
    assert doc["time_scale"] == {"accept": 1.0, "sweep": 1.0, "drill": None} and doc["warnings"] == []
    assert "Time scale" not in md and "time scale" not in md.split("## Recommended k schedule")[0]
    assert ", modelled" not in md and "modelled time" not in md


@pytest.mark.parametrize(("scale", "simulated", "why"), [
    ("fast", True, "time_scale 'fast' is not a time scale (a number of at least 1)"),
    (0.5, True, "time_scale 0.5 is not a time scale"),
    (4.0, False, "measured on real servers but at time scale 4 (real servers always run at 1)"),
])
def test_a_time_scale_that_cannot_be_is_refused(tmp_path: Path, scale: Any, simulated: bool, why: str) -> None:
    drill = _drill(tmp_path / "drill", DRILL_BLOCK, time_scale=scale, simulated=simulated)
    with pytest.raises(InputError, match=rf"^{drill / 'report.json'}: ") as refused:
        write_release([drill], tmp_path / "out")
    assert why in str(refused.value)
    assert not (tmp_path / "out").exists()


def test_release_json_round_trips_the_scales(tmp_path: Path) -> None:
    _note(tmp_path, _accept(tmp_path / "accept", 2.0), _drill(tmp_path / "drill", DRILL_BLOCK, time_scale=2.0))
    doc = json.loads((tmp_path / "out" / "release.json").read_text())
    assert doc["time_scale"] == {"accept": 2.0, "sweep": None, "drill": 2.0} and doc["warnings"] == []
