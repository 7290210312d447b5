"""The load generator's self-check on virtual clocks: which intervals it reports, and why."""

from __future__ import annotations

import pytest

from speclab.traffic.health import HealthMonitor, WorkerHealth, judge, percentile


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
    assert judge(6.0, 2.0, 50.0) == (False, "")  # within the calibrated limits
    saturated, reason = judge(9.0, 3.0, 95.0)
    assert saturated and reason.count(";") == 2
