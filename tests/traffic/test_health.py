"""The load generator's self-check on virtual clocks: which intervals it reports, and why."""

from __future__ import annotations

import pytest

from speclab.traffic.health import TICK_S, HealthMonitor, WorkerHealth, judge, percentile, read_lateness


class Clocks:
    def __init__(self) -> None:
        self.wall = 100.0
        self.cpu = 0.0


def _monitor(clocks: Clocks, reports: list[WorkerHealth]) -> HealthMonitor:
    return HealthMonitor(
        0, 100.0, lambda: (0, 0, 0), reports.append, clock=lambda: clocks.wall, cpu_clock=lambda: clocks.cpu
    )


def test_each_interval_is_reported_once_with_its_own_lags() -> None:
    clocks, reports = Clocks(), []
    monitor = _monitor(clocks, reports)
    clocks.wall = 100.2
    monitor.check(0.2)
    monitor.note_schedule_lag(0.020)
    monitor.note_loop_lag(0.001)
    clocks.wall, clocks.cpu = 101.05, 0.1
    monitor.check(1.05)
    clocks.wall, clocks.cpu = 102.01, 0.15
    monitor.check(2.01)
    assert [r.interval for r in reports] == [0, 1]
    assert reports[0].saturated and "schedule lag p99 20.0 ms" in reports[0].reason
    assert reports[0].cpu_percent == pytest.approx(100.0 * 0.1 / 0.85)
    assert not reports[1].saturated and reports[1].schedule_lag_p99_ms == 0.0


def test_send_delays_are_reported_per_interval_as_their_p99() -> None:
    clocks, reports = Clocks(), []
    monitor = _monitor(clocks, reports)
    clocks.wall = 100.2
    monitor.check(0.2)
    for i in range(100):
        monitor.note_send_delay(0.0001 * (i + 1))  # 0.1 .. 10 ms
    clocks.wall = 101.05
    monitor.check(1.05)
    clocks.wall = 102.01
    monitor.check(2.01)
    assert reports[0].send_delay_p99_ms == pytest.approx(9.9)
    assert reports[0].saturated and reports[0].reason.startswith("send delay p99 9.9 ms")
    assert reports[1].send_delay_p99_ms == 0.0 and not reports[1].saturated  # nothing written in it


def test_a_loop_blocked_across_intervals_flags_every_interval_it_swallowed() -> None:
    clocks, reports = Clocks(), []
    monitor = _monitor(clocks, reports)
    clocks.wall = 100.3
    monitor.check(0.3)
    monitor.note_loop_lag(2.9)  # one tick 2.9 s late: no tick fell in intervals 1 and 2
    clocks.wall = 103.2
    monitor.check(3.2)
    assert [r.interval for r in reports] == [0, 1, 2]
    assert all(r.saturated for r in reports)
    assert "no tick in the interval" in reports[1].reason and "2900 ms" in reports[2].reason


def test_judge_and_percentile() -> None:
    assert percentile([], 99.0) == 0.0
    assert percentile([3.0, 1.0, 2.0], 50.0) == 2.0
    assert judge(1.0, 1.0, 10.0) == (False, "")
    assert judge(6.0, 4.5, 80.0, 5.0) == (False, "")  # within the calibrated limits
    saturated, reason = judge(9.0, 6.0, 95.0, 5.5)
    assert saturated and reason.count(";") == 3
    assert "read lateness p99.5 6.00 ms" in reason and "send delay p99 5.5 ms > 5 ms" in reason
    saturated, reason = judge(1.0, 1.0, 10.0, 7.5)  # a loop that wakes on time but writes late
    assert saturated and reason == "send delay p99 7.5 ms > 5 ms"


def test_read_lateness_weights_a_stall_by_how_long_it_lasted() -> None:
    assert read_lateness([], TICK_S) == 0.0
    # 500 ticks 0.1 ms late over 1.05 s: 0.5% of the time (5.25 ms) is spent more than y late where
    # 500 (0.1 ms - y) = 5.25 ms, so y = 0.0895 ms.
    assert read_lateness([0.0001] * 500, TICK_S) == pytest.approx(0.0000895)
    # One 50 ms stall among them is one tick in 501 (under their p99) but 50 ms of 1.1 s: what arrives
    # in its first 5.5 ms (0.5% of 1.1 s) waits more than 44.5 ms.
    stalled = [0.0001] * 500 + [0.05]
    assert percentile(stalled, 99.0) == 0.0001
    assert read_lateness(stalled, TICK_S) == pytest.approx(0.05 - 0.005 * (0.0001 * 500 + 0.05 + TICK_S * 501))
    # Ten 10 ms stalls in 1.149 s: 0.5% of it (5.745 ms) is shared by the ten, so y = 10 - 0.5745 ms.
    assert read_lateness([0.0001] * 490 + [0.01] * 10, TICK_S) == pytest.approx(0.01 - 0.005 * 1.149 / 10)
    # The quantile is its own: the p99 of the same ticks is lower.
    assert read_lateness(stalled, TICK_S, q=0.99) < read_lateness(stalled, TICK_S)


def test_a_stall_under_the_tick_p99_flags_the_interval() -> None:
    clocks, reports = Clocks(), []
    monitor = _monitor(clocks, reports)
    clocks.wall = 100.2
    monitor.check(0.2)
    for _ in range(480):
        monitor.note_loop_lag(0.0002)
    for _ in range(3):
        monitor.note_loop_lag(0.012)  # three 12 ms stalls: under the ticks' p99, not under the time's
    clocks.wall, clocks.cpu = 101.05, 0.3
    monitor.check(1.05)
    (report,) = reports
    assert report.loop_lag_p99_ms == pytest.approx(0.2)
    assert report.read_lateness_ms > 5.0
    assert report.saturated and "read lateness p99.5" in report.reason
