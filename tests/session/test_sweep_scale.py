"""A sweep's time scale: one S per load level (auto's for the heaviest configuration there), kept on --resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from speclab.model.lab import load_lab
from speclab.model.time_scale import SimLoad, auto_time_scale
from speclab.servers.backends import EngineId
from speclab.session.sweep import SweepDriver, SweepSetup
from speclab.session.sweep_scale import level_scales, scale_summary, scale_text
from speclab.sweep import CellPlan, CellResult, make_grid, rules_for_lab

LAB = load_lab("default")


class _Quiet:
    def note(self, text: str) -> None: ...
    def cell_started(self, plan: CellPlan, progress: Any) -> None: ...
    def cell_finished(self, cell: CellResult, progress: Any, result: Any, elapsed_s: float) -> None: ...


def _driver(tmp_path: Path, time_scale: float | None = None) -> SweepDriver:
    grid = make_grid([0, 2, 4], rules=rules_for_lab(LAB), concurrency=[1, 8, 64], warmup_s=1.0)
    setup = SweepSetup(lab=LAB, scenario="mixed", grid=grid, directory=tmp_path / "sweep", cell_s=5.0,
                       engine=EngineId("sim"), time_scale=time_scale)
    return SweepDriver(setup, _Quiet(), lambda session, final, interrupted: {})


def test_auto_picks_each_levels_scale_for_its_heaviest_configuration(tmp_path: Path) -> None:
    driver = _driver(tmp_path)
    seqs = LAB.effective(LAB.baseline).max_num_seqs or 64
    by_value = {level.value: scale.s for level, scale in driver.scales.items()}
    expected = {c: auto_time_scale([SimLoad("k4", float(min(c, seqs)), 4)])[0] for c in (1, 8, 64)}
    assert by_value == expected
    assert by_value[1] == 1.0 and by_value[64] > 1.0  # the light level is not stretched for the heavy one
    summary = scale_summary(driver.scales)
    assert summary["time_scale"] == by_value[64]
    assert summary["time_scale_by_load"] == {"1": 1.0, "8": by_value[8], "64": by_value[64]}
    assert scale_text(driver.scales).startswith("time scale per load level: 1 at 1, ")
    assert driver.meta(False)["time_scale_by_load"] == summary["time_scale_by_load"]


def test_a_given_scale_holds_for_every_cell(tmp_path: Path) -> None:
    driver = _driver(tmp_path, time_scale=3.0)
    assert {scale.s for scale in driver.scales.values()} == {3.0}
    assert scale_text(driver.scales) == "time scale 3"


def test_resume_keeps_the_scale_a_levels_finished_cells_ran_at(tmp_path: Path) -> None:
    driver = _driver(tmp_path)
    plans = driver.grid.cells()
    done = next(p for p in plans if p.load.value == 8)
    finished = [CellResult(done, {}, None, None, {"time_scale": 7.0})]
    scales = level_scales(plans, asked=None, engine=EngineId("sim"), lab=LAB, traffic=driver._traffic_plan,
                          finished=finished)
    assert scales[done.load].s == 7.0 and "kept" in scales[done.load].reason
    assert {lv.value: s.s for lv, s in scales.items() if lv != done.load} == \
        {lv.value: s.s for lv, s in driver.scales.items() if lv != done.load}
