"""The app's memory between snapshots, and the pure renderers, without a screen."""

from __future__ import annotations

import pytest

from speclab.model.names import PERCENTILE_POINTS
from speclab.model.snapshot import Snapshot
from speclab.ui import fmt
from speclab.ui.messages import SnapshotArrived, SourceEnded
from speclab.ui.state import LabState, config_label, pick_baseline
from speclab.ui.widgets.spectrum import X_POINTS, Curve, nice_ceiling, nines, render_spectrum, value_at
from tests.ui.fakes import VARIANTS, FakeSource, build_snapshots, variant_stats


def fed_state(snapshots: list[Snapshot] | None = None) -> LabState:
    source = FakeSource(snapshots)
    state = LabState(source.info)
    state.set_servers(source.servers())
    for snap in source.frozen:
        state.ingest(snap)
    return state


def test_each_closed_interval_is_taken_once_although_snapshots_repeat_it() -> None:
    state = fed_state()
    assert state.snapshots_seen == 48
    assert [p.interval for p in state.history["k2"]] == list(range(12))
    per_interval = [sum(c.requests for k, c in snap.last_interval["k2"].classes.items() if k != "all")
                    for snap in build_snapshots()[::4]]
    assert [round(p.requests_per_s) for p in state.history["k2"]] == per_interval


def test_the_history_says_which_config_epoch_each_interval_was() -> None:
    state = fed_state()
    assert [p.epoch for p in state.history["k4"]] == [1] * 9 + [2] * 3
    assert {p.epoch for p in state.history["k2"]} == {1}


def test_events_and_saturated_intervals_are_remembered() -> None:
    state = fed_state()
    assert [(i, e.kind) for i, e in state.events] == [(4, "config_change"), (9, "transition"), (9, "relaunch")]
    assert state.saturated == {5}


def test_baseline_is_the_server_marked_so() -> None:
    source = FakeSource()
    assert pick_baseline(source.info, source.servers()) == "baseline"
    assert pick_baseline(source.info, {}) == "baseline"


def test_config_label_is_short_and_stable() -> None:
    assert config_label({"num_speculative_tokens": 4, "enable_chunked_prefill": False}) == "k=4 chunked=off"
    assert config_label({}) == "as launched"


def test_latency_units() -> None:
    assert fmt.us(850) == "850 µs"
    assert fmt.us(12_340) == "12.3 ms"
    assert fmt.us(412_000, "") == "412ms"
    assert fmt.us(2_500_000) == "2.50 s"
    assert fmt.us(None) == fmt.NO_DATA
    assert fmt.signed_pct_change(90, 100) == "-10.0%"


def test_nines_axis_spaces_each_nine_evenly() -> None:
    assert nines(0) == 0
    assert nines(90) == pytest.approx(1)
    assert nines(99.9) == pytest.approx(3)
    assert X_POINTS[-1] == pytest.approx(5)
    values = tuple(range(len(PERCENTILE_POINTS)))
    assert value_at(values, nines(99.0)) == pytest.approx(PERCENTILE_POINTS.index(99.0))
    assert nice_ceiling(1.56e6) == 2e6 and nice_ceiling(2.6e6) == 5e6


def test_spectrum_draws_axis_labels_and_numbers() -> None:
    stats = variant_stats("k2", 10, 1.0).classes["tool_call"].latency["e2e"]
    text = render_spectrum([Curve("k2", stats.values, "cyan", True)], 60, 12, "overlay").plain
    lines = text.split("\n")
    assert len(lines) == 12
    assert lines[0].startswith(f"p50 {fmt.us(stats.p50, '')}")
    assert "99.9" in lines[-1] and "max" in lines[-1]
    assert render_spectrum([], 60, 12, "overlay").plain == "no requests yet"


def test_split_layout_draws_one_panel_per_variant() -> None:
    curves = [Curve(v, variant_stats(v, 10, 1.0).total.latency["e2e"].values, "white", v == "k2") for v in VARIANTS]
    header = render_spectrum(curves, 90, 12, "split").plain.split("\n")[0]
    assert all(v in header for v in VARIANTS)
    single = render_spectrum(curves, 90, 12, "single").plain.split("\n")[0]
    assert single.startswith("p50 ")


def test_snapshot_messages_coalesce_but_end_messages_do_not() -> None:
    snap = build_snapshots(1)[0]
    assert SnapshotArrived(snap).can_replace(SnapshotArrived(snap))
    assert not SnapshotArrived(snap).can_replace(SourceEnded())


def test_time_series_shows_the_latest_intervals_of_a_long_history() -> None:
    from dataclasses import replace

    from speclab.ui.widgets.timeseries import NAME_W, VALUE_W, render_timeseries

    base = build_snapshots(1)[0]
    source = FakeSource()
    state = LabState(source.info, history_limit=100)
    for i in range(300):
        closed = replace(base.intervals[0], index=i, start_s=float(i), end_s=float(i + 1))
        state.ingest(replace(base, interval=i, t=float(i + 1), events=(), intervals=(closed,), rebuilt=i == 0))
    assert len(state.history["k2"]) == 100
    assert state.history["k2"][0].interval == 200
    width = 80
    lines = render_timeseries(state, VARIANTS, {}, True, width).plain.split("\n")
    k2 = next(line for line in lines if line.startswith("k2"))
    assert len(k2[NAME_W : width - VALUE_W].strip()) == width - NAME_W - VALUE_W
