"""Each traffic worker's health over the whole run, for ``measurement.workers`` in reports.

The aggregator folds every worker into one client health per interval (the worst of them); this
keeps them apart, with the node each ran on and, on a cluster, its clock offset and the bound
on it, so a report says which worker or which host could not keep up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from speclab.traffic.health import WorkerHealth

LOCAL_NODE = "local"


@dataclass
class _Row:
    node: str
    intervals: int = 0
    saturated: int = 0
    sent: int = 0
    finished: int = 0
    schedule_lag_p99_ms: float = 0.0
    schedule_lag_max_ms: float = 0.0
    loop_lag_max_ms: float = 0.0
    cpu_percent_max: float = 0.0
    clock_offset_ms: float = 0.0
    clock_bound_ms: float = 0.0


class WorkerTable:
    def __init__(self) -> None:
        self._rows: dict[int, _Row] = {}

    def add(self, health: WorkerHealth) -> None:
        row = self._rows.setdefault(health.worker, _Row(node=health.node or LOCAL_NODE))
        row.node = health.node or row.node
        row.intervals += 1
        row.saturated += int(health.saturated)
        row.sent += health.sent
        row.finished += health.finished
        row.schedule_lag_p99_ms = max(row.schedule_lag_p99_ms, health.schedule_lag_p99_ms)
        row.schedule_lag_max_ms = max(row.schedule_lag_max_ms, health.schedule_lag_max_ms)
        row.loop_lag_max_ms = max(row.loop_lag_max_ms, health.loop_lag_max_ms)
        row.cpu_percent_max = max(row.cpu_percent_max, health.cpu_percent)
        row.clock_offset_ms = health.clock_offset_ms
        row.clock_bound_ms = max(row.clock_bound_ms, health.clock_bound_ms)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per worker, in worker order: the worst interval's lags and CPU, the last clock
        offset and the widest bound on it."""
        return [{"worker": w, "node": r.node, "intervals": r.intervals, "saturated_intervals": r.saturated,
                 "sent": r.sent, "finished": r.finished,
                 "schedule_lag_p99_ms": round(r.schedule_lag_p99_ms, 3),
                 "schedule_lag_max_ms": round(r.schedule_lag_max_ms, 3),
                 "loop_lag_max_ms": round(r.loop_lag_max_ms, 3), "cpu_percent_max": round(r.cpu_percent_max, 1),
                 "clock_offset_ms": round(r.clock_offset_ms, 3), "clock_bound_ms": round(r.clock_bound_ms, 3)}
                for w, r in sorted(self._rows.items())]

    def nodes(self) -> list[str]:
        return sorted({r.node for r in self._rows.values()})
