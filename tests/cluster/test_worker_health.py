"""Clock offsets, per-worker health and how they show, on injected numbers (no Ray needed)."""

from __future__ import annotations

import pytest

from speclab.model.snapshot import ClientHealth, Snapshot
from speclab.model.views import SessionInfo
from speclab.session.worker_table import WorkerTable
from speclab.traffic.cluster.clock import (
    CLOCK_BOUND_LIMIT_MS,
    ClockOffset,
    Probe,
    annotate,
    discipline,
    estimate,
)
from speclab.traffic.health import WorkerHealth
from speclab.ui.widgets.status import StatusLine, render_status


def _health(worker: int, interval: int, **changes: object) -> WorkerHealth:
    base = {"worker": worker, "interval": interval, "t": interval + 1.0, "sent": 10, "finished": 9, "in_flight": 1,
            "schedule_lag_p99_ms": 0.5, "schedule_lag_max_ms": 0.9, "loop_lag_p99_ms": 0.2, "loop_lag_max_ms": 1.0,
            "cpu_percent": 20.0, "saturated": False}
    base.update(changes)
    return WorkerHealth(**base)  # type: ignore[arg-type]


def test_the_shortest_round_trip_bounds_the_offset() -> None:
    probes = [Probe(10.0, 110.004, 10.010), Probe(11.0, 111.0015, 11.002), Probe(12.0, 112.01, 12.030)]
    clock = estimate(probes)
    assert clock.offset == pytest.approx(100.0005) and clock.bound == pytest.approx(0.001)
    with pytest.raises(ValueError):
        estimate([])


def test_an_offset_is_kept_while_the_new_estimate_allows_it_and_stepped_when_not() -> None:
    assert discipline(None, ClockOffset(5.0, 0.001)) == 5.0
    assert discipline(5.0004, ClockOffset(5.0, 0.001)) == 5.0004
    assert discipline(5.01, ClockOffset(5.0, 0.001)) == 5.0


def test_a_clock_bound_past_the_limit_flags_the_interval() -> None:
    tight = annotate(_health(0, 3), "10.0.0.2/ab12cd34", ClockOffset(0.25, 0.0012))
    assert tight.node == "10.0.0.2/ab12cd34" and not tight.saturated
    assert tight.clock_offset_ms == pytest.approx(250.0) and tight.clock_bound_ms == pytest.approx(1.2)
    bound = 2 * CLOCK_BOUND_LIMIT_MS / 1000.0
    wide = annotate(_health(0, 4, saturated=True, reason="client CPU 95% of a core"), "n", ClockOffset(0.0, bound))
    assert wide.saturated and wide.reason == (f"client CPU 95% of a core; clock offset bound "
                                              f"±{2 * CLOCK_BOUND_LIMIT_MS:.1f} ms > {CLOCK_BOUND_LIMIT_MS:g} ms")
    assert annotate(_health(1, 4), "n", None).clock_bound_ms == 0.0


def test_the_table_keeps_each_worker_with_its_node_and_worst_interval() -> None:
    table = WorkerTable()
    for interval in range(3):
        table.add(_health(0, interval, node="a/1", clock_bound_ms=0.4 + interval, clock_offset_ms=2.0))
        table.add(_health(1, interval, node="b/2", cpu_percent=30.0 + interval, saturated=interval == 2))
    rows = table.rows()
    assert [r["node"] for r in rows] == ["a/1", "b/2"] and table.nodes() == ["a/1", "b/2"]
    assert rows[0]["clock_bound_ms"] == 2.4 and rows[0]["sent"] == 30 and rows[0]["intervals"] == 3
    assert rows[1]["cpu_percent_max"] == 32.0 and rows[1]["saturated_intervals"] == 1
    local = WorkerTable()
    local.add(_health(0, 0))
    assert local.rows()[0]["node"] == "local"


def test_the_status_line_names_the_nodes_and_clock_of_a_cluster_run() -> None:
    info = SessionInfo(lab="l", scenario="s", variants=("a",), classes=("c",), simulated=True)
    cluster = Snapshot(t=3.0, interval=2, health=ClientHealth(in_flight=4, nodes=2, workers=2, clock_bound_ms=1.25))
    assert "2 workers on 2 nodes, clock ±1.2 ms" in render_status(StatusLine(info, cluster)).plain
    local = Snapshot(t=3.0, interval=2, health=ClientHealth(in_flight=4))
    assert "nodes" not in render_status(StatusLine(info, local)).plain
