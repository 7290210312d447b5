"""The sweep app over a real (tiny) sweep on the simulator: the heat map fills in as cells finish."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speclab.headless.sweep import cell_report
from speclab.model.exit_codes import ExitCode
from speclab.model.lab import load_lab
from speclab.session.sweep import SweepSetup
from speclab.sweep import make_grid, rules_for_lab
from speclab.ui.sweep_app import SweepApp
from speclab.ui.widgets.sweep_heat import SweepHeat, render_heat


def _text(app: SweepApp) -> str:
    from rich.console import Console

    console = Console(width=120, record=True, color_system=None)
    console.print(render_heat(app.query_one(SweepHeat).model))
    return console.export_text()


@pytest.mark.timeout(180)
async def test_heat_map_fills_in_and_q_ends_the_sweep(tmp_path: Path) -> None:
    lab = load_lab("default")
    grid = make_grid([0, 2], rules=rules_for_lab(lab), concurrency=[1, 2], warmup_s=0.5)
    setup = SweepSetup(lab=lab, scenario="smoke", grid=grid, directory=tmp_path / "sweep", cell_s=1.5, engine="sim",
                       confirm=False)
    app = SweepApp(setup, cell_report)
    async with app.run_test(size=(80, 24)) as pilot:
        assert "·" in _text(app)  # nothing measured yet
        seen_partial = False
        while app.outcome is None:  # the sweep ending is the event waited on
            await pilot.pause(0.2)
            text = _text(app)
            seen_partial = seen_partial or ("×" in text and text.count("×") < 2)
        assert seen_partial, "the map never showed one finished level while the next ran"
        assert app.outcome.code == ExitCode.OK
        await pilot.pause()
        text = _text(app)
        row = next(line for line in text.splitlines() if line.strip().startswith("k2"))
        assert row.count("×") == 2
        assert "output tokens/s · class all" in text
        await pilot.press("m")
        assert "TPOT p50" in _text(app)
        await pilot.press("c")
        assert "class all" not in _text(app)
        await pilot.press("q")
    assert app.return_code == ExitCode.OK
    doc = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert doc["complete"] is True and len(doc["cells"]) == 4
