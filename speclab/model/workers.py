"""One traffic worker's health as the app shows it and ``measurement.workers`` reports it.

The client health of an interval folds every worker into one (the worst of them), which says
that the client fell behind but not where. A ``WorkerRow`` keeps one worker apart: the node it ran
on, its latest interval (live) beside its worst one (the run), its clock offset and the bound on it,
and the intervals it flagged. The session builds the rows once per report it receives; snapshots
carry them and the report's entries are made from the same rows, so the panel and the report agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LOCAL_NODE = "local"


@dataclass(frozen=True, slots=True)
class WorkerRow:
    worker: int
    node: str  # a cluster node (``IP/node-id``) or ``local``
    intervals: int = 0  # interval reports received
    saturated_intervals: int = 0  # of them flagged: the worker could not keep the schedule
    sent: int = 0
    finished: int = 0
    schedule_lag_p99_ms: float = 0.0  # the worst interval's p99 (sent - intended)
    schedule_lag_max_ms: float = 0.0
    loop_lag_p99_ms: float = 0.0  # the worst interval's event-loop lag p99
    loop_lag_max_ms: float = 0.0
    read_lateness_ms: float = 0.0  # the worst interval's read lateness p99.5 (what the flag judges)
    send_delay_p99_ms: float = 0.0  # the worst interval's send delay p99 (sent stamp to the request's write)
    cpu_percent_max: float = 0.0
    clock_offset_ms: float = 0.0  # its clock minus the coordinator's, at the last probe
    clock_bound_ms: float = 0.0  # the widest bound on that offset (0: the coordinator's own clock)
    # The latest interval (None where only the run's figures are known, as in a replay).
    last_interval: int | None = None
    last_schedule_lag_p99_ms: float | None = None
    last_loop_lag_p99_ms: float | None = None
    last_read_lateness_ms: float | None = None
    last_send_delay_p99_ms: float | None = None
    last_cpu_percent: float | None = None
    in_flight: int | None = None
    last_flagged: int | None = None  # the latest interval it flagged, and why
    flag_reason: str = ""

    @property
    def local(self) -> bool:
        return self.node == LOCAL_NODE

    def report(self) -> dict[str, Any]:
        """The ``measurement.workers`` entry (docs/cluster.md)."""
        return {"worker": self.worker, "node": self.node, "intervals": self.intervals,
                "saturated_intervals": self.saturated_intervals, "sent": self.sent, "finished": self.finished,
                "schedule_lag_p99_ms": round(self.schedule_lag_p99_ms, 3),
                "schedule_lag_max_ms": round(self.schedule_lag_max_ms, 3),
                "loop_lag_p99_ms": round(self.loop_lag_p99_ms, 3), "loop_lag_max_ms": round(self.loop_lag_max_ms, 3),
                "read_lateness_ms": round(self.read_lateness_ms, 3),
                "send_delay_p99_ms": round(self.send_delay_p99_ms, 3),
                "cpu_percent_max": round(self.cpu_percent_max, 1), "clock_offset_ms": round(self.clock_offset_ms, 3),
                "clock_bound_ms": round(self.clock_bound_ms, 3),
                "last_flagged_interval": self.last_flagged, "flag_reason": self.flag_reason}

    @classmethod
    def from_report(cls, entry: dict[str, Any]) -> WorkerRow:
        """A row back from a report or recording entry: the run's figures, no latest interval."""
        def num(key: str) -> float:
            value = entry.get(key)
            return float(value) if isinstance(value, int | float) else 0.0

        flagged = entry.get("last_flagged_interval")
        return cls(worker=int(entry.get("worker", 0)), node=str(entry.get("node") or LOCAL_NODE),
                   intervals=int(num("intervals")), saturated_intervals=int(num("saturated_intervals")),
                   sent=int(num("sent")), finished=int(num("finished")),
                   schedule_lag_p99_ms=num("schedule_lag_p99_ms"), schedule_lag_max_ms=num("schedule_lag_max_ms"),
                   loop_lag_p99_ms=num("loop_lag_p99_ms"), loop_lag_max_ms=num("loop_lag_max_ms"),
                   read_lateness_ms=num("read_lateness_ms"), send_delay_p99_ms=num("send_delay_p99_ms"),
                   cpu_percent_max=num("cpu_percent_max"), clock_offset_ms=num("clock_offset_ms"),
                   clock_bound_ms=num("clock_bound_ms"),
                   last_flagged=int(flagged) if isinstance(flagged, int) else None,
                   flag_reason=str(entry.get("flag_reason") or ""))
