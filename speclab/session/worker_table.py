"""Each traffic worker's health over the run: the app's worker panel and ``measurement.workers``.

The aggregator folds every worker into one client health per interval (the worst of them); this
keeps them apart, with the node each ran on and, on a cluster, its clock offset and the bound
on it, so the app and the report say which worker or which host could not keep up. Both read the
same ``WorkerRow``s, rebuilt only when a worker reports (once per interval each).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from speclab.model.workers import LOCAL_NODE, WorkerRow
from speclab.traffic.health import WorkerHealth


@dataclass
class _Row:
    node: str
    intervals: int = 0
    saturated: int = 0
    sent: int = 0
    finished: int = 0
    schedule_lag_p99_ms: float = 0.0
    schedule_lag_max_ms: float = 0.0
    loop_lag_p99_ms: float = 0.0
    loop_lag_max_ms: float = 0.0
    read_lateness_ms: float = 0.0
    send_delay_p99_ms: float = 0.0
    cpu_percent_max: float = 0.0
    clock_offset_ms: float = 0.0
    clock_bound_ms: float = 0.0
    last: WorkerHealth | None = None
    last_flagged: int | None = None
    flag_reason: str = ""


class WorkerTable:
    def __init__(self) -> None:
        self._rows: dict[int, _Row] = {}
        self._view: tuple[WorkerRow, ...] = ()

    def add(self, health: WorkerHealth) -> None:
        row = self._rows.setdefault(health.worker, _Row(node=health.node or LOCAL_NODE))
        row.node = health.node or row.node
        row.intervals += 1
        row.saturated += int(health.saturated)
        row.sent += health.sent
        row.finished += health.finished
        row.schedule_lag_p99_ms = max(row.schedule_lag_p99_ms, health.schedule_lag_p99_ms)
        row.schedule_lag_max_ms = max(row.schedule_lag_max_ms, health.schedule_lag_max_ms)
        row.loop_lag_p99_ms = max(row.loop_lag_p99_ms, health.loop_lag_p99_ms)
        row.loop_lag_max_ms = max(row.loop_lag_max_ms, health.loop_lag_max_ms)
        row.read_lateness_ms = max(row.read_lateness_ms, health.read_lateness_ms)
        row.send_delay_p99_ms = max(row.send_delay_p99_ms, health.send_delay_p99_ms)
        row.cpu_percent_max = max(row.cpu_percent_max, health.cpu_percent)
        row.clock_offset_ms = health.clock_offset_ms
        row.clock_bound_ms = max(row.clock_bound_ms, health.clock_bound_ms)
        row.last = health
        if health.saturated:
            row.last_flagged, row.flag_reason = health.interval, health.reason
        self._view = tuple(_freeze(w, r) for w, r in sorted(self._rows.items()))

    def view(self) -> tuple[WorkerRow, ...]:
        """One row per worker, in worker order; the same tuple until a worker reports again."""
        return self._view

    def rows(self) -> list[dict[str, Any]]:
        """``measurement.workers``: the worst interval's lags and CPU, the last clock offset and the
        widest bound on it, per worker."""
        return [row.report() for row in self._view]

    def nodes(self) -> list[str]:
        return sorted({r.node for r in self._rows.values()})


def _freeze(worker: int, r: _Row) -> WorkerRow:
    last = r.last
    return WorkerRow(
        worker=worker, node=r.node, intervals=r.intervals, saturated_intervals=r.saturated, sent=r.sent,
        finished=r.finished, schedule_lag_p99_ms=r.schedule_lag_p99_ms, schedule_lag_max_ms=r.schedule_lag_max_ms,
        loop_lag_p99_ms=r.loop_lag_p99_ms, loop_lag_max_ms=r.loop_lag_max_ms,
        read_lateness_ms=r.read_lateness_ms, send_delay_p99_ms=r.send_delay_p99_ms, cpu_percent_max=r.cpu_percent_max,
        clock_offset_ms=r.clock_offset_ms, clock_bound_ms=r.clock_bound_ms,
        last_interval=last.interval if last else None,
        last_schedule_lag_p99_ms=last.schedule_lag_p99_ms if last else None,
        last_loop_lag_p99_ms=last.loop_lag_p99_ms if last else None,
        last_read_lateness_ms=last.read_lateness_ms if last else None,
        last_send_delay_p99_ms=last.send_delay_p99_ms if last else None,
        last_cpu_percent=last.cpu_percent if last else None,
        in_flight=last.in_flight if last else None,
        last_flagged=r.last_flagged, flag_reason=r.flag_reason,
    )
