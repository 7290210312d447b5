"""The A/B errors row counts every error kind the window holds, stalls included.

A stall (``no data for 30 s``) finishes, by ``finish_time``, at its last chunk, but its record only
comes when the stall timeout fires, long after that interval closed: a late record.
"""

from __future__ import annotations

from dataclasses import replace

from speclab.metrics.aggregator import Aggregator
from speclab.model.records import RequestRecord
from speclab.model.snapshot import ALL_CLASSES, ABView, ABWindow, Snapshot, VariantStats
from speclab.ui import create_app
from speclab.ui.widgets.ab import ABTable, ab_cells
from tests.ui.fakes import FakeSource, build_snapshots, settle


def with_errors(stats: VariantStats, prompt_class: str, errors: dict[str, int]) -> VariantStats:
    classes = dict(stats.classes)
    for cls in (prompt_class, ALL_CLASSES):
        merged = dict(classes[cls].errors)
        for kind, n in errors.items():
            merged[kind] = merged.get(kind, 0) + n
        classes[cls] = replace(classes[cls], errors=merged)
    return replace(stats, classes=classes)


def stalled(view: ABView, n: int) -> ABView:
    current: ABWindow = view.current
    return replace(view, current=replace(current, own=with_errors(current.own, "factual_qa", {"stall": n})))


def test_errors_row_counts_stalls() -> None:
    view = build_snapshots()[-1].ab["k4"]
    before = view.current.own.total.error_count
    after = ab_cells(stalled(view, 5), corrected=True)["errors"]
    base = view.current.baseline.total.error_count
    assert after[3] == str(before + 5)
    assert after[6] == f"{before + 5 - base:+d}"
    assert ab_cells(stalled(view, 5), True, "factual_qa")["errors"][3] == "5"


async def test_the_ab_tab_shows_a_windows_stall_errors() -> None:
    snaps: list[Snapshot] = build_snapshots()
    last = snaps[-1]
    snaps[-1] = replace(last, ab={**last.ab, "k4": stalled(last.ab["k4"], 5)})
    source = FakeSource(snaps)
    app = create_app(source, source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, source)
        await pilot.press("v", "5")
        await pilot.pause()
        table = app.screen.query_one(ABTable)
        expected = snaps[-1].ab["k4"].current.own.total.error_count
        assert table.cell_text("errors", "cur") == str(expected)
        assert expected >= 5


def _record(n: int, variant: str, sent: float, e2e: float, error: str | None = None) -> RequestRecord:
    r = RequestRecord(request_id=f"{variant}-{n}", variant=variant, prompt_class="qa", intended=sent - 0.001,
                      sent=sent, epoch=1)
    r.first_token, r.last_token = sent + 0.02, sent + e2e - 0.001
    if error is None:
        r.done, r.output_tokens = sent + e2e, 20
    else:
        r.error_kind = error  # as the client fails a stream: no ``done``, so it finished at its last chunk
    return r


def test_a_stall_reported_after_its_interval_closed_counts_in_the_ab_window() -> None:
    agg = Aggregator(["baseline", "k4"], ["qa"])
    agg.launch("baseline", {}, baseline=True)
    agg.launch("k4", {"num_speculative_tokens": 4})
    for n in range(10):
        agg.add_records([_record(n, "baseline", n + 0.1, 0.2), _record(n, "k4", n + 0.1, 0.2)])
        agg.tick(n + 1.0)
    agg.add_records([_record(99, "k4", 2.1, 0.2, error="stall")])  # last chunk at 2.3 s, reported at 10.6 s
    agg.tick(10.7)
    snap = agg.snapshot(12.0)
    assert agg.late_records == 1
    assert snap.cumulative["k4"].total.errors == {"stall": 1}
    view = snap.ab["k4"]
    assert view.current.first_interval is not None and view.current.first_interval <= 2
    assert view.current.own.total.errors == {"stall": 1}
    assert ab_cells(view, corrected=True)["errors"][3] == "1"
