"""Snapshot tests of the main screens with frozen data (pytest-textual-snapshot).

Regenerate after an intended visual change with
``.venv/bin/python -m pytest tests/ui/test_ui_snapshots.py --snapshot-update`` and look at the SVGs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from textual.pilot import Pilot

from speclab.ui import SpeclabApp, create_app
from tests.ui.fakes import FakeSource, build_snapshots, settle
from tests.ui.worker_rows import with_workers


def frozen_app() -> tuple[Any, FakeSource]:
    source = FakeSource()
    return create_app(source, source), source


def all_snapshots_in(source: FakeSource, *keys: str) -> Callable[[Pilot[Any]], Awaitable[None]]:
    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, SpeclabApp)
        await settle(pilot, app, source)  # fails loudly if the frozen stream never lands
        if keys:
            await pilot.press(*keys)
        await pilot.pause()

    return run_before


def test_latency_view_120x40(snap_compare: Any) -> None:
    app, source = frozen_app()
    assert snap_compare(app, terminal_size=(120, 40), run_before=all_snapshots_in(source))


def test_acceptance_view_120x40(snap_compare: Any) -> None:
    app, source = frozen_app()
    assert snap_compare(app, terminal_size=(120, 40), run_before=all_snapshots_in(source, "v", "p", "p", "2"))


def test_time_series_view_120x40(snap_compare: Any) -> None:
    app, source = frozen_app()
    assert snap_compare(app, terminal_size=(120, 40), run_before=all_snapshots_in(source, "3"))


def test_ab_view_after_relaunch_120x40(snap_compare: Any) -> None:
    app, source = frozen_app()
    assert snap_compare(app, terminal_size=(120, 40), run_before=all_snapshots_in(source, "v", "5"))


def test_latency_view_side_by_side_80x24(snap_compare: Any) -> None:
    app, source = frozen_app()
    assert snap_compare(app, terminal_size=(80, 24), run_before=all_snapshots_in(source, "o"))


def test_ab_view_one_class_120x40(snap_compare: Any) -> None:
    app, source = frozen_app()
    assert snap_compare(app, terminal_size=(120, 40), run_before=all_snapshots_in(source, "v", "5", "p", "p", "p"))


def test_workers_view_cluster_120x40(snap_compare: Any) -> None:
    source = FakeSource(with_workers(build_snapshots(), cluster=True))
    app = create_app(source, source)
    assert snap_compare(app, terminal_size=(120, 40), run_before=all_snapshots_in(source, "6"))
