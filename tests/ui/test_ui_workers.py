"""The traffic workers panel (tab 6) with Pilot: local workers, cluster workers with flagged
intervals, a replay's run-only figures; and the rows it shares with ``measurement.workers``."""

from __future__ import annotations

import dataclasses
import io
from typing import Any

from rich.console import Console
from textual.pilot import Pilot

from speclab.model.workers import WorkerRow
from speclab.session.worker_table import WorkerTable
from speclab.traffic.health import WorkerHealth
from speclab.ui import SpeclabApp, create_app
from speclab.ui.widgets.workers import OVER, WorkersPanel, render_workers, worker_cells
from tests.ui.fakes import FakeSource, build_snapshots, settle
from tests.ui.worker_rows import cluster_rows, with_workers


async def _workers_tab(pilot: Pilot[Any], app: SpeclabApp, source: FakeSource) -> WorkersPanel:
    """Every snapshot taken in, then tab 6 shown: its panel."""
    await settle(pilot, app, source)
    await pilot.press("6")
    await pilot.pause()
    return app.screen.query_one(WorkersPanel)


def _plain(panel: WorkersPanel, width: int = 116) -> str:
    console = Console(width=width, file=io.StringIO())
    console.print(render_workers(panel.rows, replay=panel._replay))
    return " ".join(console.file.getvalue().split())  # type: ignore[attr-defined]


def _health(worker: int, interval: int, **changes: object) -> WorkerHealth:
    base: dict[str, Any] = {"worker": worker, "interval": interval, "t": interval + 1.0, "sent": 10, "finished": 9,
                            "in_flight": 2, "schedule_lag_p99_ms": 0.5, "schedule_lag_max_ms": 0.9,
                            "loop_lag_p99_ms": 0.2, "loop_lag_max_ms": 1.0, "cpu_percent": 20.0, "saturated": False}
    base.update(changes)
    return WorkerHealth(**base)


async def test_tab_6_lists_local_workers_with_their_latest_and_worst_interval() -> None:
    source = FakeSource(with_workers(build_snapshots(), cluster=False))
    app = create_app(source, source)
    async with app.run_test(size=(120, 40)) as pilot:
        panel = await _workers_tab(pilot, app, source)
        assert panel.rows == source.frozen[-1].workers and len(panel.rows) == 2
        assert panel.border_title == "traffic workers · 2 on this host"
        text = _plain(panel)
        assert "this host" in text and "0.35/0.42" in text and "18/24" in text and "0 of 12" in text
        assert "A cluster worker's clock" not in text  # no cluster, no clock note


async def test_cluster_workers_show_nodes_clock_bounds_and_why_each_was_flagged() -> None:
    source = FakeSource(with_workers(build_snapshots(), cluster=True))
    app = create_app(source, source)
    async with app.run_test(size=(120, 40)) as pilot:
        panel = await _workers_tab(pilot, app, source)
        assert panel.border_title == "traffic workers · 3 on 2 nodes"
        text = _plain(panel)
        assert "10.0.0.11/4f1c9a2e" in text and "+0.41 ±0.183" in text and "±9.600" in text
        assert "worker 1 on 10.0.0.12/b83d07c1, interval 5: schedule lag p99 11.7 ms > 8 ms" in text
        assert "1.90/6.30" in text  # worker 1's send delay p99, latest / worst
        assert "worker 2 on 10.0.0.12/b83d07c1, interval 3: clock offset bound ±9.6 ms > 8 ms" in text
        assert "2 of 12" in text and "1 of 12" in text
        # Past a limit is red: worker 1's worst schedule lag, send delay and CPU, worker 2's clock bound;
        # worker 0 nothing.
        for worker, cells in ((1, (3, 4, 6)), (2, (7,))):
            for c in cells:
                cell = worker_cells(panel.rows[worker])[c]
                assert any(span.style == OVER for span in cell.spans), (worker, c, cell)
        assert not any(span.style == OVER for cell in worker_cells(panel.rows[0]) for span in cell.spans)


async def test_the_panel_follows_new_reports_and_shows_nothing_before_the_first() -> None:
    frozen = build_snapshots(4)
    source = FakeSource([frozen[0], *with_workers(frozen[1:], cluster=True)])
    source.frozen = frozen[:1]
    app = create_app(source, source)
    async with app.run_test(size=(120, 40)) as pilot:
        panel = await _workers_tab(pilot, app, source)
        assert panel.rows == () and "no traffic worker has reported" in _plain(panel)
        later = with_workers(frozen[1:], cluster=True)
        app.state.ingest(later[-1])
        app.lab.refresh_view()
        await pilot.pause()
        assert panel.rows == cluster_rows(later[-1].interval)


async def test_a_replay_shows_the_recorded_run_without_a_latest_interval() -> None:
    table = WorkerTable()
    for interval in range(3):
        table.add(_health(0, interval, node="10.0.0.11/4f1c9a2e", clock_bound_ms=0.2, clock_offset_ms=1.5,
                          saturated=interval == 1, reason="client CPU 93% of a core", cpu_percent=93.0))
    recorded = tuple(WorkerRow.from_report(entry) for entry in table.rows())
    snaps = [dataclasses.replace(s, workers=recorded) for s in build_snapshots(2)]
    source = FakeSource(snaps, replay=True)
    app = create_app(source)
    async with app.run_test(size=(120, 40)) as pilot:
        text = _plain(await _workers_tab(pilot, app, source))
        assert "—/0.50" in text and "—/93" in text and "1 of 3" in text
        assert "interval 1: client CPU 93% of a core" in text and "Replay: the recorded run's figures" in text


def test_the_report_entries_are_the_panels_rows() -> None:
    table = WorkerTable()
    assert table.view() == () and table.rows() == []
    table.add(_health(0, 0, node="a/1", clock_offset_ms=3.0, clock_bound_ms=0.4))
    first = table.view()
    assert table.view() is first  # the same tuple until a worker reports: the panel skips its repaint
    table.add(_health(0, 1, node="a/1", schedule_lag_p99_ms=9.5, loop_lag_p99_ms=0.7, saturated=True,
                      reason="schedule lag p99 9.5 ms > 8 ms", clock_offset_ms=3.1, clock_bound_ms=0.3))
    (row,) = table.view()
    assert row is not first[0] and table.rows() == [row.report()]
    assert (row.schedule_lag_p99_ms, row.last_schedule_lag_p99_ms, row.loop_lag_p99_ms) == (9.5, 9.5, 0.7)
    assert (row.last_flagged, row.flag_reason, row.saturated_intervals) == (1, "schedule lag p99 9.5 ms > 8 ms", 1)
    assert (row.clock_offset_ms, row.clock_bound_ms, row.in_flight) == (3.1, 0.4, 2)
    back = WorkerRow.from_report(row.report())
    assert back.report() == row.report() and back.last_interval is None and back.last_cpu_percent is None
