"""The A/B view per prompt class: it shows the aggregator's windows from the snapshot, nothing of its own.

In the fake stream k4 is relaunched with k=3: asked at t=9.0 s, answering (epoch 2) from t=9.5 s.
At the end its current window is the whole intervals 10-11 and its previous one the two whole
intervals before the relaunch was asked, 7-8; each beside the baseline over the same intervals.
Expected cells are recomputed here from the frozen snapshot's windows.
"""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot
from textual.widgets import Static

from speclab.model.ab_rows import ab_rows
from speclab.model.snapshot import ALL_CLASSES, ABView
from speclab.ui import SpeclabApp, create_app, fmt
from speclab.ui.widgets.ab import ABTable, show_value
from tests.ui.fakes import CLASSES, EPOCH2_LABEL, FakeSource, settle

SIZE = (120, 40)


def final_view(source: FakeSource) -> ABView:
    return source.frozen[-1].ab["k4"]


def expected(view: ABView, prompt_class: str, corrected: bool = True) -> dict[str, dict[str, str]]:
    assert view.previous is not None
    sides = {
        "prev": view.previous.own, "prev_base": view.previous.baseline,
        "cur": view.current.own, "cur_base": view.current.baseline,
    }
    return {
        column: {row.key: show_value(row, row.value(stats.classes[prompt_class])) for row in ab_rows(corrected)}
        for column, stats in sides.items()
    }


async def open_ab(pilot: Pilot[Any], app: SpeclabApp, source: FakeSource, *keys: str) -> ABTable:
    await settle(pilot, app, source)
    await pilot.press("v", "5", *keys)  # k4, the A/B tab, then the class keys
    await pilot.pause()
    return app.screen.query_one(ABTable)


def assert_rows(table: ABTable, view: ABView, prompt_class: str, corrected: bool = True) -> None:
    for column, cells in expected(view, prompt_class, corrected).items():
        for row, text in cells.items():
            assert table.cell_text(row, column) == text, (prompt_class, row, column)


async def test_p_on_the_ab_tab_shows_the_selected_class_on_both_sides() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        table = await open_ab(pilot, app, source, "p", "p")
        assert app.lab.view.prompt_class == "tool_call"
        title = str(app.screen.query_one("#ab-title", Static).render())
        assert title.startswith("k4, tool_call: previous k4 (t 7–9 s)"), title
        assert f"current {EPOCH2_LABEL} (t 10–12 s)" in title
        assert "{" not in title, "labels, never a settings dict"
        assert "Only tool_call requests" in str(app.screen.query_one("#ab-note", Static).render())
        assert_rows(table, final_view(source), "tool_call")
        assert table.cell_text("json", "prev") != fmt.NO_DATA, "tool_call is the structured-output class"


async def test_every_class_then_all_again() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        table = await open_ab(pilot, app, source)
        view = final_view(source)
        assert_rows(table, view, ALL_CLASSES)
        seen: dict[str, tuple[str, str]] = {}
        for prompt_class in CLASSES:
            await pilot.press("p")
            await pilot.pause()
            assert app.lab.view.prompt_class == prompt_class
            assert_rows(table, view, prompt_class)
            seen[prompt_class] = (table.cell_text("len", "cur"), table.cell_text("e2e_mean", "vs_prev"))
        assert len({cells for cells in seen.values()}) == len(CLASSES), "each class shows its own numbers"
        await pilot.press("p")
        await pilot.pause()
        assert app.lab.view.prompt_class == ALL_CLASSES
        assert str(app.screen.query_one("#ab-title", Static).render()).startswith("k4, all classes:")
        assert_rows(table, view, ALL_CLASSES)


async def test_rates_change_in_points_and_times_in_percent() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        table = await open_ab(pilot, app, source, "p", "p", "p")
        assert app.lab.view.prompt_class == "long_continuation"
        view = final_view(source)
        assert view.previous is not None
        cur, prev = view.current.own.classes["long_continuation"], view.previous.own.classes["long_continuation"]
        base = view.current.baseline.classes["long_continuation"]
        cur_rej, prev_rej = cur.acceptance.rejection_rate, prev.acceptance.rejection_rate
        assert cur_rej is not None and prev_rej is not None
        assert table.cell_text("rej", "vs_prev") == f"{(cur_rej - prev_rej) * 100:+.1f} pts"
        mean = cur.latency["e2e_corrected"].mean
        assert table.cell_text("e2e_mean", "vs_prev") == f"{(mean / prev.latency['e2e_corrected'].mean - 1) * 100:+.1f}%"
        assert table.cell_text("e2e_mean", "vs_base") == f"{(mean / base.latency['e2e_corrected'].mean - 1) * 100:+.1f}%"
        p99 = cur.latency["e2e_corrected"].p99
        assert p99 is not None and table.cell_text("e2e_p99", "cur") == fmt.us(p99), "the window's own p99"
        assert table.cell_text("rps", "vs_base") == f"{(cur.requests_per_s / base.requests_per_s - 1) * 100:+.1f}%"
        assert table.cell_text("rej", "vs_base") == fmt.NO_DATA, "the baseline drafts nothing"
        await pilot.press("c")
        await pilot.pause()
        assert table.cell_text("e2e_mean", "cur") == fmt.us(cur.latency["e2e"].mean)
        assert table.cell_text("e2e_mean", "metric") == "e2e mean (uncorrected)"
        assert_rows(table, view, "long_continuation", corrected=False)
