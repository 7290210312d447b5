"""The A/B view per prompt class: numbers recomputed here from the frozen snapshots, not from the state.

In the fake stream k4 is relaunched with k=3 after interval 8 closes, so its previous window is
intervals 0-8 and its current one 9-11; the baseline columns cover the same intervals.
"""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot
from textual.widgets import Static

from speclab.model.snapshot import ALL_CLASSES, ClassStats
from speclab.ui import SpeclabApp, create_app, fmt
from speclab.ui.widgets.ab import ABTable
from tests.ui.fakes import CLASSES, FakeSource, build_snapshots

SIZE = (120, 40)
PREVIOUS = range(0, 9)
CURRENT = range(9, 12)


def interval_stats(variant: str, prompt_class: str, intervals: range) -> list[ClassStats]:
    per_interval = build_snapshots()[::4]  # four snapshots per interval carry the same last_interval
    return [per_interval[i].last_interval[variant].classes[prompt_class] for i in intervals]


def expected(variant: str, prompt_class: str, intervals: range) -> dict[str, str]:
    """The A/B cells for one side, from sums over the interval's ClassStats."""
    stats = interval_stats(variant, prompt_class, intervals)
    requests = sum(s.requests for s in stats)
    seconds = sum(s.window_s for s in stats)
    steps = sum(s.acceptance.steps for s in stats)
    drafted = sum(s.acceptance.drafted for s in stats)
    accepted = sum(s.acceptance.accepted for s in stats)
    structured = sum(s.structured_total for s in stats)
    failed = sum(s.structured_failed for s in stats)
    e2e = [s.latency["e2e_corrected"] for s in stats]
    count = sum(s.latency["e2e"].count for s in stats)
    return {
        "requests": str(requests),
        "rps": f"{requests / seconds:.2f}",
        "tps": f"{sum(s.output_tokens for s in stats) / seconds:.0f}",
        "len": f"{1 + accepted / steps:.2f}" if steps else fmt.NO_DATA,
        "rej": f"{(1 - accepted / drafted) * 100:.1f}%" if drafted else fmt.NO_DATA,
        "json": f"{failed / structured * 100:.1f}%" if structured else fmt.NO_DATA,
        "e2e_mean": fmt.us(sum(p.mean * p.count for p in e2e) / count),
        "e2e_p99": fmt.us(max(p.p99 or 0 for p in e2e)),
        "errors": str(sum(s.error_count for s in stats)),
    }


async def open_ab(pilot: Pilot[Any], app: SpeclabApp, source: FakeSource, *keys: str) -> ABTable:
    for _ in range(200):
        if app.state.snapshots_seen == len(source.frozen):
            break
        await pilot.pause(0.01)
    await pilot.press("v", "5", *keys)  # k4, the A/B tab, then the class keys
    await pilot.pause()
    return app.screen.query_one(ABTable)


def assert_rows(table: ABTable, prompt_class: str) -> None:
    columns = {
        "prev": expected("k4", prompt_class, PREVIOUS),
        "prev_base": expected("baseline", prompt_class, PREVIOUS),
        "cur": expected("k4", prompt_class, CURRENT),
        "cur_base": expected("baseline", prompt_class, CURRENT),
    }
    for column, cells in columns.items():
        for row, text in cells.items():
            assert table.cell_text(row, column) == text, (prompt_class, row, column)


async def test_p_on_the_ab_tab_shows_the_selected_class_on_both_sides() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        table = await open_ab(pilot, app, source, "p", "p")
        assert app.lab.view.prompt_class == "tool_call"
        title = str(app.screen.query_one("#ab-title", Static).render())
        assert title.startswith("k4, tool_call: previous k=4") and "current k=3" in title
        assert "Only tool_call requests" in str(app.screen.query_one("#ab-note", Static).render())
        assert_rows(table, "tool_call")
        assert table.cell_text("json", "prev") != fmt.NO_DATA, "tool_call is the structured-output class"


async def test_every_class_then_all_again() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        table = await open_ab(pilot, app, source)
        assert_rows(table, ALL_CLASSES)
        seen: dict[str, tuple[str, str]] = {}
        for prompt_class in CLASSES:
            await pilot.press("p")
            await pilot.pause()
            assert app.lab.view.prompt_class == prompt_class
            assert_rows(table, prompt_class)
            seen[prompt_class] = (table.cell_text("len", "cur"), table.cell_text("e2e_mean", "vs_prev"))
        assert len({cells for cells in seen.values()}) == len(CLASSES), "each class shows its own numbers"
        await pilot.press("p")
        await pilot.pause()
        assert app.lab.view.prompt_class == ALL_CLASSES
        assert str(app.screen.query_one("#ab-title", Static).render()).startswith("k4, all classes:")
        assert_rows(table, ALL_CLASSES)


async def test_change_columns_compare_the_class_with_itself() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        table = await open_ab(pilot, app, source, "p", "p", "p")
        assert app.lab.view.prompt_class == "long_continuation"
        cur = interval_stats("k4", "long_continuation", CURRENT)
        prev = interval_stats("k4", "long_continuation", PREVIOUS)
        base = interval_stats("baseline", "long_continuation", CURRENT)

        def mean_e2e(stats: list[ClassStats]) -> float:
            pcts = [s.latency["e2e_corrected"] for s in stats]
            return sum(p.mean * p.count for p in pcts) / sum(p.count for p in pcts)

        def rps(stats: list[ClassStats]) -> float:
            return sum(s.requests for s in stats) / sum(s.window_s for s in stats)

        assert table.cell_text("e2e_mean", "vs_prev") == f"{(mean_e2e(cur) / mean_e2e(prev) - 1) * 100:+.1f}%"
        assert table.cell_text("e2e_mean", "vs_base") == f"{(mean_e2e(cur) / mean_e2e(base) - 1) * 100:+.1f}%"
        assert table.cell_text("rps", "vs_base") == f"{(rps(cur) / rps(base) - 1) * 100:+.1f}%"
        assert table.cell_text("rej", "vs_base") == fmt.NO_DATA, "the baseline drafts nothing"
        await pilot.press("c")
        await pilot.pause()
        uncorrected = [s.latency["e2e"] for s in cur]
        mean = sum(p.mean * p.count for p in uncorrected) / sum(p.count for p in uncorrected)
        assert table.cell_text("e2e_mean", "cur") == fmt.us(mean)
        assert table.cell_text("e2e_mean", "metric") == "e2e mean (uncorrected)"
